"""Cycle semantics: queue order, what a placement writes, why pods wait, races, releases."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import services
from scheduling.models import Allocation, Card, Cycle, Decision, Node, Pod
from scheduling.pipeline import plan_cycle, run_cycle
from scheduling.pipeline.commit import commit_plan
from scheduling.pipeline.housekeeping import mark_silent_nodes_not_ready, prune_decisions
from scheduling.pipeline.snapshot import load_snapshot
from scheduling.pipeline.wake import wake_movable

from .conftest import assert_consistent, card, limits, reload, submit, t4

pytestmark = pytest.mark.django_db
#: Wakes run after the commit that freed capacity, so these tests need real commits.
AFTER_COMMIT = pytest.mark.django_db(transaction=True)


def one_slot_card():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, slots=1)])


@AFTER_COMMIT
def test_the_queue_goes_by_priority_then_submission_time():
    one_slot_card()
    early = submit("early", gpu=1, mem=100)
    high = submit("high", gpu=1, mem=100, priority=5)
    high_later = submit("high-later", gpu=1, mem=100, priority=5)
    order = []
    for _ in range(3):
        report = run_cycle()
        assert len(report.placed) == 1
        order.append(report.placed[0][0])
        services.release_pod(Pod.objects.get(status=Pod.SCHEDULED), Pod.SUCCEEDED)
    assert order == ["default/high", "default/high-later", "default/early"]
    assert [reload(p).status for p in (early, high, high_later)] == [Pod.SUCCEEDED] * 3


def test_pods_of_one_cycle_see_the_placements_before_them():
    """GPU binpack puts two 20%-core/20%-memory pods on the same card (SPEC 7 story)."""
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    policy = {"hami.io/gpu-scheduler-policy": "binpack"}
    submit("pod1", gpu=1, pct=20, cores=20, annotations=policy)
    submit("pod2", gpu=1, pct=20, cores=20, annotations=policy)
    report = run_cycle()
    assert [node for _, node, _ in report.placed] == ["node1", "node1"]
    gpu0 = Card.objects.get(uuid="GPU-0")
    assert (gpu0.used_slots, gpu0.used_memory, gpu0.used_cores) == (2, 3200, 40)
    assert Card.objects.get(uuid="GPU-1").used_slots == 0


def test_placement_writes_allocations_counters_and_the_annotation_string():
    """SPEC 6 walk-through: mutex removes GPU0 and GPU1, binpack ties, the index picks GPU2."""
    services.report_inventory("node1", {}, {}, [t4(f"GPU-{i}", i) for i in range(4)])
    for name, uuid in (("a", "GPU-0"), ("b", "GPU-0"), ("c", "GPU-1")):
        submit(name, gpu=1, mem=1000, annotations={"nvidia.com/use-gpuuuid": uuid})
    run_cycle()
    pod = submit("mutex", gpu=1, mem=1000, annotations={"hami.io/gpu-scheduler-policy": "mutex,binpack"})
    run_cycle()
    pod = reload(pod)
    assert pod.status == Pod.SCHEDULED and pod.node.name == "node1" and pod.scheduled_at is not None
    assert pod.allocated == "GPU-2,NVIDIA,1000,0:;"
    allocation = Allocation.objects.get(pod=pod)
    assert (
        allocation.card.uuid,
        allocation.memory,
        allocation.cores,
        allocation.container_index,
        allocation.container_name,
        allocation.active,
    ) == ("GPU-2", 1000, 0, 0, "main", True)
    decision = pod.decisions.get()
    assert decision.outcome == Decision.SCHEDULED and decision.node == "node1"
    assert decision.chain == ["mutex", "binpack"] and decision.weights == {"slot": 1, "core": 1, "memory": 1}
    table = {row["uuid"]: row for row in decision.cards}
    assert table["GPU-2"]["chosen"] and table["GPU-0"]["reason"] == "ExclusiveDeviceAllocateConflict"
    assert decision.cycle is not None and decision.cycle.placed == 1
    assert_consistent()


def test_a_pod_of_several_containers_gets_one_allocation_per_card_in_container_order():
    services.report_inventory("node1", {}, {}, [card(f"GPU-{i}", i) for i in range(3)])
    containers = [
        {"name": "sidecar"},
        {"name": "pair", "resources": limits(gpu=2, mem=500, cores=10)},
        {"name": "one", "resources": limits(gpu=1, mem=700)},
    ]
    pod = submit("multi", containers=containers, annotations={"hami.io/gpu-scheduler-policy": "binpack"})
    run_cycle()
    pod = reload(pod)
    parts = pod.allocated.split(";")
    assert parts[0] == "" and parts[1].count(":") == 2 and parts[2].count(":") == 1 and parts[3] == ""
    rows = list(
        pod.allocations.order_by("container_index", "card__index").values_list(
            "container_index", "container_name", "memory", "cores"
        )
    )
    assert rows[:2] == [(1, "pair", 500, 10), (1, "pair", 500, 10)] and rows[2][1:] == ("one", 700, 0)
    pair = set(pod.allocations.filter(container_index=1).values_list("card__uuid", flat=True))
    assert len(pair) == 2
    assert_consistent()


@AFTER_COMMIT
def test_a_pod_that_does_not_fit_stays_pending_with_its_reasons_and_backs_off():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=4000), card("GPU-1", 1, memory=4000)])
    pod = submit("big", gpu=1, mem=6000)
    report = run_cycle()
    assert report.pending == [("default/big", "0/1 nodes are available: 1 CardInsufficientMemory.")]
    pod = reload(pod)
    assert pod.status == Pod.PENDING and pod.reason == "0/1 nodes are available: 1 CardInsufficientMemory."
    assert pod.next_attempt_at > timezone.now() and pod.attempts == 1
    decision = pod.decisions.get()
    assert decision.outcome == Decision.PENDING
    assert decision.failed_nodes == {"node1": "2/2 CardInsufficientMemory"}
    assert decision.reasons == {"CardInsufficientMemory": 2} and decision.payload["nodes_failed"] == 1
    assert run_cycle().considered == 0  # backing off
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=8000), card("GPU-1", 1, memory=4000)])
    assert reload(pod).next_attempt_at is not None  # the report touches no waiting pod
    assert run_cycle().placed[0][0] == "default/big"  # the cycle wakes what the change lets in


@AFTER_COMMIT
def test_a_silent_node_is_not_ready_and_its_cards_take_no_new_pods():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    Node.objects.update(last_heartbeat=timezone.now() - timedelta(hours=1))
    assert mark_silent_nodes_not_ready() == 1
    assert Node.objects.get(name="node1").not_ready_reason.startswith("no report for ")
    pod = submit("p", gpu=1, mem=100)
    run_cycle()
    pod = reload(pod)
    assert pod.status == Pod.PENDING and pod.decisions.get().failed_nodes == {"node1": "2/2 NodeNotReady"}
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    assert Node.objects.get(name="node1").not_ready_reason == ""
    run_cycle()
    assert reload(pod).status == Pod.SCHEDULED


def test_extender_pods_are_placed_only_by_filter_calls_never_by_cycles():
    """Only kube-scheduler's filter call knows which nodes such a pod may use."""
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    extender = submit("ext", gpu=1, mem=100, uid="e", origin=Pod.EXTENDER)
    watched = submit("kube", gpu=1, mem=100, uid="k", origin=Pod.KUBERNETES)
    report = run_cycle()
    assert [pod for pod, _, _ in report.placed] == ["default/kube"]
    assert (reload(extender).status, extender.attempts, extender.decisions.count()) == (Pod.PENDING, 0, 0)
    assert reload(watched).status == Pod.SCHEDULED


@AFTER_COMMIT
def test_cordoned_cards_take_no_new_pods_until_uncordoned():
    services.report_inventory(
        "node1", {}, {"hami.io/device-cordon": "GPU-1"}, [card("GPU-0", 0), card("GPU-1", 1)]
    )
    services.cordon_card("GPU-0", True)
    pod = submit("p", gpu=1, mem=100)
    run_cycle()
    assert reload(pod).decisions.get().failed_nodes == {"node1": "2/2 CardCordoned"}
    services.cordon_card("GPU-0", False)
    run_cycle()
    assert reload(pod).allocated.startswith("GPU-0,")


def test_an_invalid_pod_stays_unschedulable_with_its_error_until_fixed():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    bad = {"hami.io/device-scoring-weights": "slot=1,core=x,memory=1"}
    pod = submit("p", gpu=1, mem=100, annotations=bad, validate=False)
    report = run_cycle()
    assert report.rejected and report.rejected[0][0] == "default/p"
    pod = reload(pod)
    assert pod.status == Pod.PENDING and pod.parked and pod.node is None
    assert pod.error_field == "annotations.hami.io/device-scoring-weights" and "core" in pod.error
    assert pod.reason == pod.error and pod.decisions.get().outcome == Decision.REJECTED
    assert run_cycle().considered == 0  # parked: not tried again as it is
    fixed = submit(
        "p", gpu=1, mem=100, annotations={"hami.io/device-scoring-weights": "slot=1,core=2,memory=1"}
    )
    assert not fixed.parked and fixed.error == ""
    run_cycle()
    assert reload(pod).status == Pod.SCHEDULED


def test_a_pod_asking_no_gpu_is_rejected_for_good():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    pod = submit("cpu", containers=[{"name": "main", "resources": {"limits": {"cpu": "1"}}}], validate=False)
    run_cycle()
    pod = reload(pod)
    assert pod.status == Pod.REJECTED and "asks for no GPU" in pod.error


def test_a_placement_that_lost_a_race_stays_pending_with_a_conflict_decision():
    """Plan on a snapshot, let another cycle take the card, then commit the plan: the
    re-check under lock refuses it; the next cycle decides again on fresh numbers."""
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=8000)])
    slow = submit("slow", gpu=1, mem=6000)
    plan = plan_cycle()
    assert plan.attempts[0].decision.status == "scheduled"
    fast = submit("fast", gpu=1, mem=6000, priority=9)
    assert run_cycle(limit=1).placed[0][0] == "default/fast"
    report = commit_plan(plan)
    assert report.placed == [] and report.conflicts == [("default/slow", "GPU-0 CardInsufficientMemory")]
    assert report.more  # a conflict asks for another cycle
    slow = reload(slow)
    assert slow.status == Pod.PENDING and "lost a race" in slow.reason and slow.next_attempt_at is None
    assert slow.decisions.get().outcome == Decision.CONFLICT
    assert not slow.allocations.exists() and reload(fast).status == Pod.SCHEDULED
    assert_consistent()
    services.release_pod(fast, Pod.SUCCEEDED)
    run_cycle()
    assert reload(slow).status == Pod.SCHEDULED


@AFTER_COMMIT  # the release's wake runs on commit
def test_a_pod_that_loses_two_races_running_is_backed_off_not_retried_at_once():
    """The first race lost is retried at once (another cycle took the card); a second one
    running is backed off: a planner and a commit that disagree for as long as something
    lasts must not spin a worker through cycles that each refuse the same placement."""
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=8000)])
    slow = submit("slow", gpu=1, mem=6000)
    for lost in (1, 2):
        plan = plan_cycle()
        assert plan.attempts[0].decision.status == "scheduled"
        taker = submit(f"taker{lost}", gpu=1, mem=6000, priority=9)
        assert run_cycle(limit=1).placed[0][0] == f"default/taker{lost}"
        assert commit_plan(plan).conflicts == [("default/slow", "GPU-0 CardInsufficientMemory")]
        slow = reload(slow)
        assert "lost a race" in slow.reason
        assert (slow.next_attempt_at is None) == (lost == 1), lost
        services.release_pod(taker, Pod.SUCCEEDED)
    # the capacity freed cuts the back-off short, as for any waiting pod
    run_cycle()
    assert reload(slow).status == Pod.SCHEDULED
    assert_consistent()


def test_a_pod_changed_since_the_snapshot_is_left_for_the_next_cycle():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    pod = submit("p", gpu=1, mem=1000)
    plan = plan_cycle()
    submit("p", gpu=1, mem=2000)
    report = commit_plan(plan)
    assert report.skipped == ["default/p"] and not Allocation.objects.exists()
    run_cycle()
    assert reload(pod).allocated == "GPU-0,NVIDIA,2000,0:;"


@AFTER_COMMIT
def test_release_then_the_waiting_pod_is_placed():
    one_slot_card()
    first = submit("first", gpu=1, mem=100)
    waiting = submit("waiting", gpu=1, mem=100)
    run_cycle()
    assert reload(waiting).status == Pod.PENDING and "CardTimeSlicingExhausted" in waiting.reason
    assert reload(waiting).next_attempt_at is not None
    services.release_pod(first, Pod.DELETED)
    assert wake_movable() == 1 and reload(waiting).next_attempt_at is None
    assert run_cycle().placed[0][0] == "default/waiting"
    assert_consistent()


def test_init_containers_fit_alone_and_hold_nothing_afterwards():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=8000)])
    pod = submit("p", gpu=1, mem=3000, init=[{"name": "warmup", "resources": limits(gpu=1, mem=7000)}])
    run_cycle()
    pod = reload(pod)
    # SPEC 8: the init container first in the allocation; only the app container holds usage.
    assert (
        pod.allocated == "GPU-0,NVIDIA,7000,0:;GPU-0,NVIDIA,3000,0:;"
        and Card.objects.get().used_memory == 3000
    )


def test_the_snapshot_takes_the_same_few_queries_however_big_the_cluster(django_assert_max_num_queries):
    # config, nodes, cards, the running pods (own placed and bound by others, one UNION) and,
    # on PostgreSQL, the bound mark (`bound_mark`: the oldest transaction running)
    services.report_inventory("node0", {}, {}, [card("GPU-0-0", 0)])
    with django_assert_max_num_queries(5):
        small = load_snapshot()
    for n in range(1, 20):
        services.report_inventory(
            f"node{n}", {}, {}, [card(f"GPU-{n}-{i}", i, links={f"GPU-{n}-{1 - i}": 60}) for i in range(2)]
        )
    with django_assert_max_num_queries(5):
        big = load_snapshot()
    assert len(small.cluster.nodes) == 1 and len(big.cluster.nodes) == 20
    assert big.cluster.node("node5").pair_score("GPU-5-0", "GPU-5-1") == 60


def test_a_cycle_with_nothing_due_writes_nothing(django_assert_max_num_queries):
    wake_movable()  # this process has looked at the capacity version as it is
    with django_assert_max_num_queries(2):  # the capacity version, the due pods
        report = run_cycle()
    assert report.considered == 0 and not Cycle.objects.exists()


def test_history_keeps_the_last_decisions_of_each_pod(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "DECISIONS_PER_POD": 3}
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=100)])
    pod = submit("p", gpu=1, mem=1000)
    other = submit("q", gpu=1, mem=1000)
    for _ in range(5):
        Pod.objects.update(next_attempt_at=None)
        run_cycle()
    latest = pod.decisions.order_by("-id").values_list("id", flat=True)[:3]
    assert prune_decisions() == 4
    assert list(pod.decisions.order_by("-id").values_list("id", flat=True)) == list(latest)
    assert other.decisions.count() == 3
