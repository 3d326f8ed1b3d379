"""A viewer cannot make the web tier unresponsive: 8 worst-case simulations posted at once to a
live server (pytest-django's `live_server`, a real HTTP server, a thread per request) while
`/healthz` and an agent report keep answering within 1 s each (issue 29).

Worst case: the work estimate is made to let the issue's scenario through (one node of 120
linked cards, 8 pods asking 16 under topology-aware: minutes of combination search), as if
the estimate were wrong. What then bounds it is the run itself: one simulation at a time per
process (the others 503 at once), stopped after HAMI_SIMULATE_SYNC_SECONDS (413)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from scheduling.api.tokens import issue_agent_token, issue_role_token

from .conftest import report_body, t4
from .test_simulate import issue_scenario, limits

pytestmark = pytest.mark.django_db(transaction=True)


def call(url: str, token: str, body: dict | None = None, timeout: float = 60) -> tuple[int, float, str]:
    """(status, seconds, body) of one request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    request.add_header("Authorization", f"Token {token}")
    request.add_header("Content-Type", "application/json")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, time.monotonic() - started, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, time.monotonic() - started, error.read().decode()


def test_eight_worst_case_simulations_at_once_leave_healthz_and_agent_reports_answering(
    live_server, settings
):
    limits(settings, SIMULATE_SYNC_MAX_WORK=10**12, SIMULATE_MAX_WORK=10**12, SIMULATE_SYNC_SECONDS=3)
    viewer = issue_role_token("load-viewer", "viewer")
    agent = issue_agent_token("node1")
    report = report_body("node1", t4("GPU-1-0", 0), t4("GPU-1-1", 1))
    scenario = issue_scenario()
    answers: list[tuple[int, float, str]] = []

    def post() -> None:
        answers.append(call(f"{live_server.url}/api/v1/simulate/", viewer, scenario))

    for url, body in (
        (f"{live_server.url}/healthz", None),
        (f"{live_server.url}/api/v1/agents/report/", report),
    ):
        assert call(url, agent, body)[0] == 200  # warm: the first request of a process pays imports
    posters = [threading.Thread(target=post) for _ in range(8)]
    for poster in posters:
        poster.start()
    time.sleep(0.3)  # the simulations have arrived and one runs
    probes: list[tuple[str, int, float]] = []
    while any(poster.is_alive() for poster in posters) or len(probes) < 4:
        status, seconds, _ = call(f"{live_server.url}/healthz", viewer, timeout=5)
        probes.append(("healthz", status, seconds))
        status, seconds, body = call(f"{live_server.url}/api/v1/agents/report/", agent, report, timeout=5)
        probes.append(("agent report", status, seconds))
        time.sleep(0.1)
    for poster in posters:
        poster.join()

    assert all(status == 200 for _, status, _ in probes), probes
    slowest = max(seconds for _, _, seconds in probes)
    print(
        f"{len(probes)} probes, slowest {slowest * 1000:.0f} ms; simulations: {sorted(a[0] for a in answers)}"
    )
    assert slowest < 1.0, f"slowest probe {slowest:.2f}s: {probes}"
    statuses = sorted(status for status, _, _ in answers)
    assert set(statuses) <= {413, 503} and 413 in statuses, answers
    assert max(seconds for _, seconds, _ in answers) < 3 + 2  # none held a thread past its bound
    stopped = next(body for status, _, body in answers if status == 413)
    assert "HAMI_SIMULATE_SYNC_SECONDS" in stopped
    busy = [body for status, _, body in answers if status == 503]
    assert all("HAMI_SIMULATE_SYNC_CONCURRENCY" in body for body in busy)
