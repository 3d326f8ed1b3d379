"""Single-flight for scheduling cycles: at most one cycle runs at a time across all workers.

The lock is an optimisation, not the safety net: commits re-check capacity under row locks,
so overlapping cycles (the lock disabled, or expired under a stalled worker) waste work
but never over-commit. Each kind of lock ends by itself when its holder dies: a Redis key
expires after CYCLE_LOCK_TIMEOUT_SECONDS, a PostgreSQL advisory lock ends with the session,
and the process-local lock ends with the process.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from functools import cache

from django.conf import settings
from django.db import connection

from .pipeline.options import option

log = logging.getLogger(__name__)

REDIS_LOCK_KEY = "hamiadmin:cycle-lock"
ADVISORY_LOCK_KEY = 0x68616D69  # "hami"
_local_lock = threading.Lock()


def redis_client():
    """One client per process (and URL); redis-py pools connections and is thread-safe."""
    return _client_for(settings.REDIS_URL)


@cache
def _client_for(url: str):
    import redis

    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)


def lock_kind() -> str:
    """Which lock `cycle_lock` takes here: none, redis, advisory (PostgreSQL) or local."""
    if not option("SINGLE_FLIGHT"):
        return "none"
    if settings.REDIS_URL:
        return "redis"
    if connection.vendor == "postgresql":
        return "advisory"
    return "local"


class Held:
    """What `cycle_lock` yields: true when this caller holds the lock. `renew()` pushes a
    Redis lock's expiry back, so a long run of cycles keeps it (a no-op for the others)."""

    def __init__(self, held: bool, renew=None):
        self.held = held
        self._renew = renew

    def __bool__(self) -> bool:
        return self.held

    def renew(self) -> None:
        if self.held and self._renew is not None:
            self._renew()


@contextmanager
def cycle_lock(wait: float = 0):
    """Yield a true `Held` when this caller holds the cycle lock, a false one when someone
    else does. `wait` is how long to wait for it (0: do not wait).
    """
    kind = lock_kind()
    if kind == "none":
        yield Held(True)
    elif kind == "redis":
        with _redis_lock(wait) as held:
            yield held
    elif kind == "advisory":
        with _advisory_lock(wait) as held:
            yield Held(held)
    else:
        held = _local_lock.acquire(timeout=wait) if wait else _local_lock.acquire(blocking=False)
        try:
            yield Held(held)
        finally:
            if held:
                _local_lock.release()


@contextmanager
def _redis_lock(wait: float):
    from redis.exceptions import LockError

    lock = redis_client().lock(
        REDIS_LOCK_KEY, timeout=option("CYCLE_LOCK_TIMEOUT_SECONDS"), blocking=bool(wait), blocking_timeout=wait or None
    )
    held = lock.acquire()

    def renew() -> None:
        try:
            lock.reacquire()
        except LockError:
            log.warning("the cycle lock expired under this worker; commits stay safe, cycles may overlap")

    try:
        yield Held(held, renew)
    finally:
        if held:
            try:
                lock.release()
            except LockError:
                pass  # expired while we worked: someone else may hold it now, and that is fine


@contextmanager
def _advisory_lock(wait: float):
    import time

    deadline = time.monotonic() + wait
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
            held = bool(cursor.fetchone()[0])
            if held or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    try:
        yield held
    finally:
        if held and connection.connection is not None:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_LOCK_KEY])
            except Exception:  # noqa: BLE001 - a broken session has dropped the lock already
                pass
