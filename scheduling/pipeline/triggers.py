"""Asking for a scheduling cycle when something changed.

Writes call `request_cycle` inside their transaction; the request goes out only once the
transaction commits, so a cycle never runs before the change it was asked for is visible.

- An in-process scheduler loop (embedded mode, `manage.py schedule`) is woken directly.
- Otherwise, with REDIS_URL, a flag in Redis records that a cycle is wanted and one Celery
  task is sent per debounce window; the task clears the window key when it starts, so a
  request arriving while a cycle runs always leads to another cycle (see pipeline.flight).
- Neither: nothing to signal; a loop in another process finds due pods on its next poll.

With node pools (`pipeline.pools`) every pool's planner has its own flag, window and Celery
queue, and a request goes to each of them: which pools a change concerns is the planners'
question (a cycle with nothing due costs one query), not the writer's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from functools import partial

from celery import current_app
from django.conf import settings
from django.db import transaction

from scheduling.pipeline import pools
from scheduling.pipeline.locks import redis_client
from scheduling.pipeline.options import option

log = logging.getLogger(__name__)

REQUESTED_KEY = "hamiadmin:cycle-requested"
QUEUED_KEY = "hamiadmin:cycle-queued"
#: Sent by name: the pipeline never imports the Celery tasks that run it (scheduling.tasks).
RUN_CYCLE_TASK = "scheduling.run_cycle"


def requested_key(pool: str | None = None) -> str:
    """The "cycle wanted" flag of a pool's planner (this process's by default, `pools`)."""
    return REQUESTED_KEY + pools.suffix(pool)


def queued_key(pool: str | None = None) -> str:
    """The debounce window key of a pool's planner (this process's by default)."""
    return QUEUED_KEY + pools.suffix(pool)


_local_loops: list[threading.Event] = []
_loops_guard = threading.Lock()


def attach_local_loop(wakeup: threading.Event) -> None:
    with _loops_guard:
        _local_loops.append(wakeup)


def detach_local_loop(wakeup: threading.Event) -> None:
    with _loops_guard:
        if wakeup in _local_loops:
            _local_loops.remove(wakeup)


def request_cycle(reason: str, planners: Collection[str] | None = None) -> None:
    """Ask for a cycle once the current transaction commits (at once outside a transaction).
    `planners`: the node pools whose planners the write concerns ('' the planner without a
    pool; `pools.planners_of` for new pods); None, every planner (capacity moved: any pool's
    pods may fit now, and queue shares are the whole cluster's)."""
    transaction.on_commit(partial(signal_scheduler, reason, planners))


def signal_scheduler(reason: str, planners: Collection[str] | None = None) -> None:
    """Wake whoever runs cycles (`planners`, as `request_cycle`). Never raises: a lost signal
    costs one safety-cycle period."""
    with _loops_guard:
        loops = list(_local_loops)
    for wakeup in loops:
        wakeup.set()
    if loops or not settings.REDIS_URL:
        return
    try:
        every = ["", *pools.pools()]
        planners = every if planners is None else [pool for pool in every if pool in planners]
        if not planners:
            return
        pipe = redis_client().pipeline(transaction=False)  # one round trip, the flags first
        for pool in planners:
            pipe.set(requested_key(pool), reason[:100] or "requested", ex=3600)
            pipe.set(queued_key(pool), "1", nx=True, px=max(1, int(option("TRIGGER_DEBOUNCE_MS"))))
        answers = pipe.execute()
        for pool, first_in_window in zip(planners, answers[1::2], strict=True):
            if first_in_window:
                current_app.send_task(RUN_CYCLE_TASK, args=(reason[:100],), queue=pools.pool_queue(pool))
    except Exception as exc:  # noqa: BLE001 - the write has committed; scheduling catches up later
        log.warning("could not signal the scheduler (%s): %s", reason, exc)


def clear_queued() -> None:
    """Called when a cycle task starts: requests from now on send a new task."""
    if settings.REDIS_URL:
        key = queued_key()
        try:
            redis_client().delete(key)
        except Exception as exc:  # noqa: BLE001
            log.warning("could not clear %s: %s", key, exc)


def take_request() -> bool:
    """Consume the "cycle wanted" flag; True if it was set. Local mode has no flag."""
    if not settings.REDIS_URL:
        return False
    key = requested_key()
    try:
        client = redis_client()
        pipe = client.pipeline()
        pipe.get(key)
        pipe.delete(key)
        value, _ = pipe.execute()
        return value is not None
    except Exception as exc:  # noqa: BLE001
        log.warning("could not read %s: %s", key, exc)
        return False


def request_pending() -> bool:
    """Whether a cycle has been asked for since the flag was last taken (does not consume it)."""
    if not settings.REDIS_URL:
        return False
    try:
        return bool(redis_client().exists(requested_key()))
    except Exception:  # noqa: BLE001
        return False
