"""A web write never waits long on a scheduling commit (issue 29, PostgreSQL).

The commit is a real worker process paused inside it (the test-only hook), holding the row
locks of the pods it places. Releasing a pod it does not touch answers at once (the release's
capacity-version bump no longer waits on commits); a write to a pod it holds answers 503 with
`Retry-After` after HAMI_DB_WEB_LOCK_TIMEOUT_MS, not after the commit.
"""

from __future__ import annotations

import time

import pytest

from scheduling.models import Pod
from scheduling.pipeline.flight import run_requested_cycles
from tests.pipeline.conftest import start_worker, stop
from tests.pipeline.test_fault import wait_for_line

from .conftest import gpu_pod, report_body, t4

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_stalled_commit_holds_no_web_write_for_longer_than_the_bound(
    client_for, settings, require_postgres
):
    operator = client_for("operator")
    node1 = client_for("agent:node1").post(
        "/api/v1/agents/report/", report_body("node1", t4("GPU-1-0", 0)), format="json"
    )
    assert node1.status_code == 200, node1.content
    assert operator.post("/api/v1/pods/", gpu_pod("placed", mem=15360), format="json").status_code == 201
    run_requested_cycles("place the first")
    assert Pod.objects.get(name="placed").status == Pod.SCHEDULED
    node2 = client_for("agent:node2").post(
        "/api/v1/agents/report/", report_body("node2", t4("GPU-2-0", 0), t4("GPU-2-1", 1)), format="json"
    )
    assert node2.status_code == 200, node2.content
    for n in range(3):  # node1's card is full: these go to node2, in the commit that pauses
        assert operator.post("/api/v1/pods/", gpu_pod(f"p{n}", mem=1000), format="json").status_code == 201

    worker = start_worker("--once", HAMI_FAULT_COMMIT_PAUSE_SECONDS=120)
    try:
        wait_for_line(worker, "commit paused", 60)
        started = time.monotonic()
        answer = operator.delete("/api/v1/pods/default/placed/")
        unrelated = time.monotonic() - started
        assert answer.status_code == 200, answer.content
        assert unrelated < 1.0, f"releasing a pod the commit does not hold took {unrelated:.2f} s"

        started = time.monotonic()
        answer = operator.delete("/api/v1/pods/default/p0/")
        held = time.monotonic() - started
        assert answer.status_code == 503, answer.content
        assert answer["Retry-After"] == "1" and answer.json()["code"] == "lock_timeout"
        assert held < 0.5 + 1.0, f"a write to a pod the commit holds waited {held:.2f} s"
        print(
            f"release beside a stalled commit {unrelated * 1000:.0f} ms; a held row answered 503 in {held * 1000:.0f} ms"
        )
        assert Pod.objects.get(name="p0").status == Pod.PENDING, "the refused write wrote nothing"
    finally:
        stop(worker)
