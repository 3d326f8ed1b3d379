"""Bulk release (`services.release_pods`): a batch ends where `release_pod` one item after
another would (a later item naming a pod again is refused naming `name`), in one
transaction, with one result per item, counters equal to the active allocations and one
cycle asked for."""

from __future__ import annotations

import random

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from scheduling import services
from scheduling.models import Allocation, Card, Pod, PodGroup
from scheduling.pipeline import run_cycle
from scheduling.pipeline.consistency import counter_drift
from scheduling.pipeline.triggers import signal_scheduler
from scheduling.services.pods import FINAL_STATUSES, RELEASE_KEYS, WriteOutcome, release_pods
from tests.pipeline.conftest import card, limits

pytestmark = pytest.mark.django_db


def submit(name: str, mem: int = 1000, **fields) -> Pod:
    return services.submit_pod(
        "default",
        name,
        fields.pop("annotations", {}),
        [{"name": "main", "resources": limits(gpu=1, mem=mem)}],
        **fields,
    )


GANG = {"hami.io/group-name": "g1", "hami.io/group-min-member": "2"}
PAIR = {"hami.io/group-name": "g2"}


def world() -> dict[str, str]:
    """Four cards and pods in every state a release meets: scheduled, running, pending
    (fits nowhere), succeeded, rejected; a gang of three (min 2) and a pair (min 1), placed
    and running; a card shrunk under its tenants (over capacity). Their uids, by name."""
    services.report_inventory("node1", {}, {}, [card(f"GPU-{n}", n, memory=4000) for n in range(4)])
    uids = {}
    for name in ("placed", "running", "done", "shared"):
        uids[name] = f"u-{name}"
        submit(name, mem=1500, uid=uids[name])
    for n in range(3):
        submit(f"gang-{n}", annotations=GANG, uid=f"u-gang-{n}")
    for n in range(2):
        submit(f"pair-{n}", annotations=PAIR)
    run_cycle(trigger="test")
    for name in ("running", "gang-0", "gang-1", "gang-2", "pair-0", "pair-1"):
        pod = Pod.objects.select_related("node").get(name=name)
        services.mark_bound(pod, pod.node.name)
    services.release_pod("default/done", Pod.SUCCEEDED)
    submit("waiting", mem=90000, uid="u-waiting")
    submit("refusal", uid="u-refusal")
    Pod.objects.filter(name="refusal").update(status=Pod.REJECTED, reason="test")
    held = (
        Allocation.objects.filter(pod__name="placed", active=True)
        .values_list("card__uuid", flat=True)
        .first()
    )
    shrunk = [card(f"GPU-{n}", n, memory=1000 if f"GPU-{n}" == held else 4000) for n in range(4)]
    services.report_inventory("node1", {}, {}, shrunk)
    assert Card.objects.filter(uuid=held).exclude(over_capacity="").exists()
    assert set(PodGroup.objects.values_list("name", "phase")) == {
        ("g1", PodGroup.RUNNING),
        ("g2", PodGroup.RUNNING),
    }
    statuses = dict(Pod.objects.values_list("name", "status"))
    assert statuses["placed"] == Pod.SCHEDULED and statuses["running"] == Pod.RUNNING
    assert statuses["waiting"] == Pod.PENDING and statuses["done"] == Pod.SUCCEEDED
    uids.update({f"gang-{n}": f"u-gang-{n}" for n in range(3)}, waiting="u-waiting", refusal="u-refusal")
    return uids


def state() -> dict:
    """What a release may change: pods, allocations, card counters, groups (times as set or not)."""
    pods = set(
        Pod.objects.values_list("name", "status", "reason", "revision", "node_id", "next_attempt_at", "uid")
    )
    finished = set(Pod.objects.filter(finished_at__isnull=False).values_list("name", flat=True))
    allocations = set(
        (name, uuid, active, released is not None)
        for name, uuid, active, released in Allocation.objects.values_list(
            "pod__name", "card__uuid", "active", "released_at"
        )
    )
    cards = set(Card.objects.values_list("uuid", "used_slots", "used_memory", "used_cores", "over_capacity"))
    groups = {
        group.name: (
            group.phase,
            group.reason,
            [(c["phase"], c["reason"], c["message"]) for c in group.conditions],
            group.running_at is not None,
            group.finished_at is not None,
        )
        for group in PodGroup.objects.all()
    }
    return {"pods": pods, "finished": finished, "allocations": allocations, "cards": cards, "groups": groups}


def rolled_back(run):
    """`run()`'s result and the state it left, then undone (a savepoint of the test's transaction)."""
    with transaction.atomic():
        result = run()
        after = state()
        assert counter_drift() == []  # counters equal active allocations (one card stays over capacity)
        transaction.set_rollback(True)
    return result, after


def one_by_one(items: list, final_status: str, placed_only: bool) -> list[str]:
    """`release_pod` for each item in order, as the outcomes `release_pods` reports: an item
    that is not an object of `RELEASE_KEYS`, or names a pod an earlier item named (refused or
    not), or no pod, is refused; with `placed_only`, so is a pod that is not scheduled or running (the check
    `POST .../complete/` makes before `release_pod`)."""
    outcomes, seen = [], set()
    for entry in items:
        if not isinstance(entry, dict):
            outcomes.append(WriteOutcome.REFUSED)
            continue
        key = (entry.get("namespace"), entry.get("name"))
        named = all(isinstance(part, str) for part in key)
        again = key in seen
        if named:
            seen.add(key)  # an item names its pod whatever becomes of it (`named_again`)
        if set(entry) - set(RELEASE_KEYS) or again or not named:
            outcomes.append(WriteOutcome.REFUSED)
            continue
        before = Pod.objects.filter(namespace=key[0], name=key[1]).values_list("status", "uid").first()
        uid = entry.get("uid") or None
        if before is None or (placed_only and before[0] not in Pod.BOUND and uid in (None, before[1])):
            outcomes.append(WriteOutcome.REFUSED)
            continue
        after = services.release_pod(f"{key[0]}/{key[1]}", final_status, expected_uid=uid)
        if after is None:
            outcomes.append(WriteOutcome.REFUSED)
        else:
            outcomes.append(WriteOutcome.UNCHANGED if before[0] in Pod.FINISHED else WriteOutcome.RELEASED)
    return outcomes


NAMES = [
    "placed",
    "running",
    "done",
    "shared",
    "waiting",
    "refusal",
    "gang-0",
    "gang-1",
    "gang-2",
    "pair-0",
    "pair-1",
    "ghost",
]
BAD = [{"colour": "blue"}, {"name": 5}, {"namespace": ""}, {"uid": "x\x00"}]
UIDS: dict[str, str] = {}


@st.composite
def batches(draw):
    """Items over the world's pods and one that does not exist, some with their uid or
    another, some malformed, some repeated. Drawn evenly from a seed (hypothesis' own draws
    favour the first choices; the cases that matter are combinations: two members of a gang
    in one batch, say)."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    items: list = []
    for _ in range(rng.randint(1, 8)):
        name = rng.choice(NAMES)
        entry: dict = {"namespace": "default", "name": name}
        uid = rng.choice([None, None, UIDS.get(name, ""), "u-other"])
        if uid is not None:
            entry["uid"] = uid
        bad = rng.choice([None] * 12 + BAD + ["not an object"])
        items.append(bad if isinstance(bad, str) else {**entry, **(bad or {})})
    if rng.random() < 0.3:  # the whole gang in one batch: judged after each member, in order
        for n in rng.sample(range(3), 3):
            items.insert(rng.randint(0, len(items)), {"namespace": "default", "name": f"gang-{n}"})
    note(f"items: {items}")
    return items


@pytest.mark.parametrize(
    ("final_status", "placed_only"),
    [(Pod.DELETED, False), (Pod.SUCCEEDED, True), (Pod.FAILED, True), (Pod.SUCCEEDED, False)],
)
def test_a_batch_ends_where_release_pod_one_item_after_another_ends(final_status, placed_only):
    UIDS.update(world())

    @settings(
        max_examples=40,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(items=batches())
    def check(items):
        expected, sequential = rolled_back(lambda: one_by_one(items, final_status, placed_only))
        results, together = rolled_back(lambda: release_pods(items, final_status, placed_only=placed_only))
        assert [result.index for result in results] == list(range(len(items)))
        assert [result.outcome for result in results] == expected
        assert together == sequential
        for result in results:
            assert (result.error is None) == (result.outcome != WriteOutcome.REFUSED)
        seen.update(expected)

    seen: set[str] = set()
    check()
    assert seen == (
        {WriteOutcome.RELEASED, WriteOutcome.REFUSED}
        if placed_only
        else {WriteOutcome.RELEASED, WriteOutcome.UNCHANGED, WriteOutcome.REFUSED}
    )  # finished: not placed


def test_a_whole_gang_in_one_batch_passes_through_the_queue_as_one_by_one():
    """Three members (min 2) ending in one batch: below min_member after the second, all
    succeeded after the third; the conditions say both, as `release_pod` one by one writes."""
    world()
    gang = [{"namespace": "default", "name": f"gang-{n}"} for n in (2, 0, 1)]
    assert [r.outcome for r in release_pods(gang, Pod.SUCCEEDED)] == [WriteOutcome.RELEASED] * 3
    group = PodGroup.objects.get(name="g1")
    assert (group.phase, group.reason) == (PodGroup.COMPLETED, "3 members succeeded")
    assert [c["phase"] for c in group.conditions][-2:] == [PodGroup.INQUEUE, PodGroup.COMPLETED]
    assert group.finished_at is not None


def test_a_gang_released_in_two_batches_is_judged_member_by_member():
    """Releasing two of three members (min 2) puts the gang back in the queue; the last one
    ends it as failed."""
    world()
    release_pods(
        [{"namespace": "default", "name": "gang-0"}, {"namespace": "default", "name": "gang-1"}],
        Pod.SUCCEEDED,
    )
    group = PodGroup.objects.get(name="g1")
    assert (group.phase, group.reason) == (PodGroup.INQUEUE, "1/2 members placed after one ended")
    release_pods([{"namespace": "default", "name": "gang-2"}], Pod.FAILED)
    group.refresh_from_db()
    assert (group.phase, group.reason) == (PodGroup.FAILED, "2/3 members succeeded")
    assert [c["phase"] for c in group.conditions][-2:] == [PodGroup.INQUEUE, PodGroup.FAILED]


def test_a_gang_ends_judged_by_its_live_members_a_deleted_and_replaced_one_does_not_fail_it():
    """Kubernetes controllers delete a member and recreate it under a new name: the gang
    completes once every member that was not deleted succeeded."""
    world()
    services.release_pod("default/gang-1", Pod.DELETED)
    submit("gang-1-b7x2q", annotations=GANG)
    run_cycle(trigger="test")
    assert Pod.objects.get(name="gang-1-b7x2q").status == Pod.SCHEDULED
    release_pods([{"namespace": "default", "name": f"gang-{n}"} for n in (0, 2, "1-b7x2q")], Pod.SUCCEEDED)
    group = PodGroup.objects.get(name="g1")
    assert (group.phase, group.reason) == (PodGroup.COMPLETED, "3 members succeeded (1 deleted)")


def test_a_gang_whose_members_were_all_deleted_fails_saying_so():
    world()
    release_pods([{"namespace": "default", "name": f"gang-{n}"} for n in range(3)], Pod.DELETED)
    group = PodGroup.objects.get(name="g1")
    assert (group.phase, group.reason) == (PodGroup.FAILED, "all 3 members were deleted")


def test_one_transaction_and_one_cycle_for_a_batch(
    django_assert_max_num_queries, django_capture_on_commit_callbacks
):
    services.report_inventory("node1", {}, {}, [card(f"GPU-{n}", n, memory=64000) for n in range(8)])
    for n in range(60):
        submit(f"p-{n}", mem=1000)
    run_cycle(trigger="test")
    assert Pod.objects.filter(status=Pod.SCHEDULED).count() == 60
    items = [{"namespace": "default", "name": f"p-{n}"} for n in range(60)]
    with django_capture_on_commit_callbacks(execute=False) as callbacks, django_assert_max_num_queries(12):
        results = release_pods(items, Pod.SUCCEEDED, placed_only=True)
    assert [r.outcome for r in results] == [WriteOutcome.RELEASED] * 60
    cycles = [c for c in callbacks if getattr(c, "func", None) is signal_scheduler]
    assert len(cycles) == 1 and cycles[0].args[0] == "released 60 pods"
    assert set(Card.objects.values_list("used_slots", "used_memory")) == {(0, 0)}
    assert not Allocation.objects.filter(active=True).exists()
    assert set(Pod.objects.values_list("status", "reason")) == {
        (Pod.SUCCEEDED, "succeeded after running on node1")
    }


def test_refusals_name_the_field_and_never_keep_the_others_out():
    uids = world()
    items = [
        {"namespace": "default", "name": "placed"},
        {"namespace": "default", "name": "ghost"},
        {"namespace": "default", "name": "placed"},
        {"namespace": "default", "name": "running", "uid": "u-other"},
        {"namespace": "default", "name": "waiting"},
        {"namespace": "default", "name": "shared", "colour": "blue"},
        "default/shared",
        {"namespace": "default", "name": ""},
        {"namespace": "default", "name": "gang-0", "uid": uids["gang-0"]},
    ]
    results = release_pods(items, Pod.SUCCEEDED, placed_only=True)
    assert [(r.outcome, r.error and r.error.field) for r in results] == [
        (WriteOutcome.RELEASED, None),
        (WriteOutcome.REFUSED, "name"),
        (WriteOutcome.REFUSED, "name"),
        (WriteOutcome.REFUSED, "uid"),
        (WriteOutcome.REFUSED, "status"),
        (WriteOutcome.REFUSED, "colour"),
        (WriteOutcome.REFUSED, "pod"),
        (WriteOutcome.REFUSED, "name"),
        (WriteOutcome.RELEASED, None),
    ]
    assert "no pod default/ghost" in results[1].error.message
    assert "item 0 of this batch" in results[2].error.message
    assert "u-running" in results[3].error.message
    assert "pending" in results[4].error.message
    assert results[4].pod.status == Pod.PENDING
    statuses = dict(Pod.objects.values_list("name", "status"))
    assert counter_drift() == []
    assert (statuses["placed"], statuses["gang-0"], statuses["running"]) == (
        Pod.SUCCEEDED,
        Pod.SUCCEEDED,
        Pod.RUNNING,
    )


@pytest.mark.parametrize("final_status", ["running", "Succeeded", None])
def test_an_unknown_final_status_is_a_value_error(final_status):
    with pytest.raises(ValueError, match="final_status"):
        release_pods([{"namespace": "default", "name": "p"}], final_status)
    assert set(FINAL_STATUSES) == {Pod.SUCCEEDED, Pod.FAILED, Pod.DELETED}
