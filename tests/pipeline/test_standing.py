"""The standing snapshot (pipeline.standing): kept between cycles, it must always equal a
snapshot read whole, and the kept scheduler must decide as a new one on that fresh read does,
whatever was written in between and by whom (services, plain ORM updates, planning that was
never committed)."""

from __future__ import annotations

import gc
import random
import threading
import weakref

import pytest
from django.db.models import F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling import services
from scheduling.engine import PodSpec, Scheduler
from scheduling.models import Card, Node, Pod
from scheduling.pipeline import plan_cycle, run_cycle
from scheduling.pipeline.snapshot import load_snapshot
from scheduling.pipeline.standing import STANDING

from .conftest import card, limits, pod_kind, submit

pytestmark = pytest.mark.django_db

#: Writes the standing snapshot takes in place; any other rebuilds it.
IN_PLACE = ("cycle", "plan only", "release", "cordon", "health", "ready", "counters", "heartbeat")
STRUCTURAL = (
    "annotation cordon",
    "capacity",
    "new node",
    "card absent",
    "labels",
    "card deleted",
    "node deleted",
)

PROBES = [
    PodSpec(name="probe-a", containers=[{"name": "main", "resources": limits(gpu=1, mem=1000)}]),
    PodSpec(
        name="probe-b",
        annotations={"hami.io/gpu-scheduler-policy": "binpack", "hami.io/node-scheduler-policy": "spread"},
        containers=[{"name": "main", "resources": limits(gpu=2, mem=3000, cores=20)}],
    ),
]


def describe(cluster) -> list:
    """Everything a decision reads of a cluster, as plain data."""
    return [
        (
            node.name,
            node.ready,
            node.labels,
            node.annotations,
            [
                (c.uuid, c.index, c.type, c.slots, c.memory, c.cores, c.numa, c.health, c.cordoned, c.mode)
                + (c.used_slots, c.used_memory, c.used_cores, c.gangs)
                for c in node.cards
            ],
        )
        for node in cluster.nodes
    ]


def assert_standing_is_fresh() -> None:
    with STANDING.use() as (snapshot, scheduler):
        fresh = load_snapshot()
        assert describe(snapshot.cluster) == describe(fresh.cluster)
        assert snapshot.node_ids == fresh.node_ids and snapshot.card_ids == fresh.card_ids
        new = Scheduler(fresh.cluster, fresh.config)
        for probe in PROBES:
            assert scheduler.decide(probe).as_dict() == new.decide(probe).as_dict()


def start_cluster(rng: random.Random) -> None:
    Pod.objects.all().delete()
    Node.objects.all().delete()
    STANDING.clear()
    for n in range(rng.randint(1, 4)):
        services.report_inventory(
            f"node{n}", {}, {}, [card(f"GPU-{n}-{i}", i, memory=rng.choice([8000, 16000])) for i in range(4)]
        )


def apply(kind: str, rng: random.Random, step: int) -> None:
    """One write of `kind` to the database (or, for `plan only`, to the kept snapshot alone)."""
    cards = list(Card.objects.filter(present=True).order_by("uuid"))
    some = rng.choice(cards) if cards else None
    if kind in ("cycle", "plan only"):
        for n in range(rng.randint(1, 3)):
            annotations, resources = pod_kind(rng)
            submit(
                f"p{step}-{n}", annotations=annotations, containers=[{"name": "main", "resources": resources}]
            )
        if kind == "cycle":
            run_cycle()
        else:
            plan_cycle()  # assumed on the kept cards, never committed
    elif kind == "release":
        placed = list(Pod.objects.filter(status=Pod.SCHEDULED).order_by("pk"))
        if placed:
            services.release_pod(rng.choice(placed), Pod.SUCCEEDED)
    elif some is None:
        return
    elif kind == "cordon":
        services.cordon_card(some.uuid, not some.cordoned)
    elif kind == "health":
        Card.objects.filter(pk=some.pk).update(health=not some.health)
    elif kind == "ready":
        Node.objects.filter(pk=some.node_id).update(ready=~F("ready"))
    elif kind == "counters":  # a writer the snapshot was never told about
        Card.objects.filter(pk=some.pk).update(used_memory=F("used_memory") + 1)
    elif kind == "heartbeat":
        node = some.node
        devices = [
            {"uuid": c.uuid, "index": c.index, "memory": c.memory} for c in node.cards.filter(present=True)
        ]
        services.report_inventory(node.name, node.labels, node.annotations, devices)
    elif kind == "annotation cordon":
        Node.objects.filter(pk=some.node_id).update(annotations={"hami.io/device-cordon": some.uuid})
    elif kind == "capacity":
        Card.objects.filter(pk=some.pk).update(memory=some.memory + 1000)
    elif kind == "new node":
        services.report_inventory(f"extra{step}", {}, {}, [card(f"GPU-x{step}-0", 0)])
    elif kind == "card absent":
        Card.objects.filter(pk=some.pk).update(present=False)
    elif kind == "card deleted":  # rows gone: only the counts tell
        Card.objects.filter(pk=some.pk, allocations__isnull=True).delete()
    elif kind == "node deleted":
        Node.objects.filter(pk=some.node_id).exclude(cards__allocations__isnull=False).delete()
    elif kind == "labels":
        Node.objects.filter(pk=some.node_id).update(labels={"zone": f"z{step}"})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), kinds=st.lists(st.sampled_from(IN_PLACE + STRUCTURAL), max_size=12))
def test_the_kept_snapshot_equals_a_fresh_read_after_any_write(seed, kinds):
    rng = random.Random(seed)
    start_cluster(rng)
    assert_standing_is_fresh()
    for step, kind in enumerate(kinds):
        rebuilds = STANDING.rebuilds
        apply(kind, rng, step)
        assert_standing_is_fresh()
        if kind in IN_PLACE and kind != "cycle":  # a cycle's commit may find more to read
            assert STANDING.rebuilds == rebuilds, f"{kind} rebuilt the kept snapshot"


def test_ordinary_cycles_never_read_the_cluster_whole_again():
    rng = random.Random(7)
    start_cluster(rng)
    assert_standing_is_fresh()  # read whole once
    rebuilds = STANDING.rebuilds
    for step in range(6):
        apply("cycle", rng, step)
        apply("release", rng, step)
    assert STANDING.rebuilds == rebuilds
    assert STANDING.refreshes >= 6
    assert_standing_is_fresh()


def test_a_changed_capacity_rebuilds_it():
    start_cluster(random.Random(1))
    assert_standing_is_fresh()
    rebuilds = STANDING.rebuilds
    apply("capacity", random.Random(2), 0)
    assert_standing_is_fresh()
    assert STANDING.rebuilds == rebuilds + 1


def test_an_error_while_planning_forgets_it():
    start_cluster(random.Random(3))
    with pytest.raises(RuntimeError), STANDING.use():
        raise RuntimeError("planning failed half way")
    assert STANDING.snapshot is None
    assert_standing_is_fresh()


@pytest.mark.django_db(transaction=True)  # the second thread reads on its own connection
def test_a_second_planner_in_the_process_gets_a_fresh_snapshot_of_its_own():
    start_cluster(random.Random(4))
    other: list = []
    with STANDING.use() as (kept, _):
        thread = threading.Thread(target=lambda: other.append(describe(load_other())))
        thread.start()
        thread.join()
        assert other and other[0] == describe(kept.cluster)


def load_other():
    """What a second thread gets while the kept snapshot is in use (its own connection)."""
    from django.db import connection

    try:
        with STANDING.use() as (snapshot, _):
            assert snapshot is not STANDING.snapshot
            return snapshot.cluster
    finally:
        connection.close()


def test_turned_off_every_cycle_reads_the_cluster_whole(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "SNAPSHOT_KEEP": False}
    start_cluster(random.Random(5))
    with STANDING.use() as (first, _):
        pass
    with STANDING.use() as (second, _):
        pass
    assert first is not second and STANDING.rebuilds == 0


def _tracked(obj) -> bool:
    """Whether the garbage collector still sweeps `obj` (a frozen object is not listed)."""
    return any(found is obj for found in gc.get_objects())


def test_the_standing_snapshot_is_frozen_out_of_the_collector_and_a_rebuild_lets_it_go(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "GC_FREEZE": True}  # the suite runs with it off
    gc.unfreeze()
    start_cluster(random.Random(5))
    assert_standing_is_fresh()  # read whole
    assert not _tracked(STANDING.snapshot.cluster.nodes[0]), "the kept snapshot is frozen after its rebuild"
    old = weakref.ref(STANDING.snapshot.cluster)
    STANDING.spoil()
    assert_standing_is_fresh()  # rebuilt: the old snapshot is unfrozen first, then collected
    assert old() is None, "the replaced snapshot was collected"
    assert not _tracked(STANDING.snapshot.cluster.nodes[0])
    settings.HAMIADMIN = {**settings.HAMIADMIN, "GC_FREEZE": False}
    gc.unfreeze()
    STANDING.spoil()
    assert_standing_is_fresh()
    assert _tracked(STANDING.snapshot.cluster.nodes[0]), "HAMI_GC_FREEZE=false leaves it to the collector"
    gc.unfreeze()


def test_a_refresh_since_the_cycle_began_is_taken_as_up_to_date():
    """The cycle's wake refreshed it: planning reads no card again unless something planned on
    the snapshot since, or the refresh came before the cycle began."""
    import time

    start_cluster(random.Random(11))
    assert_standing_is_fresh()
    began = time.perf_counter()
    with STANDING.use():  # the wake's refresh
        pass
    some = Card.objects.filter(present=True).order_by("pk").first()
    Card.objects.filter(pk=some.pk).update(used_memory=F("used_memory") + 7)  # lands in between
    with STANDING.use(since=began) as (snapshot, _):
        kept = next(c for n in snapshot.cluster.nodes for c in n.cards if c.uuid == some.uuid)
        assert kept.used_memory == some.used_memory  # not read again: the commit re-checks
    with STANDING.use(since=time.perf_counter()) as (snapshot, _):  # refreshed before `since`
        kept = next(c for n in snapshot.cluster.nodes for c in n.cards if c.uuid == some.uuid)
        assert kept.used_memory == some.used_memory + 7
    began = time.perf_counter()
    with STANDING.use() as (snapshot, scheduler):
        snapshot.cluster.nodes[0].touch()  # planning assumed something on a node
    Card.objects.filter(pk=some.pk).update(used_memory=F("used_memory") + 1)
    with STANDING.use(since=began) as (snapshot, _):
        kept = next(c for n in snapshot.cluster.nodes for c in n.cards if c.uuid == some.uuid)
        assert kept.used_memory == some.used_memory + 8  # touched since: read again


def test_the_snapshots_capacity_is_what_the_card_rows_sum_to():
    from scheduling.pipeline.batch import cluster_capacity, snapshot_capacity

    rng = random.Random(12)
    start_cluster(rng)
    apply("card absent", rng, 0)
    apply("new node", rng, 1)
    with STANDING.use() as (snapshot, _):
        assert snapshot_capacity(snapshot) == cluster_capacity()
        assert snapshot_capacity(snapshot)["vgpus"] > 0


@pytest.mark.django_db(transaction=True)  # each write its own transaction, as in production
def test_writes_in_plain_sql_are_found_by_their_marks_on_postgresql():
    """The `written` marks and the deletion log come from triggers: an operator's SQL, which no
    service announces, is found like a service's write, and a deleted card reads it whole."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the marks are PostgreSQL triggers (SQLite compares every row)")
    start_cluster(random.Random(13))
    assert_standing_is_fresh()
    rebuilds = STANDING.rebuilds
    some = Card.objects.filter(present=True).order_by("pk").first()
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Card._meta.db_table} SET used_memory = used_memory + 5 WHERE id = %s", [some.pk]
        )
    assert_standing_is_fresh()
    assert STANDING.rebuilds == rebuilds  # a counter: taken in place
    other = Card.objects.filter(present=True, allocations__isnull=True).exclude(pk=some.pk).first()
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {Card._meta.db_table} WHERE id = %s", [other.pk])
    assert_standing_is_fresh()
    assert STANDING.rebuilds == rebuilds + 1  # a row gone: read whole
    assert_standing_is_fresh()
    assert STANDING.rebuilds == rebuilds + 1  # and only once


@pytest.mark.django_db(transaction=True)
def test_a_whole_read_forgets_deletions_older_than_any_horizon_on_postgresql():
    """The deletion log is pruned by whole reads: entries older than GONE_KEEP (or twice the
    rebuild period) go, newer ones stay for the other processes' looks."""
    from django.db import connection

    from scheduling.pipeline.standing import GONE_KEEP

    if connection.vendor != "postgresql":
        pytest.skip("the deletion log is PostgreSQL's (SQLite compares every row)")
    start_cluster(random.Random(14))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO hamiadmin_gone (tbl, xid, at) VALUES"
            " ('scheduling_card', 1, now() - make_interval(secs => %s)), ('scheduling_card', 2, now())",
            [GONE_KEEP + 60],
        )
    STANDING.clear()
    assert_standing_is_fresh()  # a whole read
    with connection.cursor() as cursor:
        cursor.execute("SELECT xid FROM hamiadmin_gone WHERE xid IN (1, 2) ORDER BY xid")
        assert [row[0] for row in cursor.fetchall()] == [2]


def test_a_whole_read_of_a_cluster_large_enough_to_sweep_builds_its_card_columns_first():
    """The card columns a new shape's sweep reads are built by the whole read (`warm`), so
    the first pods decided after it build nothing; a cluster too small to sweep builds none."""
    Pod.objects.all().delete()
    Node.objects.all().delete()
    STANDING.clear()
    for n in range(Scheduler.SWEEP_NODES):
        services.report_inventory(f"node{n:03}", {}, {}, [card(f"GPU-{n}-0", 0), card(f"GPU-{n}-1", 1)])
    with STANDING.use() as (_, scheduler):
        built = scheduler._columns_reads
        assert built == 1, "read whole: the columns are built"
        decision = scheduler.decide(PROBES[0])
        assert decision.status == "scheduled" and decision.nodes_fit == Scheduler.SWEEP_NODES
        assert scheduler._columns_reads == built, "the first sweep found them built"
    Node.objects.exclude(name="node000").delete()
    STANDING.clear()
    with STANDING.use() as (_, scheduler):
        assert scheduler._columns_reads == 0
        assert scheduler.decide(PROBES[0]).status == "scheduled"


def _held(cluster) -> dict:
    """What the pods on each node hold of it, as plain data."""
    return {
        node.name: (
            sorted(node.held.pods) if node.held else [],
            dict(sorted(node.held.requested.items())) if node.held else {},
        )
        for node in cluster.nodes
    }


def test_a_refresh_recounts_the_nodes_it_put_back_as_a_fresh_read_counts_every_node():
    """The refresh recounts only the running pods of the nodes it put back; every node must
    then hold what a fresh read counts, cycle after cycle and release after release."""
    Pod.objects.all().delete()
    Node.objects.all().delete()
    STANDING.clear()
    for n in range(4):
        services.report_inventory(
            f"node{n}",
            {},
            {},
            [card(f"GPU-{n}-{i}", i, memory=16000) for i in range(2)],
            allocatable={"cpu": "8", "memory": "64Gi", "pods": "110"},
        )
    cpu = {
        "limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000},
        "requests": {"cpu": "1", "memory": "1Gi"},
    }
    rng = random.Random(3)
    for step in range(6):
        for i in range(rng.randint(1, 5)):
            services.submit_pod("default", f"p{step}-{i}", {}, [{"name": "main", "resources": cpu}])
        run_cycle(trigger="test")
        placed = list(Pod.objects.filter(status=Pod.SCHEDULED))
        for pod in rng.sample(placed, k=min(len(placed), rng.randint(0, 2))):
            services.release_pod(pod, Pod.SUCCEEDED)
        with STANDING.use() as (snapshot, _):
            assert _held(snapshot.cluster) == _held(load_snapshot().cluster), f"step {step}"
    assert any(pods for pods, _ in _held(load_snapshot().cluster).values())


def _cpu_cluster(nodes: int = 3) -> dict:
    """Nodes of two cards and 8 cpus each; the asks of a 1-card, 1-cpu pod."""
    Pod.objects.all().delete()
    Node.objects.all().delete()
    STANDING.clear()
    for n in range(nodes):
        services.report_inventory(
            f"node{n}",
            {},
            {},
            [card(f"GPU-{n}-{i}", i, memory=16000) for i in range(2)],
            allocatable={"cpu": "8", "memory": "64Gi", "pods": "110"},
        )
    return {
        "limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000},
        "requests": {"cpu": "1", "memory": "1Gi"},
    }


def test_nodes_a_commit_left_as_planned_are_kept_and_still_equal_a_fresh_read():
    """After a commit of what planning assumed, the refresh keeps those nodes as they are (no
    put-back, no recount of their pods): they hold what a fresh read counts all the same."""
    cpu = _cpu_cluster()
    for step in range(3):
        for i in range(4):
            services.submit_pod("default", f"p{step}-{i}", {}, [{"name": "main", "resources": cpu}])
        kept = STANDING.kept_as_planned
        run_cycle(trigger="test")
        assert Pod.objects.filter(status=Pod.SCHEDULED).count() == 4 * (step + 1)
        with STANDING.use() as (snapshot, _):
            assert _held(snapshot.cluster) == _held(load_snapshot().cluster), f"step {step}"
        assert STANDING.kept_as_planned > kept, "the placed nodes were kept as planned"
        assert_standing_is_fresh()


def test_a_node_whose_assumed_placement_was_not_committed_is_put_back():
    from scheduling.pipeline.commit import commit_plan

    cpu = _cpu_cluster(nodes=1)
    services.submit_pod("default", "a", {}, [{"name": "main", "resources": cpu}])
    services.submit_pod("default", "b", {}, [{"name": "main", "resources": cpu}])
    plan = plan_cycle()
    assert {attempt.decision.node for attempt in plan.attempts} == {"node0"}
    Pod.objects.filter(name="b").update(revision=F("revision") + 1)  # changed since: skipped
    report = commit_plan(plan)
    assert [key for key in report.skipped] == ["default/b"]
    kept = STANDING.kept_as_planned
    with STANDING.use() as (snapshot, _):
        fresh = load_snapshot().cluster
        assert _held(snapshot.cluster) == _held(fresh)
        assert describe(snapshot.cluster) == describe(fresh)
    assert STANDING.kept_as_planned == kept, "b was assumed there and never placed: put back"
