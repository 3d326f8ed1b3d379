"""``python -m agents.nvml``: ``--once``, missing NVML, ``--simulate`` and the demo node files."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from agents.nvml.__main__ import main
from agents.nvml.simulation import NodeFileError, load_node_file, measured
from tests.agents.nvml_standin import T4_UUIDS, StandinNvml, pcie_t4

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "deploy" / "demo"
NO_NVML_LINE = "hamiadmin-agent: NVML is not available (driver not loaded?): "


def agent(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agents.nvml", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def sysfs(tmp_path):
    device = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:b0:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    return tmp_path / "sys"


#: What the stand-in's idle T4 measures: no memory in use, no ECC errors (the other sensors are not offered).
IDLE_T4 = {"memory": 0, "ecc_errors": 0}


def t4(index: int, numa: int, links: dict[int, int], **changes) -> dict:
    card = {
        "uuid": T4_UUIDS[index],
        "index": index,
        "type": "NVIDIA-Tesla T4",
        "slots": 10,
        "memory": 15360,
        "cores": 100,
        "numa": numa,
        "health": True,
        "links": {T4_UUIDS[other]: score for other, score in links.items()},
        "observed": IDLE_T4,
    }
    return {**card, **changes}


def test_once_prints_the_report_of_this_node(capsys, monkeypatch, sysfs):
    monkeypatch.setenv("NODE_NAME", "t4-node")

    code = main(["--once"], library=pcie_t4(), sysfs_root=str(sysfs))

    assert code == 0
    assert json.loads(capsys.readouterr().out) == {
        "node": "t4-node",
        "labels": {},
        "annotations": {},
        "devices": [
            t4(0, 0, {1: 50, 2: 10, 3: 10}),
            t4(1, 0, {0: 50, 2: 10, 3: 10}),
            t4(2, 1, {0: 10, 1: 10, 3: 50}),
            t4(3, 1, {0: 10, 1: 10, 2: 50}),
        ],
    }


def test_once_applies_config_file_and_flags(capsys, sysfs, tmp_path):
    config = tmp_path / "node.yaml"
    config.write_text(
        f"split_count: 5\nmemory_scaling: 0.5\nexclude: [{T4_UUIDS[0]}]\nlabels: {{gpu: 'on'}}\n"
    )

    code = main(
        ["--once", "--node", "edge-1", "--config", str(config), "--core-scaling", "0.5", "--exclude", "3"],
        library=pcie_t4(),
        sysfs_root=str(sysfs),
    )

    assert code == 0
    assert json.loads(capsys.readouterr().out) == {
        "node": "edge-1",
        "labels": {"gpu": "on"},
        "annotations": {},
        "devices": [
            t4(1, 0, {2: 10}, slots=5, memory=7680, cores=50),
            t4(2, 1, {1: 10}, slots=5, memory=7680, cores=50),
        ],
    }


def test_a_bad_config_exits_2_naming_the_field(capsys, tmp_path):
    config = tmp_path / "node.yaml"
    config.write_text("split_count: 0\n")

    code = main(["--once", "--config", str(config)], library=pcie_t4())

    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err == f"hamiadmin-agent: {config}: split_count: expected a whole number >= 1, got 0\n"


def test_a_driver_that_is_not_loaded_gives_one_line_and_exit_3(capsys):
    machine = StandinNvml(pcie_t4().cards, init_error=pynvml.NVMLError_DriverNotLoaded)

    code = main(["--once"], library=machine)

    captured = capsys.readouterr()
    assert code == 3 and captured.out == ""
    assert captured.err == NO_NVML_LINE + "Driver Not Loaded\n"


def test_nvml_unable_to_count_the_cards_exits_3(capsys):
    machine = pcie_t4()
    machine.nvmlDeviceGetCount = lambda: (_ for _ in ()).throw(pynvml.NVMLError_Unknown())

    code = main(["--once"], library=machine)

    assert code == 3
    assert capsys.readouterr().err == "hamiadmin-agent: NVML cannot count the cards: Unknown Error\n"


def nvml_loadable() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(
    nvml_loadable(), reason="this machine has an NVIDIA driver; the no-driver path cannot be seen"
)
def test_on_a_machine_without_the_nvidia_library_the_real_pynvml_path_gives_one_line():
    result = agent("--once")

    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr == NO_NVML_LINE + "NVML Shared Library Not Found\n"


def test_without_the_pynvml_package_the_agent_gives_one_line(tmp_path):
    (tmp_path / "pynvml.py").write_text("raise ImportError('pynvml is not installed in this image')\n")

    result = agent("--once", env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})

    assert result.returncode == 3
    assert result.stderr == NO_NVML_LINE + "cannot import pynvml: pynvml is not installed in this image\n"


def test_simulate_once_prints_the_described_node_without_nvml(tmp_path):
    (tmp_path / "pynvml.py").write_text("raise ImportError('no NVML here')\n")

    result = agent(
        "--simulate", str(DEMO / "gpu-t4.yaml"), "--once", env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    )

    assert result.returncode == 0, result.stderr
    uuids = [f"GPU-t4-{index}" for index in range(4)]

    def card(index, numa, links):
        return {
            "uuid": uuids[index],
            "index": index,
            "type": "NVIDIA-Tesla T4",
            "slots": 10,
            "memory": 15360,
            "cores": 100,
            "numa": numa,
            "health": True,
            "links": {uuids[other]: score for other, score in links.items()},
        }

    body = json.loads(result.stdout)
    observed = [card.pop("observed") for card in body["devices"]]
    assert body == {
        "node": "t4-node",
        "labels": {"gpu": "on"},
        "annotations": {},
        "devices": [
            card(0, 0, {1: 50, 2: 10, 3: 10}),
            card(1, 0, {0: 50, 2: 10, 3: 10}),
            card(2, 1, {0: 10, 1: 10, 3: 50}),
            card(3, 1, {0: 10, 1: 10, 2: 50}),
        ],
    }
    assert [seen["memory"] for seen in observed] == [450, 420, 400, 6500]  # as the file writes them
    assert all(set(seen) == {"memory", "utilization", "temperature", "power"} for seen in observed)


def test_simulate_fills_spec_9_defaults_and_one_sided_links(tmp_path, capsys):
    node = tmp_path / "node.json"
    node.write_text(
        json.dumps(
            {
                "name": "tiny",
                "devices": [
                    {"uuid": "GPU-x", "memory": 1000, "links": {"GPU-y": 200, "GPU-z": 0}},
                    {"uuid": "GPU-y", "memory": 2000, "health": False},
                    {"uuid": "GPU-z", "memory": 3000, "mode": "hami-core"},
                ],
            }
        )
    )

    assert main(["--simulate", str(node), "--once", "--node", "renamed"]) == 0

    defaults = {"type": "NVIDIA", "slots": 10, "cores": 100, "numa": 0}
    assert json.loads(capsys.readouterr().out) == {
        "node": "renamed",
        "labels": {},
        "annotations": {},
        "devices": [
            {
                "uuid": "GPU-x",
                "index": 0,
                **defaults,
                "memory": 1000,
                "health": True,
                "links": {"GPU-y": 200},
            },
            {
                "uuid": "GPU-y",
                "index": 1,
                **defaults,
                "memory": 2000,
                "health": False,
                "links": {"GPU-x": 200},
            },
            {
                "uuid": "GPU-z",
                "index": 2,
                **defaults,
                "memory": 3000,
                "health": True,
                "links": {},
                "mode": "hami-core",
            },
        ],
    }


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"devices": []}, "name: required"),
        ({"name": "n"}, "devices: required, a list of cards"),
        ({"name": "n", "devices": [{"uuid": "GPU-a"}]}, "devices[0].memory: required"),
        ({"name": "n", "devices": [{"memory": 1}]}, "devices[0].uuid: required"),
        (
            {"name": "n", "devices": [{"uuid": "a", "memory": -1}]},
            "devices[0].memory: expected a whole number >= 0",
        ),
        (
            {"name": "n", "devices": [{"uuid": "a", "memory": 1, "colour": "red"}]},
            "devices[0].colour: unknown field",
        ),
        (
            {"name": "n", "devices": [{"uuid": "a", "memory": 1}, {"uuid": "a", "memory": 1}]},
            "devices[1].uuid: 'a' appears twice",
        ),
        (
            {"name": "n", "devices": [{"uuid": "a", "memory": 1, "links": {"b": 100}}]},
            "devices[0].links.b: not another card",
        ),
        (
            {
                "name": "n",
                "devices": [
                    {"uuid": "a", "memory": 1, "links": {"b": 100}},
                    {"uuid": "b", "memory": 1, "links": {"a": 200}},
                ],
            },
            "devices[0].links.b: 100 here but 200 on b",
        ),
        (
            {"name": "n", "devices": [{"uuid": "a", "memory": 1, "health": "yes"}]},
            "devices[0].health: expected true or false",
        ),
    ],
)
def test_a_malformed_node_file_names_where(tmp_path, document, message):
    path = tmp_path / "node.yaml"
    path.write_text(json.dumps(document))

    with pytest.raises(NodeFileError) as raised:
        load_node_file(path)

    assert str(raised.value).startswith(f"{path}: ") and message in str(raised.value)


def test_a_malformed_node_file_exits_2(tmp_path, capsys):
    path = tmp_path / "node.yaml"
    path.write_text("name: n\ndevices: [{uuid: a}]\n")

    assert main(["--simulate", str(path), "--once"]) == 2
    assert capsys.readouterr().err == f"hamiadmin-agent: {path}: devices[0].memory: required (MiB)\n"


def test_simulate_refuses_config_flags_that_would_be_ignored():
    with pytest.raises(SystemExit) as raised:
        main(["--simulate", str(DEMO / "gpu-t4.yaml"), "--once", "--split-count", "4"])

    assert raised.value.code == 2


def test_reporting_needs_an_api_and_a_token(monkeypatch):
    monkeypatch.delenv("HAMIADMIN_AGENT_TOKEN", raising=False)
    for argv in (
        ["--simulate", str(DEMO / "gpu-t4.yaml")],
        ["--api", "http://h", "--simulate", str(DEMO / "gpu-t4.yaml")],
    ):
        with pytest.raises(SystemExit) as raised:
            main(argv)
        assert raised.value.code == 2


@pytest.mark.parametrize(
    ("name", "node", "model", "memory", "numa", "scores"),
    [
        (
            "gpu-a100.yaml",
            "a100-node",
            "NVIDIA-A100-SXM4-40GB",
            40960,
            [0, 0, 1, 1],
            {(i, j): 1200 for i in range(4) for j in range(4) if i != j},
        ),
        (
            "gpu-t4.yaml",
            "t4-node",
            "NVIDIA-Tesla T4",
            15360,
            [0, 0, 1, 1],
            {(i, j): 50 if i // 2 == j // 2 else 10 for i in range(4) for j in range(4) if i != j},
        ),
        (
            "gpu-v100.yaml",
            "v100-node",
            "NVIDIA-Tesla V100-SXM2-16GB",
            16384,
            [0, 0],
            {(0, 1): 200, (1, 0): 200},
        ),
    ],
)
def test_demo_node_files(name, node, model, memory, numa, scores):
    body = load_node_file(DEMO / name)

    cards = body["devices"]
    assert body["node"] == node
    assert [card["index"] for card in cards] == list(range(len(numa)))
    assert [card["numa"] for card in cards] == numa
    assert {
        (card["type"], card["memory"], card["slots"], card["cores"], card["health"]) for card in cards
    } == {(model, memory, 10, 100, True)}
    uuids = [card["uuid"] for card in cards]
    assert {
        (i, uuids.index(other)): score
        for i, card in enumerate(cards)
        for other, score in card["links"].items()
    } == scores


def test_simulated_measurements_sway_around_the_file_within_the_accepted_ranges(tmp_path):
    """A card's `observed` is the centre: busy, temperature and power move with time and stay
    in range (100% busy at most), memory in use stays as written; a card without `observed`
    reports none."""
    node = tmp_path / "node.yaml"
    node.write_text(
        "name: n\ndevices:\n"
        "  - {uuid: GPU-a, memory: 16000, observed: {memory: 6500, utilization: 95, temperature: 60, power: 40}}\n"
        "  - {uuid: GPU-b, memory: 16000}\n"
    )
    body = load_node_file(node)
    readings = [measured(body, float(t))["devices"] for t in range(0, 300, 15)]
    busy = [cards[0]["observed"]["utilization"] for cards in readings]
    assert len(set(busy)) > 3 and max(busy) == 100 and min(busy) < 95
    assert {cards[0]["observed"]["memory"] for cards in readings} == {6500}
    assert all(54 <= cards[0]["observed"]["temperature"] <= 66 for cards in readings)
    assert all("observed" not in cards[1] for cards in readings)
    assert body["devices"][0]["observed"]["utilization"] == 95  # the file's body is not changed


@pytest.mark.parametrize(
    ("observed", "message"),
    [
        ("{temp: 50}", "devices[0].observed.temp: unknown"),
        (
            "{utilization: 150}",
            "devices[0].observed.utilization: expected a whole number from 0 to 100, got 150",
        ),
        ("[1]", "devices[0].observed: expected a mapping"),
    ],
)
def test_simulated_measurements_are_checked_naming_the_field(tmp_path, observed, message):
    node = tmp_path / "node.yaml"
    node.write_text(f"name: n\ndevices:\n  - {{uuid: GPU-a, memory: 16000, observed: {observed}}}\n")
    with pytest.raises(NodeFileError, match=re.escape(message)):
        load_node_file(node)
