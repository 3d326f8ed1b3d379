"""Bulk submission (`services.submit_pods`): a batch ends where `submit_pod` one item after
another would (a later item naming a pod again is refused naming `name`), in one
transaction, with one result per item and one cycle asked for."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
from django.db import DataError, connection, connections, transaction
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from scheduling import services
from scheduling.engine import PodInvalid
from scheduling.models import Allocation, Card, Pod, PodGroup
from scheduling.pipeline import run_cycle
from scheduling.pipeline.triggers import signal_scheduler
from scheduling.services.pods import SUBMISSION_KEYS, WriteOutcome
from tests.pipeline.conftest import card, limits

pytestmark = pytest.mark.django_db


def containers(mem: int = 1000) -> list[dict]:
    return [{"name": "main", "resources": limits(gpu=1, mem=mem)}]


def item(name: str, mem: int = 1000, **fields) -> dict:
    return {"namespace": "default", "name": name, "containers": containers(mem), **fields}


#: The pods `base_state` submits, as items: resubmitting one as it is changes nothing.
EXISTING = {
    "placed": item("placed", uid="u-placed"),
    "running": item("running", uid="u-running"),
    "done": item("done", uid="u-done"),
    "waiting": item("waiting", mem=9000, uid="u-waiting"),  # fits nowhere
    "anonymous": item("anonymous", annotations={"hami.io/queue": "team-a"}),
    "gang": item("gang", annotations={"hami.io/group-name": "g1"}, uid="u-gang"),
    "refusal": item("refusal", uid="u-refusal"),
}


def base_state() -> dict[str, str]:
    """Two cards, a queue, and pods in every state a submission meets: pending (one with no
    uid), placed, running, succeeded, rejected, in a group. Their uids, by name."""
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=4000), card("GPU-1", 1, memory=4000)])
    services.create_queue("team-a")
    for name in ("placed", "running", "done"):
        services.submit_pod(**EXISTING[name])
    run_cycle(trigger="test")
    services.mark_bound("default/running", "node1")
    services.release_pod("default/done", Pod.SUCCEEDED)
    for name in ("waiting", "anonymous", "gang", "refusal"):
        services.submit_pod(**EXISTING[name])
    Pod.objects.filter(name="refusal").update(status=Pod.REJECTED, reason="test")
    assert set(Pod.objects.values_list("name", "status")) >= {
        ("placed", Pod.SCHEDULED),
        ("running", Pod.RUNNING),
        ("done", Pod.SUCCEEDED),
    }
    return {name: entry.get("uid", "") for name, entry in EXISTING.items()}


def state() -> dict:
    """What a submission may change: the pods' rows, groups, allocations and card counters."""
    pods = {
        pod.key: (
            pod.status,
            pod.group.name if pod.group else None,
            pod.queue.name if pod.queue else None,
            pod.spec_hash,
            pod.uid,
            pod.origin,
            pod.revision,
            pod.node_id,
            pod.attempts,
            pod.allocated,
            pod.annotations,
            pod.labels,
            pod.containers,
            pod.priority,
            pod.parked,
            pod.reason,
        )
        for pod in Pod.objects.select_related("group", "queue")
    }
    groups = set(
        PodGroup.objects.values_list(
            "namespace", "name", "min_member", "schedule_timeout_seconds", "queue__name"
        )
    )
    allocations = set(Allocation.objects.values_list("pod__name", "card__uuid", "active", "memory"))
    cards = set(Card.objects.values_list("uuid", "used_slots", "used_memory", "used_cores"))
    return {"pods": pods, "groups": groups, "allocations": allocations, "cards": cards}


def rolled_back(run):
    """`run()`'s result and the state it left, then undone (a savepoint of the test's transaction)."""
    with transaction.atomic():
        result = run()
        after = state()
        transaction.set_rollback(True)
    return result, after


def one_by_one(items: list[dict], validate: bool, origin: str) -> list[str]:
    """`submit_pod` for each item in order, as the outcomes `submit_pods` reports: an item
    naming a pod an earlier item named, or with a key `submit_pod` does not take, is refused."""
    outcomes, seen = [], set()
    for entry in items:
        key = (entry.get("namespace"), entry.get("name"))
        if key in seen or set(entry) - set(SUBMISSION_KEYS):
            outcomes.append(WriteOutcome.REFUSED)
            seen.add(key)
            continue
        seen.add(key)
        before = (
            Pod.objects.filter(namespace=key[0], name=key[1]).values_list("status", "revision", "uid").first()
        )
        try:
            services.submit_pod(**entry, validate=validate, origin=origin)
        except (PodInvalid, DataError):
            outcomes.append(WriteOutcome.REFUSED)
            continue
        after = (
            Pod.objects.filter(namespace=key[0], name=key[1]).values_list("status", "revision", "uid").get()
        )
        if before is None or before[0] in Pod.FINISHED:
            outcomes.append(WriteOutcome.CREATED)
        else:
            outcomes.append(WriteOutcome.UNCHANGED if before[1:] == after[1:] else WriteOutcome.UPDATED)
    return outcomes


NAMES = ["placed", "running", "done", "waiting", "anonymous", "gang", "refusal", "new-a", "new-b", "new-c"]
ANNOTATIONS = [
    {},
    {"team": "x"},
    {"hami.io/group-name": "g1"},
    {"hami.io/group-name": "g1", "hami.io/group-min-member": "2"},
    {"hami.io/group-name": "g1", "hami.io/group-min-member": "3"},
    {"hami.io/group-name": "g2", "hami.io/group-schedule-timeout-seconds": "60", "hami.io/queue": "team-a"},
    {"hami.io/queue": "team-a"},
    {"hami.io/queue": "nowhere"},
]
LABELS = [{}, {"kai.scheduler/queue": "team-a"}, {"scheduling.x-k8s.io/pod-group": "g1"}]
#: Items the checks refuse (some only when validating), mixed into batches.
BAD = [
    {"colour": "blue"},
    {"containers": []},
    {"priority": "high"},
    {"labels": {"team": 1}},
    {"annotations": {"hami.io/device-scoring-weights": "slot=1,core=1"}},
    {"annotations": {"hami.io/group-name": "g1", "hami.io/group-min-member": "none"}},
    {"annotations": {"hami.io/group-name": "g2"}, "labels": {"scheduling.x-k8s.io/pod-group": "g1"}},
]


@st.composite
def batches(draw):
    """Items over existing and new pods: resubmissions, new specs, new uids, bad items. Drawn
    evenly from a seed (hypothesis' own draws favour the first choices, and the cases that
    matter are combinations: a placed pod with a new spec and a group, say)."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    items = []
    for _ in range(rng.randint(1, 10)):
        name = rng.choice(NAMES)
        uid = rng.choice(["", UIDS.get(name, ""), UIDS.get(name, ""), "u-other"])
        entry = item(
            name,
            mem=rng.choice([1000, 2000]),
            annotations=dict(rng.choice(ANNOTATIONS)),
            labels=dict(rng.choice(LABELS)),
            priority=rng.choice([0, 0, 5]),
            uid=uid,
        )
        if name in EXISTING and rng.random() < 0.25:
            entry = dict(EXISTING[name])  # as it was: unchanged, unless a new incarnation
        bad = rng.choice([None] * 10 + BAD)
        items.append({**entry, **(bad or {})})
    note(f"items: {items}")
    return items


UIDS: dict[str, str] = {}


@pytest.mark.parametrize(("validate", "origin"), [(True, Pod.API), (False, Pod.KUBERNETES)])
def test_a_batch_ends_where_submit_pod_one_item_after_another_ends(validate, origin):
    UIDS.update(base_state())

    @settings(
        max_examples=60,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(items=batches())
    def check(items):
        expected, sequential = rolled_back(lambda: one_by_one(items, validate, origin))
        results, together = rolled_back(lambda: services.submit_pods(items, validate=validate, origin=origin))
        assert [result.index for result in results] == list(range(len(items)))
        assert [result.outcome for result in results] == expected
        assert together == sequential
        for result in results:
            assert (result.error is None) == (result.outcome != WriteOutcome.REFUSED)
        seen.update(expected)

    seen: set[str] = set()
    check()
    assert seen == {WriteOutcome.CREATED, WriteOutcome.UPDATED, WriteOutcome.UNCHANGED, WriteOutcome.REFUSED}


def test_one_transaction_and_one_cycle_for_a_mixed_batch(
    django_assert_max_num_queries, django_capture_on_commit_callbacks
):
    base_state()
    batch = [item(f"new-{n}") for n in range(50)] + [
        item("waiting", mem=2000, uid="u-waiting"),  # a new spec: requeued
        item("placed", uid="u-placed-2"),  # a new incarnation: its cards are given back
        item("done", uid="u-done"),  # finished: a new incarnation
        item("gang", annotations={"hami.io/group-name": "g1"}, uid="u-gang"),  # the same again
    ]
    with django_capture_on_commit_callbacks(execute=False) as callbacks, django_assert_max_num_queries(25):
        results = services.submit_pods(batch)
    assert [r.outcome for r in results] == [WriteOutcome.CREATED] * 50 + [
        WriteOutcome.UPDATED,
        WriteOutcome.UPDATED,
        WriteOutcome.CREATED,
        WriteOutcome.UNCHANGED,
    ]
    assert results[51].previous_uid == "u-placed" and results[51].pod.uid == "u-placed-2"
    cycles = [c for c in callbacks if getattr(c, "func", None) is signal_scheduler]
    assert len(cycles) == 1 and "50 pods submitted, 3 updated" in cycles[0].args[0]
    assert Pod.objects.filter(name__startswith="new-", status=Pod.PENDING).count() == 50
    assert not Allocation.objects.filter(pod__name="placed", active=True).exists()
    assert Card.objects.filter(used_slots__gt=0).count() == 1  # "running" keeps its card


def test_an_unchanged_batch_writes_nothing_and_asks_for_no_cycle(django_capture_on_commit_callbacks):
    base_state()
    batch = [item(f"new-{n}") for n in range(20)]
    services.submit_pods(batch)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        again = services.submit_pods(batch)
    assert {r.outcome for r in again} == {WriteOutcome.UNCHANGED}
    assert not callbacks


def test_bad_items_are_refused_naming_the_field_and_never_keep_the_others_out():
    base_state()
    results = services.submit_pods(
        [
            item("ok-1"),
            item("ok-1", mem=2000),
            {**item("stray"), "colour": "blue"},
            "not an object",
            item("placed", mem=2000, uid="u-placed"),
            item("bad-weights", annotations={"hami.io/device-scoring-weights": "slot=1,core=1"}),
            {"name": "nameless-namespace", "namespace": "", "containers": containers()},
            item("ok-2"),
        ]
    )
    fields = [(r.outcome, r.error.field if r.error else None) for r in results]
    assert fields == [
        (WriteOutcome.CREATED, None),
        (WriteOutcome.REFUSED, "name"),
        (WriteOutcome.REFUSED, "colour"),
        (WriteOutcome.REFUSED, "pod"),
        (WriteOutcome.REFUSED, "containers"),
        (WriteOutcome.REFUSED, "annotations.hami.io/device-scoring-weights"),
        (WriteOutcome.REFUSED, "namespace"),
        (WriteOutcome.CREATED, None),
    ]
    assert "item 0" in results[1].error.message and "placed on node1" in results[4].error.message
    assert Pod.objects.get(name="placed").containers == containers(1000)
    assert not Pod.objects.filter(name__in=["stray", "bad-weights", "nameless-namespace"]).exists()


def test_a_refused_placed_pod_makes_no_group_and_later_items_see_none():
    """One by one, the refused submission's transaction is rolled back with the group it
    made; the batch judges the placed pod before it makes any group."""
    base_state()
    results = services.submit_pods(
        [
            item(
                "placed",
                mem=2000,
                uid="u-placed",
                annotations={"hami.io/group-name": "g9", "hami.io/group-min-member": "3"},
            ),
            item("new-a", annotations={"hami.io/group-name": "g9"}),
        ]
    )
    assert [r.outcome for r in results] == [WriteOutcome.REFUSED, WriteOutcome.CREATED]
    assert PodGroup.objects.get(name="g9").min_member == 1
    with pytest.raises(PodInvalid):
        services.submit_pod(
            "default", "placed", {"hami.io/group-name": "g8"}, containers(2000), uid="u-placed"
        )
    assert not PodGroup.objects.filter(name="g8").exists()


def test_groups_and_queues_resolve_in_item_order():
    base_state()
    results = services.submit_pods(
        [
            item(
                "m-1",
                annotations={
                    "hami.io/group-name": "g5",
                    "hami.io/group-min-member": "2",
                    "hami.io/queue": "team-a",
                },
            ),
            item("m-2", annotations={"hami.io/group-name": "g5", "hami.io/group-min-member": "4"}),
            item("m-3", annotations={"hami.io/group-name": "g5", "hami.io/group-min-member": "2"}),
            item("q-1", labels={"kai.scheduler/queue": "team-a"}),
        ]
    )
    assert {r.outcome for r in results} == {WriteOutcome.CREATED}
    group = PodGroup.objects.get(name="g5")
    assert (group.min_member, group.queue.name) == (2, "team-a")
    assert set(
        Pod.objects.filter(name__in=["m-1", "m-2", "m-3", "q-1"]).values_list("queue__name", flat=True)
    ) == {"team-a"}


def test_the_database_refusing_one_pod_refuses_that_one_only(require_postgres):
    base_state()
    results = services.submit_pods([item("fine-1"), item("nul\x00name"), item("fine-2")], validate=False)
    assert [r.outcome for r in results] == [WriteOutcome.CREATED, WriteOutcome.REFUSED, WriteOutcome.CREATED]
    assert results[1].error.field == "pod" and "database refused" in results[1].error.message
    assert Pod.objects.filter(name__in=["fine-1", "fine-2"]).count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_pod_inserted_concurrently_is_written_as_a_resubmission(require_postgres):
    """Another transaction inserts `raced` after the batch looked for its row: the batch's
    insert waits on the unique name, fails once it commits, and starts over seeing the row."""
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    other = connections.create_connection("default")
    results, pids = [], []

    def batch():
        try:
            connection.ensure_connection()
            pids.append(connection.connection.info.backend_pid)
            results.extend(services.submit_pods([item("calm"), item("raced", mem=2000)]))
        finally:
            connection.close()

    try:
        with other.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute(
                "INSERT INTO scheduling_pod (namespace, name, uid, origin, annotations, labels, containers,"
                " init_containers, priority, status, submitted_at, attempts, reason, error, error_field, parked,"
                " allocated, extra_annotations, spec_hash, revision, updated_at)"
                " VALUES ('default', 'raced', '', 'api', '{}', '{}', %s, '[]', 0, 'pending', now(), 0, '', '',"
                " '', false, '', '{}', 'other', 0, now())",
                [json.dumps(containers(1000))],
            )
            writer = threading.Thread(target=batch)
            writer.start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if not pids:
                    time.sleep(0.01)
                    continue
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND pid = ANY(%s)", [pids])
                if cursor.fetchone()[0]:
                    break  # the batch's insert waits for this transaction's row
                time.sleep(0.02)
            else:
                pytest.fail("the batch's insert never waited for the other transaction")
            cursor.execute("COMMIT")
        writer.join(30)
    finally:
        other.close()
    assert [r.outcome for r in results] == [WriteOutcome.CREATED, WriteOutcome.UPDATED]
    raced = Pod.objects.get(name="raced")
    assert raced.containers == containers(2000) and raced.revision == 1
    assert Pod.objects.filter(name="calm").count() == 1
