"""Gangs and queues through real cycles: all-or-nothing placement and commit, queue limits and
namespace quotas counted from allocation rows, the queue tree, timeouts and group phases.

SQLite by default, PostgreSQL in CI (DATABASE_URL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import services
from scheduling.engine import PodInvalid
from scheduling.models import Allocation, Card, Decision, NamespaceQuota, Pod, PodGroup, Queue
from scheduling.pipeline import plan_cycle, run_cycle
from scheduling.pipeline.batch import load_book, queue_usage
from scheduling.pipeline.commit import commit_plan

from .conftest import assert_consistent, card, limits, reload

pytestmark = pytest.mark.django_db

GROUP = "hami.io/group-name"
MIN = "hami.io/group-min-member"


def member(name, group, min_member=None, gpu=1, mem=6000, namespace="default", **annotations):
    annotations = {GROUP: group, **annotations}
    if min_member is not None:
        annotations[MIN] = str(min_member)
    return services.submit_pod(
        namespace, name, annotations, [{"name": "main", "resources": limits(gpu=gpu, mem=mem)}]
    )


def pod(name, gpu=1, mem=1000, namespace="default", pct=None, **annotations):
    return services.submit_pod(
        namespace, name, dict(annotations), [{"name": "main", "resources": limits(gpu=gpu, mem=mem, pct=pct)}]
    )


def cards(node="node1", count=2, slots=1, memory=8000, prefix="GPU"):
    services.report_inventory(
        node, {}, {}, [card(f"{prefix}-{node}-{i}", i, memory, slots=slots) for i in range(count)]
    )


def last_decision(p: Pod) -> Decision:
    return Decision.objects.filter(pod=p).order_by("-id").first()


def test_a_gang_too_big_for_the_cluster_holds_nothing_and_every_member_says_why():
    cards(count=2)  # two single-slot cards: room for 2 of the 3
    members = [member(f"w{i}", "train", 3) for i in range(3)]
    report = run_cycle()
    assert report.placed == []
    assert Allocation.objects.filter(active=True).count() == 0
    assert Card.objects.filter(used_slots__gt=0).count() == 0
    for m in members:
        m = reload(m)
        assert m.status == Pod.PENDING
        assert m.reason.startswith("GangUnschedulable: gang default/train: 2/3 members placeable; w2: ")
        assert last_decision(m).payload["batch"]["reason"] == "GangUnschedulable"
    group = PodGroup.objects.get(name="train")
    assert (group.phase, group.min_member, group.source) == (PodGroup.INQUEUE, 3, "annotation")
    assert group.conditions[-1]["reason"] == "GangUnschedulable"
    assert_consistent()


def test_a_gang_that_fits_is_placed_whole_and_runs():
    cards(count=4)
    members = [member(f"w{i}", "train", 3) for i in range(3)]
    report = run_cycle()
    assert sorted(key for key, _, _ in report.placed) == ["default/w0", "default/w1", "default/w2"]
    group = PodGroup.objects.get(name="train")
    assert group.phase == PodGroup.RUNNING and group.running_at is not None
    assert group.reason == "3/3 members placed"
    for m in members:
        services.release_pod(reload(m), Pod.SUCCEEDED)
    group.refresh_from_db()
    assert group.phase == PodGroup.COMPLETED
    assert_consistent()


@pytest.mark.django_db(transaction=True)
def test_a_gang_waits_for_min_member_pods_then_goes_together():
    cards(count=4)
    first = [member(f"w{i}", "job", 3) for i in range(2)]
    run_cycle()
    assert {reload(m).reason for m in first} == {"NotEnoughPods: gang default/job: 2/3 members known"}
    assert PodGroup.objects.get(name="job").phase == PodGroup.PENDING
    last = member("w2", "job", 3)  # the first two back off; the third brings them along
    report = run_cycle()
    assert len(report.placed) == 3
    assert reload(last).status == Pod.SCHEDULED
    assert all(reload(m).status == Pod.SCHEDULED for m in first)


def test_the_commit_keeps_none_of_a_gang_when_a_member_lost_its_card():
    cards(count=3)
    for i in range(3):
        member(f"w{i}", "train", 3)
    plan = plan_cycle()
    assert sum(a.decision.status == "scheduled" for a in plan.attempts) == 3
    # someone else takes one of the cards between planning and commit
    taken = plan.attempts[1].decision.containers[0].devices[0].uuid
    thief = Card.objects.get(uuid=taken)
    Card.objects.filter(pk=thief.pk).update(used_slots=1, used_memory=8000)
    report = commit_plan(plan)
    assert report.placed == []
    assert len(report.conflicts) == 3
    assert all(
        why.startswith(f"gang: 2/3 placements still fit; default/w1: {taken} ") for _, why in report.conflicts
    )
    assert Allocation.objects.filter(active=True).count() == 0
    assert PodGroup.objects.get(name="train").reason.startswith("gang: 2/3 placements still fit")


def volcano_member(name: str, task: str, mem: int = 6000):
    """A member of the Volcano group `tf`, its task named as Volcano's controller names it."""
    annotations = {"scheduling.k8s.io/group-name": "tf", "volcano.sh/task-spec": task}
    return services.submit_pod(
        "default", name, annotations, [{"name": "main", "resources": limits(gpu=1, mem=mem)}]
    )


def tf_group():
    """Volcano's PodGroup tf: minMember 2, minTaskMember {ps: 1, worker: 1}."""
    services.store_pod_group(
        "default",
        "tf",
        "volcano",
        None,
        min_member=2,
        subgroups=[{"name": "ps", "min_member": 1}, {"name": "worker", "min_member": 1}],
    )


def test_a_cycle_starts_no_gang_whose_part_cannot_reach_its_minimum():
    """Two workers fit and make min_member 2, but the ps fits nowhere: nothing is placed."""
    cards(count=3)
    tf_group()
    members = [volcano_member("ps-0", "ps", mem=64000)] + [
        volcano_member(f"w{i}", "worker") for i in range(2)
    ]
    assert run_cycle().placed == []
    for m in members:
        assert reload(m).reason.startswith("GangUnschedulable: gang default/tf: subgroup ps: 0/1 placeable; ")
    assert_consistent()


def test_the_commit_keeps_none_of_a_gang_whose_part_lost_its_card():
    """Planned: the ps and a worker for the minimum, the other worker as an extra. The ps's
    card is taken before the commit: two workers would still make min_member 2, but the ps's
    part would have none, so nothing is kept."""
    cards(count=3)
    tf_group()
    volcano_member("ps-0", "ps")
    for i in range(2):
        volcano_member(f"w{i}", "worker")
    plan = plan_cycle()
    assert sum(a.decision.status == "scheduled" for a in plan.attempts) == 3
    ps = next(a for a in plan.attempts if a.key == "default/ps-0")
    assert (ps.part, ps.parts_needed, ps.gang_needed) == ("ps", {"ps": 1, "worker": 1}, 2)
    taken = ps.decision.containers[0].devices[0].uuid
    Card.objects.filter(uuid=taken).update(used_slots=1, used_memory=8000)
    report = commit_plan(plan)
    assert report.placed == []
    assert all(
        why.startswith("gang: subgroup ps: 0/1 placements still fit; default/ps-0: ")
        for _, why in report.conflicts
    )
    assert Allocation.objects.filter(active=True).count() == 0


def test_a_queue_limit_counts_every_vgpu_of_a_multi_card_ask():
    research = Queue.objects.create(name="research", limit_gpumem=10_000)
    cards(count=4, slots=4)
    first = pod("first", gpu=2, mem=4000, **{"hami.io/queue": "research"})  # 8000 MiB
    second = pod("second", gpu=1, mem=4000, **{"hami.io/queue": "research"})  # 8000 + 4000 > 10000
    other = pod("other", gpu=1, mem=4000)  # the default queue has no limit
    run_cycle()
    assert reload(first).status == Pod.SCHEDULED and reload(first).queue == research
    assert reload(other).status == Pod.SCHEDULED
    second = reload(second)
    assert second.status == Pod.PENDING
    assert second.reason == "QueueLimitExceeded: queue research: gpumem 8000 + 4000 > limit 10000 MiB"
    assert queue_usage()["research"] == {"vgpus": 2, "gpumem": 8000, "gpucores": 0}


def test_a_percentage_ask_counts_the_mib_granted():
    Queue.objects.create(name="q", limit_gpumem=6000)
    cards(count=2, slots=4, memory=8000)
    half = pod("half", gpu=1, mem=None, pct=50, **{"hami.io/queue": "q"})  # 4000 of 8000
    more = pod("more", gpu=1, mem=None, pct=50, **{"hami.io/queue": "q"})
    run_cycle()
    assert reload(half).status == Pod.SCHEDULED
    assert reload(more).reason == "QueueLimitExceeded: queue q: gpumem 4000 + 4000 > limit 6000 MiB"


def test_a_child_queue_cannot_take_its_parent_over_its_limit():
    org = Queue.objects.create(name="org", limit_vgpus=2)
    Queue.objects.create(name="a", parent=org)
    Queue.objects.create(name="b", parent=org, limit_vgpus=5)
    cards(count=4, slots=4)
    pod("a1", gpu=2, **{"hami.io/queue": "a"})
    blocked = pod("b1", gpu=1, **{"hami.io/queue": "b"}, **{"hami.io/node-scheduler-policy": "binpack"})
    parent = pod("p1", gpu=1, **{"hami.io/queue": "org"})
    run_cycle()
    assert reload(blocked).reason == "QueueLimitExceeded: queue org: vgpus 2 + 1 > limit 2"
    assert reload(parent).reason.startswith("QueueNotFound: the pod names queue 'org', a parent queue")
    book = load_book()
    assert book.queues["org"].used["vgpus"] == 2


def test_an_unknown_queue_waits_and_says_so():
    cards()
    p = pod("p", **{"hami.io/queue": "nope"})
    run_cycle()
    assert reload(p).reason == "QueueNotFound: the pod names queue 'nope', which does not exist"


def test_a_namespace_default_queue_and_a_namespace_quota():
    team = Queue.objects.create(name="team", namespaces=["ml"])
    NamespaceQuota.objects.create(namespace="ml", quota="gpu-quota", resource="gpumem", hard=10_000)
    cards(count=4, slots=4)
    a = pod("a", gpu=2, mem=4000, namespace="ml")
    b = pod("b", gpu=1, mem=4000, namespace="ml")
    run_cycle()
    assert reload(a).status == Pod.SCHEDULED and reload(a).queue == team
    assert reload(b).reason == "NamespaceQuotaExceeded: namespace ml: gpumem 8000 + 4000 > hard 10000 MiB"


def test_a_bad_group_annotation_is_refused_naming_it():
    with pytest.raises(PodInvalid) as caught:
        member("w", "g", min_member="lots")
    assert caught.value.field == MIN


def test_a_gang_past_its_timeout_fails_and_its_members_stay_pending_or_are_rejected():
    cards(count=1)
    for i in range(2):
        member(f"w{i}", "slow", 2, **{"hami.io/group-schedule-timeout-seconds": "60"})
    later = timezone.now() + timedelta(seconds=120)
    commit_plan(plan_cycle(now=later))
    group = PodGroup.objects.get(name="slow")
    assert group.phase == PodGroup.FAILED
    assert any(c["reason"] == "ScheduleTimeout" for c in group.conditions)
    assert set(Pod.objects.filter(group=group).values_list("status", flat=True)) == {Pod.PENDING}
    # the same, with on_timeout: reject
    group.on_timeout = PodGroup.REJECT
    group.save()
    Pod.objects.filter(group=group).update(next_attempt_at=None)
    commit_plan(plan_cycle(now=later))
    rejected = Pod.objects.filter(group=group)
    assert set(rejected.values_list("status", flat=True)) == {Pod.REJECTED}
    assert set(rejected.values_list("error_field", flat=True)) == {"schedule_timeout_seconds"}


def test_gangs_never_commit_partially_over_many_cycles():
    """100 pods in gangs of varying min_member on a small cluster, released as they run. A gang
    short of its minimum may take other gangs' extras (docs/queues.md, "Elastic gangs"): its
    members nominated to the freed cards count with those placed."""
    import random

    from scheduling.models import Nomination

    rng = random.Random(3)
    for n in range(4):
        cards(node=f"node{n}", count=4, slots=2)
    gangs = {}
    for g in range(20):
        size = rng.randint(1, 6)
        gangs[f"g{g}"] = rng.randint(1, size)
        for i in range(size):
            member(f"g{g}-{i}", f"g{g}", gangs[f"g{g}"], mem=rng.choice([2000, 4000, 7000]))
    placed_gangs = 0
    for _ in range(12):
        before = {
            name: PodGroup.objects.get(name=name).pods.filter(status__in=Pod.BOUND).count() for name in gangs
        }
        report = run_cycle()
        for name, min_member in gangs.items():
            new = sum(key.startswith(f"default/{name}-") for key, _, _ in report.placed)
            nominated = Nomination.objects.filter(pod__group__name=name).values("pod").distinct().count()
            assert new == 0 or before[name] + new + nominated >= min_member, name
            placed_gangs += bool(new)
        assert_consistent()
        running = sorted({key.split("/")[1].rsplit("-", 1)[0] for key, _, _ in report.placed})
        for name in running[::2]:  # whole gangs finish
            for p in Pod.objects.filter(group__name=name, status__in=Pod.BOUND):
                services.release_pod(p, Pod.SUCCEEDED)
        Pod.objects.filter(status=Pod.PENDING).update(next_attempt_at=None)
    assert placed_gangs >= 10  # the run proved something: most gangs got placed at some point


def test_a_gang_member_changed_since_the_snapshot_takes_the_gang_back_whole():
    """Regression: with a member skipped (its row changed) and every other one still fitting,
    the gang is below what it needs; the commit keeps none of it and says why."""
    cards(count=3)
    members = [member(f"w{i}", "train", 3) for i in range(3)]
    plan = plan_cycle()
    Pod.objects.filter(pk=members[2].pk).update(revision=members[2].revision + 5)
    report = commit_plan(plan)
    assert report.placed == [] and report.skipped == ["default/w2"]
    assert {why for _, why in report.conflicts} == {
        "gang: 2/3 placements left; the other members changed since the snapshot"
    }
    assert Allocation.objects.filter(active=True).count() == 0


def test_gang_spread_sees_members_placed_in_earlier_cycles():
    cards(count=2, slots=4)
    spread = {"hami.io/gpu-scheduler-policy": "gang-spread,binpack"}
    first = member("w0", "train", 1, mem=2000, **spread)
    run_cycle()
    taken = Allocation.objects.get(pod=first).card.uuid
    second = member("w1", "train", 1, mem=2000, **spread)
    run_cycle()
    assert Allocation.objects.get(pod=reload(second)).card.uuid != taken
    plain = member("x0", "other", 1, mem=2000, **{"hami.io/gpu-scheduler-policy": "binpack"})
    run_cycle()
    assert reload(plain).status == Pod.SCHEDULED  # binpack alone packs: no gang rule for it
