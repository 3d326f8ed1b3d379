"""Why a pod waits: pending, decisions, cycles; and the cluster config."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling.models import Pod, SchedulerConfig
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod

pytestmark = pytest.mark.django_db


def results(answer) -> list[dict]:
    assert answer.status_code == 200, answer.content
    return answer.json()["results"]


def test_pending_is_oldest_first_with_age_chain_and_reasons(cluster, operator, viewer):
    operator.post(
        "/api/v1/pods/",
        gpu_pod("old", gpu=4, annotations={"hami.io/gpu-scheduler-policy": "mutex,binpack"}),
        format="json",
    )
    operator.post("/api/v1/pods/", gpu_pod("urgent", gpu=5, priority=100), format="json")
    operator.post("/api/v1/pods/", gpu_pod("fits", mem=100), format="json")
    Pod.objects.filter(name="old").update(
        submitted_at=Pod.objects.get(name="old").submitted_at - timedelta(hours=1)
    )
    run_cycle(trigger="test")
    pending = results(viewer.get("/api/v1/pending/"))
    assert [p["name"] for p in pending] == ["old", "urgent"]
    old = pending[0]
    assert old["age_seconds"] >= 3600 and old["chain"] == ["mutex", "binpack"]
    assert old["reasons"] == {"NodeInsufficientDevice": 5}
    assert old["reason"] == "0/2 nodes are available: 2 NodeInsufficientDevice."


def test_decisions_are_a_pods_attempt_history(cluster, operator, viewer):
    operator.post("/api/v1/pods/", gpu_pod("late", gpu=4), format="json")
    run_cycle(trigger="test")
    Pod.objects.filter(name="late").update(next_attempt_at=None)
    run_cycle(trigger="test")
    history = results(viewer.get("/api/v1/decisions/?pod=default/late"))
    assert [d["outcome"] for d in history] == ["pending", "pending"]
    assert history[0]["id"] > history[1]["id"]
    assert history[0]["failed_nodes"]["node1"] == "2/2 NodeInsufficientDevice"
    assert history[0]["policy"]["sort_keys"] == ["spread"]
    one = viewer.get(f"/api/v1/decisions/{history[0]['id']}/").json()
    assert one == history[0]
    assert viewer.get("/api/v1/decisions/?pod=default/ghost").status_code == 404
    assert results(viewer.get("/api/v1/decisions/?pod=default/late&outcome=scheduled")) == []


def test_cycles_show_counts_and_durations(cluster, operator, viewer):
    operator.post("/api/v1/pods/", gpu_pod("a", mem=100), format="json")
    operator.post("/api/v1/pods/", gpu_pod("b", gpu=9), format="json")
    run_cycle(trigger="test")
    [cycle] = results(viewer.get("/api/v1/cycles/"))
    assert (cycle["considered"], cycle["placed"], cycle["pending"], cycle["nodes"]) == (2, 1, 1, 2)
    assert cycle["duration_ms"] > 0 and cycle["trigger"] == "test"
    # any offset works: the time is moved to UTC before it reaches the database
    assert len(results(viewer.get("/api/v1/cycles/?since=1396-03-23T15:45:57.9-22:02"))) == 1
    assert results(viewer.get("/api/v1/cycles/?since=9999-12-31T23:00:00-00:30")) == []


def test_config_reads_defaults_and_admin_changes_are_recorded(cluster, admin, operator, viewer):
    assert viewer.get("/api/v1/config/").json()["node_scheduler_policy"] == "binpack"
    answer = admin.patch("/api/v1/config/", {"node_scheduler_policy": "spread"}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["node_scheduler_policy"] == "spread" and answer.json()["changed_by"] == "admin-user"
    assert answer.json()["gpu_scheduler_policy"] == "spread"
    row = SchedulerConfig.objects.latest("id")
    assert (row.node_scheduler_policy, row.changed_by) == ("spread", "admin-user")
    # the next cycle uses it: two one-card pods land on two nodes
    operator.post("/api/v1/pods/", gpu_pod("p1", mem=100), format="json")
    operator.post("/api/v1/pods/", gpu_pod("p2", mem=100), format="json")
    run_cycle(trigger="test")
    assert {Pod.objects.get(name="p1").node.name, Pod.objects.get(name="p2").node.name} == {"node1", "node2"}


@pytest.mark.parametrize(
    "body, field",
    [
        ({"node_scheduler_policy": "fastest"}, "node_scheduler_policy"),
        ({"gpu_scheduler_policy": 5}, "gpu_scheduler_policy"),
        ({"resources": {"memory_percentage": 0}}, "resources"),
        ({"resources": {"cores": 101}}, "resources"),
        ({"resources": {"exclusive_cores": "all"}}, "resources"),
        ({"resources": []}, "resources"),
        ([], "non_field_errors"),
    ],
)
def test_bad_config_is_400_by_field_and_nothing_is_recorded(admin, body, field):
    answer = admin.patch("/api/v1/config/", body, format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.content
    assert not SchedulerConfig.objects.exists()


def test_put_needs_every_field(admin):
    answer = admin.put("/api/v1/config/", {"node_scheduler_policy": "spread"}, format="json")
    assert answer.status_code == 400 and set(answer.json()) == {"gpu_scheduler_policy", "resources"}
