"""`POST simulate/`: the engine's simulate output for a posted scenario; errors say where."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from scheduling.engine.scenario import run_scenario
from scheduling.models import Card, Node, Pod

pytestmark = pytest.mark.django_db

_ROOT = Path(__file__).resolve().parents[2]
# The shared examples beside the checkout, else the copy the Simulator page offers.
EXAMPLES = sorted((_ROOT.parent / "shared" / "examples").glob("*.json")) or sorted(
    (_ROOT / "static" / "scheduling" / "examples").glob("*.json")
)
SCENARIO = {
    "config": {"node_scheduler_policy": "spread", "gpu_scheduler_policy": "binpack"},
    "nodes": [
        {"name": "node1", "devices": [{"uuid": "A0", "memory": 8000}, {"uuid": "A1", "memory": 8000}]},
        {"name": "node2", "devices": [{"uuid": "B0", "memory": 8000, "used": {"slots": 1, "memory": 5000}}]},
    ],
    "pods": [
        {"name": "p1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpumem": 2000}}}]},
        {"name": "p2", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 3}}}]},
        {"name": "p3", "annotations": {"hami.io/device-scoring-weights": "slot=1"},
         "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    ],
}


def simulate(client, body, query=""):
    return client.post(f"/api/v1/simulate/{query}", body, format="json")


def test_answer_is_the_engines_output_and_nothing_is_written(viewer):
    answer = simulate(viewer, SCENARIO)
    assert answer.status_code == 200, answer.content
    assert answer.json() == json.loads(json.dumps(run_scenario(copy.deepcopy(SCENARIO))))
    assert [p["status"] for p in answer.json()["pods"]] == ["scheduled", "pending", "rejected"]
    assert (Node.objects.count(), Card.objects.count(), Pod.objects.count()) == (0, 0, 0)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_shared_examples_match_the_engine(viewer, path):
    scenario = json.loads(path.read_text())
    assert simulate(viewer, scenario).json() == json.loads(json.dumps(run_scenario(copy.deepcopy(scenario))))


def test_top_keeps_k_entries(viewer):
    pods = simulate(viewer, SCENARIO, "?top=1").json()["pods"]
    assert len(pods[0]["node_scores"]) == 1 and pods[0]["nodes_fit"] == 2
    assert simulate(viewer, SCENARIO, "?top=0").status_code == 400
    assert "top" in simulate(viewer, SCENARIO, "?top=x").json()


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda s: s.pop("nodes"), "nodes"),
        (lambda s: s.update(pods={}), "pods"),
        (lambda s: s["nodes"][1].pop("name"), "nodes[1].name"),
        (lambda s: s["nodes"][0]["devices"][1].pop("uuid"), "nodes[0].devices[1].uuid"),
        (lambda s: s["nodes"][0]["devices"][1].pop("memory"), "nodes[0].devices[1].memory"),
        (lambda s: s["nodes"][0]["devices"][1].update(uuid="B0"), "nodes[1].devices"),
        (lambda s: s["nodes"][1]["devices"][0]["used"].update(memory=-1), "nodes[1].devices[0].used.memory"),
        (lambda s: s["config"].update(node_scheduler_policy="random"), "config.node_scheduler_policy"),
        (lambda s: s["pods"][0].pop("containers"), "pods[0].containers"),
    ],
)
def test_malformed_scenario_is_400_keyed_by_where(viewer, change, where):
    scenario = copy.deepcopy(SCENARIO)
    change(scenario)
    answer = simulate(viewer, scenario)
    assert answer.status_code == 400, answer.content
    assert where in answer.json(), answer.json()


def test_scenario_that_is_not_an_object_is_400(viewer):
    answer = simulate(viewer, [1, 2])
    assert answer.status_code == 400 and answer.json() == {"non_field_errors": [
        "a scenario must be an object with nodes and pods"]}  # fmt: skip


def test_request_size_is_bounded(viewer, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    big = copy.deepcopy(SCENARIO)
    big["nodes"] += [{"name": f"n{i}", "devices": [{"uuid": f"X{i}", "memory": 1}]} for i in range(100)]
    assert simulate(viewer, big).status_code == 413
