"""End to end on PostgreSQL and Redis with a real Celery worker: agents report two nodes over
HTTP, an operator submits pods with different chains, the worker schedules them, and the API
shows the allocations and decisions that the engine's simulator gives for the same cluster.
"""

from __future__ import annotations

import copy
import time

import pytest

from scheduling.engine.scenario import run_scenario
from scheduling.models import Pod
from tests.pipeline.conftest import celery_worker_process

pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.django_db(transaction=True)]

TOLERANCE = 1e-3


def t4(uuid, index, numa, links):
    return {
        "uuid": uuid,
        "index": index,
        "type": "NVIDIA-Tesla T4",
        "memory": 15360,
        "numa": numa,
        "links": links,
    }


def a100(uuid, index):
    return {
        "uuid": uuid,
        "index": index,
        "type": "NVIDIA-A100-SXM4-40GB",
        "memory": 40960,
        "slots": 4,
        "numa": index,
    }


NODES = [
    {
        "name": "gpu-a",
        "labels": {"zone": "z1"},
        "annotations": {},
        "devices": [
            t4("A-0", 0, 0, {"A-1": 100, "A-2": 20, "A-3": 10}),
            t4("A-1", 1, 0, {"A-0": 100, "A-2": 10, "A-3": 20}),
            t4("A-2", 2, 1, {"A-0": 20, "A-1": 10, "A-3": 100}),
            t4("A-3", 3, 1, {"A-0": 10, "A-1": 20, "A-2": 100}),
        ],
    },
    {
        "name": "gpu-b",
        "labels": {"zone": "z2"},
        "annotations": {},
        "devices": [a100("B-0", 0), a100("B-1", 1)],
    },
]


def pod(name, annotations=None, gpu=1, mem=None, pct=None, cores=None, priority=0):
    limits = {"nvidia.com/gpu": gpu}
    for key, value in (
        ("nvidia.com/gpumem", mem),
        ("nvidia.com/gpumem-percentage", pct),
        ("nvidia.com/gpucores", cores),
    ):
        if value is not None:
            limits[key] = value
    return {
        "name": name,
        "namespace": "e2e",
        "annotations": annotations or {},
        "priority": priority,
        "containers": [{"name": "main", "resources": {"limits": limits}}],
        "initContainers": [],
    }


CHAIN = "hami.io/gpu-scheduler-policy"
PODS = [
    pod("a100-whole", {"nvidia.com/use-gputype": "A100"}),
    pod("binpack-small", {CHAIN: "binpack"}, mem=2000, cores=10),
    pod("binpack-again", {CHAIN: "binpack"}, mem=2000, cores=10),
    pod("spread-small", {CHAIN: "spread"}, mem=3000, cores=20),
    pod("mutex-binpack", {CHAIN: "mutex,binpack"}, mem=1000),
    pod("numa-first", {CHAIN: "numa,binpack", "nvidia.com/numa-bind": "true"}, gpu=2, mem=1000),
    pod("topology-pair", {CHAIN: "topology-aware,spread"}, gpu=2, mem=500),
    pod("weighted", {CHAIN: "binpack", "hami.io/device-scoring-weights": "slot=0,core=1,memory=3"}, mem=4000),
    pod("node-spread", {"hami.io/node-scheduler-policy": "spread", CHAIN: "spread,numa"}, pct=25),
    pod("too-wide", {CHAIN: "binpack"}, gpu=5),
]


@pytest.fixture
def celery_worker(redis_url, settings, require_postgres):
    settings.REDIS_URL = redis_url
    with celery_worker_process(redis_url) as process:
        yield process


def wait_for(predicate, timeout, worker):
    deadline = time.monotonic() + timeout
    while not predicate():
        if worker.poll() is not None:
            pytest.fail(f"the Celery worker exited with {worker.returncode}: {worker.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout}s")
        time.sleep(0.05)


def expected_placed(expected: dict) -> list[str]:
    return [name for name, p in expected.items() if p["status"] == "scheduled"]


def close(a, b, path=""):
    """Equal JSON, floats within TOLERANCE."""
    if isinstance(a, float) or isinstance(b, float):
        assert abs(a - b) <= TOLERANCE, (path, a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (path, a, b)
        for key in a:
            close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            close(x, y, f"{path}[{i}]")
    else:
        assert a == b, (path, a, b)


def test_api_agrees_with_the_simulator(celery_worker, client_for):
    for node in NODES:
        agent = client_for(f"agent:{node['name']}")
        answer = agent.post("/api/v1/agents/report/", {**node, "node": node["name"]}, format="json")
        assert answer.status_code == 200, answer.content
    operator = client_for("operator")
    viewer = client_for("viewer")
    for body in PODS:
        answer = operator.post("/api/v1/pods/", body, format="json")
        assert answer.status_code == 201, answer.content
        # one at a time, as the simulator does: each pod sees the placements before it
        wait_for(
            lambda name=body["name"]: Pod.objects.get(namespace="e2e", name=name).attempts >= 1,
            30,
            celery_worker,
        )

    scenario = {
        "nodes": [{"name": n["name"], "labels": n["labels"], "devices": n["devices"]} for n in NODES],
        "pods": copy.deepcopy(PODS),
    }
    expected = {p["name"]: p for p in run_scenario(scenario)["pods"]}
    # the story covers both nodes, several cards, and a pod that waits
    assert {p["node"] for p in expected.values()} == {"gpu-a", "gpu-b", None}
    assert [name for name, p in expected.items() if p["status"] != "scheduled"] == ["too-wide"]

    expected_allocations = set()
    for body in PODS:
        want = expected[body["name"]]
        got = viewer.get(f"/api/v1/pods/e2e/{body['name']}/").json()
        assert got["status"] == want["status"], body["name"]
        assert (got["node"], got["allocated"]) == (want["node"], want["allocated"]), body["name"]
        if want["status"] == "scheduled":
            assert [c["devices"] for c in got["containers"]] == [c["devices"] for c in want["containers"]]
        else:
            assert all(c["devices"] == [] for c in got["containers"]), body["name"]
        decision = got["decision"]
        for key in ("policy", "node_scores", "failed_nodes", "nodes_fit", "nodes_failed", "reasons", "error"):
            close(decision[key], want[key], f"{body['name']}.{key}")
        if want["status"] == "scheduled":
            close(decision["containers"], want["containers"], f"{body['name']}.containers")
            for container in want["containers"]:
                for device in container["devices"]:
                    expected_allocations.add(
                        (f"e2e/{body['name']}", device["uuid"], device["memory"], device["cores"])
                    )

    allocations = viewer.get("/api/v1/allocations/?namespace=e2e&limit=1000").json()["results"]
    assert {(a["pod"], a["card"], a["memory"], a["cores"]) for a in allocations} == expected_allocations
    pending = viewer.get("/api/v1/pending/").json()["results"]
    assert [(p["name"], p["reasons"]) for p in pending] == [("too-wide", expected["too-wide"]["reasons"])]
    history = viewer.get("/api/v1/decisions/?pod=e2e/too-wide").json()["results"]
    assert history and all(d["outcome"] == "pending" for d in history)
    cycles = viewer.get("/api/v1/cycles/").json()["results"]
    assert sum(c["placed"] for c in cycles) == len(PODS) - 1 == len(expected_placed(expected))
