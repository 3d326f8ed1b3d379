"""The garbage collector around cycles (`pipeline.collector`, HAMI_GC_FREEZE): paused while a
cycle runs, what the cycle left frozen unswept at its end, the whole heap swept at least every
SNAPSHOT_REBUILD_SECONDS, and the collector as the caller had it afterwards."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from scheduling import services
from scheduling.pipeline import collector, run_cycle
from scheduling.pipeline.standing import STANDING

from .conftest import card, submit


class Knot:
    """An object that only the collector can free: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


def _tracked(obj) -> bool:
    """Whether the collector still sweeps `obj` (a frozen object is not listed)."""
    return any(found is obj for found in gc.get_objects())


@pytest.fixture
def freezing(settings):
    """HAMI_GC_FREEZE on (the suite runs with it off), the collector restored afterwards."""
    settings.HAMIADMIN = {**settings.HAMIADMIN, "GC_FREEZE": True}
    was = gc.isenabled()
    gc.unfreeze()
    gc.enable()
    yield settings
    gc.unfreeze()
    if was:
        gc.enable()
    else:
        gc.disable()


def test_paused_disables_the_collector_and_freezes_what_lives_at_the_end(freezing):
    with collector.paused():
        assert not gc.isenabled()
        kept = Knot()
        assert _tracked(kept)
    assert gc.isenabled()
    assert not _tracked(kept), "what the block left alive is frozen"


def test_nested_and_concurrent_blocks_enable_it_once_the_last_ends(freezing):
    inside, leave = threading.Event(), threading.Event()

    def other():
        with collector.paused():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    assert inside.wait(10)
    with collector.paused():
        with collector.paused():
            pass
        assert not gc.isenabled()
    assert not gc.isenabled(), "the other thread's block still runs"
    leave.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled(freezing):
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()


def test_cyclic_garbage_frozen_unswept_goes_at_the_whole_sweep(freezing):
    freezing.HAMIADMIN = {**freezing.HAMIADMIN, "SNAPSHOT_REBUILD_SECONDS": 3600}
    collector.sweep_whole()  # not due again within the test
    with collector.paused():
        knot = weakref.ref(Knot())
    assert knot() is not None, "frozen with the cycle's survivors: no sweep sees it"
    collector.freeze_young()
    assert knot() is not None, "the refresh's freeze sweeps nothing"
    collector.sweep_whole()
    assert knot() is None


def test_the_whole_sweep_runs_when_a_cycle_ends_once_it_is_due(freezing):
    freezing.HAMIADMIN = {**freezing.HAMIADMIN, "SNAPSHOT_REBUILD_SECONDS": 0}
    with collector.paused():
        knot = weakref.ref(Knot())
    assert knot() is None


def test_turned_off_it_leaves_the_collector_alone(freezing):
    freezing.HAMIADMIN = {**freezing.HAMIADMIN, "GC_FREEZE": False}
    with collector.paused():
        assert gc.isenabled()
        kept = Knot()
    assert _tracked(kept)


@pytest.mark.django_db
def test_a_cycle_runs_without_automatic_collections(freezing):
    """A real cycle of 40 pods: the collector's own (generation 0 and 1) sweeps never run
    inside it with the freeze on, and do without it (so the count can tell)."""
    services.report_inventory("n1", {}, {}, [card(f"GPU-{i}", i, memory=80000) for i in range(8)])
    STANDING.clear()

    def automatic_sweeps_in_a_cycle(tag: str) -> int:
        for i in range(40):
            submit(f"{tag}-{i}", gpu=1, mem=100)
        found = []

        def seen(phase, info):
            if phase == "start" and info["generation"] < 2:
                found.append(info["generation"])

        gc.callbacks.append(seen)
        try:
            report = run_cycle(trigger="test")
        finally:
            gc.callbacks.remove(seen)
        assert len(report.placed) == 40
        return len(found)

    assert automatic_sweeps_in_a_cycle("frozen") == 0
    assert gc.isenabled()
    freezing.HAMIADMIN = {**freezing.HAMIADMIN, "GC_FREEZE": False}
    assert automatic_sweeps_in_a_cycle("swept") > 0
