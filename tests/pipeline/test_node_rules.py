"""Cycles honour the Kubernetes node rules (SPEC 10): a pod is never placed on a node its
nodeSelector, a taint, a cordon or its cpu rule out; pods others bound hold their cpu and (HAMi's)
cards; a gated pod is never tried, and is placed once its gate goes. Each write reaches the
standing snapshot a worker keeps between cycles."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.engine.encoding import encode_allocation
from scheduling.models import Decision, Pod
from scheduling.pipeline import run_cycle
from scheduling.pipeline.commit import commit_plan
from scheduling.pipeline.cycle import plan_one

from .conftest import limits, reload, t4

pytestmark = pytest.mark.django_db
AFTER_COMMIT = pytest.mark.django_db(transaction=True)

GATE = [{"name": "kueue.x-k8s.io/admission"}]


def two_nodes(a: dict | None = None, b: dict | None = None, labels_a=None, labels_b=None) -> None:
    """node-a and node-b alike, one T4 each: with nothing else, a pod goes to node-a (name order)."""
    services.report_inventory("node-a", labels_a or {}, {}, [t4("GPU-A", 0)], **(a or {}))
    services.report_inventory("node-b", labels_b or {}, {}, [t4("GPU-B", 0)], **(b or {}))


def pod(name: str, mem=1000, cpu=None, scheduling=None, **kwargs) -> Pod:
    resources = limits(gpu=1, mem=mem)
    if cpu is not None:
        resources["requests"] = {"cpu": cpu}
    containers = [{"name": "main", "resources": resources}]
    return services.submit_pod("default", name, {}, containers, scheduling=scheduling, **kwargs)


def placed_on(report) -> dict[str, str]:
    return {key.split("/")[1]: node for key, node, _ in report.placed}


def test_with_nothing_else_a_pod_goes_to_node_a():
    """The baseline the other tests move away from."""
    two_nodes()
    pod("p")
    assert placed_on(run_cycle()) == {"p": "node-a"}


def test_a_node_selector_rules_out_the_other_pool():
    two_nodes(labels_a={"pool": "inference"}, labels_b={"pool": "training"})
    pod("p", scheduling={"nodeSelector": {"pool": "training"}})
    assert placed_on(run_cycle()) == {"p": "node-b"}


def test_a_taint_rules_out_the_node_unless_tolerated():
    two_nodes(a={"taints": [{"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}]})
    pod("plain")
    assert placed_on(run_cycle()) == {"plain": "node-b"}
    toleration = {"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"}
    pod("tolerant", scheduling={"tolerations": [toleration], "nodeName": "node-a"})
    assert placed_on(run_cycle()) == {"tolerant": "node-a"}


def test_a_cordoned_node_takes_no_pod():
    two_nodes(a={"unschedulable": True})
    pod("p")
    assert placed_on(run_cycle()) == {"p": "node-b"}


def test_a_node_ruled_out_everywhere_leaves_the_pod_pending_counting_nodes():
    two_nodes(labels_a={"pool": "inference"}, labels_b={"pool": "inference"})
    waiting = pod("p", scheduling={"nodeSelector": {"pool": "training"}})
    report = run_cycle()
    assert report.placed == [] and reload(waiting).status == Pod.PENDING
    decision = Decision.objects.get(pod=waiting)
    assert decision.payload["reasons"] == {"NodeAffinity": 2}


def test_cpu_held_by_a_pod_others_bound_counts():
    two_nodes(a={"allocatable": {"cpu": "4"}}, b={"allocatable": {"cpu": "4"}})
    services.upsert_bound_pods(
        [
            {
                "namespace": "web",
                "name": "frontend",
                "node": "node-a",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}],
                "phase": "Running",
            }
        ]
    )
    pod("p", cpu="2")
    assert placed_on(run_cycle()) == {"p": "node-b"}


def test_cards_held_by_a_pod_hami_placed_count():
    """After a switch from HAMi: its pod holds 15,000 of GPU-A's 15,360 MiB."""
    two_nodes()
    allocated = encode_allocation([[("GPU-A", 15000, 0)]])
    services.upsert_bound_pods([{"namespace": "ml", "name": "old", "node": "node-a", "allocated": allocated}])
    pod("p", mem=8000)
    assert placed_on(run_cycle()) == {"p": "node-b"}


def test_a_pod_that_ended_holds_nothing():
    two_nodes(b={"unschedulable": True})
    allocated = encode_allocation([[("GPU-A", 15000, 0)]])
    services.upsert_bound_pods(
        [{"namespace": "ml", "name": "old", "node": "node-a", "allocated": allocated, "phase": "Succeeded"}]
    )
    pod("p", mem=8000)
    assert placed_on(run_cycle()) == {"p": "node-a"}


@AFTER_COMMIT
def test_the_kept_snapshot_sees_pods_bound_by_others_and_node_fields_change():
    two_nodes()
    pod("first")
    assert placed_on(run_cycle()) == {"first": "node-a"}  # the standing snapshot is built
    allocated = encode_allocation([[("GPU-A", 14000, 0)]])
    services.upsert_bound_pods([{"namespace": "ml", "name": "old", "node": "node-a", "allocated": allocated}])
    pod("second", mem=1000)
    assert placed_on(run_cycle()) == {"second": "node-b"}
    services.forget_bound_pods([{"namespace": "ml", "name": "old"}])
    services.set_node_fields("node-b", unschedulable=True)
    pod("third", mem=1000)
    assert placed_on(run_cycle()) == {"third": "node-a"}


@AFTER_COMMIT
def test_the_kept_snapshot_sees_a_pod_bound_by_others_change_in_place():
    """Same number of rows, one changed: HAMi's old pod is now reported on node-b's card."""
    two_nodes()
    old = {"namespace": "ml", "name": "old", "node": "node-a"}
    services.upsert_bound_pods([{**old, "allocated": encode_allocation([[("GPU-A", 14000, 0)]])}])
    pod("first", mem=2000)
    assert placed_on(run_cycle()) == {"first": "node-b"}
    services.upsert_bound_pods(
        [{**old, "node": "node-b", "allocated": encode_allocation([[("GPU-B", 14000, 0)]])}]
    )
    pod("second", mem=2000)
    assert placed_on(run_cycle()) == {"second": "node-a"}


@AFTER_COMMIT
def test_cpu_of_pods_placed_in_earlier_cycles_counts():
    two_nodes(a={"allocatable": {"cpu": "4"}}, b={"allocatable": {"cpu": "4"}})
    pod("first", cpu="3")
    assert placed_on(run_cycle()) == {"first": "node-a"}
    pod("second", cpu="2")
    assert placed_on(run_cycle()) == {"second": "node-b"}


def test_cpu_of_pods_placed_earlier_in_the_same_cycle_counts():
    two_nodes(a={"allocatable": {"cpu": "4"}}, b={"allocatable": {"cpu": "4"}})
    pod("first", cpu="3", priority=1)
    pod("second", cpu="2")
    assert placed_on(run_cycle()) == {"first": "node-a", "second": "node-b"}


@AFTER_COMMIT
def test_a_gated_pod_is_never_tried_and_is_placed_once_its_gate_goes():
    two_nodes()
    gated = pod("gated", scheduling={"schedulingGates": GATE})
    for _ in range(3):
        report = run_cycle()
        assert report.considered == 0
    gated = reload(gated)
    assert (gated.status, gated.attempts, gated.next_attempt_at) == (Pod.PENDING, 0, None)
    assert gated.reason == "waiting for scheduling gates: kueue.x-k8s.io/admission"
    assert not Decision.objects.filter(pod=gated).exists()
    services.set_scheduling_gates(gated.key, [])
    assert placed_on(run_cycle()) == {"gated": "node-a"}
    assert reload(gated).status == Pod.SCHEDULED


def test_a_gated_pod_waits_while_the_others_are_tried():
    two_nodes()
    free = pod("free")
    gated = pod("gated", scheduling={"schedulingGates": GATE})
    report = run_cycle()
    assert report.considered == 1 and placed_on(report) == {"free": "node-a"}
    assert reload(gated).attempts == 0 and reload(free).status == Pod.SCHEDULED


def planned_apart(*pods: Pod) -> list:
    """Each pod planned alone on node-a, on a snapshot read before any is committed: what two
    workers planning at the same time would commit."""
    return [plan_one(p, ["node-a"]) for p in pods]


@pytest.mark.parametrize(
    ("allocatable", "second_placed"),
    [({"cpu": "4"}, False), ({}, True)],
    ids=["cpu-limited", "not-limited"],
)
def test_the_commit_keeps_two_workers_from_over_committing_a_nodes_cpu(allocatable, second_placed):
    services.report_inventory("node-a", {}, {}, [t4("GPU-A", 0)], allocatable=allocatable)
    plans = planned_apart(pod("one", cpu="3"), pod("two", cpu="3"))
    assert [plan.attempts[0].decision.node for plan in plans] == ["node-a", "node-a"]
    assert commit_plan(plans[0]).placed
    second = commit_plan(plans[1])
    assert bool(second.placed) == second_placed
    if not second_placed:
        assert second.conflicts == [("default/two", "node-a Insufficient cpu")]
        assert Pod.objects.get(name="two").status == Pod.PENDING


def test_the_commit_keeps_two_workers_from_taking_one_host_port():
    services.report_inventory("node-a", {}, {}, [t4("GPU-A", 0)], allocatable={"pods": "110"})
    port = [{"containerPort": 80, "hostPort": 8080}]
    containers = [{"name": "main", "resources": limits(gpu=1, mem=1000), "ports": port}]
    first = services.submit_pod("default", "one", {}, containers)
    second = services.submit_pod("default", "two", {}, containers)
    plans = planned_apart(first, second)
    assert commit_plan(plans[0]).placed
    assert commit_plan(plans[1]).conflicts == [("default/two", "node-a host port TCP/8080 is taken")]
