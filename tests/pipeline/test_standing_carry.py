"""A whole read carried over (issue 29, `StandingSnapshot._carry_over`): when the periodic
read (SNAPSHOT_REBUILD_SECONDS) or a pod others bound finds the same nodes and cards, the kept
scheduler stays, with its per-shape tables, and only the nodes whose state differs are looked
at again. It must decide exactly as a new scheduler on a snapshot read whole, whatever was
written in between: here each write is followed by a whole read, so the carry-over alone
brings the kept snapshot up to date (planning never committed included)."""

from __future__ import annotations

import random

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling import services
from scheduling.engine import PodSpec, Scheduler
from scheduling.engine.encoding import encode_allocation
from scheduling.models import BoundPod, Card, Node
from scheduling.pipeline.snapshot import load_snapshot
from scheduling.pipeline.standing import STANDING

from .conftest import pod_kind
from .test_standing import IN_PLACE, PROBES, STRUCTURAL, apply, describe, start_cluster

pytestmark = pytest.mark.django_db

#: Pods others bind and forget: a whole read carries them over too.
FOREIGN = ("bound", "bound gone")

#: Shapes decided after every write, so the kept scheduler has tables for each to keep stale;
#: the first asks a cpu of nodes that have two (`start`), so what pods others bound hold counts.
CPU = {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}, "requests": {"cpu": "1"}}
SHAPES = [PodSpec(name="cpu", containers=[{"name": "main", "resources": CPU}]), *PROBES] + [
    PodSpec(name=f"shape-{n}", annotations=annotations, containers=[{"name": "main", "resources": resources}])
    for n, (annotations, resources) in enumerate(pod_kind(random.Random(n)) for n in range(8))
]


def start(rng: random.Random) -> None:
    start_cluster(rng)
    Node.objects.update(allocatable={"cpu": "2", "memory": "64Gi", "pods": "110"})


def bind_foreign(rng: random.Random, step: int) -> None:
    """A pod another scheduler bound, holding cpu and, half the time, a vGPU of a card."""
    cards = list(Card.objects.filter(present=True).select_related("node").order_by("uuid"))
    if not cards:
        return
    some = rng.choice(cards)
    allocated = encode_allocation([[(some.uuid, rng.choice([1000, 4000]), 10)]]) if rng.random() < 0.5 else ""
    container = {"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    item = {"namespace": "other", "name": f"b{step}", "node": some.node.name, "containers": [container]}
    done = services.upsert_bound_pods([{**item, "allocated": allocated, "phase": "Running"}])
    assert done[0].outcome != "refused", done


def forget_foreign(rng: random.Random) -> None:
    bound = list(BoundPod.objects.order_by("name").values("namespace", "name"))
    if bound:
        services.forget_bound_pods([rng.choice(bound)])


def assert_decides_as_fresh() -> None:
    """The kept snapshot equals a whole read, and its scheduler decides every shape as a new
    scheduler on that read does."""
    with STANDING.use() as (snapshot, scheduler):
        fresh = load_snapshot()
        assert describe(snapshot.cluster) == describe(fresh.cluster)
        assert snapshot.node_ids == fresh.node_ids and snapshot.card_ids == fresh.card_ids
        new = Scheduler(fresh.cluster, fresh.config)
        for shape in SHAPES:
            assert scheduler.decide(shape).as_dict() == new.decide(shape).as_dict(), shape.name


def read_whole_next() -> None:
    """As SNAPSHOT_REBUILD_SECONDS running out does: the next use reads the cluster whole."""
    STANDING.built_at = float("-inf")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    kinds=st.lists(st.sampled_from(IN_PLACE + FOREIGN + STRUCTURAL), max_size=12),
)
def test_a_whole_read_carried_over_decides_as_a_fresh_snapshot(seed, kinds):
    rng = random.Random(seed)
    start(rng)
    assert_decides_as_fresh()  # read whole, every shape decided: tables to keep
    for step, kind in enumerate(kinds):
        kept, carried = STANDING.scheduler, STANDING.carried
        if kind == "bound":
            bind_foreign(rng, step)
        elif kind == "bound gone":
            forget_foreign(rng)
        else:
            apply(kind, rng, step)
        read_whole_next()
        assert_decides_as_fresh()
        if kind in IN_PLACE + FOREIGN:  # same nodes and cards: the scheduler stays
            assert STANDING.scheduler is kept and STANDING.carried == carried + 1, kind


def test_the_periodic_read_keeps_the_scheduler_and_touches_only_what_differs():
    start(random.Random(11))
    assert_decides_as_fresh()
    kept, rebuilds = STANDING.scheduler, STANDING.rebuilds
    some = Card.objects.filter(present=True).order_by("uuid").first()
    Card.objects.filter(pk=some.pk).update(used_memory=some.used_memory + 1000)  # nobody said so
    versions = {node.name: node.version for node in STANDING.snapshot.cluster.nodes}
    read_whole_next()
    assert_decides_as_fresh()
    assert STANDING.rebuilds == rebuilds + 1 and STANDING.scheduler is kept
    moved = {node.name for node in STANDING.snapshot.cluster.nodes if node.version != versions[node.name]}
    assert moved == {some.node.name}


def test_a_changed_node_or_a_spoiled_snapshot_gets_a_new_scheduler():
    start(random.Random(12))
    assert_decides_as_fresh()
    kept = STANDING.scheduler
    Node.objects.update(labels={"zone": "b"})
    read_whole_next()
    assert_decides_as_fresh()
    assert STANDING.scheduler is not kept, "labels differ: built anew"
    kept = STANDING.scheduler
    STANDING.spoil()  # a decision failed half way: the scheduler's own tables are suspect
    assert_decides_as_fresh()
    assert STANDING.scheduler is not kept


@pytest.mark.django_db(transaction=True)  # committed writes: their `written` marks differ
def test_a_refresh_reads_bound_pods_only_when_one_was_written_and_still_counts_them(require_postgres):
    """The refresh asks whether any pod others bound was written since its horizon in the
    statement that takes the new horizon (`_postgres_changes`), and reads their rows only then;
    the kept snapshot still decides as a whole read after each (`assert_decides_as_fresh`)."""
    rng = random.Random(7)
    start(rng)
    STANDING.clear()
    assert_decides_as_fresh()

    def refresh_reads_bound_rows() -> bool:
        with CaptureQueriesContext(connection) as queries, STANDING.use():
            pass
        assert_decides_as_fresh()
        return any(
            "boundpod" in q["sql"] and not q["sql"].startswith("SELECT pg_snapshot_xmin") for q in queries
        )

    assert not refresh_reads_bound_rows(), "no bound pod was written: nothing more is read"
    # the horizon is the server's oldest running transaction (another session's may hold it
    # back), so from here a refresh may read the rows again: what it must do is count them
    for step in range(3):
        bind_foreign(rng, step)
        assert refresh_reads_bound_rows(), "a bound pod was written: the rows are read"
        refresh_reads_bound_rows()
    forget_foreign(rng)
    assert_decides_as_fresh()
