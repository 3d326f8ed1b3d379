"""Owed decrements (`pipeline.settle`): a release that finds a card held by another writer
marks its allocations owed instead of waiting; whoever next holds the card settles them, once.

Where a test needs a card held by another transaction (PostgreSQL row locks), another session
holds it as a commit does (`cards_held`); the others make an owed allocation by hand, as such
a release leaves it. Nothing is ever owed on SQLite (no row locks: every card is had), and its
cycles do not look; the check, the repair and a release settling what is owed on its card
are run there too.
"""

from __future__ import annotations

import random
import threading
import time
from functools import partial

import pytest
from django.db import connection, connections
from django.db.models import Count, Sum
from django.test.utils import CaptureQueriesContext

from scheduling import services
from scheduling.models import Allocation, CapacityVersion, Card, Pod
from scheduling.pipeline import settle
from scheduling.pipeline.consistency import counter_drift, overcommitted
from scheduling.pipeline.flight import run_requested_cycles
from scheduling.pipeline.housekeeping import housekeeping
from scheduling.pipeline.rowlocks import lock_cards
from scheduling.services.pods import WriteOutcome
from tests.conftest import held_elsewhere

from .conftest import assert_consistent, card, submit

pytestmark = pytest.mark.django_db(transaction=True)


def placed(*names: str, mem: int = 1000) -> None:
    for name in names:
        submit(name, gpu=1, mem=mem)
    run_requested_cycles("test")
    assert Pod.objects.filter(name__in=names, status=Pod.SCHEDULED).count() == len(names)


def counters(uuid: str) -> tuple[int, int, int]:
    row = Card.objects.get(uuid=uuid)
    return row.used_slots, row.used_memory, row.used_cores


def owe(name: str) -> None:
    """`name` ended while its cards were held: finished, its allocations released and owed, its
    cards' counters untouched (what `_release_allocations_of` leaves on a card it could not have)."""
    Pod.objects.filter(name=name).update(status=Pod.SUCCEEDED)
    Allocation.objects.filter(pod__name=name, active=True).update(active=False, owed=True)


def uuid_of(name: str) -> str:
    return Allocation.objects.get(pod__name=name).card.uuid


def cards_held(*uuids: str):
    """Another session holds these cards' row locks, as a scheduling commit does, until the
    block ends."""
    return held_elsewhere(lambda: list(lock_cards(Card.objects.filter(uuid__in=uuids))), 60, "the cards")


# -- any database -------------------------------------------------------------------------


def test_an_owed_decrement_is_no_drift_and_the_repair_leaves_it_to_its_settle():
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0)])
    placed("a", "b")
    owe("a")
    assert counters("GPU-0")[:2] == (2, 2000)
    assert counter_drift() == [], "counters = active + owed"
    repair = services.repair_consistency()
    assert repair.counters_fixed == [] and counters("GPU-0")[:2] == (2, 2000)
    assert Allocation.objects.filter(owed=True).count() == 1, "left to its settle"


def test_the_next_release_on_a_card_settles_what_is_owed_there():
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0)])
    placed("a", "b", "c")
    owe("a")
    services.release_pod(Pod.objects.get(name="b"), Pod.SUCCEEDED)
    assert counters("GPU-0")[:2] == (1, 1000), "b's decrement and a's owed one"
    assert not Allocation.objects.filter(owed=True).exists()
    assert_consistent()


def test_a_settle_lowers_the_counters_once_and_moves_the_capacity_version(require_postgres):
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0)])
    placed("a", "b")
    owe("a")
    version = CapacityVersion.read()
    assert settle.settle_owed() == 1
    assert counters("GPU-0")[:2] == (1, 1000)
    assert CapacityVersion.read() == version + 1, "settled capacity moves the version"
    assert not Allocation.objects.filter(owed=True).exists()
    assert settle.settle_owed() == 0, "a settle is done once"
    assert CapacityVersion.read() == version + 1
    assert_consistent()


def test_before_a_cycle_nothing_owed_costs_one_statement_that_reads_the_version_too(require_postgres):
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0)])
    placed("a")
    services.release_pod(Pod.objects.get(name="a"))  # moves the version
    with CaptureQueriesContext(connection) as queries:
        version = settle.settle_before_cycle()
    assert version == CapacityVersion.read() > 0
    assert len(queries) == 1, [q["sql"] for q in queries]


def test_before_a_cycle_what_is_owed_is_settled_and_the_moved_version_left_to_the_wake(require_postgres):
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0)])
    placed("a", "b")
    owe("a")
    version = CapacityVersion.read()
    assert settle.settle_before_cycle() is None, "the settle moved it: the cycle's wake reads it"
    assert CapacityVersion.read() == version + 1
    assert counters("GPU-0")[:2] == (1, 1000)
    assert settle.owed_and_version() == ([], version + 1)
    assert_consistent()


def test_housekeeping_settles_owed_decrements(require_postgres):
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0)])
    placed("a")
    owe("a")
    done = housekeeping()
    assert done["owed_cards_settled"] == 1
    assert counters("GPU-0") == (0, 0, 0)
    assert "drift_counter_drift" not in done
    assert_consistent()


def test_a_requested_cycle_settles_before_it_plans_and_places_in_the_room(settings, require_postgres):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "BACKOFF_BASE_SECONDS": 600, "BACKOFF_MAX_SECONDS": 600}
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0)])
    placed("a", mem=6000)
    submit("big", gpu=1, mem=6000)
    run_requested_cycles("too full")
    assert Pod.objects.get(name="big").next_attempt_at is not None  # backed off: only a wake helps
    owe("a")
    run_requested_cycles("test")
    assert Pod.objects.get(name="big").status == Pod.SCHEDULED
    assert_consistent()


def test_nothing_is_owed_without_contention():
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    placed("a", "b", "c")
    services.release_pods([{"namespace": "default", "name": n} for n in ("a", "b")], Pod.SUCCEEDED)
    services.release_pod(Pod.objects.get(name="c"))
    assert not Allocation.objects.filter(owed=True).exists()
    assert counters("GPU-0") == counters("GPU-1") == (0, 0, 0)
    assert_consistent()


# -- PostgreSQL: cards held by another session ----------------------------------------------


def test_a_release_beside_a_held_card_owes_its_decrement_there_only(require_postgres):
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    submit("two", gpu=2, mem=1000)
    placed("a", "b")
    held, free = uuid_of("a"), ({"GPU-0", "GPU-1"} - {uuid_of("a")}).pop()
    version = CapacityVersion.read()
    before_held, before_free = counters(held), counters(free)
    with cards_held(held):
        started = time.monotonic()
        services.release_pod(Pod.objects.get(name="two"), Pod.SUCCEEDED)  # one card each
        took = time.monotonic() - started
        assert took < 0.5, f"the release waited {took:.2f} s for a held card"
        assert counters(held) == before_held, "a held card's counters are left alone"
        assert counters(free)[0] == before_free[0] - 1, "the card it had is lowered at once"
        mine = dict(Allocation.objects.filter(pod__name="two").values_list("card__uuid", "owed"))
        assert mine == {held: True, free: False}
        assert CapacityVersion.read() == version + 1, "the capacity it freed now is made known"
        assert counter_drift() == []
    # the next release touching the held card settles what is owed there too
    services.release_pods([{"namespace": "default", "name": "a"}], Pod.SUCCEEDED)
    assert not Allocation.objects.filter(owed=True).exists()
    assert_consistent()


def test_a_bulk_release_beside_held_cards_answers_at_once(require_postgres):
    services.report_inventory("n1", {}, {}, [card(f"GPU-{i}", i) for i in range(4)])
    names = [f"p{i}" for i in range(8)]
    placed(*names)
    held = [uuid_of("p0"), uuid_of("p1")]
    with cards_held(*held):
        started = time.monotonic()
        done = services.release_pods([{"namespace": "default", "name": n} for n in names], Pod.SUCCEEDED)
        assert time.monotonic() - started < 0.5
        assert {item.outcome for item in done} == {WriteOutcome.RELEASED}
        owed = set(Allocation.objects.filter(owed=True).values_list("card__uuid", flat=True))
        assert owed == set(held)
        assert counter_drift() == []
    assert settle.settle_owed() == len(set(held))
    assert all(counters(f"GPU-{i}") == (0, 0, 0) for i in range(4))
    assert_consistent()


def test_a_settle_waits_for_a_held_card_only_as_long_as_a_commit_would(settings, require_postgres):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "COMMIT_LOCK_TIMEOUT_MS": 200}
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0)])
    placed("a")
    owe("a")
    with cards_held("GPU-0"):
        started = time.monotonic()
        assert settle.settle_owed() == 0, "left for later"
        assert time.monotonic() - started < 2.0
    assert Allocation.objects.filter(owed=True).count() == 1
    assert settle.settle_owed() == 1
    assert_consistent()


def held_by_active() -> dict[str, tuple[int, int, int]]:
    rows = (
        Allocation.objects.filter(active=True)
        .values("card__uuid")
        .annotate(n=Count("id"), memory=Sum("memory"), cores=Sum("cores"))
    )
    return {row["card__uuid"]: (row["n"], row["memory"], row["cores"]) for row in rows}


def together(*steps) -> None:
    """Run the steps in threads started at once (each on its own connection); raise the first
    error one met."""
    start = threading.Barrier(len(steps))
    errors: list[BaseException] = []

    def run(step) -> None:
        try:
            start.wait(10)
            step()
        except BaseException as exc:  # noqa: BLE001 - raised below
            errors.append(exc)
        finally:
            connections["default"].close()

    threads = [threading.Thread(target=run, args=(step,)) for step in steps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [], errors


def release_each(names: list[str]) -> None:
    for name in names:
        services.release_pod(Pod.objects.get(name=name), Pod.SUCCEEDED)


@pytest.mark.slow
def test_settlers_releases_and_commits_race_without_a_decrement_lost_or_lowered_twice(require_postgres):
    """Owed decrements on every card, then at once: two settlers, releases on the same cards
    (which settle too) and cycles placing new pods there (their commits lock the same cards).
    Lowered twice, a card would show less than its active allocations; lost, more."""
    uuids = [f"GPU-{i}" for i in range(4)]
    services.report_inventory("n1", {}, {}, [card(uuid, i) for i, uuid in enumerate(uuids)])
    rng = random.Random(29)
    for round_ in range(3):
        names = [f"r{round_}-{i}" for i in range(16)]
        placed(*names)
        owed_now, later = names[:8], names[8:]
        with cards_held(*uuids):
            services.release_pods([{"namespace": "default", "name": n} for n in owed_now], Pod.SUCCEEDED)
        assert Allocation.objects.filter(owed=True).count() == 8
        for i in range(6):
            submit(f"n{round_}-{i}", gpu=1, mem=500)
        rng.shuffle(later)
        together(
            settle.settle_owed,
            settle.settle_owed,
            partial(release_each, later[:4]),
            partial(services.release_pods, [{"namespace": "default", "name": n} for n in later[4:]]),
            partial(run_requested_cycles, "race"),
        )
        assert counter_drift() == [] and overcommitted() == []
        settle.settle_owed()
        assert not Allocation.objects.filter(owed=True).exists()
        active = held_by_active()
        assert {uuid: counters(uuid) for uuid in uuids} == {
            uuid: active.get(uuid, (0, 0, 0)) for uuid in uuids
        }
        assert Pod.objects.filter(name__startswith=f"n{round_}-", status=Pod.SCHEDULED).count() == 6
