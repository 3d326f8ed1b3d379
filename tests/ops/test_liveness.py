"""`python -m scheduling.ops.liveness`: exit 0 while the heartbeat file is fresh, 1 when stale or
missing; and the probes of the rendered manifests call it as it accepts."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from scheduling.ops import liveness
from tests.deploy.manifests import find, render_overlay
from tests.pipeline.conftest import REPO


def probe(*args: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scheduling.ops.liveness", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_a_fresh_file_passes_a_stale_or_missing_one_fails(tmp_path):
    beat = tmp_path / "beat"
    result = probe("beat", "--max-age", "60", HAMI_BEAT_HEARTBEAT_FILE=str(beat))
    assert result.returncode == 1 and "does not exist" in result.stdout

    liveness.touch(beat)
    result = probe("beat", "--max-age", "60", HAMI_BEAT_HEARTBEAT_FILE=str(beat))
    assert result.returncode == 0, result.stdout

    two_minutes_ago = time.time() - 120
    os.utime(beat, (two_minutes_ago, two_minutes_ago))
    result = probe("beat", "--max-age", "60", HAMI_BEAT_HEARTBEAT_FILE=str(beat))
    assert result.returncode == 1 and "more than 60s" in result.stdout
    assert probe("beat", "--max-age", "180", HAMI_BEAT_HEARTBEAT_FILE=str(beat)).returncode == 0


def test_each_role_reads_its_own_file(tmp_path, monkeypatch):
    worker, beat = tmp_path / "worker", tmp_path / "beat"
    monkeypatch.setenv("HAMI_WORKER_HEARTBEAT_FILE", str(worker))
    monkeypatch.setenv("HAMI_BEAT_HEARTBEAT_FILE", str(beat))
    liveness.touch(worker)
    assert liveness.main(["worker", "--max-age", "60"]) == 0
    assert liveness.main(["beat", "--max-age", "60"]) == 1
    assert liveness.main(["beat", "--max-age", "60", "--file", str(worker)]) == 0


def test_defaults_and_bad_flags(monkeypatch):
    monkeypatch.delenv("HAMI_WORKER_HEARTBEAT_FILE", raising=False)
    assert str(liveness.heartbeat_file("worker")) == "/tmp/hamiadmin-worker-heartbeat"
    assert str(liveness.heartbeat_file("beat")) == "/tmp/hamiadmin-beat-heartbeat"
    assert liveness.main(["nobody"]) == liveness.EXIT_USAGE
    assert liveness.main(["worker", "--max-age", "0"]) == liveness.EXIT_USAGE


@pytest.mark.parametrize(("deployment", "role"), [("hamiadmin-worker", "worker"), ("hamiadmin-beat", "beat")])
def test_the_manifests_probe_worker_and_beat_with_this_command(deployment, role, tmp_path, monkeypatch):
    """The exec probe as rendered runs here: fresh file 0, stale file 1."""
    objects = render_overlay("production")
    (container,) = find(objects, "Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    command = container["livenessProbe"]["exec"]["command"]
    assert command[:4] == ["python", "-m", "scheduling.ops.liveness", role]
    heartbeat = tmp_path / role
    monkeypatch.setenv(liveness.ROLES[role][0], str(heartbeat))
    liveness.touch(heartbeat)
    assert liveness.main(command[3:]) == 0
    old = time.time() - 3600
    os.utime(heartbeat, (old, old))
    assert liveness.main(command[3:]) == 1
    max_age = float(command[command.index("--max-age") + 1])
    period = container["livenessProbe"]["periodSeconds"]
    assert max_age >= 3 * 10 and period <= max_age  # several heartbeats (every 10 s) fit in the window
