"""`manage.py simulate FILE` starts without Django (issue 29: Django's set-up alone was ~0.7
CPU-s, more than the numpy lower bound at 1,000 nodes) and answers byte for byte as the Django
command does (`--settings` sends it there); a batch scenario still reads the server's
preemption options, and only it sets Django up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .batch.test_simulate_live import tenant, world

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "static" / "scheduling" / "examples" / "story3-gpu-binpack.json"
DJANGO = ("--settings", "hamiadmin.settings")  # an option the fast path leaves to Django


def simulate(*args: str, env: dict | None = None, importtime: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, *(["-X", "importtime"] if importtime else []), "manage.py", "simulate", *args]
    return subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120
    )


def imported(stderr: str) -> set[str]:
    """The modules `-X importtime` reports."""
    return {
        line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")
    }


def test_a_scenario_file_is_decided_without_importing_django():
    answer = simulate(str(EXAMPLE), "--top", "3", importtime=True)
    assert answer.returncode == 0, answer.stderr[-2000:]
    assert json.loads(answer.stdout)["pods"]
    assert not {
        name for name in imported(answer.stderr) if name.split(".")[0] in ("django", "rest_framework")
    }


@pytest.mark.parametrize("args", [("--top", "3", "--indent", "0"), ("--format", "table"), ()])
def test_the_fast_path_prints_what_the_django_command_prints(args):
    fast, django = simulate(str(EXAMPLE), *args), simulate(str(EXAMPLE), *args, *DJANGO)
    assert fast.returncode == django.returncode == 0, (fast.stderr, django.stderr)
    assert fast.stdout == django.stdout


def test_a_malformed_file_exits_2_saying_where_on_both_paths(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"nodes": [{"devices": []}], "pods": []}))
    fast, django = simulate(str(bad)), simulate(str(bad), *DJANGO)
    assert fast.returncode == django.returncode == 2
    assert fast.stderr == django.stderr and "nodes[0].name" in fast.stderr


def test_a_batch_scenario_reads_the_servers_preemption_setting(tmp_path):
    path = tmp_path / "batch.json"
    scenario = world(
        [tenant("low-a", "n1-g0", priority=0), tenant("low-b", "n1-g1", priority=0)],
        [{"name": "high", "priority": 100, "containers": tenant("x", "n1-g0")["containers"]}],
    )
    path.write_text(json.dumps(scenario))
    answers = {}
    for preemption in ("true", "false"):
        fast = simulate(str(path), "--indent", "0", env={"HAMI_PREEMPTION": preemption})
        django = simulate(str(path), "--indent", "0", *DJANGO, env={"HAMI_PREEMPTION": preemption})
        assert fast.returncode == 0, fast.stderr[-2000:]
        assert fast.stdout == django.stdout
        answers[preemption] = json.loads(fast.stdout)
    assert answers["true"]["evictions"] and not answers["false"].get("evictions")
