"""A worker killed inside its commit leaves no partial allocation and loses no pod.

The worker process pauses inside the commit transaction right after writing its
allocation rows (test-only hook HAMI_FAULT_COMMIT_PAUSE_SECONDS) and is SIGKILLed there.
"""

from __future__ import annotations

import select
import time

import pytest
from django.db import connection

from scheduling import services
from scheduling.models import Allocation, Card, Cycle, Decision, Pod
from scheduling.pipeline import run_cycle

from .conftest import assert_consistent, card, start_worker, stop, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def wait_for_line(process, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the worker exited early: {''.join(seen)[-2000:]}{process.stderr.read()[-2000:]}")
        ready, _, _ = select.select([process.stderr], [], [], 0.2)
        if ready:
            line = process.stderr.readline()
            seen.append(line)
            if text in line:
                return
    pytest.fail(f"no {text!r} within {timeout}s: {''.join(seen)[-2000:]}")


def test_a_worker_killed_in_the_middle_of_its_commit_leaves_everything_as_before():
    for n in range(10):
        services.report_inventory(f"node{n}", {}, {}, [card(f"GPU-{n}-0", 0), card(f"GPU-{n}-1", 1)])
    for n in range(30):
        submit(f"p{n:02d}", gpu=1, mem=3000, cores=20)
    held = submit("held", gpu=1, mem=1000)
    run_cycle(limit=1)  # one real placement before the crash, which must survive it
    assert Pod.objects.get(name="p00").status == Pod.SCHEDULED
    before = (
        Allocation.objects.count(),
        list(Card.objects.order_by("pk").values_list("used_slots", "used_memory")),
    )

    worker = start_worker("--once", HAMI_FAULT_COMMIT_PAUSE_SECONDS=120)
    try:
        wait_for_line(worker, "commit paused", 60)
        if connection.vendor == "postgresql":  # its session is inside the open transaction
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND state = 'idle in transaction' AND pid <> pg_backend_pid()"
                )
                assert cursor.fetchone()[0] >= 1
        # The worker has written allocation rows it has not committed; kill it right there.
        worker.kill()
        worker.wait(10)
    finally:
        stop(worker)

    assert (
        Allocation.objects.count(),
        list(Card.objects.order_by("pk").values_list("used_slots", "used_memory")),
    ) == before
    assert Pod.objects.filter(status=Pod.SCHEDULED).count() == 1
    waiting = Pod.objects.exclude(name="p00")
    assert all(pod.status == Pod.PENDING and pod.attempts == 0 for pod in waiting)
    assert Cycle.objects.count() == 1 and Decision.objects.count() == 1
    assert_consistent()

    report = run_cycle()  # the next cycle picks everything up
    assert len(report.placed) == 30 and held.pk in Pod.objects.filter(status=Pod.SCHEDULED).values_list(
        "pk", flat=True
    )
    assert not Pod.objects.filter(status=Pod.PENDING).exists()
    assert_consistent()
