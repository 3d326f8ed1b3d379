"""`python manage.py simulate FILE` end to end, in a subprocess: the example stories, `--top`,
YAML by extension, and exit status 2 with one line for a file that cannot be read."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .builders import ask, card, node, pod, scenario

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "static" / "scheduling" / "examples"  # the seed stories, as the Simulator page offers them


def simulate(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "simulate", str(path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def simulated(path: Path, *args: str) -> dict[str, dict]:
    """The output pods by name; the command must succeed."""
    done = simulate(path, *args)
    assert done.returncode == 0, done.stderr
    return {p["name"]: p for p in json.loads(done.stdout)["pods"]}


def example(name: str) -> Path:
    path = EXAMPLES / name
    if not path.is_file():
        pytest.skip(f"example {path} is not in this checkout")
    return path


def cards_of(out: dict) -> list[str]:
    return [d["uuid"] for c in out["containers"] for d in c["devices"]]


# -- the stories of examples/README.md ---------------------------------------------------------


def test_story1_node_binpack_puts_both_pods_on_node1():
    pods = simulated(example("story1-node-binpack.json"))
    assert (pods["pod1"]["node"], pods["pod2"]["node"]) == ("node1", "node1")


def test_story2_node_spread_puts_pod2_on_node2():
    pods = simulated(example("story2-node-spread.json"))
    assert (pods["pod1"]["node"], pods["pod2"]["node"]) == ("node1", "node2")


def test_story3_gpu_binpack_shares_one_card():
    pods = simulated(example("story3-gpu-binpack.json"))
    assert cards_of(pods["pod1"]) == cards_of(pods["pod2"]) == ["node1-gpu0"]


def test_story4_gpu_spread_uses_two_cards():
    pods = simulated(example("story4-gpu-spread.json"))
    assert cards_of(pods["pod1"]) == ["node1-gpu0"]
    assert cards_of(pods["pod2"]) == ["node1-gpu1"]


def test_chain_walk_through_mutex_binpack_then_plain_binpack():
    pods = simulated(example("chain-mutex-binpack-t4.json"))
    latency, plain = pods["latency-tier"], pods["plain-binpack"]
    assert cards_of(latency) == ["GPU-2"]
    rows = {row["uuid"]: row for row in latency["containers"][0]["cards"]}
    assert rows["GPU-0"]["reason"] == rows["GPU-1"]["reason"] == "ExclusiveDeviceAllocateConflict"
    assert rows["GPU-2"]["score"] == pytest.approx(rows["GPU-3"]["score"], abs=1e-3)
    assert latency["allocated"] == "GPU-2,NVIDIA,1000,0:;"
    assert cards_of(plain) == ["GPU-0"]


def test_top_keeps_k_node_scores_and_complete_counts():
    pods = simulated(example("story1-node-binpack.json"), "--top", "1")
    for out in pods.values():
        assert len(out["node_scores"]) == 1
        assert out["nodes_fit"] == 2
    assert list(pods["pod2"]["node_scores"]) == ["node1"]


# -- input forms and exit status ------------------------------------------------------------


def small_scenario() -> dict:
    return scenario(
        [node("n1", card("G0"))],
        [pod("fits", None, ask(gpu=1, mem=1000)), pod("waits", None, ask(gpu=2, mem=1000))],
    )


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_yaml_is_accepted_by_extension(tmp_path, suffix):
    path = tmp_path / f"scenario{suffix}"
    path.write_text(yaml.safe_dump(small_scenario()))
    pods = simulated(path)
    assert pods["fits"]["status"] == "scheduled"
    assert pods["waits"]["status"] == "pending"  # pending pods are not errors: exit 0


@pytest.mark.parametrize(
    "name, text, where",
    [
        ("bad.json", '{"nodes": [], "pods": [}', "line 1"),
        ("bad.yaml", "nodes: [\n  - name: n1\npods: {", "line"),
        ("missing.json", None, "cannot read"),
        ("no-pods.json", '{"nodes": []}', "pods"),
        (
            "bad-card.yaml",
            "nodes:\n  - name: n1\n    devices:\n      - memory: 100\npods: []\n",
            "nodes[0].devices[0].uuid",
        ),
    ],
)
def test_unreadable_file_exits_2_with_one_line_saying_where(tmp_path, name, text, where):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    done = simulate(path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert name in lines[0]
    assert where in lines[0]


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.json")))
def test_the_command_decides_every_example_as_the_simulator_page_does(name):
    """`manage.py simulate` and `run_scenario` (the API's and the page's path) give the same
    pods for every shipped example (k8s-volumes.json: a volume taken by one pod is not
    counted on by the next)."""
    from scheduling.engine.scenario import read_scenario_file, run_scenario

    path = EXAMPLES / name
    expected = {p["name"]: p for p in run_scenario(read_scenario_file(path))["pods"]}
    got = simulated(path)
    for pods in (expected, got):
        for p in pods.values():
            p.pop("duration_ms", None)
    assert got == expected


def test_a_misspelt_key_annotation_and_resource_exit_2_naming_all_three(tmp_path):
    path = tmp_path / "typos.json"
    typos = {"name": "p", "tpye": "T4", "annotatons": {}}
    typos["containers"] = [{"name": "c", "resources": {"limits": {"nvidia.com/gpumemory": 3000}}}]
    path.write_text(
        json.dumps({"nodes": [{"name": "n1", "devices": [{"uuid": "A", "memory": 8000}]}], "pods": [typos]})
    )
    done = simulate(path)
    assert done.returncode == 2 and done.stdout == ""
    for where in (
        "pods[0].tpye",
        "pods[0].annotatons",
        "pods[0].containers[0].resources.limits.nvidia.com/gpumemory",
    ):
        assert where in done.stderr
    assert "did you mean nvidia.com/gpumem?" in done.stderr
