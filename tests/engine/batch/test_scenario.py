"""Scenarios with queues and groups: decided as jobs, with per-group and per-queue results."""

from __future__ import annotations

import pytest

from scheduling.engine.batch.scenario import run_batch_scenario, wants_batch
from scheduling.engine.errors import ScenarioError
from scheduling.engine.scenario import parse_scenario

from ..builders import ask, card, container, node


def scenario(**extra) -> dict:
    gang = {"hami.io/group-name": "train"}
    return {
        "nodes": [node("n1", card("GPU-0", 8000, slots=1), card("GPU-1", 8000, slots=1))],
        "pods": [
            {"name": f"w{i}", "annotations": gang, "containers": [container(limits=ask(gpu=1, mem=4000))]}
            for i in range(3)
        ]
        + [
            {
                "name": "solo",
                "annotations": {"hami.io/queue": "q"},
                "containers": [container(limits=ask(gpu=1, mem=4000))],
            }
        ],
        **extra,
    }


def run(raw: dict) -> dict:
    cluster, config, pods = parse_scenario(raw)
    return run_batch_scenario(raw, cluster, config, pods)


def test_a_gang_bigger_than_the_cluster_places_nothing_and_a_single_pod_backfills():
    raw = scenario(groups=[{"name": "train", "min_member": 3}], queues=[{"name": "q"}])
    assert wants_batch(raw)
    out = run(raw)
    statuses = {p["name"]: p["status"] for p in out["pods"]}
    assert statuses == {"w0": "pending", "w1": "pending", "w2": "pending", "solo": "scheduled"}
    assert out["pods"][0]["batch"]["reason"] == "GangUnschedulable"
    (group,) = out["groups"]
    assert group == {
        "name": "default/train",
        "min_member": 3,
        "members": 3,
        "placed": 0,
        "verdict": group["verdict"],
        "scheduled": False,
    }
    assert group["verdict"].startswith("GangUnschedulable: gang default/train: 2/3 members placeable")
    q = next(q for q in out["queues"] if q["name"] == "q")
    assert q["used"] == {"vgpus": 1, "gpumem": 4000, "gpucores": 0}


def test_a_gang_of_min_two_is_placed_and_the_queue_limit_holds_the_rest():
    raw = scenario(
        groups=[{"name": "train", "min_member": 2}], queues=[{"name": "q", "limit": {"gpumem": 1000}}]
    )
    raw["nodes"][0]["devices"] += [card("GPU-2", 8000, slots=1), card("GPU-3", 8000, slots=1)]
    out = run(raw)
    statuses = {p["name"]: p["status"] for p in out["pods"]}
    assert statuses["w0"] == statuses["w1"] == "scheduled"
    assert out["groups"][0]["scheduled"] is True
    solo = out["pods"][3]
    assert solo["batch"]["message"] == "queue q: gpumem 0 + 4000 > limit 1000 MiB"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"queues": {"name": "q"}}, "queues"),
        ({"queues": [{"name": ""}]}, "queues[0].name"),
        ({"queues": [{"name": "q", "weight": 0}]}, "queues[0].weight"),
        ({"queues": [{"name": "q", "limit": {"gpus": 1}}]}, "queues[0].limit.gpus"),
        ({"queues": [{"name": "q", "parent": "nope"}]}, "queues[0].parent"),
        ({"groups": [{"name": "g", "min_member": 0}]}, "groups[0].min_member"),
    ],
)
def test_a_bad_queue_or_group_names_its_field(extra, field):
    with pytest.raises(ScenarioError) as caught:
        run(scenario(**extra))
    assert caught.value.where == field


def test_the_simulate_command_prints_groups_and_queues(tmp_path, capsys):
    import json

    from django.core.management import call_command

    path = tmp_path / "gangs.json"
    path.write_text(json.dumps(scenario(groups=[{"name": "train", "min_member": 3}], queues=[{"name": "q"}])))
    call_command("simulate", str(path), "--indent", "2")
    out = json.loads(capsys.readouterr().out)
    assert [p["status"] for p in out["pods"]] == ["pending", "pending", "pending", "scheduled"]
    assert out["groups"][0]["scheduled"] is False
    assert {q["name"] for q in out["queues"]} == {"default", "q"}


def test_a_scenario_keeps_an_idle_guarantee_unless_the_queue_lends_it():
    pods = [
        {
            "name": f"p{i}",
            "annotations": {"hami.io/queue": "a"},
            "containers": [container(limits=ask(gpu=1, mem=8000))],
        }
        for i in range(2)
    ]
    raw = {
        "nodes": [node("n1", card("GPU-0", 8000, slots=1), card("GPU-1", 8000, slots=1))],
        "pods": pods,
        "queues": [{"name": "a"}, {"name": "b", "guarantee": {"vgpus": 1}}],
    }
    out = run(raw)
    assert [p["status"] for p in out["pods"]] == ["scheduled", "pending"]
    assert out["pods"][1]["batch"]["reason"] == "QueueLimitExceeded"
    raw["queues"][1]["lend_guarantee"] = True
    assert [p["status"] for p in run(raw)["pods"]] == ["scheduled", "scheduled"]
    raw["queues"][1]["lend_guarantee"] = "yes"
    with pytest.raises(ScenarioError) as caught:
        run(raw)
    assert "queues[1].lend_guarantee" in str(caught.value)


def test_a_groups_subgroups_hold_each_part_to_its_minimum():
    """Two cards, a ps that fits nowhere and two workers: min_member 2 alone places the
    workers; with subgroups {ps: 1, worker: 1} nothing starts. A bad minimum is named."""
    task = "volcano.sh/task-spec"
    gang = {"hami.io/group-name": "tf"}
    raw = {
        "nodes": [node("n1", card("GPU-0", 8000, slots=1), card("GPU-1", 8000, slots=1))],
        "pods": [
            {
                "name": "ps",
                "annotations": {**gang, task: "ps"},
                "containers": [container(limits=ask(gpu=1, mem=64000))],
            }
        ]
        + [
            {
                "name": f"w{i}",
                "annotations": {**gang, task: "worker"},
                "containers": [container(limits=ask(gpu=1, mem=4000))],
            }
            for i in range(2)
        ],
        "groups": [{"name": "tf", "min_member": 2}],
    }
    assert run(raw)["groups"][0]["placed"] == 2
    raw["groups"][0]["subgroups"] = {"ps": 1, "worker": 1}
    (group,) = run(raw)["groups"]
    assert (group["placed"], group["scheduled"]) == (0, False)
    assert group["verdict"].startswith("GangUnschedulable: gang default/tf: subgroup ps: 0/1 placeable")
    raw["groups"][0]["subgroups"] = {"ps": "one"}
    with pytest.raises(ScenarioError) as caught:
        run(raw)
    assert caught.value.where == "groups[0].subgroups.ps"
