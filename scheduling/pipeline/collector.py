"""The cyclic garbage collector around cycles (HAMI_GC_FREEZE, issue 29).

A worker's long-lived objects (the standing snapshot, the scheduler's verdict tables) are
frozen out of the collector's sweeps; what a cycle makes is not. A 5,000-pod burst at 5,000
nodes made about a million objects a cycle, most freed by their reference counts the moment
the cycle ended, and the collector's automatic sweeps in the middle of cycles walked
everything made so far: ~1.1 s of a 7 s burst, full sweeps of 30-100 ms among them. The
cyclic garbage those sweeps were for was about a hundred objects in the whole burst.

So a cycle runs with the collector paused (`paused`) and, when it ends, what it left alive
is frozen without a sweep (O(1)), as is what the standing snapshot's refresh finds young
(`freeze_young`: between cycles the collector runs as usual, and what the refresh finds is
mostly the cycle's own rows); and the whole heap, frozen part included, is swept at a
whole read and at least every SNAPSHOT_REBUILD_SECONDS (`sweep_whole`), which bounds how
long cyclic garbage frozen unswept (or a replaced snapshot) stays.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .options import option

_lock = threading.Lock()
_depth = 0  # blocks running in this process with the collector paused
_resume = False  # whether the first of them found it enabled
_swept_whole_at = time.monotonic()  # when `sweep_whole` last ran


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection while the block runs (in any thread: `gc.disable` is
    process-wide). When the last such block ends, what lives is frozen unswept, the whole
    heap is swept if that is due, and the collector is enabled again where the first block
    found it enabled. A no-op with HAMI_GC_FREEZE=false."""
    global _depth, _resume
    if not option("GC_FREEZE"):
        yield
        return
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                if time.monotonic() - _swept_whole_at >= option("SNAPSHOT_REBUILD_SECONDS"):
                    sweep_whole()
                else:
                    gc.freeze()
                if _resume:
                    gc.enable()


def freeze_young() -> None:
    """Freeze what lives of what is not frozen, unswept (O(1)). The standing snapshot's
    refresh runs inside a cycle's pause, so what is young then is mostly the cycle's own rows,
    alive: sweeping it cost ~20 ms a 1,000-pod cycle at 5,000 nodes and found no garbage
    (issue 29). Cyclic garbage frozen here goes at the next `sweep_whole`."""
    if option("GC_FREEZE"):
        gc.freeze()


def sweep_whole() -> None:
    """Sweep everything, frozen objects included, then freeze what lives."""
    global _swept_whole_at
    if option("GC_FREEZE"):
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _swept_whole_at = time.monotonic()
