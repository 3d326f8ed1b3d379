"""SPEC 9: reading a scenario (defaults, validation that says where) and the output's fields."""

import copy
import json

import pytest
from django.core.management import call_command

from scheduling.engine.errors import ScenarioError
from scheduling.engine.scenario import parse_scenario, run_scenario

from .builders import (
    GPU_POLICY,
    NUMA_BIND,
    USE_TYPE,
    WEIGHTS,
    ask,
    card,
    card_row,
    container,
    node,
    picked,
    pod,
    run,
    run_one,
    scenario,
)

ONE_GIB = ask(gpu=1, mem=1000)


def good() -> dict:
    return scenario(
        [node("n1", card("G0"), card("G1")), node("n2", card("H0"))],
        [pod("p1", None, ONE_GIB), pod("p2", None, ONE_GIB)],
    )


def broken(change) -> dict:
    raw = copy.deepcopy(good())
    change(raw)
    return raw


def drop(path_keys):
    def change(raw):
        target = raw
        for key in path_keys[:-1]:
            target = target[key]
        del target[path_keys[-1]]

    return change


def put(path_keys, value):
    def change(raw):
        target = raw
        for key in path_keys[:-1]:
            target = target[key]
        target[path_keys[-1]] = value

    return change


MALFORMED = [
    pytest.param(drop(["nodes"]), "nodes", id="missing-nodes"),
    pytest.param(drop(["pods"]), "pods", id="missing-pods"),
    pytest.param(put(["nodes"], {"n1": {}}), "nodes", id="nodes-not-a-list"),
    pytest.param(drop(["nodes", 1, "name"]), "nodes[1].name", id="node-without-name"),
    pytest.param(
        drop(["nodes", 0, "devices", 1, "uuid"]), "nodes[0].devices[1].uuid", id="card-without-uuid"
    ),
    pytest.param(
        drop(["nodes", 1, "devices", 0, "memory"]), "nodes[1].devices[0].memory", id="card-without-memory"
    ),
    pytest.param(
        put(["nodes", 0, "devices", 0, "memory"], -1), "nodes[0].devices[0].memory", id="negative-memory"
    ),
    pytest.param(
        put(["nodes", 0, "devices", 1, "slots"], -2), "nodes[0].devices[1].slots", id="negative-slots"
    ),
    pytest.param(
        put(["nodes", 1, "devices", 0, "cores"], -100), "nodes[1].devices[0].cores", id="negative-cores"
    ),
    pytest.param(
        put(["nodes", 0, "devices", 0, "memory"], "lots"), "nodes[0].devices[0].memory", id="memory-not-int"
    ),
    pytest.param(
        put(["nodes", 1, "devices", 0, "uuid"], "G0"), "nodes[1].devices", id="duplicate-uuid-across-nodes"
    ),
    pytest.param(
        put(["nodes", 0, "devices", 1, "uuid"], "G0"), "nodes[0].devices", id="duplicate-uuid-on-a-node"
    ),
    pytest.param(drop(["pods", 1, "containers"]), "pods[1].containers", id="pod-without-containers"),
    pytest.param(put(["pods", 0, "containers"], []), "pods[0].containers", id="pod-with-empty-containers"),
    pytest.param(drop(["pods", 1, "name"]), "pods[1].name", id="pod-without-name"),
    pytest.param(
        lambda raw: (
            raw["nodes"][0]["devices"][0].update(links={"G1": 100}),
            raw["nodes"][0]["devices"][1].update(links={"G0": 60}),
        ),
        "nodes[0].devices[1].links.G0",
        id="links-disagree",
    ),
    pytest.param(
        lambda raw: raw["nodes"][0]["devices"][0].update(links={"H0": 100}),
        "nodes[0].devices",
        id="link-to-a-card-of-another-node",
    ),
]


@pytest.mark.parametrize("change, where", MALFORMED)
def test_malformed_scenario_says_where(change, where):
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(broken(change))
    assert raised.value.where == where


@pytest.mark.parametrize("change, where", MALFORMED)
def test_simulate_exits_2_with_one_line_naming_where(change, where, tmp_path, capsys):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(broken(change)))
    with pytest.raises(SystemExit) as exited:
        call_command("simulate", str(path))
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert where in lines[0]


def test_links_agreeing_on_both_sides_are_accepted():
    raw = good()
    raw["nodes"][0]["devices"][0]["links"] = {"G1": 100}
    raw["nodes"][0]["devices"][1]["links"] = {"G0": 100}
    assert run_scenario(raw)["pods"][0]["status"] == "scheduled"


# -- defaults ---------------------------------------------------------------------------------


def test_card_defaults():
    """Only uuid and memory: 10 slots, 100 cores, NUMA 0, healthy, type NVIDIA, index = position."""
    out = run_one(
        [node("n1", card("G0", 10000), card("G1", 10000))],
        pod("p", {USE_TYPE: "nvidia", NUMA_BIND: "true"}, ask(gpu=2, mem=1000, cores=10)),
    )
    assert out["status"] == "scheduled"
    assert [card_row(out, uuid)["index"] for uuid in ("G0", "G1")] == [0, 1]
    assert card_row(out, "G0")["score"] == pytest.approx(10 * (1 / 10 + 10 / 100 + 1000 / 10000), abs=1e-3)


def test_scenario_card_defaults_are_the_engines():
    from scheduling.engine.model import Card
    from scheduling.engine.scenario import CARD_DEFAULTS

    bare = Card(uuid="G0", index=0, memory=1000)
    assert CARD_DEFAULTS == {"type": "NVIDIA", "slots": 10, "cores": 100, "numa": 0, "health": True}
    assert CARD_DEFAULTS == {key: getattr(bare, key) for key in CARD_DEFAULTS}
    cluster, _, _ = parse_scenario({"nodes": [node("n1", card("G0", 1000))], "pods": []})
    parsed = cluster.node("n1").cards[0]
    assert {key: getattr(parsed, key) for key in CARD_DEFAULTS} == CARD_DEFAULTS


def test_default_slots_are_ten():
    pods = [pod(f"p{i}", None, ask(gpu=1, mem=10)) for i in range(11)]
    outs = run([node("n1", card("G0"))], pods)
    assert [o["status"] for o in outs] == ["scheduled"] * 10 + ["pending"]
    assert outs[-1]["failed_nodes"] == {"n1": "1/1 CardTimeSlicingExhausted"}


def test_pod_namespace_defaults_to_default_and_is_echoed():
    outs = run([node("n1", card("G0"))], [pod("a", None, ONE_GIB), pod("b", None, ONE_GIB, namespace="ml")])
    assert [(o["name"], o["namespace"]) for o in outs] == [("a", "default"), ("b", "ml")]


# -- invalid pods inside a good file -----------------------------------------------------------


def test_invalid_pods_are_rejected_and_the_rest_still_run():
    pods = [
        pod("bad-weights", {WEIGHTS: "slot=1"}, ONE_GIB),
        pod("ok-1", None, ONE_GIB),
        pod("bad-cores", None, ask(gpu=1, cores=-5)),
        pod("no-gpu", containers=[container("web", limits={"cpu": "2"})]),
        pod("ok-2", {GPU_POLICY: "binpack"}, ONE_GIB),
    ]
    outs = run([node("n1", card("G0"))], pods)
    assert [(o["name"], o["status"]) for o in outs] == [
        ("bad-weights", "rejected"),
        ("ok-1", "scheduled"),
        ("bad-cores", "rejected"),
        ("no-gpu", "rejected"),
        ("ok-2", "scheduled"),
    ]
    assert WEIGHTS in outs[0]["error"]
    assert "nvidia.com/gpucores" in outs[2]["error"]
    assert outs[4]["allocated"] == "G0,NVIDIA,1000,0:;"
    assert outs[4]["node_scores"]["n1"] == pytest.approx(10 * (2 / 10 + 0 + 2000 / 15360), abs=1e-3)


# -- output fields -----------------------------------------------------------------------------

POD_FIELDS = {
    "name",
    "namespace",
    "status",
    "node",
    "containers",
    "allocated",
    "node_scores",
    "failed_nodes",
    "nodes_fit",
    "nodes_failed",
    "reasons",
    "policy",
    "error",
}
POLICY_FIELDS = {"node", "gpu", "filters", "sort_keys", "ignored", "weights"}


def test_output_fields_of_scheduled_pending_and_rejected_pods():
    pods = [pod("s", None, ONE_GIB), pod("p", None, ask(gpu=5)), pod("r", {WEIGHTS: ""}, ONE_GIB)]
    scheduled, pending, rejected = run([node("n1", card("G0"))], pods)
    for out in (scheduled, pending, rejected):
        assert POD_FIELDS <= set(out)
        assert POLICY_FIELDS <= set(out["policy"])
    assert scheduled["status"] == "scheduled" and scheduled["node"] == "n1" and scheduled["error"] is None
    (placement,) = scheduled["containers"]
    assert {"name", "devices", "cards"} <= set(placement)
    assert set(placement["devices"][0]) >= {"uuid", "memory", "cores"}
    assert {"uuid", "index", "score", "eligible", "reason"} <= set(placement["cards"][0])
    assert isinstance(placement["cards"][0]["score"], float)
    assert isinstance(scheduled["node_scores"]["n1"], float)
    assert set(scheduled["policy"]["weights"]) == {"slot", "core", "memory"}
    for out, status in ((pending, "pending"), (rejected, "rejected")):
        assert out["status"] == status
        assert (out["node"], out["containers"], out["allocated"]) == (None, [], None)
    assert pending["reasons"] == {"NodeInsufficientDevice": 1}
    assert pending["error"] is None
    assert rejected["error"]


def test_output_is_json_serialisable_and_in_input_order():
    names = [f"pod-{i}" for i in (3, 1, 2)]
    out = run_scenario(scenario([node("n1", card("G0"))], [pod(n, None, ONE_GIB) for n in names]))
    assert [p["name"] for p in json.loads(json.dumps(out))["pods"]] == names


def test_picked_devices_carry_memory_and_cores():
    out = run_one([node("n1", card("G0", 8000))], pod("p", None, ask(gpu=1, pct=50, cores=30)))
    assert out["containers"][0]["devices"] == [{"uuid": "G0", "memory": 4000, "cores": 30}]
    assert picked(out) == ["G0"]
