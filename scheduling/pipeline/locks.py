"""Single-flight for scheduling cycles: at most one cycle runs at a time across all workers.

The lock is an optimisation, not the safety net: commits re-check capacity under row locks,
so overlapping cycles (the lock disabled, or lost under a stalled worker) waste work but
never over-commit. What matters is that a dead holder never stops scheduling for long:

- On PostgreSQL the lock is a session advisory lock, even when Redis is configured: it
  dies with the holder's connection, so a killed worker's lock is gone as soon as the
  server sees the socket close (well under a second).
- Elsewhere, with Redis, it is a short lease (CYCLE_LOCK_TIMEOUT_SECONDS, 3 s) that a
  thread of the holder renews every third of it; a killed holder's lease runs out within
  the timeout. With Redis unreachable, the process-local lock stands in, so cycles still
  run (beat and the loops keep calling); overlapping workers are then merely wasteful.
- Without either, a process-local lock (SQLite, where BEGIN IMMEDIATE serialises commits).

CYCLE_LOCK (auto, advisory, redis, local) picks one by hand; SINGLE_FLIGHT off takes none.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from functools import cache

import redis
from django.conf import settings
from django.db import connection
from redis.exceptions import LockError, RedisError

from scheduling.pipeline.options import option

log = logging.getLogger(__name__)

REDIS_LOCK_KEY = "hamiadmin:cycle-lock"
ADVISORY_LOCK_KEY = 0x68616D69  # "hami"
KINDS = ("auto", "advisory", "redis", "local")
_local_lock = threading.Lock()


def redis_client():
    """One client per process (and URL); redis-py pools connections and is thread-safe."""
    return _client_for(settings.REDIS_URL)


@cache
def _client_for(url: str):
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)


def lock_kind() -> str:
    """Which lock `cycle_lock` takes here: none, advisory (PostgreSQL), redis or local."""
    if not option("SINGLE_FLIGHT"):
        return "none"
    chosen = option("CYCLE_LOCK")
    if chosen not in KINDS:
        raise ValueError(f"CYCLE_LOCK must be one of {', '.join(KINDS)}, got {chosen!r}")
    if chosen == "auto":
        if connection.vendor == "postgresql":
            return "advisory"
        return "redis" if settings.REDIS_URL else "local"
    return chosen


class Held:
    """What `cycle_lock` yields: true when this caller holds the lock (a Redis lease renews
    itself while held, however long the holder runs)."""

    def __init__(self, held: bool):
        self.held = held

    def __bool__(self) -> bool:
        return self.held


@contextmanager
def cycle_lock(wait: float = 0):
    """Yield a true `Held` when this caller holds the cycle lock, a false one when someone
    else does. `wait` is how long to wait for it (0: do not wait)."""
    kind = lock_kind()
    if kind == "none":
        yield Held(True)
    elif kind == "redis":
        with _redis_lock(wait) as held:
            yield Held(held)
    elif kind == "advisory":
        with _advisory_lock(wait) as held:
            yield Held(held)
    else:
        with _process_lock(wait) as held:
            yield Held(held)


@contextmanager
def _process_lock(wait: float):
    held = _local_lock.acquire(timeout=wait) if wait else _local_lock.acquire(blocking=False)
    try:
        yield held
    finally:
        if held:
            _local_lock.release()


class _Renewer(threading.Thread):
    """Pushes the holder's Redis lease back every third of its timeout until stopped."""

    def __init__(self, lock, every: float):
        super().__init__(name="cycle-lock-renewer", daemon=True)
        self.lock, self.every, self.stopped = lock, every, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                self.lock.reacquire()
            except LockError:
                log.warning(
                    "the cycle lease expired under this worker; commits stay safe, cycles may overlap"
                )
                return
            except RedisError as exc:
                log.warning("could not renew the cycle lease: %s", exc)


@contextmanager
def _redis_lock(wait: float):
    timeout = option("CYCLE_LOCK_TIMEOUT_SECONDS")
    lock = redis_client().lock(
        REDIS_LOCK_KEY,
        timeout=timeout,
        blocking=bool(wait),
        blocking_timeout=wait or None,
        thread_local=False,
    )
    try:
        held = lock.acquire()
    except RedisError as exc:
        log.warning("Redis unreachable for the cycle lock (%s); using the process-local lock", exc)
        with _process_lock(wait) as local:
            yield local
        return
    renewer = _Renewer(lock, timeout / 3) if held else None
    if renewer is not None:
        renewer.start()
    try:
        yield held
    finally:
        if renewer is not None:
            renewer.stopped.set()
            renewer.join(timeout)
            try:
                lock.release()
            except (LockError, RedisError):
                pass  # expired or unreachable: the lease runs out by itself


@contextmanager
def _advisory_lock(wait: float):
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
