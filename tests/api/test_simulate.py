"""`POST simulate/`: the engine's simulate output for a posted scenario; errors say where."""

from __future__ import annotations

import copy
import gzip
import json
import time
from pathlib import Path

import pytest

from scheduling.engine.scenario import run_scenario
from scheduling.models import Card, Node, Pod

pytestmark = pytest.mark.django_db

_ROOT = Path(__file__).resolve().parents[2]
# The shared examples beside the checkout, else the copy the Simulator page offers.
EXAMPLES = sorted((_ROOT.parent / "shared" / "examples").glob("*.json")) or sorted(
    (_ROOT / "static" / "scheduling" / "examples").glob("*.json")
)
SCENARIO = {
    "config": {"node_scheduler_policy": "spread", "gpu_scheduler_policy": "binpack"},
    "nodes": [
        {"name": "node1", "devices": [{"uuid": "A0", "memory": 8000}, {"uuid": "A1", "memory": 8000}]},
        {"name": "node2", "devices": [{"uuid": "B0", "memory": 8000, "used": {"slots": 1, "memory": 5000}}]},
    ],
    "pods": [
        {"name": "p1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpumem": 2000}}}]},
        {"name": "p2", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 3}}}]},
        {
            "name": "p3",
            "annotations": {"hami.io/device-scoring-weights": "slot=1"},
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}],
        },
    ],
}


def simulate(client, body, query=""):
    return client.post(f"/api/v1/simulate/{query}", body, format="json")


def test_answer_is_the_engines_output_and_nothing_is_written(viewer):
    answer = simulate(viewer, SCENARIO)
    assert answer.status_code == 200, answer.content
    assert answer.json() == json.loads(json.dumps(run_scenario(copy.deepcopy(SCENARIO))))
    assert [p["status"] for p in answer.json()["pods"]] == ["scheduled", "pending", "rejected"]
    assert (Node.objects.count(), Card.objects.count(), Pod.objects.count()) == (0, 0, 0)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_shared_examples_match_the_engine(viewer, path):
    scenario = json.loads(path.read_text())
    assert simulate(viewer, scenario).json() == json.loads(json.dumps(run_scenario(copy.deepcopy(scenario))))


def test_top_keeps_k_entries(viewer):
    pods = simulate(viewer, SCENARIO, "?top=1").json()["pods"]
    assert len(pods[0]["node_scores"]) == 1 and pods[0]["nodes_fit"] == 2
    assert simulate(viewer, SCENARIO, "?top=0").status_code == 400
    assert "top" in simulate(viewer, SCENARIO, "?top=x").json()


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda s: s.pop("nodes"), "nodes"),
        (lambda s: s.update(pods={}), "pods"),
        (lambda s: s["nodes"][1].pop("name"), "nodes[1].name"),
        (lambda s: s["nodes"][0]["devices"][1].pop("uuid"), "nodes[0].devices[1].uuid"),
        (lambda s: s["nodes"][0]["devices"][1].pop("memory"), "nodes[0].devices[1].memory"),
        (lambda s: s["nodes"][0]["devices"][1].update(uuid="B0"), "nodes[1].devices"),
        (lambda s: s["nodes"][1]["devices"][0]["used"].update(memory=-1), "nodes[1].devices[0].used.memory"),
        (lambda s: s["config"].update(node_scheduler_policy="random"), "config.node_scheduler_policy"),
        (lambda s: s["pods"][0].pop("containers"), "pods[0].containers"),
    ],
)
def test_malformed_scenario_is_400_keyed_by_where(viewer, change, where):
    scenario = copy.deepcopy(SCENARIO)
    change(scenario)
    answer = simulate(viewer, scenario)
    assert answer.status_code == 400, answer.content
    assert where in answer.json(), answer.json()


def test_scenario_that_is_not_an_object_is_400(viewer):
    answer = simulate(viewer, [1, 2])
    assert answer.status_code == 400 and answer.json() == {
        "non_field_errors": ["a scenario must be an object with nodes and pods"]
    }


def test_request_size_is_bounded(viewer, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    big = copy.deepcopy(SCENARIO)
    big["nodes"] += [{"name": f"n{i}", "devices": [{"uuid": f"X{i}", "memory": 1}]} for i in range(100)]
    assert simulate(viewer, big).status_code == 413


# --- bounded work: answered at once, queued, or refused ---------------------------------------


def limits(settings, **values):
    settings.HAMIADMIN = {**settings.HAMIADMIN, **values}


def wide_scenario(nodes: int, cards: int, pods: int) -> dict:
    """`nodes` nodes of `cards` A100s each and `pods` pods of one 1000 MiB vGPU each."""
    return {
        "nodes": [
            {
                "name": f"node-{n:03d}",
                "devices": [
                    {"uuid": f"GPU-{n:03d}-{i}", "index": i, "type": "NVIDIA-A100", "memory": 40960}
                    for i in range(cards)
                ],
            }
            for n in range(nodes)
        ],
        "pods": [
            {
                "name": f"pod-{p:04d}",
                "containers": [
                    {
                        "name": "main",
                        "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}},
                    }
                ],
            }
            for p in range(pods)
        ],
    }


def wait_until_finished(client, url, timeout=60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        answer = client.get(url)
        assert answer.status_code == 200, answer.content
        job = answer.json()
        if job["status"] in ("done", "failed"):
            return job
        assert time.monotonic() < deadline, f"still {job['status']} after {timeout}s"
        time.sleep(0.05)


def test_a_body_over_the_simulate_limit_is_413_naming_the_limit(viewer, settings):
    limits(settings, SIMULATE_MAX_BODY_BYTES=1000)
    big = copy.deepcopy(SCENARIO)
    big["nodes"] += [{"name": f"n{i}", "devices": [{"uuid": f"X{i}", "memory": 1}]} for i in range(100)]
    answer = simulate(viewer, big)
    assert answer.status_code == 413, answer.content
    assert answer.json() == {"detail": "Request body larger than 1000 bytes (HAMI_SIMULATE_MAX_BODY_BYTES)."}


def test_more_work_than_the_hard_limit_is_413_naming_the_counts_and_the_limit(viewer, settings):
    limits(settings, SIMULATE_MAX_WORK=14)
    answer = simulate(viewer, SCENARIO)  # 3 pods x (2 nodes + 3 cards) = 15
    assert answer.status_code == 413, answer.content
    assert answer.json() == {
        "detail": "Scenario too big to simulate: 3 pods x (2 nodes + 3 cards) = 15 work units, "
        "more than HAMI_SIMULATE_MAX_WORK (14)."
    }
    limits(settings, SIMULATE_MAX_WORK=15)
    assert simulate(viewer, SCENARIO).status_code == 200


def test_with_the_default_limits_300_nodes_of_10_cards_and_9000_pods_are_refused_at_once(viewer):
    scenario = wide_scenario(300, 10, 9000)  # 9000 x 3300 = 29,700,000 units, over 25,000,000
    started = time.monotonic()
    answer = simulate(viewer, scenario)
    assert answer.status_code == 413, answer.content
    assert "HAMI_SIMULATE_MAX_WORK" in answer.json()["detail"]
    assert time.monotonic() - started < 5


@pytest.fixture
def embedded(settings):
    """No Redis: queued simulations run in a thread of this process (the embedded default)."""
    settings.REDIS_URL = ""


def test_above_the_synchronous_bound_a_simulation_is_queued_and_its_result_url_gives_the_engines_answer(
    viewer, settings, embedded
):
    limits(settings, SIMULATE_SYNC_MAX_WORK=14)
    answer = simulate(viewer, SCENARIO, "?top=1")
    assert answer.status_code == 202, answer.content
    job = answer.json()
    assert job["status"] == "queued" and job["work"] == 15
    assert answer["Location"] == job["url"] and job["url"].endswith(f"/api/v1/simulate/{job['id']}/")
    finished = wait_until_finished(viewer, job["url"])
    assert finished["status"] == "done" and finished["error"] is None, finished
    assert finished["result"] == json.loads(json.dumps(run_scenario(copy.deepcopy(SCENARIO), top=1)))
    assert finished["submitted_at"] <= finished["started_at"] <= finished["finished_at"]


def test_a_finished_result_is_sent_gzip_encoded_to_clients_that_accept_it(viewer, settings, embedded):
    limits(settings, SIMULATE_SYNC_MAX_WORK=14)
    url = simulate(viewer, SCENARIO).json()["url"]
    plain = wait_until_finished(viewer, url)
    encoded = viewer.get(url, HTTP_ACCEPT_ENCODING="gzip, deflate")
    assert encoded["Content-Encoding"] == "gzip"
    assert json.loads(gzip.decompress(encoded.content)) == plain


def test_only_the_submitter_reads_a_queued_simulation(viewer, client_for, settings, embedded):
    limits(settings, SIMULATE_SYNC_MAX_WORK=14)
    url = simulate(viewer, SCENARIO).json()["url"]
    wait_until_finished(viewer, url)
    assert client_for("operator").get(url).status_code == 404
    assert client_for(None).get(url).status_code == 401
    assert viewer.get("/api/v1/simulate/0123456789abcdef0123456789abcdef/").status_code == 404


def test_a_malformed_scenario_above_the_synchronous_bound_is_400_and_not_queued(viewer, settings, embedded):
    limits(settings, SIMULATE_SYNC_MAX_WORK=1)
    scenario = copy.deepcopy(SCENARIO)
    scenario["nodes"][1]["devices"][0].pop("uuid")
    answer = simulate(viewer, scenario)
    assert answer.status_code == 400 and "nodes[1].devices[0].uuid" in answer.json(), answer.content


def test_the_issue_scenario_is_queued_without_holding_the_request(viewer, embedded):
    """1.72 MiB, 300 nodes x 8 cards and 9,000 pods: 24,300,000 work units, queued (default limits)."""
    body = json.dumps(wide_scenario(300, 8, 9000), indent=1)
    assert 1.6 * 2**20 < len(body) < 2 * 2**20
    started = time.monotonic()
    answer = viewer.post("/api/v1/simulate/?top=3", body, content_type="application/json")
    elapsed = time.monotonic() - started
    assert answer.status_code == 202, answer.content[:500]
    assert answer.json()["work"] == 9000 * (300 + 2400)
    assert elapsed < 3, f"the request took {elapsed:.2f}s"
    finished = wait_until_finished(viewer, answer.json()["url"], timeout=120)
    assert finished["status"] == "done", finished["error"]
    assert len(finished["result"]["pods"]) == 9000
    assert finished["result"]["pods"][0]["status"] == "scheduled"


def test_simulate_is_throttled_per_user(viewer, monkeypatch):
    from rest_framework.throttling import ScopedRateThrottle

    from scheduling.api.tokens import issue_role_token

    from .conftest import token_client

    monkeypatch.setitem(ScopedRateThrottle.THROTTLE_RATES, "simulate", "2/min")
    codes = [simulate(viewer, SCENARIO).status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    other = token_client(issue_role_token("another-viewer", "viewer"))
    assert simulate(other, SCENARIO).status_code == 200


def test_queued_simulations_have_their_own_rate(viewer, settings, embedded, monkeypatch):
    from scheduling.api.views import QueuedSimulationThrottle

    limits(settings, SIMULATE_SYNC_MAX_WORK=14)
    monkeypatch.setitem(QueuedSimulationThrottle.THROTTLE_RATES, "simulate-queued", "1/hour")
    assert simulate(viewer, SCENARIO).status_code == 202
    refused = simulate(viewer, SCENARIO)
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    small = copy.deepcopy(SCENARIO)
    small["pods"] = small["pods"][:1]  # 5 units: answered at once, not throttled by that rate
    assert simulate(viewer, small).status_code == 200


@pytest.fixture
def celery_worker(redis_url, settings, require_postgres):
    from tests.pipeline.conftest import celery_worker_process

    settings.REDIS_URL = redis_url
    with celery_worker_process(redis_url, queues=settings.HAMIADMIN["SIMULATE_QUEUE"]) as process:
        yield process


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_with_redis_a_queued_simulation_runs_in_a_celery_worker(celery_worker, client_for, settings):
    viewer = client_for("viewer")
    limits(settings, SIMULATE_SYNC_MAX_WORK=14)
    answer = simulate(viewer, SCENARIO)
    assert answer.status_code == 202, answer.content
    finished = wait_until_finished(viewer, answer.json()["url"], timeout=90)
    assert finished["status"] == "done", finished
    assert finished["result"] == json.loads(json.dumps(run_scenario(copy.deepcopy(SCENARIO))))


# --- topology-aware's combinations, and the run's own bounds ------------------------------------


def issue_scenario() -> dict:
    """About 15 KB: one node of 120 linked cards and 8 pods asking 16 each under topology-aware,
    968 work units by pods x (nodes + cards) alone; it ran 131 s in the request before."""
    from tests.engine.test_budget import topology_scenario

    return topology_scenario(1, 120, 8, 16)


def test_topology_combinations_count_as_work_so_the_issue_scenario_is_refused_at_once(viewer):
    started = time.monotonic()
    answer = simulate(viewer, issue_scenario())
    assert answer.status_code == 413, answer.content
    detail = answer.json()["detail"]
    assert "8 pods x (1 nodes + 120 cards) + 387200000 card-choice steps (topology-aware" in detail
    assert "HAMI_SIMULATE_MAX_WORK" in detail
    assert time.monotonic() - started < 3


def test_a_run_in_the_request_past_its_seconds_is_413_naming_the_setting(viewer, settings):
    limits(settings, SIMULATE_SYNC_MAX_WORK=10**12, SIMULATE_MAX_WORK=10**12, SIMULATE_SYNC_SECONDS=0.3)
    started = time.monotonic()
    answer = simulate(viewer, issue_scenario())
    assert answer.status_code == 413, answer.content
    assert "stopped after 0.3 s (HAMI_SIMULATE_SYNC_SECONDS)" in answer.json()["detail"]
    assert time.monotonic() - started < 3


def test_a_queued_run_past_its_time_limit_fails_naming_the_setting(viewer, settings, embedded):
    limits(settings, SIMULATE_SYNC_MAX_WORK=1, SIMULATE_MAX_WORK=10**12, SIMULATE_TIME_LIMIT_SECONDS=0.3)
    answer = simulate(viewer, issue_scenario())
    assert answer.status_code == 202, answer.content
    finished = wait_until_finished(viewer, answer.json()["url"], timeout=10)
    assert finished["status"] == "failed"
    assert finished["error"] == "stopped after 0.3 s (HAMI_SIMULATE_TIME_LIMIT_SECONDS)"


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_with_redis_the_scheduling_workers_queue_never_runs_a_simulation(
    redis_url, settings, require_postgres, client_for
):
    """The shipped scheduling worker consumes `celery` only (`-Q celery`): a simulation waits
    for the simulator rather than taking the worker a cycle needs."""
    from scheduling.pipeline.locks import redis_client
    from tests.pipeline.conftest import celery_worker_process

    settings.REDIS_URL = redis_url
    viewer = client_for("viewer")
    limits(settings, SIMULATE_SYNC_MAX_WORK=14)
    with celery_worker_process(redis_url, queues="celery"):
        answer = simulate(viewer, SCENARIO)
        assert answer.status_code == 202, answer.content
        time.sleep(8)  # a worker starts and takes what it consumes in a few seconds
        assert viewer.get(answer.json()["url"]).json()["status"] == "queued"
    redis_client().delete(settings.HAMIADMIN["SIMULATE_QUEUE"])
