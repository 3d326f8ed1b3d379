"""Retrying a whole transaction when PostgreSQL aborts it for a lock cycle or a
serialization failure (SQLSTATE 40P01, 40001).

The lock order (docs/architecture.md, "Lock order") is meant to make deadlocks impossible;
this is the second line: a transaction the database chose as a victim is run again, from
the start, a few times with jittered back-off, instead of failing the request or killing
the worker. Only an outermost transaction can be retried: inside an enclosing atomic block
the error is raised for the owner of that block to handle.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections import Counter

from django.db import DatabaseError, connection

from scheduling.ops.metrics import DB_RETRIES

log = logging.getLogger(__name__)

RETRYABLE = {"40P01": "deadlock", "40001": "serialization"}
#: Retries done in this process, by kind (tests and the metrics read it).
RETRIES: Counter[str] = Counter()
ATTEMPTS = 5
BASE_SECONDS = 0.02
CAP_SECONDS = 0.5


def sqlstates(error: BaseException):
    """The SQLSTATEs `error` and what caused it carry (at most five links down the chain)."""
    seen = 0
    exc: BaseException | None = error
    while exc is not None and seen < 5:
        state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
        if state:
            yield state
        exc = exc.__cause__ or exc.__context__
        seen += 1


def retryable_kind(error: BaseException) -> str | None:
    """'deadlock' or 'serialization' when `error` (or what caused it) carries such a SQLSTATE."""
    return next((RETRYABLE[state] for state in sqlstates(error) if state in RETRYABLE), None)


#: SQLSTATE 55P03, lock_not_available: a `lock_timeout` ran out (hamiadmin.dbtimeouts).
LOCK_NOT_AVAILABLE = "55P03"


def lock_wait_ran_out(error: BaseException) -> bool:
    """Whether `error` (or what caused it) is PostgreSQL giving up waiting for a lock."""
    return LOCK_NOT_AVAILABLE in sqlstates(error)


def _observe(kind: str) -> None:
    RETRIES[kind] += 1
    DB_RETRIES.labels(kind).inc()


def retry_on_conflict(fn=None, *, attempts: int = ATTEMPTS):
    """Decorator: run `fn` again when its transaction was aborted as a deadlock victim or for
    a serialization failure; at most `attempts` runs, then the error is raised."""

    def wrap(function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            if connection.in_atomic_block:
                return function(*args, **kwargs)
            for attempt in range(attempts):
                try:
                    return function(*args, **kwargs)
                except DatabaseError as exc:
                    kind = retryable_kind(exc)
                    if kind is None or attempt == attempts - 1:
                        raise
                    _observe(kind)
                    delay = min(CAP_SECONDS, BASE_SECONDS * 2**attempt) * random.uniform(0.5, 1.5)
                    log.warning(
                        "%s: %s, retrying in %.0f ms (attempt %d of %d)",
                        function.__qualname__,
                        kind,
                        delay * 1000,
                        attempt + 2,
                        attempts,
                    )
                    time.sleep(delay)
            raise AssertionError("unreachable")

        return run

    return wrap(fn) if fn is not None else wrap
