"""A time budget for one run of the engine, so a caller that must answer (a web request, a
background job) never waits on it without bound.

The caller opens `deadline(seconds, setting)` around the run; the engine calls `check()` where
work repeats (each pod decided, every few thousand combinations topology-aware weighs), and
past the deadline `check` raises `OverBudget` naming the setting that set it. The deadline
lives in a context variable: each thread (each web request) has its own, and a run without
one is never stopped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_deadline: ContextVar[tuple[float, float, str] | None] = ContextVar("engine_deadline", default=None)


class OverBudget(Exception):
    """The run went past its deadline; `seconds` and `setting` say which bound it was."""

    def __init__(self, seconds: float, setting: str):
        self.seconds = seconds
        self.setting = setting
        super().__init__(f"stopped after {seconds:g} s ({setting})")


@contextmanager
def deadline(seconds: float, setting: str) -> Iterator[None]:
    """Stop the engine runs inside this block `seconds` from now (0 or less: no bound)."""
    if seconds <= 0:
        yield
        return
    token = _deadline.set((time.monotonic() + seconds, seconds, setting))
    try:
        yield
    finally:
        _deadline.reset(token)


def check() -> None:
    """Raise `OverBudget` when the current deadline has passed; cheap enough to call per pod."""
    current = _deadline.get()
    if current is not None and time.monotonic() > current[0]:
        raise OverBudget(current[1], current[2])
