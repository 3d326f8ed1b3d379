"""The NVML agent's logs: JSON lines with LOG_FORMAT=json or in production, no token, no Django."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "agent-token-must-not-be-logged"


def closed_port() -> int:
    """A port nothing listens on: bound, then released."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_briefly(env: dict) -> tuple[int, str]:
    """Reports the demo T4 node to a closed port for about a second, then SIGTERM.
    The log settings are only those of `env`."""
    inherited = {
        key: value for key, value in os.environ.items() if key not in ("LOG_FORMAT", "HAMIADMIN_ENV")
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agents.nvml",
            "--simulate",
            str(ROOT / "deploy/demo/gpu-t4.yaml"),
            "--api",
            f"http://127.0.0.1:{closed_port()}",
            "--interval",
            "0.1",
        ],
        cwd=ROOT,
        env={**inherited, "PYTHONPATH": str(ROOT), "HAMIADMIN_AGENT_TOKEN": TOKEN, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    return process.returncode, stderr


@pytest.mark.parametrize(
    "env", [{"LOG_FORMAT": "json"}, {"HAMIADMIN_ENV": "production"}], ids=["LOG_FORMAT=json", "production"]
)
def test_every_log_line_is_a_json_object_without_the_token(env):
    code, stderr = run_briefly(env)

    assert code == 0, stderr
    lines = stderr.splitlines()
    entries = [json.loads(line) for line in lines]
    assert {"level", "logger", "message"} <= set(entries[0])
    assert entries[0]["logger"] == "hamiadmin.agent"
    assert entries[0]["message"].startswith("reporting node t4-node to http://127.0.0.1:")
    assert any(
        entry["logger"] == "hamiadmin.agent.reporter" and entry["level"] == "WARNING" for entry in entries
    )
    assert entries[-1]["message"] == "stopped"
    assert TOKEN not in stderr


def test_plain_lines_stay_the_default():
    code, stderr = run_briefly({})

    assert code == 0, stderr
    assert stderr.splitlines()[0].startswith("hamiadmin-agent: INFO: reporting node t4-node to ")
    assert TOKEN not in stderr


def test_the_agent_imports_no_django():
    """It runs on GPU nodes from the same image but needs nothing of the web application."""
    probe = "import sys, agents.nvml.__main__; print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'celery'}))"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
