"""A cycle-lock holder that is alive but makes no progress loses the lock within its lease
(issue 29): the lease's deadline moves only from the holder's cycle loop.

The holder is a real worker process paused inside its commit (the test-only hook); on
PostgreSQL it is also stopped with SIGSTOP, as a process stuck on a full pipe or a debugger
would be. The figure is the time from the pause until another caller holds the lock.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from scheduling import services
from scheduling.models import Allocation, Pod
from scheduling.pipeline import locks
from scheduling.pipeline.flight import run_requested_cycles
from tests.conftest import pod_row_held

from .conftest import assert_consistent, card, start_worker, stop, submit
from .test_fault import wait_for_line

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LEASE = 2.0


def cluster_with_waiting_pods(count: int = 6) -> None:
    for n in range(3):
        services.report_inventory(f"node{n}", {}, {}, [card(f"GPU-{n}-0", 0), card(f"GPU-{n}-1", 1)])
    for n in range(count):
        submit(f"p{n}", gpu=1, mem=1000)


def seconds_until_held(since: float, bound: float) -> float:
    while True:
        with locks.cycle_lock() as held:
            if held:
                return time.monotonic() - since
        assert time.monotonic() - since < bound, "the stuck holder kept the cycle lock"
        time.sleep(0.05)


def test_a_stopped_holder_loses_the_advisory_lock_within_its_lease(settings, require_postgres):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "CYCLE_LOCK": "advisory", "CYCLE_LOCK_LEASE_SECONDS": LEASE}
    cluster_with_waiting_pods()
    worker = start_worker(
        "--once",
        HAMI_FAULT_COMMIT_PAUSE_SECONDS=120,
        HAMI_CYCLE_LOCK="advisory",
        HAMI_CYCLE_LOCK_LEASE_SECONDS=LEASE,
    )
    try:
        wait_for_line(worker, "commit paused", 60)
        paused = time.monotonic()
        os.kill(worker.pid, signal.SIGSTOP)  # alive, its session open, making no progress
        with locks.cycle_lock() as held:
            assert not held, "the paused worker holds the lock"
        took = seconds_until_held(paused, LEASE + 10)
        print(f"advisory: a stopped holder lost the lock {took:.2f} s after it stopped (lease {LEASE} s)")
        assert took < LEASE + 2.0
        # its session was ended: the allocations it had written and not committed are gone
        assert Allocation.objects.count() == 0
    finally:
        os.kill(worker.pid, signal.SIGCONT)
        stop(worker)
    run_requested_cycles("after the takeover")
    assert Pod.objects.filter(status=Pod.SCHEDULED).count() == 6
    assert_consistent()


def test_a_stalled_holder_lets_its_redis_lease_go_though_its_renewing_thread_runs(settings, redis_url):
    settings.REDIS_URL = redis_url
    settings.HAMIADMIN = {**settings.HAMIADMIN, "CYCLE_LOCK": "redis", "CYCLE_LOCK_LEASE_SECONDS": LEASE}
    locks.redis_client().delete(locks.REDIS_LOCK_KEY)
    cluster_with_waiting_pods()
    worker = start_worker(
        "--once",
        HAMI_FAULT_COMMIT_PAUSE_SECONDS=120,
        HAMI_CYCLE_LOCK="redis",
        HAMI_CYCLE_LOCK_LEASE_SECONDS=LEASE,
        REDIS_URL=redis_url,
    )
    try:
        wait_for_line(worker, "commit paused", 60)
        paused = time.monotonic()  # the main thread sleeps; the renewing thread would go on
        with locks.cycle_lock() as held:
            assert not held, "the paused worker holds the lease"
        timeout = settings.HAMIADMIN.get("CYCLE_LOCK_TIMEOUT_SECONDS", 3.0)
        took = seconds_until_held(paused, LEASE + timeout + 10)
        print(f"redis: a stalled holder lost the lease {took:.2f} s after it stalled (lease {LEASE} s)")
        assert took < LEASE + timeout + 2.0
    finally:
        stop(worker)
        locks.redis_client().delete(locks.REDIS_LOCK_KEY)


def test_a_holder_whose_loop_renews_keeps_the_lock_past_its_lease(settings, require_postgres):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "CYCLE_LOCK": "advisory", "CYCLE_LOCK_LEASE_SECONDS": 0.6}
    taken, done = threading.Event(), threading.Event()
    renewed = []

    def holder():
        from django.db import connection

        try:
            with locks.cycle_lock() as held:
                assert held
                taken.set()
                end = time.monotonic() + 2.0
                while time.monotonic() < end:
                    renewed.append(held.renew())
                    time.sleep(0.1)
            done.set()
        finally:
            connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    assert taken.wait(10)
    refused = 0
    while not done.is_set():
        with locks.cycle_lock() as held:
            if held:
                break
            refused += 1
        time.sleep(0.1)
    thread.join(10)
    assert done.is_set(), "a holder renewing from its loop lost the lock to a caller"
    assert refused >= 10 and all(renewed)


def test_a_commit_gives_up_on_a_row_held_elsewhere_and_the_next_cycle_places(settings, require_postgres):
    from scheduling.pipeline.flight import run_cycle

    settings.HAMIADMIN = {**settings.HAMIADMIN, "COMMIT_LOCK_TIMEOUT_MS": 300}
    cluster_with_waiting_pods(2)
    with pod_row_held("p0"):
        started = time.monotonic()
        report = run_cycle("held row")
        waited = time.monotonic() - started
        assert report.more and not report.placed and waited < 2.0, (report, waited)
        assert Allocation.objects.count() == 0 and not Pod.objects.filter(status=Pod.SCHEDULED).exists()
    assert len(run_cycle("row free").placed) == 2
    assert_consistent()
