"""`manage.py simulate FILE --format table`: a line per pod for people (pod, status, node,
cards, why it waits), coloured on a terminal only and never with NO_COLOR; JSON stays the
default."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduling.engine.scenario import read_scenario_file, run_scenario

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "small-cluster.yaml"
ESCAPE = "\033["


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def table_rows(text: str) -> dict[str, str]:
    """The table's pod lines, by pod."""
    return {line.split()[0]: line for line in text.splitlines()[1:] if line.startswith("default/")}


def test_the_table_has_a_line_per_pod_with_its_node_cards_and_why(capsys):
    call_command("simulate", str(EXAMPLE), "--format", "table")
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["POD", "STATUS", "NODE", "CARDS", "VERDICT", "WHY"]
    rows = table_rows(out)
    assert list(rows) == [
        "default/infer",
        "default/notebook",
        "default/bench",
        "default/train",
        "default/sixteen-gpus",
        "default/bad-weights",
    ]
    assert rows["default/infer"].split()[1:5] == ["scheduled", "t4-node", "GPU-T4-0", "3000MiB"]
    assert "GPU-A100-1 16000MiB, GPU-A100-0 16000MiB" in rows["default/train"]
    bench = rows["default/bench"]
    assert bench.split()[1:4] == ["pending", "-", "-"]
    # what blocks usable cards comes before the cards the pod excluded itself
    assert "ExclusiveDeviceAllocateConflict 2, CardTypeMismatch 2" in bench
    assert "t4-node: mutex: every card has tenants" in bench
    assert "never fits here" in rows["default/sixteen-gpus"]
    assert "rejected" in rows["default/bad-weights"]
    assert "hami.io/device-scoring-weights" in rows["default/bad-weights"]
    assert "6 pods: 3 scheduled, 2 pending, 1 rejected" in out
    assert ESCAPE not in out  # captured output is no terminal


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    terminal = Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    call_command("simulate", str(EXAMPLE), "--format", "table")
    assert f"{ESCAPE}32mscheduled" in terminal.getvalue()
    assert f"{ESCAPE}33mpending" in terminal.getvalue()
    assert f"{ESCAPE}31mrejected" in terminal.getvalue()

    monkeypatch.setenv("NO_COLOR", "1")
    plain = Terminal()
    monkeypatch.setattr("sys.stdout", plain)
    call_command("simulate", str(EXAMPLE), "--format", "table")
    assert ESCAPE not in plain.getvalue()
    assert table_rows(plain.getvalue()).keys() == table_rows(terminal.getvalue()).keys()


def test_json_stays_the_default(capsys):
    call_command("simulate", str(EXAMPLE))
    assert json.loads(capsys.readouterr().out) == json.loads(
        json.dumps(run_scenario(read_scenario_file(EXAMPLE)))
    )


def test_a_batch_scenario_lists_its_groups_and_queues_after_the_pods(tmp_path, capsys):
    ask = {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}}
    scenario = {
        "queues": [{"name": "research"}],
        "groups": [{"name": "train", "min_member": 3, "queue": "research"}],
        "nodes": [
            {"name": "n1", "devices": [{"uuid": "G0", "memory": 16000}, {"uuid": "G1", "memory": 16000}]}
        ],
        "pods": [
            {
                "name": f"w{i}",
                "annotations": {"hami.io/group-name": "train"},
                "containers": [{"name": "m", "resources": ask}],
            }
            for i in range(2)
        ],
    }
    path = tmp_path / "gang.json"
    path.write_text(json.dumps(scenario))
    call_command("simulate", str(path), "--format", "table")
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert all(row.split()[1] == "pending" for row in rows.values()), out
    assert "NotEnoughPods" in rows["default/w0"]
    assert "group default/train: 0/3 placed; NotEnoughPods" in out
    assert "queue research: used vgpus 0" in out


def test_an_unknown_format_is_refused():
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("simulate", str(EXAMPLE), "--format", "yaml")


def test_the_table_names_each_waiting_pods_verdict_class_and_deciding_fact(capsys):
    call_command("simulate", str(EXAMPLE), "--format", "table")
    rows = table_rows(capsys.readouterr().out)
    assert rows["default/infer"].split()[-1] == "-"  # placed: no verdict, no why
    sixteen = rows["default/sixteen-gpus"]
    assert sixteen.split()[4] == "never"
    assert "Never fits here: 16 cards asked > the most on one node (2)" in sixteen
    assert rows["default/bench"].split()[4] == "capacity"
    assert rows["default/bad-weights"].split()[4] == "invalid"
