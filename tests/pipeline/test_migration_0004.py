"""0004 gives decisions stored before the engine wrote structured reasons their
`failed_reasons` and `node_order`, exactly as the engine writes them today."""

from __future__ import annotations

import copy
import importlib
import json

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from scheduling.engine.scenario import run_scenario

backfill = importlib.import_module("scheduling.migrations.0004_decision_failed_reasons")

BEFORE = [("scheduling", "0003_events_card_over_capacity")]
AFTER = [("scheduling", "0004_decision_failed_reasons")]
NEW_KEYS = ("failed_reasons", "node_order")


def node(name, *used_slots, memory=16000):
    return {
        "name": name,
        "devices": [
            {"uuid": f"{name}-{i}", "index": i, "memory": memory, "used": {"slots": s, "memory": 1000 * s}}
            for i, s in enumerate(used_slots)
        ],
    }


def pods_on(nodes, *pods):
    return run_scenario({"nodes": nodes, "pods": list(pods)})["pods"]


def pod(name, node_policy, chain="spread", **limits):
    annotations = {"hami.io/node-scheduler-policy": node_policy, "hami.io/gpu-scheduler-policy": chain}
    return {
        "name": name,
        "annotations": annotations,
        "containers": [{"name": "main", "resources": {"limits": limits}}],
    }


def engine_payloads() -> list[dict]:
    """Placed under both node policies with tied scores, waiting for mixed reasons, rejected."""
    nodes = [node("b", 1, 0), node("a", 1, 0), node("c", 3, 3), node("small", 0, memory=1000)]
    ask = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1500}
    decided = pods_on(
        nodes,
        pod("spread", "spread", **ask),
        pod("binpack", "binpack", **ask),
        pod("waits", "binpack", "mutex", **{"nvidia.com/gpu": 2, "nvidia.com/gpumem": 15000}),
        pod("rejected", "spread", **{"nvidia.com/gpucores": -1}),
    )
    return json.loads(json.dumps(decided))  # as stored: JSON has lists, not tuples


def old(payload: dict) -> dict:
    stored = copy.deepcopy(payload)
    for key in NEW_KEYS:
        stored.pop(key, None)
    return stored


def test_the_backfill_rebuilds_what_the_engine_writes():
    payloads = engine_payloads()
    assert [p["status"] for p in payloads] == ["scheduled", "scheduled", "pending", "rejected"]
    assert len(payloads[0]["node_order"]) >= 3 and len(payloads[2]["failed_reasons"]) >= 2
    for payload in payloads:
        assert backfill.with_structured_reasons(old(payload)) == payload, payload["name"]
        assert backfill.with_structured_reasons(payload) is None, "a payload with both keys is left alone"


def test_node_order_follows_the_stored_node_policy_ties_by_name():
    scores = {"c": 3.0, "b": 1.0, "a": 1.0}
    assert backfill.node_order(scores, "spread") == [["a", 1.0], ["b", 1.0], ["c", 3.0]]
    assert backfill.node_order(scores, "binpack") == [["c", 3.0], ["a", 1.0], ["b", 1.0]]
    text = {"n1": "2/4 CardInsufficientMemory, 1/4 CardTypeMismatch", "n2": "3/3 NodeNotReady"}
    assert backfill.failed_reasons(text) == {
        "n1": {"cards": 4, "reasons": {"CardInsufficientMemory": 2, "CardTypeMismatch": 1}},
        "n2": {"cards": 3, "reasons": {"NodeNotReady": 3}},
    }
    assert backfill.with_structured_reasons({}) == {"failed_reasons": {}, "node_order": []}


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_0004_backfills_stored_decisions_in_batches_and_goes_back_as_a_no_op(monkeypatch):
    monkeypatch.setattr(backfill, "BATCH", 2)
    payloads = engine_payloads()
    apps = migrate(BEFORE)
    try:
        Pod, Decision = apps.get_model("scheduling", "Pod"), apps.get_model("scheduling", "Decision")
        for payload in payloads:
            row = Pod.objects.create(name=payload["name"], containers=[])
            Decision.objects.create(pod=row, outcome=payload["status"], payload=old(payload))
        current = Decision.objects.create(
            pod=row, outcome="rejected", payload={**payloads[3], "node_order": [["x", 1]]}
        )
        apps = migrate(AFTER)
        Decision = apps.get_model("scheduling", "Decision")
        stored = {
            d.pod.name: d.payload for d in Decision.objects.exclude(pk=current.pk).select_related("pod")
        }
        assert stored == {payload["name"]: payload for payload in payloads}
        assert Decision.objects.get(pk=current.pk).payload["node_order"] == [["x", 1]], (
            "rows with the keys are kept"
        )
        apps = migrate(BEFORE)
        Decision = apps.get_model("scheduling", "Decision")
        assert all("failed_reasons" in d.payload for d in Decision.objects.all()), "going back keeps the keys"
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
