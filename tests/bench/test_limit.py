"""bench.limit, the numpy lower bound `make bench` compares `simulate` with: it must do the
real work (every pod decided, every card checked, placements applied, the scenario's policies
honoured), or the ratio it prints means nothing; and it must not do needless work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.engine import synthetic_nodes, synthetic_pods, time_simulate
from bench.limit import Unmodelled, decide_all
from scheduling.engine.scenario import parse_scenario
from scheduling.engine.scheduler import Scheduler

ROOT = Path(__file__).resolve().parents[2]


def card(uuid: str, memory: int = 10000, **extra) -> dict:
    return {"uuid": uuid, "memory": memory, **extra}


def pod(name: str, annotations: dict | None = None, **limits) -> dict:
    limits = {f"nvidia.com/{key}": value for key, value in limits.items()}
    return {
        "name": name,
        "annotations": annotations or {},
        "containers": [{"name": "main", "resources": {"limits": limits}}],
    }


def test_placements_are_applied_so_later_pods_see_them():
    raw = {"nodes": [{"name": "a", "devices": [card("A0", 10000)]}]}
    pods = [pod(f"p{i}", gpu=1, gpumem=4000) for i in range(3)]
    answers = decide_all(raw, pods, top=10)
    assert [a["status"] for a in answers] == ["scheduled", "scheduled", "pending"]
    assert [a["nodes_fit"] for a in answers] == [1, 1, 0]


@pytest.mark.parametrize(
    "device, ask, annotations",
    [
        (card("X", health=False), {"gpu": 1, "gpumem": 500}, None),  # check 1
        (card("X", type="NVIDIA-Tesla T4"), {"gpu": 1, "gpumem": 500}, {"nvidia.com/use-gputype": "A100"}),
        (card("X", slots=2, used={"slots": 2, "memory": 0, "cores": 0}), {"gpu": 1, "gpumem": 500}, None),
        (
            card("X", used={"slots": 1, "memory": 100, "cores": 0}),
            {"gpu": 1, "gpumem": 500},
            {"hami.io/gpu-scheduler-policy": "mutex"},
        ),
        (card("X", 1000), {"gpu": 1, "gpumem": 1500}, None),  # check 7
        (
            card("X", used={"slots": 1, "memory": 0, "cores": 90}),
            {"gpu": 1, "gpumem": 500, "gpucores": 20},
            None,
        ),
        (card("X", used={"slots": 1, "memory": 0, "cores": 0}), {"gpu": 1}, None),  # whole card, has tenants
        (
            card("X", used={"slots": 1, "memory": 0, "cores": 100}),
            {"gpu": 1, "gpumem": 500},
            None,
        ),  # check 10
        (card("X"), {"gpu": 2, "gpumem": 500}, None),  # fewer cards than asked
    ],
)
def test_each_check_keeps_the_pod_off_the_card(device, ask, annotations):
    raw = {"nodes": [{"name": "a", "devices": [device]}]}
    answer = decide_all(raw, [pod("p", annotations, **ask)], top=10)[0]
    assert answer["status"] == "pending" and answer["nodes_fit"] == 0


def test_binpack_node_policy_takes_the_fuller_node_and_the_pod_can_ask_spread():
    raw = {
        "config": {"node_scheduler_policy": "binpack"},
        "nodes": [
            {"name": "empty", "devices": [card("E0")]},
            {"name": "busy", "devices": [card("B0", used={"slots": 1, "memory": 4000, "cores": 0})]},
        ],
    }
    spread = {"hami.io/node-scheduler-policy": "spread"}
    first, second = decide_all(
        raw, [pod("p", gpu=1, gpumem=1000), pod("q", spread, gpu=1, gpumem=1000)], top=10
    )
    assert first["node"] == "busy" and list(first["node_scores"]) == ["busy", "empty"]
    assert second["node"] == "empty"


def test_the_incremental_path_answers_as_a_full_pass_per_pod_does():
    raw = {"nodes": synthetic_nodes(40), "pods": synthetic_pods(400)}
    assert decide_all(raw, raw["pods"], top=10) == decide_all(raw, raw["pods"], top=10, cache=False)


def test_it_decides_as_the_engine_does_where_card_choice_is_binpack_or_spread():
    """Without NUMA and topology sort keys (which it leaves out), every pod lands where the
    engine puts it, on the same cards, with the same node count and best nodes."""
    pods = [
        p
        for p in synthetic_pods(600)
        if not any(
            key in p["annotations"].get("hami.io/gpu-scheduler-policy", "") for key in ("numa", "topology")
        )
    ]
    raw = {"nodes": synthetic_nodes(30), "pods": pods}
    cluster, config, specs = parse_scenario(json.loads(json.dumps(raw)))
    scheduler = Scheduler(cluster, config)
    engine = [scheduler.schedule(spec).as_dict(top=10) for spec in specs]
    bound = decide_all(raw, pods, top=10)
    assert {a["status"] for a in bound} == {"scheduled", "pending"}
    for mine, theirs in zip(bound, engine, strict=True):
        assert (mine["name"], mine["status"], mine["node"], mine["nodes_fit"]) == (
            theirs["name"],
            theirs["status"],
            theirs["node"],
            theirs["nodes_fit"],
        )
        if mine["status"] == "scheduled":
            taken = [int(d["uuid"].rsplit("-", 1)[1]) for c in theirs["containers"] for d in c["devices"]]
            assert sorted(mine["cards"]) == sorted(taken)
            assert list(mine["node_scores"]) == list(theirs["node_scores"])


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda raw: raw["nodes"][0].update(ready=False), "nodes[0].ready"),
        (
            lambda raw: raw["pods"][0]["annotations"].update({"nvidia.com/numa-bind": "true"}),
            "pods[0].annotations",
        ),
        (
            lambda raw: raw["pods"][0]["containers"].append(raw["pods"][0]["containers"][0]),
            "pods[0].containers",
        ),
    ],
)
def test_what_it_does_not_model_is_refused_naming_the_field(change, field):
    raw = {"nodes": [{"name": "a", "devices": [card("A0")]}], "pods": [pod("p", gpu=1, gpumem=100)]}
    change(raw)
    with pytest.raises(Unmodelled, match=field.replace("[", r"\[").replace("]", r"\]")):
        decide_all(raw, raw["pods"], top=10)


def test_the_command_refuses_with_status_2(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps({"nodes": [{"name": "a", "ready": False, "devices": [card("A0")]}], "pods": []})
    )
    done = subprocess.run(
        [sys.executable, "-m", "bench.limit", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "nodes[0].ready" in done.stderr


def test_make_bench_times_both_on_the_same_file_and_counts_what_each_decided():
    result = time_simulate(nodes=20, pods=60)
    assert set(result["walls"]) == {"simulate", "bound"} and all(w > 0 for w in result["walls"].values())
    for counts in result["counts"].values():
        assert sum(counts.values()) == 60
