"""`make run`'s first minutes: the dashboard login printed last and again on request, the
demo's logs in a file, a big synthetic cluster or a scenario's cluster loaded through the
services, and waiting mutex pods that do not pile up."""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from scheduling.management.commands.demo import (
    NAMESPACE,
    POD_KINDS,
    SYNTHETIC_NAMESPACE,
    WAITING_PER_KIND,
    DemoInventory,
    DemoWorkload,
    synthetic_nodes,
)
from scheduling.models import Card, Node, Pod

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "small-cluster.yaml"


@pytest.fixture
def var(settings, tmp_path, monkeypatch):
    """The demo's var/ in a temporary folder, no DEMO_PASSWORD."""
    settings.VAR_DIR = tmp_path
    monkeypatch.delenv("DEMO_PASSWORD", raising=False)
    return tmp_path


def demo(*args) -> list[str]:
    from io import StringIO

    out = StringIO()
    call_command("demo", *args, stdout=out)
    return out.getvalue().splitlines()


def test_a_generated_password_is_printed_last_kept_0600_and_shown_again(var, capsys):
    lines = demo("--load-only", "--no-pods")
    login = lines[-1]
    assert login.startswith("login: admin / ") and "demo --password" in login
    password = login.removeprefix("login: admin / ").split()[0]
    assert get_user_model().objects.get(username="admin").check_password(password)
    kept = var / "demo-login"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert kept.read_text() == f"admin {password}\n"
    assert demo("--password") == [f"login: admin / {password}"]
    # a second start keeps the password and still shows it
    assert demo("--load-only")[-1].startswith(f"login: admin / {password} ")


def test_demo_password_set_is_not_kept_in_a_file(var, monkeypatch):
    demo("--load-only")
    monkeypatch.setenv("DEMO_PASSWORD", "chosen-one")
    assert demo("--load-only")[-1].startswith("login: admin / (DEMO_PASSWORD)")
    assert get_user_model().objects.get(username="admin").check_password("chosen-one")
    assert not (var / "demo-login").exists()
    assert demo("--password") == ["login: admin / (DEMO_PASSWORD)"]


def test_the_password_command_says_why_it_has_nothing_to_show(var, capsys):
    with pytest.raises(SystemExit) as exited:
        call_command("demo", "--password")
    assert exited.value.code == 1
    assert "no demo admin yet" in capsys.readouterr().err
    demo("--load-only")
    admin = get_user_model().objects.get(username="admin")
    admin.set_password("changed-in-the-admin")
    admin.save()
    with pytest.raises(SystemExit) as exited:
        call_command("demo", "--password")
    assert exited.value.code == 1
    assert "changed since the demo set it" in capsys.readouterr().err


def test_the_demo_logs_go_to_var_demo_log_and_the_console_comes_back(var):
    root = logging.getLogger()
    before = list(root.handlers)
    demo("--load-only", "--scenario", str(EXAMPLE))
    log = (var / "demo.log").read_text()
    assert "2 nodes and 5 pods loaded in" in log
    assert "refused: default/bad-weights" in log
    assert root.handlers == before


def test_a_synthetic_cluster_is_loaded_through_the_services(var):
    lines = demo("--load-only", "--nodes", "6", "--pods", "20")
    assert any(line.startswith("6 nodes and 20 pods loaded in") for line in lines), lines
    assert Node.objects.filter(name__startswith="syn-", ready=True).count() == 6
    assert Card.objects.filter(node__name__startswith="syn-").count() == 8 + 8 + 8 + 4 + 8 + 8
    pods = Pod.objects.filter(namespace=SYNTHETIC_NAMESPACE)
    assert pods.count() == 20 and set(pods.values_list("status", flat=True)) == {Pod.PENDING}
    assert {name.rsplit("-", 1)[0] for name in pods.values_list("name", flat=True)} == {
        k[0] for k in POD_KINDS
    }


def test_a_scenario_loads_its_nodes_and_pods(var):
    lines = demo("--load-only", "--scenario", str(EXAMPLE))
    assert lines[0].startswith("refused: default/bad-weights: annotations.hami.io/device-scoring-weights")
    assert set(Node.objects.values_list("name", flat=True)) == {"t4-node", "a100-node"}
    a100 = Card.objects.get(uuid="GPU-A100-1")
    assert (a100.memory, a100.used_memory) == (40960, 0)  # the scenario's `used` is not reported
    assert set(Pod.objects.values_list("name", flat=True)) == {
        "infer",
        "notebook",
        "bench",
        "train",
        "sixteen-gpus",
    }


def test_a_broken_scenario_is_refused_naming_every_problem(var, tmp_path, capsys):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps({"nodes": [{"devices": [{"uuid": "G0"}]}], "pods": [{"name": "p"}]}))
    with pytest.raises(SystemExit) as exited:
        call_command("demo", "--load-only", "--scenario", str(path))
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"demo: {path}: 3 problems",
        "  nodes[0].name: required: a non-empty string",
        "  nodes[0].devices[0].memory: required (MiB)",
        "  pods[0].containers: required: a non-empty list of containers",
    ]
    assert not Node.objects.exists()


@pytest.mark.parametrize(
    "args", [("--pods", "3"), ("--nodes", "0"), ("--nodes", "2", "--scenario", "x.yaml")]
)
def test_flags_that_do_not_go_together_are_refused(var, args, capsys):
    with pytest.raises(SystemExit) as exited:
        call_command("demo", "--load-only", *args)
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("demo: ")


def test_silent_synthetic_nodes_come_back_with_the_heartbeat(var):
    inventory = DemoInventory(nodes=synthetic_nodes(3))
    inventory.report()
    Node.objects.filter(name="syn-0001").update(ready=False, not_ready_reason="no report for 60 s")
    inventory.heartbeat()
    assert Node.objects.filter(name__startswith="syn-", ready=True).count() == 3


def test_waiting_mutex_pods_do_not_pile_up():
    """The trickle passes over a kind that already has WAITING_PER_KIND pods waiting (with no
    node here every pod waits), and submits nothing once every kind has."""
    workload = DemoWorkload()
    submitted = [workload.submit() for _ in range(5 * len(POD_KINDS))]
    assert submitted.count(True) == WAITING_PER_KIND * len(POD_KINDS)
    waiting = Pod.objects.filter(namespace=NAMESPACE, status=Pod.PENDING)
    assert waiting.filter(name__startswith="mutex-v100-").count() == WAITING_PER_KIND
    assert waiting.count() == WAITING_PER_KIND * len(POD_KINDS)


def test_a_placed_kind_is_submitted_again():
    workload = DemoWorkload()
    for _ in range(WAITING_PER_KIND * len(POD_KINDS)):
        workload.submit()
    assert not workload.submit()
    Pod.objects.filter(name__startswith="notebook-").update(status=Pod.RUNNING)
    assert workload.submit()
    assert Pod.objects.filter(name__startswith="notebook-").count() == WAITING_PER_KIND + 1


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").exists(), reason="SIGTERM and the agents' parent-death signal (Linux)")
def test_make_run_prints_the_login_last_and_logs_to_the_file(tmp_path):
    env = {
        **os.environ,
        "HAMIADMIN_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path}/demo.sqlite3",
        "REDIS_URL": "",
    }
    env.pop("DEMO_PASSWORD", None)
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--no-serve", "--scenario", str(EXAMPLE)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "demo-login").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # a few scheduling cycles, which log
    finally:
        demo.send_signal(signal.SIGTERM)
        out, err = demo.communicate(timeout=30)
    lines = out.splitlines()
    assert lines[-1].startswith("login: admin / "), out
    assert lines[-2] == f"logs: {tmp_path / 'demo.log'} (--verbose shows them here)"
    assert err == ""
    assert lines[-3] == "demo cluster: 2 nodes (scenario " + str(EXAMPLE) + ")"
    log = (tmp_path / "demo.log").read_text()
    assert "2 nodes and 5 pods loaded" in log
    assert "pod default/infer scheduled on t4-node" in log
