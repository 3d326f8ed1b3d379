"""/metrics after real scheduling: the counters move by what the cycle decided, and the
gauges say what the database says."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from scheduling import services
from scheduling.models import Card, Node, Pod
from scheduling.ops import metrics
from scheduling.pipeline import plan_cycle, run_cycle
from scheduling.pipeline.commit import commit_plan
from scheduling.pipeline.housekeeping import mark_silent_nodes_not_ready
from tests.pipeline.conftest import REPO, card, submit

from .conftest import scrape, series, value

pytestmark = pytest.mark.django_db

ATTEMPTS = "hamiadmin_scheduling_attempts_total"
BAD_WEIGHTS = {"hami.io/device-scoring-weights": "slot=1,core=x,memory=1"}
CPU_ONLY = [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]


def cluster():
    """node-a: two 8000 MiB cards; node-b: one card, silent for an hour (not ready)."""
    services.report_inventory("node-a", {}, {}, [card("GPU-a0", 0, slots=2), card("GPU-a1", 1, slots=2)])
    services.report_inventory("node-b", {}, {}, [card("GPU-b0", 0)])
    Node.objects.filter(name="node-b").update(last_heartbeat=timezone.now() - timedelta(hours=1))
    assert mark_silent_nodes_not_ready() == 1


def deltas(before, after, name: str) -> dict[frozenset, float]:
    """What changed in each series of `name` between two scrapes (non-zero only)."""
    old, new = series(before, name), series(after, name)
    return {
        labels: new[labels] - old.get(labels, 0.0) for labels in new if new[labels] != old.get(labels, 0.0)
    }


def labels(**pairs) -> frozenset:
    return frozenset(pairs.items())


def test_a_cycle_counts_each_outcome_and_each_pending_reason(client):
    cluster()
    submit("p1", gpu=1, mem=3000)
    submit("p2", gpu=1, mem=3000)
    submit("huge", gpu=1, mem=100000)  # fits nowhere: too big for node-a, node-b not ready
    submit("invalid", gpu=1, mem=100, annotations=BAD_WEIGHTS, validate=False)
    submit("cpu", containers=CPU_ONLY, validate=False)
    before = scrape(client)

    report = run_cycle()
    assert len(report.placed) == 2 and len(report.pending) == 1 and len(report.rejected) == 2

    after = scrape(client)
    assert deltas(before, after, ATTEMPTS) == {
        labels(outcome="scheduled", reason="none"): 2,
        # one pending decision, counted once under each reason code of its summary
        labels(outcome="pending", reason="CardInsufficientMemory"): 1,
        labels(outcome="pending", reason="NodeNotReady"): 1,
        labels(outcome="rejected", reason="InvalidSpec"): 1,
        labels(outcome="rejected", reason="NoGPURequest"): 1,
    }
    assert (
        Pod.objects.get(name="huge").reason
        == "0/2 nodes are available: 1 CardInsufficientMemory, 1 NodeNotReady."
    )

    name = "hamiadmin_cycle_duration_seconds"
    assert value(after, f"{name}_count") - value(before, f"{name}_count") == 1
    assert value(after, f"{name}_sum") > value(before, f"{name}_sum")
    assert value(after, f"{name}_bucket", le="+Inf") - value(before, f"{name}_bucket", le="+Inf") == 1

    decided = deltas(before, after, "hamiadmin_decision_duration_seconds_count")
    assert decided == {
        labels(outcome="scheduled"): 2,
        labels(outcome="pending"): 1,
        labels(outcome="rejected"): 2,
    }
    assert value(after, "hamiadmin_decision_duration_seconds_sum", outcome="scheduled") > value(
        before, "hamiadmin_decision_duration_seconds_sum", outcome="scheduled"
    )


def test_a_lost_race_counts_as_a_conflict_under_the_card_check_that_failed(client):
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=8000)])
    submit("slow", gpu=1, mem=6000)
    plan = plan_cycle()
    submit("fast", gpu=1, mem=6000, priority=9)
    run_cycle(limit=1)
    before = scrape(client)
    assert commit_plan(plan).conflicts == [("default/slow", "GPU-0 CardInsufficientMemory")]
    after = scrape(client)
    assert deltas(before, after, ATTEMPTS) == {labels(outcome="conflict", reason="CardInsufficientMemory"): 1}


def test_a_pod_in_a_cluster_without_nodes_waits_for_no_nodes(client):
    submit("early", gpu=1, mem=1000)
    before = scrape(client)
    assert run_cycle().pending == [("default/early", "0/0 nodes are available: no GPU nodes.")]
    assert deltas(before, scrape(client), ATTEMPTS) == {labels(outcome="pending", reason="NoNodes"): 1}


def test_an_empty_cycle_records_nothing(client):
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    before = scrape(client)
    assert run_cycle().considered == 0
    after = scrape(client)
    assert deltas(before, after, ATTEMPTS) == {}
    assert deltas(before, after, "hamiadmin_cycle_duration_seconds_count") == {}


def test_cluster_gauges_are_read_from_the_database_at_scrape_time(client):
    cluster()
    for n in range(3):
        submit(f"p{n}", gpu=1, mem=2500, cores=20)
    submit("huge", gpu=1, mem=100000)
    submit("invalid", gpu=1, mem=100, annotations=BAD_WEIGHTS, validate=False)
    run_cycle()
    samples = scrape(client)

    assert value(samples, "hamiadmin_cluster_state_up") == 1
    pending = Pod.objects.filter(status=Pod.PENDING).count()
    assert pending == 2  # huge waits, invalid is parked
    assert value(samples, "hamiadmin_pending_pods") == pending

    gauges = {
        "hamiadmin_card_slots": lambda c: c.slots,
        "hamiadmin_card_slots_used": lambda c: c.used_slots,
        "hamiadmin_card_memory_bytes": lambda c: c.memory * 1024 * 1024,
        "hamiadmin_card_memory_used_bytes": lambda c: c.used_memory * 1024 * 1024,
        "hamiadmin_card_cores": lambda c: c.cores,
        "hamiadmin_card_cores_used": lambda c: c.used_cores,
    }
    cards = list(Card.objects.select_related("node"))
    assert sum(c.used_slots for c in cards) == 3  # the gauges below are not all zeros
    for name, expected in gauges.items():
        assert series(samples, name) == {
            labels(node=c.node.name, uuid=c.uuid, type=c.type): expected(c) for c in cards
        }, name

    ages = series(samples, "hamiadmin_node_report_age_seconds")
    assert set(ages) == {labels(node="node-a"), labels(node="node-b")}
    assert 0 <= ages[labels(node="node-a")] < 60
    assert 3600 <= ages[labels(node="node-b")] < 3700
    assert series(samples, "hamiadmin_node_ready") == {labels(node="node-a"): 1, labels(node="node-b"): 0}


def test_gauges_follow_a_release_without_any_cycle(client):
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    pod = submit("p", gpu=1, mem=3000)
    run_cycle()
    assert value(
        scrape(client), "hamiadmin_card_memory_used_bytes", node="node1", uuid="GPU-0", type="NVIDIA"
    ) == (3000 * 1024 * 1024)
    services.release_pod(pod, Pod.SUCCEEDED)
    assert (
        value(scrape(client), "hamiadmin_card_memory_used_bytes", node="node1", uuid="GPU-0", type="NVIDIA")
        == 0
    )


def test_metrics_can_require_a_bearer_token(client, settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "METRICS_TOKEN": "s3cret-metrics-token"}
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401 and wrong["WWW-Authenticate"].startswith("Bearer")
    assert b"s3cret" not in wrong.content
    samples = scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-metrics-token")
    assert value(samples, "hamiadmin_cluster_state_up") == 1


def test_metrics_is_open_by_default_and_read_only(client):
    assert client.get("/metrics").status_code == 200
    assert client.post("/metrics").status_code == 405


def test_reason_labels_stay_within_a_fixed_set(client):
    """Whatever a decision says, the reason label is a code or one of the fixed words."""
    allowed = metrics.REASON_CODES | {
        metrics.NONE,
        metrics.NO_NODES,
        metrics.OTHER,
        metrics.INVALID,
        metrics.NO_GPU,
        metrics.SCHEDULER_ERROR,
    }
    assert metrics.reason_code("0/3 nodes are available: something new") == metrics.OTHER
    reasons = {dict(key)["reason"] for key in series(scrape(client), ATTEMPTS)}
    assert reasons and reasons <= allowed


@pytest.mark.parametrize("default_queue", [True, False])
def test_a_database_error_leaves_the_event_series_and_says_the_state_is_down(client, default_queue):
    """A real failure: the pods table is gone (renamed inside the test's transaction). With
    no default queue row yet (a flushed database), the queue gauges' own read meets the
    failed transaction first as Django's refusal to open a savepoint: left out all the same."""
    from scheduling.models import Queue

    if default_queue:
        Queue.default()
    else:
        Queue.objects.filter(name="default").delete()
    table = Pod._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {connection.ops.quote_name(table)} RENAME TO {connection.ops.quote_name(table + '_gone')}"
        )
    samples = scrape(client)
    assert value(samples, "hamiadmin_cluster_state_up") == 0
    assert series(samples, ATTEMPTS)  # the counters are still served
    assert not series(samples, "hamiadmin_pending_pods")


def production_answers(tmp_path, **environment) -> list[str]:
    """Status codes of GET /metrics (no credential, then the bearer token `tok3n`) and of an
    API page, from a process running the production settings."""
    script = (
        "import django; django.setup(); from django.test import Client; c = Client(); "
        "print(c.get('/metrics').status_code, c.get('/metrics', HTTP_AUTHORIZATION='Bearer tok3n').status_code, "
        "c.get('/api/v1/pods/').status_code)"
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "LOG_FORMAT", "HAMI_METRICS_TOKEN")
    }
    env.update(
        HAMIADMIN_ENV="production",
        SECRET_KEY="x" * 50,
        ALLOWED_HOSTS="testserver",
        SECURE_SSL_REDIRECT="true",
        HAMIADMIN_VAR_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="hamiadmin.settings",
        **environment,
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_production_serves_metrics_over_plain_http_behind_its_token(tmp_path):
    """Prometheus scrapes the Service over HTTP with the token; production redirects every other page."""
    assert production_answers(tmp_path, HAMI_METRICS_TOKEN="tok3n") == ["401", "200", "301"]


def test_production_without_a_metrics_token_serves_no_metrics(tmp_path):
    """Open by default is for development only: production wants HAMI_METRICS_TOKEN."""
    assert production_answers(tmp_path) == ["403", "403", "301"]
