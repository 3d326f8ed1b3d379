"""The report loop against a real HTTP server on 127.0.0.1 that plays the hamiadmin API.

Sleeping is injected (recorded, not waited) so back-off is checked without slowing the suite.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agents.nvml.inventory import InventoryError
from agents.nvml.reporter import ApiReporter, Backoff, TokenError, report_forever, report_url, token_source

BODY = {
    "node": "t4-node",
    "labels": {},
    "annotations": {},
    "devices": [
        {
            "uuid": "GPU-t4-0",
            "index": 0,
            "type": "NVIDIA-Tesla T4",
            "slots": 10,
            "memory": 15360,
            "cores": 100,
            "numa": 0,
            "health": True,
            "links": {},
        }
    ],
}


class FakeApi:
    """Answers POSTs with scripted (status, body, headers) in turn, the last one forever; records requests."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests: list[dict] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                api.requests.append(
                    {
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": json.loads(self.rfile.read(length)),
                    }
                )
                status, text, *extra = api.answers.pop(0) if len(api.answers) > 1 else api.answers[0]
                self.send_response(status)
                for name, value in (extra[0] if extra else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(text.encode())))
                self.end_headers()
                self.wfile.write(text.encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


class Clock:
    """Records the delays asked for and stops the loop after ``sleeps`` of them."""

    def __init__(self, sleeps: int):
        self.delays: list[float] = []
        self.sleeps = sleeps

    def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)

    def stopped(self) -> bool:
        return len(self.delays) >= self.sleeps


def run_loop(reporter, clock, produce=lambda: BODY, interval=15.0, backoff=None):
    report_forever(
        produce,
        reporter,
        interval=interval,
        sleep=clock.sleep,
        stopped=clock.stopped,
        backoff=backoff or Backoff(base=1.0, cap=60.0, rng=random.Random(7)),
    )


def test_503_then_200_backs_off_then_reports_at_the_interval_with_token_and_exact_body():
    with FakeApi([(503, '{"detail": "starting"}'), (200, '{"accepted": 1}')]) as api:
        clock = Clock(sleeps=3)

        run_loop(ApiReporter(api.url + "/", token_source("k3y")), clock)

    assert len(api.requests) == 3
    for request in api.requests:
        assert request["path"] == "/api/v1/agents/report/"
        assert request["headers"]["Authorization"] == "Token k3y"
        assert request["headers"]["Content-Type"] == "application/json"
        assert request["body"] == BODY
    assert 0.5 <= clock.delays[0] <= 1.0
    assert clock.delays[1:] == [15.0, 15.0]


def test_a_403_is_logged_with_the_api_answer_and_not_hammered(caplog):
    answer = '{"detail": "token of node a100-node cannot report t4-node"}'
    with FakeApi([(403, answer)]) as api:
        clock = Clock(sleeps=2)

        with caplog.at_level(logging.ERROR, logger="hamiadmin.agent.reporter"):
            run_loop(ApiReporter(api.url, token_source("k")), clock)

    assert clock.delays == [15.0, 15.0]
    errors = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 2
    assert "HTTP 403" in errors[0] and answer in errors[0]


def test_a_400_names_the_field_the_api_complained_about(caplog):
    with FakeApi([(400, '{"devices": ["0.memory: must be >= 0"]}')]) as api:
        with caplog.at_level(logging.ERROR, logger="hamiadmin.agent.reporter"):
            run_loop(ApiReporter(api.url, token_source("k")), Clock(sleeps=1))

    assert "HTTP 400 (the API found the report malformed)" in caplog.text
    assert "0.memory: must be >= 0" in caplog.text


def test_api_down_backs_off_exponentially_with_jitter_up_to_the_cap():
    with FakeApi([(200, "{}")]) as api:
        url = api.url  # the port is closed once the server stops: connection refused
    clock = Clock(sleeps=9)

    run_loop(ApiReporter(url, token_source("k"), timeout=2), clock, backoff=Backoff(base=1, cap=60))

    ceilings = [1, 2, 4, 8, 16, 32, 60, 60, 60]
    for delay, ceiling in zip(clock.delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling


def test_429_is_retried_with_back_off_like_5xx():
    with FakeApi([(429, "slow down"), (200, "{}")]) as api:
        clock = Clock(sleeps=2)
        run_loop(ApiReporter(api.url, token_source("k")), clock, interval=5)

    assert clock.delays[0] <= 1.0 and clock.delays[1] == 5


def test_a_redirect_is_not_followed_because_it_would_drop_the_post(caplog):
    with FakeApi([(302, "", {"Location": "https://hamiadmin.example/api/v1/agents/report/"})]) as api:
        with caplog.at_level(logging.ERROR, logger="hamiadmin.agent.reporter"):
            run_loop(ApiReporter(api.url, token_source("k")), Clock(sleeps=1))

    assert len(api.requests) == 1
    assert "HTTP 302" in caplog.text and "https://hamiadmin.example" in caplog.text


def test_token_file_is_reread_so_a_rotated_secret_is_used(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("old-token\n")
    with FakeApi([(200, "{}")]) as api:
        reporter = ApiReporter(api.url, token_source(token_file=token_file))
        reporter.send(BODY)
        token_file.write_text("new-token\n")
        reporter.send(BODY)

    assert [r["headers"]["Authorization"] for r in api.requests] == ["Token old-token", "Token new-token"]


def test_a_missing_token_file_is_retried_with_back_off_without_calling_the_api(tmp_path):
    with FakeApi([(200, "{}")]) as api:
        clock = Clock(sleeps=2)
        run_loop(ApiReporter(api.url, token_source(token_file=tmp_path / "absent")), clock)

    assert api.requests == []
    assert clock.delays[0] <= 1.0 and 1.0 <= clock.delays[1] <= 2.0


def test_cards_unreadable_for_a_while_back_off_then_report(caplog):
    attempts = iter([InventoryError("NVML cannot count the cards: Unknown Error")])

    def produce():
        error = next(attempts, None)
        if error:
            raise error
        return BODY

    with FakeApi([(200, "{}")]) as api:
        clock = Clock(sleeps=2)
        with caplog.at_level(logging.ERROR):
            run_loop(ApiReporter(api.url, token_source("k")), clock, produce=produce)

    assert [r["body"] for r in api.requests] == [BODY]
    assert clock.delays[0] <= 1.0 and clock.delays[1] == 15.0
    assert "NVML cannot count the cards" in caplog.text


def test_backoff_bounds():
    backoff = Backoff(base=2, cap=10, rng=random.Random(1))

    delays = [backoff.delay(failures) for failures in range(1, 8)]

    for delay, ceiling in zip(delays, [2, 4, 8, 10, 10, 10, 10], strict=True):
        assert ceiling / 2 <= delay <= ceiling
    assert backoff.delay(5000) <= 10


def test_report_url_and_token_checks():
    assert (
        report_url("http://h:8000") == report_url("http://h:8000/") == "http://h:8000/api/v1/agents/report/"
    )
    with pytest.raises(ValueError, match="--api"):
        report_url("h:8000")
    with pytest.raises(TokenError, match="no API token"):
        token_source("  ")


def test_the_agent_process_reports_a_simulated_node_retries_and_stops_on_sigterm(tmp_path):
    """End to end: ``python -m agents.nvml --simulate`` against the stand-in API, then SIGTERM."""
    root = Path(__file__).resolve().parents[2]
    node = tmp_path / "node.yaml"
    node.write_text("name: sim-node\ndevices: [{uuid: GPU-s0, memory: 1024, links: {}}]\n")
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    expected = {
        "node": "sim-node",
        "labels": {},
        "annotations": {},
        "devices": [
            {
                "uuid": "GPU-s0",
                "index": 0,
                "type": "NVIDIA",
                "slots": 10,
                "memory": 1024,
                "cores": 100,
                "numa": 0,
                "health": True,
                "links": {},
            }
        ],
    }
    with FakeApi([(503, "warming up"), (201, "{}")]) as api:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agents.nvml",
                "--simulate",
                str(node),
                "--api",
                api.url,
                "--token-file",
                str(token),
                "--interval",
                "0.05",
            ],
            cwd=root,
            env={**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"},
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 20
            while len(api.requests) < 3 and time.monotonic() < deadline and process.poll() is None:
                time.sleep(0.02)
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()

    assert process.returncode == 0, stderr
    assert len(api.requests) >= 3
    assert all(r["body"] == expected for r in api.requests)
    assert all(r["headers"]["Authorization"] == "Token s3cret" for r in api.requests)
    assert "API unavailable (HTTP 503" in stderr and "warming up" in stderr
