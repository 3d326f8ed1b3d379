"""`pods/{ns}/{name}/decision/`, `whatif/` and `capacity/`: why a pod waits and what-if on the
live cluster, through the real API. What-if and capacity never write."""

from __future__ import annotations

import json

import pytest
from django.apps import apps
from django.core.management import call_command

from scheduling.pipeline import run_cycle

from .conftest import gpu_pod


def row_counts() -> dict[str, int]:
    """Rows in every table of the app (and auth's), to prove a request wrote nothing."""
    return {
        model._meta.label: model._default_manager.count()
        for model in apps.get_models()
        if model._meta.app_label in ("scheduling", "auth")
    }


def test_a_pending_pod_decision_names_the_closest_nodes_and_what_would_fit(cluster, operator, viewer):
    # 15,360 MiB T4s: the first pod takes 12,000 of GPU-1-0, the second asks 10,000 on one card
    assert operator.post("/api/v1/pods/", gpu_pod("big", mem=15000), format="json").status_code == 201
    assert operator.post("/api/v1/pods/", gpu_pod("huge", mem=90000), format="json").status_code == 201
    run_cycle(trigger="test")
    answer = viewer.get("/api/v1/pods/default/huge/decision/")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["pod"] == "default/huge" and body["outcome"] == "pending"
    assert body["unschedulable"] is True
    assert body["unschedulable_words"] == (
        "gpumem 90,000 MiB exceeds every card (largest 40,960 MiB): never fits here"
    )
    assert body["summary"].startswith("0/2 nodes are available: ")
    assert {close["node"] for close in body["closest_nodes"]} == {"node1", "node2"}
    cards = body["closest_nodes"][0]["cards"]
    assert cards and all(card["reason"] == "CardInsufficientMemory" for card in cards)
    assert all(card["css"] == "capacity" and card["words"] for card in cards)
    assert body["payload"]["closest_nodes"][0]["node"] == body["closest_nodes"][0]["node"]


def test_the_decision_of_a_pod_never_decided_is_empty_and_an_unknown_pod_is_404(operator, viewer, client_for):
    assert operator.post("/api/v1/pods/", gpu_pod("fresh"), format="json").status_code == 201
    body = viewer.get("/api/v1/pods/default/fresh/decision/").json()
    assert (body["decision"], body["closest_nodes"], body["would_fit"]) == (None, [], [])
    assert viewer.get("/api/v1/pods/default/nobody/decision/").status_code == 404
    assert client_for(None).get("/api/v1/pods/default/fresh/decision/").status_code == 401


def test_whatif_decides_against_the_live_snapshot_and_writes_nothing(cluster, operator, viewer):
    assert operator.post("/api/v1/pods/", gpu_pod("queued"), format="json").status_code == 201
    before = row_counts()
    body = {
        "pods": [gpu_pod("a", mem=15000), gpu_pod("b", mem=15000), gpu_pod("c", mem=15000)],
        "edits": {"cordon": ["GPU-2-2"], "add": [{"like": "node1", "count": 1}]},
    }
    answer = viewer.post("/api/v1/whatif/", body, format="json")
    assert answer.status_code == 200, answer.content
    assert row_counts() == before
    decisions = answer.json()["pods"]
    assert answer.json()["snapshot"] == {"nodes": 3, "cards": 7}
    assert [d["payload"]["status"] for d in decisions] == ["scheduled"] * 3
    assert all(d["payload"]["containers"][0]["devices"][0]["uuid"] != "GPU-2-2" for d in decisions)
    assert "node1-whatif-1" in {d["payload"]["node"] for d in decisions}


def test_whatif_explains_a_pod_that_would_wait(cluster, viewer):
    body = {"pods": [gpu_pod("x", mem=15000)], "edits": {"drain": ["node1", "node2"]}}
    (decision,) = viewer.post("/api/v1/whatif/", body, format="json").json()["pods"]
    assert decision["payload"]["status"] == "pending"
    assert decision["closest_nodes"] and decision["closest_nodes"][0]["hint_data"][0]["kind"] == "blocked"
    assert "cordoned" in decision["would_fit"][0]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"pods": []}, "pods"),
        ({"pods": [{"name": "x"}]}, "pods[0].containers"),
        ({"pods": [gpu_pod("x")], "edits": {"cordon": ["GPU-none"]}}, "edits.cordon[0]"),
        ({"pods": [gpu_pod("x")], "edits": {"drain": ["node9"]}}, "edits.drain[0]"),
        ({"pods": [gpu_pod("x")], "extra": 1}, "extra"),
    ],
)
def test_a_bad_whatif_is_a_400_naming_the_field(cluster, viewer, body, field):
    answer = viewer.post("/api/v1/whatif/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json(), answer.json()


def test_a_whatif_with_malformed_kubernetes_fields_names_every_one(cluster, viewer):
    bad = gpu_pod("x", tolerations=[{"key": "k", "effect": "NoRun"}], nodeSelector={"pool": 1})
    answer = viewer.post("/api/v1/whatif/", {"pods": [gpu_pod("ok"), bad]}, format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json() == {
        "pods[1].nodeSelector.pool": ["must be a string, got 1"],
        "pods[1].tolerations[0].effect": ["must be NoSchedule, PreferNoSchedule or NoExecute, not 'NoRun'"],
    }


def test_whatif_needs_a_role(cluster, client_for):
    assert (
        client_for(None).post("/api/v1/whatif/", {"pods": [gpu_pod("x")]}, format="json").status_code == 401
    )


def test_capacity_counts_more_pods_per_node_and_in_all(cluster, viewer):
    before = row_counts()
    answer = viewer.get("/api/v1/capacity/?gpu=1&gpumem=15000")
    assert answer.status_code == 200, answer.content
    # one per T4 (4 of them) and two on the 40,960 MiB A100
    assert answer.json()["total"] == 6 and answer.json()["more"] is False
    assert answer.json()["nodes"] == [{"node": "node1", "pods": 2}, {"node": "node2", "pods": 4}]
    assert row_counts() == before
    none = viewer.get("/api/v1/capacity/?gpu=1&gpumem=90000").json()
    assert none["total"] == 0 and none["reason"].startswith("0/2 nodes") and none["would_fit"]
    assert viewer.get("/api/v1/capacity/?gpu=1&gpumem=15000&limit=2").json() == {
        "total": 2,
        "more": True,
        "nodes": [{"node": "node1", "pods": 2}],
        "reason": None,
        "would_fit": [],
    }


@pytest.mark.parametrize(
    ("query", "field"), [("gpu=0", "gpu"), ("gpumem=lots", "gpumem"), ("limit=99999999", "limit")]
)
def test_a_bad_capacity_ask_is_a_400_naming_the_parameter(cluster, viewer, query, field):
    answer = viewer.get(f"/api/v1/capacity/?{query}")
    assert answer.status_code == 400 and field in answer.json(), answer.content


def test_simulate_live_decides_a_file_against_the_database_and_writes_nothing(cluster, tmp_path, capsys):
    path = tmp_path / "whatif.yaml"
    path.write_text(
        "pods:\n"
        "  - name: a\n"
        "    containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 30000}}}]\n"
        "edits:\n"
        "  add: [{like: node2, count: 1}]\n"
        "  cordon: [GPU-2-2]\n",
        encoding="utf-8",
    )
    before = row_counts()
    call_command("simulate", str(path), "--live", "--indent", "0")
    (decision,) = json.loads(capsys.readouterr().out)["pods"]
    assert (decision["status"], decision["node"]) == ("scheduled", "node2-whatif-1")
    assert row_counts() == before


def test_simulate_live_names_a_bad_edit_and_exits_2(cluster, tmp_path, capsys):
    path = tmp_path / "whatif.json"
    path.write_text(json.dumps({"pods": [gpu_pod("a")], "edits": {"drain": ["nowhere"]}}), encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        call_command("simulate", str(path), "--live")
    assert exited.value.code == 2
    assert "edits.drain[0]: no node 'nowhere' in the cluster" in capsys.readouterr().err
