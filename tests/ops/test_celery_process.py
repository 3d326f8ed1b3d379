"""Celery processes: a real worker serves its metrics on HAMI_METRICS_PORT and keeps its
heartbeat file fresh; a real beat touches its own. Both run with the embedded filesystem
broker in a temporary folder, so no Redis is needed; the worker runs on the test database.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from types import SimpleNamespace

import pytest

from scheduling.models import Pod
from scheduling.ops import celery_process, liveness, metrics
from tests.pipeline.conftest import REPO, card, submit, worker_env

from .conftest import free_port, parse, value


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def wait_for(predicate, timeout: float, process: subprocess.Popen, what: str):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if process.poll() is not None:
            pytest.fail(
                f"the process exited with {process.returncode} before {what}:\n{process.stderr.read()}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout}s: {what}")
        time.sleep(0.05)


def scrape_port(port: int):
    try:
        return parse(get(f"http://127.0.0.1:{port}/metrics"))
    except OSError:
        return None


def celery(args: list[str], tmp_path, **env) -> subprocess.Popen:
    """A Celery process on the embedded broker (folders under tmp_path) and the test database."""
    for folder in ("broker/queue", "broker/processed"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "hamiadmin", *args],
        cwd=REPO,
        env=worker_env(HAMIADMIN_VAR_DIR=tmp_path, LOG_FORMAT="json", **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


@pytest.mark.django_db(transaction=True)
def test_a_prefork_worker_serves_the_metrics_of_the_cycles_its_child_ran(tmp_path):
    from scheduling import services

    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, slots=4)])
    submit("p1", gpu=1, mem=1000)
    submit("p2", gpu=1, mem=1000)
    submit("huge", gpu=1, mem=100000)
    port, heartbeat = free_port(), tmp_path / "worker-heartbeat"
    worker = celery(
        [
            "worker",
            "--pool=prefork",
            "--concurrency=1",
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
        ],
        tmp_path,
        HAMI_METRICS_PORT=port,
        HAMI_WORKER_HEARTBEAT_FILE=heartbeat,
        HAMI_WORKER_HEARTBEAT_SECONDS=0.2,
    )
    try:
        # The starting worker runs one cycle (worker_ready): its child places the pods.
        wait_for(lambda: Pod.objects.filter(status=Pod.SCHEDULED).count() == 2, 60, worker, "pods placed")
        samples = wait_for(lambda: scrape_port(port), 10, worker, "metrics served")
        attempts = "hamiadmin_scheduling_attempts_total"
        wait_for(
            lambda: value(scrape_port(port) or {}, attempts, outcome="scheduled", reason="none") == 2,
            10,
            worker,
            "the counters of the cycle",
        )
        samples = scrape_port(port)
        assert value(samples, attempts, outcome="pending", reason="CardInsufficientMemory") == 1
        assert value(samples, "hamiadmin_cycle_duration_seconds_count") >= 1
        assert value(samples, "hamiadmin_decision_duration_seconds_count", outcome="scheduled") == 2
        assert not any(name.startswith("hamiadmin_card_") for name, _ in samples)  # state is web's alone

        wait_for(heartbeat.exists, 30, worker, "the heartbeat file")
        first = heartbeat.stat().st_mtime
        wait_for(lambda: heartbeat.stat().st_mtime > first, 10, worker, "a second heartbeat")
        assert liveness.main(["worker", "--max-age", "5", "--file", str(heartbeat)]) == 0
    finally:
        stop(worker)
    time.sleep(1.2)
    assert liveness.main(["worker", "--max-age", "1", "--file", str(heartbeat)]) == 1  # stopped: goes stale


def test_beat_touches_its_heartbeat_file_on_each_tick(tmp_path):
    heartbeat = tmp_path / "beat-heartbeat"
    beat = celery(
        ["beat", "--loglevel=INFO", "--schedule", str(tmp_path / "schedule")],
        tmp_path,
        HAMI_BEAT_HEARTBEAT_FILE=heartbeat,
        HAMI_SAFETY_CYCLE_SECONDS=1,
    )
    try:
        wait_for(heartbeat.exists, 30, beat, "the beat heartbeat file")
        first = heartbeat.stat().st_mtime
        # ticks at least every SAFETY_CYCLE_SECONDS (1 s here); touches at most once a second
        wait_for(lambda: heartbeat.stat().st_mtime > first, 12, beat, "a later tick")
        assert liveness.main(["beat", "--max-age", "10", "--file", str(heartbeat)]) == 0
    finally:
        stop(beat)


# --- the metrics port, in this process -----------------------------------------------


@pytest.fixture
def fresh_process(monkeypatch):
    """serve_from_env remembers the port it serves per process: forget it for each test."""
    monkeypatch.setattr(metrics, "_served", {})


def test_no_port_no_server(monkeypatch, fresh_process):
    monkeypatch.delenv("HAMI_METRICS_PORT", raising=False)
    assert metrics.serve_from_env() is None
    monkeypatch.setenv("HAMI_METRICS_PORT", "")
    assert metrics.serve_from_env() is None
    monkeypatch.setenv("HAMI_METRICS_PORT", "nine")
    assert metrics.serve_from_env() is None  # logged; the worker keeps working


def test_a_taken_port_is_logged_not_fatal(monkeypatch, fresh_process, caplog):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        monkeypatch.setenv("HAMI_METRICS_PORT", str(taken.getsockname()[1]))
        assert celery_process.serve_pool_process_metrics() is None
        assert metrics._served == {}
    assert "metrics not served" in caplog.text


def test_the_pool_process_signal_serves_this_process_metrics_once(monkeypatch, fresh_process):
    port = free_port()
    monkeypatch.setenv("HAMI_METRICS_PORT", str(port))
    monkeypatch.setenv("HAMI_METRICS_ADDR", "127.0.0.1")
    celery_process.serve_pool_process_metrics(sender="celery@test")
    assert metrics._served == {os.getpid(): port}
    metrics.SCHEDULING_ATTEMPTS.labels("scheduled", "none").inc(0)
    samples = parse(get(f"http://127.0.0.1:{port}/metrics"))
    assert (
        "hamiadmin_scheduling_attempts_total",
        frozenset({("outcome", "scheduled"), ("reason", "none")}),
    ) in samples
    celery_process.serve_worker_metrics(
        sender=SimpleNamespace(pool_cls="threads")
    )  # same process: no second server
    assert metrics._served == {os.getpid(): port}


@pytest.mark.parametrize(
    ("pool", "serves"), [("prefork", False), ("solo", False), ("threads", True), ("gevent", True)]
)
def test_worker_init_serves_only_where_tasks_run_in_the_worker_itself(
    pool, serves, monkeypatch, fresh_process
):
    """prefork: the children serve (worker_process_init); solo sends worker_process_init itself."""
    port = free_port()
    monkeypatch.setenv("HAMI_METRICS_PORT", str(port))
    monkeypatch.setenv("HAMI_METRICS_ADDR", "127.0.0.1")
    celery_process.serve_worker_metrics(sender=SimpleNamespace(pool_cls=pool))
    assert (metrics._served == {os.getpid(): port}) is serves
