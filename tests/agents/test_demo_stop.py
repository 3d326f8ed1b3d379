"""`make run`'s demo: however it is stopped, its simulated NVML agents stop with it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agents_of(pid: int) -> list[int]:
    """The demo's agent processes: children running `agents.nvml`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid and "agents.nvml" in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@contextlib.contextmanager
def demo_with_agents(tmp_path, command: list[str]):
    """The demo started by `command` (then `demo --port P --no-pods`) on its own SQLite file,
    once its simulated agents run: (the process, the agents' pids). Killed after, if alive."""
    env = {
        **os.environ,
        "HAMIADMIN_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path}/demo.sqlite3",
        "REDIS_URL": "",
        "DEMO_PASSWORD": "not-shown",
    }
    demo = subprocess.Popen(
        [sys.executable, *command, "demo", "--port", str(free_port()), "--no-pods"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while len(agents_of(demo.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        agents = agents_of(demo.pid)
        assert len(agents) >= 3, "the demo started no agents"
        yield demo, agents
    finally:
        if demo.poll() is None:
            demo.kill()


def outliving(agents: list[int]) -> list[int]:
    """The agents still alive 15 s on (none, once the kernel's parent-death signal ended them)."""
    deadline = time.monotonic() + 15
    while any(alive(pid) for pid in agents) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [pid for pid in agents if alive(pid)]


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_the_demo_agents_stop_when_the_demo_is_stopped(tmp_path, how):
    with demo_with_agents(tmp_path, ["manage.py"]) as (demo, agents):
        demo.send_signal(how)
        demo.wait(timeout=30)
        assert not outliving(agents), f"agents outlived the demo ({how.name})"


#: Run the demo with its scheduler loop's stop stuck for good and a 3-second stop grace.
STUCK_DEMO = """
import os, sys, threading
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hamiadmin.settings")
import django
django.setup()
from django.core.management import execute_from_command_line
from scheduling.management.commands import demo
from scheduling.pipeline.loop import SchedulerLoop
demo.STOP_GRACE = 3.0
SchedulerLoop.stop = lambda self, timeout=10: threading.Event().wait()
execute_from_command_line(["manage.py", *sys.argv[1:]])
"""


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc (Linux)")
def test_a_demo_whose_stop_hangs_exits_anyway_and_logs_where(tmp_path):
    with demo_with_agents(tmp_path, ["-c", STUCK_DEMO]) as (demo, agents):
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=30) == 1
        assert not outliving(agents), "agents outlived the stuck demo"
        log = (tmp_path / "demo.log").read_text()
        assert "Timeout (0:00:03)!" in log and "in <lambda>" in log, log[-2000:]
