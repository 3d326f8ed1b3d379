"""A release never waits for a scheduling commit's card locks (issue 29, PostgreSQL).

The commit is a real worker process paused inside it (the test-only hook) after it locked the
card it places on. Before the owed decrements, `complete/` of another pod on that card waited
for the card's row lock (`SELECT ... FROM scheduling_card ... FOR NO KEY UPDATE`, seen in
`pg_locks`) and was answered 503 after HAMI_DB_WEB_LOCK_TIMEOUT_MS (500 ms). Now it answers at
once, its decrement owed; the next cycle settles it, moves the capacity version, and the pod
waiting for that room is woken and placed.
"""

from __future__ import annotations

import time

import pytest

from scheduling.models import Allocation, Card, Pod
from scheduling.pipeline.consistency import counter_drift
from scheduling.pipeline.flight import run_requested_cycles
from tests.api.conftest import client_for, gpu_pod, report_body, t4  # noqa: F401 (a fixture)

from .conftest import assert_consistent, start_worker, stop
from .test_fault import wait_for_line

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BOUND = 0.5  # HAMI_DB_WEB_LOCK_TIMEOUT_MS


def used_memory(uuid: str) -> int:
    return Card.objects.get(uuid=uuid).used_memory


def test_complete_beside_a_commit_holding_its_card_answers_at_once_and_the_room_is_used(
    client_for,  # noqa: F811
    settings,
    require_postgres,
):
    # only a wake can make the waiting pod due again: its back-off outlasts the test
    settings.HAMIADMIN = {**settings.HAMIADMIN, "BACKOFF_BASE_SECONDS": 600, "BACKOFF_MAX_SECONDS": 600}
    operator = client_for("operator")
    report = client_for("agent:node1").post(
        "/api/v1/agents/report/", report_body("node1", t4("GPU-1-0", 0)), format="json"
    )
    assert report.status_code == 200, report.content
    assert operator.post("/api/v1/pods/", gpu_pod("placed", mem=8000), format="json").status_code == 201
    run_requested_cycles("place the first")
    assert Pod.objects.get(name="placed").status == Pod.SCHEDULED
    assert operator.post("/api/v1/pods/", gpu_pod("waiting", mem=10000), format="json").status_code == 201
    run_requested_cycles("the card is too full for it")
    waiting = Pod.objects.get(name="waiting")
    assert waiting.status == Pod.PENDING and waiting.next_attempt_at is not None

    assert operator.post("/api/v1/pods/", gpu_pod("p0", mem=1000), format="json").status_code == 201
    worker = start_worker("--once", HAMI_FAULT_COMMIT_PAUSE_SECONDS=4)  # places p0 on GPU-1-0
    try:
        wait_for_line(worker, "commit paused", 60)
        started = time.monotonic()
        answer = operator.post("/api/v1/pods/default/placed/complete/")
        took = time.monotonic() - started
        assert answer.status_code == 200, answer.content
        assert took < BOUND, f"complete/ beside a commit holding its card took {took:.2f} s"
        print(f"complete/ beside a commit holding its card: {took * 1000:.0f} ms")
        assert Pod.objects.get(name="placed").status == Pod.SUCCEEDED
        (allocation,) = Allocation.objects.filter(pod__name="placed")
        assert (allocation.active, allocation.owed) == (False, True)
        assert used_memory("GPU-1-0") == 8000, "the counters of a held card are left alone"
        assert counter_drift() == [], "an owed decrement is no drift"
        assert worker.wait(30) == 0
    finally:
        stop(worker)

    assert Pod.objects.get(name="p0").status == Pod.SCHEDULED
    assert used_memory("GPU-1-0") == 9000, "the commit added p0 to the counters it locked"
    assert counter_drift() == []
    run_requested_cycles("after the commit")  # settles, moves the version, wakes `waiting`
    assert not Allocation.objects.filter(owed=True).exists()
    assert Pod.objects.get(name="waiting").status == Pod.SCHEDULED
    assert used_memory("GPU-1-0") == 11000
    assert_consistent()
