"""Single-flight and triggers: one cycle at a time, a dead holder never blocks for long,
and a burst of writes sends one task, not one per write."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from scheduling import services
from scheduling.models import Pod
from scheduling.pipeline import locks, triggers
from scheduling.pipeline.flight import run_requested_cycles

from .conftest import card, submit


def in_thread(work):
    """Run `work` in another thread (its own database connection); return its result."""
    result = {}

    def target():
        try:
            result["value"] = work()
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(30)
    return result["value"]


@pytest.mark.django_db(transaction=True)
def test_while_one_holds_the_cycle_lock_another_caller_runs_no_cycle():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    submit("p", gpu=1, mem=100)
    with locks.cycle_lock() as held:
        assert held
        assert in_thread(lambda: run_requested_cycles("test")) == []
        assert Pod.objects.get().status == Pod.PENDING
    reports = in_thread(lambda: run_requested_cycles("test"))
    assert len(reports) == 1 and reports[0].placed


@pytest.mark.django_db(transaction=True)
def test_with_single_flight_off_both_callers_get_through(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "SINGLE_FLIGHT": False}
    with locks.cycle_lock() as held:
        assert held
        assert in_thread(lambda: _try_lock()) is True


def _try_lock() -> bool:
    with locks.cycle_lock() as held:
        return bool(held)


@pytest.mark.django_db
def test_the_redis_lease_of_a_dead_worker_expires_and_a_live_holder_keeps_its_own(redis_url, settings):
    settings.REDIS_URL = redis_url
    settings.HAMIADMIN = {**settings.HAMIADMIN, "CYCLE_LOCK": "redis", "CYCLE_LOCK_TIMEOUT_SECONDS": 0.5}
    client = locks.redis_client()
    client.delete(locks.REDIS_LOCK_KEY)
    assert locks.lock_kind() == "redis"
    dead = client.lock(locks.REDIS_LOCK_KEY, timeout=0.5)
    assert dead.acquire(blocking=False)  # a worker that took the lock and died
    with locks.cycle_lock() as held:
        assert not held
    time.sleep(0.6)
    with locks.cycle_lock() as held:
        assert held
        time.sleep(1.2)  # a long run of cycles: the holder's thread renews the lease meanwhile
        assert client.exists(locks.REDIS_LOCK_KEY)
        with locks.cycle_lock() as other:
            assert not other
    assert not client.exists(locks.REDIS_LOCK_KEY)


def test_on_postgresql_the_session_lock_is_used_even_with_redis(settings):
    settings.REDIS_URL = "redis://127.0.0.1:6379/0"
    expected = "advisory" if connection.vendor == "postgresql" else "redis"
    assert locks.lock_kind() == expected


@pytest.mark.django_db(transaction=True)
def test_with_redis_down_cycles_still_run(settings):
    """A Redis that does not answer (nothing listens on port 1) costs the lease, not the cycles."""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.HAMIADMIN = {**settings.HAMIADMIN, "CYCLE_LOCK": "redis"}
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    submit("p", gpu=1, mem=100)
    reports = run_requested_cycles("safety")
    assert reports and reports[0].placed


@pytest.mark.django_db
def test_a_burst_of_requests_sends_one_task_and_leaves_the_flag_for_the_holder(redis_url, settings):
    settings.REDIS_URL = redis_url
    settings.HAMIADMIN = {**settings.HAMIADMIN, "TRIGGER_DEBOUNCE_MS": 2000}
    client = locks.redis_client()
    client.delete(triggers.REQUESTED_KEY, triggers.QUEUED_KEY)
    queued_before = client.llen("celery")
    for n in range(20):
        triggers.signal_scheduler(f"write {n}")
    assert client.llen("celery") - queued_before == 1
    assert triggers.request_pending()
    assert triggers.take_request() and not triggers.take_request()
    triggers.clear_queued()  # the task started: the next request sends a new one
    triggers.signal_scheduler("after start")
    assert client.llen("celery") - queued_before == 2


def test_an_in_process_loop_is_woken_directly_without_redis():
    wakeup = threading.Event()
    triggers.attach_local_loop(wakeup)
    try:
        triggers.signal_scheduler("test")
        assert wakeup.is_set()
    finally:
        triggers.detach_local_loop(wakeup)
