"""`python -m kube` as a process: kubeconfig, the Lease, syncing, a clean SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from scheduling.models import Pod

from .conftest import pod_object, wait_until

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)


def database_url() -> str:
    """The test database as a DATABASE_URL for the agent process."""
    conf = connection.settings_dict
    if conf["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{Path(conf['NAME']).resolve()}"
    auth = quote(conf["USER"] or "") + (":" + quote(conf["PASSWORD"]) if conf.get("PASSWORD") else "")
    return f"postgres://{auth}@{conf.get('HOST') or '127.0.0.1'}:{conf.get('PORT') or 5432}/{conf['NAME']}"


def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: standin, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: tester, user: {token: test-token}}]\n"
        "contexts: [{name: standin, context: {cluster: standin, user: tester}}]\n"
        "current-context: standin\n"
    )
    return path


def agent_process(*args: str, env: dict | None = None) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "PYTHONPATH": str(REPO),
        "REDIS_URL": "",
        **(env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "kube", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_agent_leads_syncs_and_releases_its_lease_on_sigterm(apiserver, tmp_path):
    apiserver.put("pods", pod_object("train", gpu=1, scheduler="gpu-sched"))
    process = agent_process(
        "--kubeconfig",
        str(kubeconfig(tmp_path, apiserver.url)),
        "--scheduler-name",
        "gpu-sched",
        "--namespace",
        "hamiadmin",
        "--lease-name",
        "agent-lease",
        "--identity",
        "replica-1",
        "--watch-timeout",
        "2",
    )
    try:
        wait_until(lambda: Pod.objects.filter(name="train").exists(), timeout=30, what="the agent's sync")
        lease = apiserver.get("leases", "hamiadmin", "agent-lease")
        assert lease["spec"]["holderIdentity"] == "replica-1"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0, stderr
    assert apiserver.get("leases", "hamiadmin", "agent-lease")["spec"]["holderIdentity"] == ""
    assert "released the lease" in stderr


def test_no_usable_configuration_exits_2(tmp_path):
    process = agent_process("--kubeconfig", str(tmp_path / "missing"))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    assert "no usable Kubernetes configuration" in stderr


def test_with_log_format_json_every_line_is_a_json_object_without_the_token(apiserver, tmp_path):
    apiserver.put("pods", pod_object("train", gpu=1, scheduler="gpu-sched"))
    process = agent_process(
        "--kubeconfig",
        str(kubeconfig(tmp_path, apiserver.url)),
        "--scheduler-name",
        "gpu-sched",
        "--namespace",
        "hamiadmin",
        "--identity",
        "replica-1",
        "--watch-timeout",
        "2",
        env={"LOG_FORMAT": "json"},
    )
    try:
        wait_until(lambda: Pod.objects.filter(name="train").exists(), timeout=30, what="the agent's sync")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0, stderr
    entries = [json.loads(line) for line in stderr.splitlines()]
    assert all({"time", "level", "logger", "message"} <= set(entry) for entry in entries)
    assert any(
        entry["logger"] == "hamiadmin.kube" and entry["message"].startswith("kube agent replica-1: ")
        for entry in entries
    )
    assert any("released the lease" in entry["message"] for entry in entries)
    assert "test-token" not in stderr


def test_a_bad_vgpu_monitor_setting_exits_2_naming_it(apiserver, tmp_path):
    process = agent_process(
        "--kubeconfig",
        str(kubeconfig(tmp_path, apiserver.url)),
        env={"HAMI_VGPU_MONITOR": "http://{host}:9394/metrics"},
    )
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    assert "HAMI_VGPU_MONITOR: unknown placeholder {host}" in stderr
