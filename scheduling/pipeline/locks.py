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

A holder that is alive but makes no progress (stopped with SIGSTOP, stuck writing a full
pipe) must lose the lock too. Each lock but the process-local one carries a lease deadline
(CYCLE_LOCK_LEASE_SECONDS, 15 s) that only the holder's cycle loop moves forward
(`keep_alive`, called between cycles and while a cycle plans), never a side thread:

- PostgreSQL: the deadline is the `CycleLease` row, written by the holding session; a caller
  that finds the lock held by a session whose deadline passed ends that session
  (`pg_terminate_backend`): its transaction rolls back and the lock is free.
- Redis: the renewing thread keeps the short lease alive only until the deadline; past it the
  key runs out within CYCLE_LOCK_TIMEOUT_SECONDS.

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

from scheduling.pipeline import pools
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
    """What `cycle_lock` yields: true when this caller holds the lock. `renew` moves the
    lease's deadline forward (the cycle loop calls it); false once the lease is lost."""

    def __init__(self, held: bool, lease: _Lease | None = None):
        self.held = held
        self.lease = lease

    def __bool__(self) -> bool:
        return self.held

    def renew(self) -> bool:
        return self.lease.renew() if self.lease is not None else self.held


class _Lease:
    """The holder's deadline. `renew` is cheap when called often: it writes at most every
    third of the lease."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.renewed = float("-inf")
        self.lost = False

    def renew(self, force: bool = False) -> bool:
        if self.lost:
            return False
        now = time.monotonic()
        if force or now - self.renewed >= self.seconds / 3:
            if not self._write():
                return not self.lost
            self.renewed = now
            self.deadline = now + self.seconds
        return True

    def _write(self) -> bool:
        return True


class _AdvisoryLease(_Lease):
    """The `CycleLease` row, written by the session holding the advisory lock. Inside a
    transaction the write would stay unseen until it commits, so it waits for the next call."""

    def __init__(self, seconds: float, holder: str):
        super().__init__(seconds)
        self.holder = holder

    def _write(self) -> bool:
        if connection.in_atomic_block:
            return False
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {_lease_table()} (id, pid, holder, expires_at)"  # noqa: S608
                    " VALUES (%s, pg_backend_pid(), %s, now() + make_interval(secs => %s))"
                    " ON CONFLICT (id) DO UPDATE SET pid = EXCLUDED.pid, holder = EXCLUDED.holder,"
                    " expires_at = EXCLUDED.expires_at",
                    [lease_row(), self.holder[:200], self.seconds],
                )
        except Exception:  # noqa: BLE001 - our session is gone, and the lock with it
            log.warning("could not renew the cycle lease; this worker may have lost the cycle lock")
            self.lost = True
            return False
        return True


_current = threading.local()


def keep_alive() -> bool:
    """Called by a cycle as it makes progress: moves this thread's lease forward (cheap: a
    clock read, and a write at most every third of the lease). False when the lease is lost:
    the caller should stop planning; the commit's re-checks keep it safe either way."""
    lease = getattr(_current, "lease", None)
    return lease.renew() if lease is not None else True


def redis_lock_key() -> str:
    """This process's cycle lock in Redis: one per node pool (`pools`)."""
    return REDIS_LOCK_KEY + pools.suffix()


def advisory_lock_key() -> int:
    """This process's advisory lock: `ADVISORY_LOCK_KEY`, its pool's number (`pools.number`)
    in the upper 32 bits, so each pool's planners take a lock of their own."""
    return ADVISORY_LOCK_KEY | (pools.number() << 32)


def lease_row() -> int:
    """This process's `CycleLease` row: the unsharded one, or its pool's number."""
    from scheduling.models import CycleLease

    return pools.number() or CycleLease.ROW


def _lease_table() -> str:
    from scheduling.models import CycleLease

    return CycleLease._meta.db_table


@contextmanager
def cycle_lock(wait: float = 0):
    """Yield a true `Held` when this caller holds the cycle lock, a false one when someone
    else does. `wait` is how long to wait for it (0: do not wait)."""
    kind = lock_kind()
    if kind == "none":
        yield Held(True)
    elif kind == "redis":
        with _redis_lock(wait) as (held, lease):
            with _leased(lease):
                yield Held(held, lease)
    elif kind == "advisory":
        with _advisory_lock(wait) as (held, lease):
            with _leased(lease):
                yield Held(held, lease)
    else:
        with _process_lock(wait) as held:
            yield Held(held)


@contextmanager
def _leased(lease: _Lease | None):
    """Make `lease` the one `keep_alive` moves in this thread while the lock is held."""
    if lease is None:
        yield
        return
    before = getattr(_current, "lease", None)
    _current.lease = lease
    try:
        yield
    finally:
        _current.lease = before


@contextmanager
def _process_lock(wait: float):
    held = _local_lock.acquire(timeout=wait) if wait else _local_lock.acquire(blocking=False)
    try:
        yield held
    finally:
        if held:
            _local_lock.release()


class _Renewer(threading.Thread):
    """Pushes the holder's Redis lease back every third of its timeout until stopped, and
    only while the holder's deadline (`lease`, moved by its cycle loop) has not passed."""

    def __init__(self, lock, every: float, lease: _Lease):
        super().__init__(name="cycle-lock-renewer", daemon=True)
        self.lock, self.every, self.lease, self.stopped = lock, every, lease, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            if time.monotonic() > self.lease.deadline:
                self.lease.lost = True
                log.error(
                    "this worker's cycle loop made no progress for %.0f s; letting the cycle lease go",
                    self.lease.seconds,
                )
                return
            try:
                self.lock.reacquire()
            except LockError:
                self.lease.lost = True
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
        redis_lock_key(),
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
            yield local, None
        return
    lease = _Lease(option("CYCLE_LOCK_LEASE_SECONDS")) if held else None
    renewer = _Renewer(lock, timeout / 3, lease) if lease is not None else None
    if renewer is not None:
        renewer.start()
    try:
        yield held, lease
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
    key = advisory_lock_key()
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
            held = bool(cursor.fetchone()[0])
            if not held and _end_a_stuck_holder(cursor):
                deadline = max(deadline, time.monotonic() + 1.0)  # its session is ending now
            if held or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    lease = None
    if held:
        from .plan import worker_name

        lease = _AdvisoryLease(option("CYCLE_LOCK_LEASE_SECONDS"), worker_name())
        lease.renew(force=True)
    try:
        yield held, lease
    finally:
        if held and connection.connection is not None:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
            except Exception:  # noqa: BLE001 - a broken session has dropped the lock already
                pass


def _end_a_stuck_holder(cursor) -> bool:
    """End the session holding the advisory lock when its lease deadline has passed (the
    holder made no progress for CYCLE_LOCK_LEASE_SECONDS). A holder with no lease row of its
    own yet (it has just taken the lock) is left alone. True when a session was ended."""
    key = advisory_lock_key()
    cursor.execute(
        "SELECT l.pid, c.holder, extract(epoch FROM now() - c.expires_at)"  # noqa: S608
        f" FROM pg_locks l JOIN {_lease_table()} c ON c.id = {lease_row()} AND c.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
        f" AND l.classid = {key >> 32} AND l.objid = {key & 0xFFFFFFFF}"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND c.expires_at < now()"
    )
    row = cursor.fetchone()
    if row is None:
        return False
    pid, holder, late = row
    cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    ended = bool(cursor.fetchone()[0])
    log.error(
        "the cycle lock's holder %s (session %s) made no progress for %.0f s past its lease; %s",
        holder or "?",
        pid,
        float(late),
        "ended its session" if ended else "could not end its session",
    )
    return ended
