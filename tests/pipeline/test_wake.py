"""Waking only what can move (issue 29, `pipeline.wake`): a change of capacity no longer
wakes every backed-off pod in the writer's request; the next cycle wakes the pods of the
specs that now fit somewhere.

The property: against a reference that wakes everything after every change (the old
behaviour), random streams of releases, cordons, uncordons and card reports give the same
placements, step by step once the cycles settle, with fewer decisions. Back-off is long (60 s) so that only wakes
make pods due. SQLite by default, PostgreSQL in CI (DATABASE_URL)."""

from __future__ import annotations

import random

import pytest

from scheduling import services
from scheduling.engine.scheduler import Scheduler
from scheduling.models import Allocation, CapacityVersion, Card, Decision, Node, Pod
from scheduling.pipeline import run_cycle
from scheduling.pipeline.standing import STANDING
from scheduling.pipeline.wake import SEEN
from scheduling.services.pods import bump_capacity

from .conftest import card, reload, submit

pytestmark = pytest.mark.django_db(transaction=True)  # the version moves after the writer commits

SHAPES = [(1, 4000), (1, 8000), (1, 16000), (2, 8000), (1, 30000)]  # (cards, MiB): the last fits 48,000 only


@pytest.fixture(autouse=True)
def long_backoff(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "BACKOFF_BASE_SECONDS": 60.0, "BACKOFF_MAX_SECONDS": 60.0}


def world(rng: random.Random) -> None:
    for n in range(2):
        services.report_inventory(
            f"node{n}", {}, {}, [card(f"GPU-{n}-{i}", i, memory=16000, slots=2) for i in range(2)]
        )
    for k in range(14):
        gpus, mem = rng.choice(SHAPES)
        submit(f"p{k:02d}", gpu=gpus, mem=mem)


def change(rng: random.Random, step: int) -> None:
    kind = rng.choice(["release", "release", "cordon", "uncordon", "report"])
    placed = list(Pod.objects.filter(status=Pod.SCHEDULED).order_by("name"))
    cards = list(Card.objects.filter(present=True).order_by("uuid"))
    if kind == "release" and placed:
        services.release_pod(rng.choice(placed), Pod.SUCCEEDED)
    elif kind in ("cordon", "uncordon"):
        services.cordon_card(rng.choice(cards).uuid, kind == "cordon")
    elif kind == "report":
        n = rng.randrange(2)
        memory = rng.choice([16000, 24000, 48000])  # 48,000: the shape that never fit now fits
        services.report_inventory(
            f"node{n}", {}, {}, [card(f"GPU-{n}-{i}", i, memory=memory, slots=2) for i in range(2)]
        )
    if step % 3 == 0:
        submit(f"late{step:02d}", gpu=1, mem=rng.choice([4000, 8000]))


def placements() -> list[tuple]:
    return sorted(
        Allocation.objects.filter(active=True).values_list("pod__name", "card__uuid", "memory").order_by()
    )


def settle() -> None:
    """Cycles until one decides nothing (a wake that left some of a spec asleep looks again)."""
    for _ in range(8):
        if not run_cycle().considered:
            return


def play(seed: int, wake_all: bool) -> tuple[list, int]:
    Pod.objects.all().delete()
    Node.objects.all().delete()
    STANDING.clear()
    rng = random.Random(seed)
    world(rng)
    settle()
    steps = [placements()]
    for step in range(10):
        change(rng, step)
        if wake_all:
            services.wake_pending_pods()
        settle()
        steps.append(placements())
    return steps, Decision.objects.count()


@pytest.mark.parametrize("seed", range(8))
def test_waking_only_what_can_move_places_what_waking_everything_places(seed):
    reference, decided_all = play(seed, wake_all=True)
    ours, decided = play(seed, wake_all=False)
    assert ours == reference
    assert decided < decided_all


def test_a_release_touches_no_waiting_pod_and_the_cycle_wakes_only_the_shapes_that_fit():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=16000, slots=1)])
    tenant = submit("tenant", gpu=1, mem=16000)
    run_cycle()
    small = [submit(f"small{k}", gpu=1, mem=8000) for k in range(3)]
    huge = [submit(f"huge{k}", gpu=1, mem=30000) for k in range(3)]
    run_cycle()
    assert all(reload(p).next_attempt_at is not None for p in small + huge)
    version = CapacityVersion.read()
    services.release_pod(tenant, Pod.SUCCEEDED)
    assert CapacityVersion.read() == version + 1
    assert all(reload(p).next_attempt_at is not None for p in small + huge), "the release woke nobody"
    attempts = {p.name: reload(p).attempts for p in huge}
    report = run_cycle()
    assert [key for key, *_ in report.placed] == ["default/small0"]
    assert {p.name: reload(p).attempts for p in huge} == attempts, "a shape that cannot fit was not decided"
    assert run_cycle().considered == 0  # nothing moved since: nothing woken, nothing decided


def test_a_freed_card_wakes_as_many_single_pods_as_its_nodes_take_and_more_while_they_move(monkeypatch):
    from scheduling.pipeline import wake

    monkeypatch.setattr(wake, "WAKE_PER_NODE", 2)
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=16000, slots=10)])
    tenant = submit("tenant", gpu=1, mem=16000)
    run_cycle()
    waiting = [submit(f"w{k}", gpu=1, mem=2000) for k in range(6)]
    run_cycle()
    services.release_pod(tenant, Pod.SUCCEEDED)
    first = run_cycle()  # fits on one node: two of six woken, first in queue order
    assert sorted(key for key, *_ in first.placed) == ["default/w0", "default/w1"] and first.more
    assert SEEN.woken, "some of the spec sleep on"
    assert len(run_cycle().placed) == 2  # they moved: the next cycle looks again
    assert len(run_cycle().placed) == 2
    assert Pod.objects.filter(status=Pod.SCHEDULED).count() == 6
    assert run_cycle().considered == 0
    assert all(reload(p).status == Pod.SCHEDULED for p in waiting)


def test_pods_that_fit_but_a_queue_holds_do_not_bring_the_look_back_every_cycle(monkeypatch):
    from scheduling.models import Queue
    from scheduling.pipeline import wake

    monkeypatch.setattr(wake, "WAKE_PER_NODE", 1)
    Queue.objects.create(name="small", limit_vgpus=1)
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=16000, slots=10)])
    tenant = submit("tenant", gpu=1, mem=16000)
    run_cycle()
    held = [submit(f"q{k}", gpu=1, mem=2000, annotations={"hami.io/queue": "small"}) for k in range(4)]
    first = submit("first", gpu=1, mem=2000, annotations={"hami.io/queue": "small"})
    run_cycle()
    services.release_pod(tenant, Pod.SUCCEEDED)
    assert [key for key, *_ in run_cycle().placed] == ["default/q0"]  # one woken, placed: it moved
    looked = run_cycle()  # looks again: q1 woken, but the queue is at its limit
    assert looked.considered == 1 and not looked.placed
    assert run_cycle().considered == 0, "no progress: the look does not come back"
    assert [reload(p).status for p in held[1:] + [first]] == [Pod.PENDING] * 4


def test_the_specs_are_kept_between_looks_and_a_new_one_is_read_from_the_pods_written_since():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=16000, slots=1)])
    tenant = submit("tenant", gpu=1, mem=16000)
    run_cycle()
    submit("huge", gpu=1, mem=30000)
    run_cycle()  # backed off; the first look summed the backed-off pods up whole
    regroups = SEEN.specs.regroups
    submit("small", gpu=1, mem=8000)  # a spec the summary has not seen
    run_cycle()
    assert reload(Pod.objects.get(name="small")).next_attempt_at is not None
    services.release_pod(tenant, Pod.SUCCEEDED)
    report = run_cycle()
    assert [key for key, *_ in report.placed] == ["default/small"], "read from the pods written since"
    assert SEEN.specs.regroups == regroups, "no look summed every backed-off pod up again"
    assert {digest for _, digest in SEEN.specs.specs} == set(
        Pod.objects.exclude(name="tenant").values_list("spec_hash", flat=True)
    )


def test_a_pod_written_before_the_overlap_is_found_by_the_next_whole_summing_up(monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.pipeline import wake

    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=16000, slots=1)])
    tenant = submit("tenant", gpu=1, mem=16000)
    run_cycle()
    run_cycle()  # a look: the summary's watermark is now
    late = submit("late", gpu=1, mem=8000)
    run_cycle()
    # as a transaction that stamped its rows long before it committed: older than the overlap
    Pod.objects.filter(pk=late.pk).update(updated_at=timezone.now() - timedelta(minutes=10))
    SEEN.specs.specs.clear()
    services.release_pod(tenant, Pod.SUCCEEDED)
    assert run_cycle().placed == [], "missed by the look (its back-off is the net)"
    monkeypatch.setattr(wake, "WAKE_REGROUP_SECONDS", 0.0)
    bump_capacity()  # capacity moves again (an operator's wake): the look sums up whole
    assert [key for key, *_ in run_cycle().placed] == ["default/late"]


def test_a_spec_no_node_could_ever_take_is_judged_again_only_when_the_cards_change():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=16000, slots=2)])
    tenant = submit("tenant", gpu=1, mem=8000)
    run_cycle()
    huge = submit("huge", gpu=1, mem=30000)
    run_cycle()
    key = (huge.namespace, reload(huge).spec_hash)
    services.release_pod(tenant, Pod.SUCCEEDED)
    run_cycle()
    judged = SEEN.specs.specs[key].never
    assert judged is not None, "no card is large enough: judged never"
    services.cordon_card("GPU-0", True)
    services.cordon_card("GPU-0", False)
    run_cycle()
    assert SEEN.specs.specs[key].never is judged, "a cordon changes no card's size: not judged again"
    assert reload(huge).status == Pod.PENDING
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=32000, slots=2)])
    report = run_cycle()
    assert [k for k, *_ in report.placed] == ["default/huge"], "a larger card: judged again, placed"


@pytest.mark.parametrize("seed", range(4))
def test_a_waiting_pod_decided_on_the_kept_scheduler_reads_as_on_a_fresh_one_after_every_change(
    seed, monkeypatch
):
    """The standing scheduler keeps each shape's closeness keys from cycle to cycle and computes
    again only those of the nodes changed since (`closeness.ClosestKeys`; over the card columns
    at any size here): after every change of a stream, each waiting pod decided on it reads as
    on a fresh scheduler of the same snapshot, reasons, closest nodes with their card tables
    and the never-fits reason included."""
    monkeypatch.setattr(Scheduler, "SWEEP_NODES", 0)
    Pod.objects.all().delete()
    Node.objects.all().delete()
    STANDING.clear()
    rng = random.Random(seed)
    world(rng)
    for n in range(2, 6):  # more nodes to come close, in an order the stream keeps changing
        services.report_inventory(
            f"node{n}", {}, {}, [card(f"GPU-{n}-{i}", i, memory=3000 * n, slots=2) for i in range(2)]
        )
    settle()
    closest = 0
    for step in range(10):
        change(rng, step)
        settle()
        with STANDING.use() as (snapshot, scheduler):
            assert scheduler is STANDING.scheduler, "the kept one, not one made for this use"
            for pod in Pod.objects.filter(status=Pod.PENDING).order_by("name"):
                spec = pod.as_spec()
                kept = scheduler.decide(spec).as_dict()
                assert kept == Scheduler(snapshot.cluster, snapshot.config).decide(spec).as_dict()
                closest += bool(kept.get("closest_nodes"))
    assert closest, "some waiting pod had closest nodes to compare"
