"""What-if on a snapshot: each edit, decisions in order, and capacity."""

from __future__ import annotations

import pytest

from scheduling.engine.errors import ScenarioError
from scheduling.engine.noderules import account_running
from scheduling.engine.scenario import parse_scenario
from scheduling.engine.whatif import apply_edits, capacity, decide_all, parse_edits, parse_whatif

from .builders import ask, card, node, pod, scenario


def snapshot(*nodes):
    cluster, config, _ = parse_scenario(scenario(list(nodes), []))
    return cluster, config


def one(limits, name="p"):
    pods, _ = parse_whatif({"pods": [pod(name, None, limits)]})
    return pods[0]


def test_cordoning_the_only_free_card_leaves_the_pod_pending():
    cluster, config = snapshot(node("a", card("A0"), card("A1", used=(10, 0, 0))))
    cluster, config = apply_edits(cluster, config, parse_edits({"cordon": ["A0"]}))
    (decision,) = decide_all(cluster, config, [one(ask(gpu=1))])
    assert decision.status == "pending" and decision.reasons == {
        "CardCordoned": 1,
        "CardTimeSlicingExhausted": 1,
    }


def test_draining_a_node_sends_the_pod_elsewhere_and_emptying_one_frees_it():
    cluster, config = snapshot(node("a", card("A0", 8000)), node("b", card("B0", 8000, used=(1, 7000, 0))))
    cluster, config = apply_edits(cluster, config, parse_edits({"drain": ["a"], "empty": ["b"]}))
    (decision,) = decide_all(cluster, config, [one(ask(gpu=1, mem=4000))])
    assert (decision.status, decision.node) == ("scheduled", "b")


def test_adding_nodes_like_an_existing_one_adds_empty_copies():
    cluster, config = snapshot(node("a", card("A0", 8000, used=(1, 8000, 0))))
    cluster, config = apply_edits(cluster, config, parse_edits({"add": [{"like": "a", "count": 2}]}))
    assert [n.name for n in cluster.nodes] == ["a", "a-whatif-1", "a-whatif-2"]
    first, second, third = decide_all(cluster, config, [one(ask(gpu=1, mem=8000), f"p{i}") for i in range(3)])
    assert {first.node, second.node} == {"a-whatif-1", "a-whatif-2"} and third.status == "pending"


def test_changing_the_default_node_policy_changes_where_the_pod_goes():
    nodes = (node("a", card("A0", 8000, used=(1, 4000, 0))), node("b", card("B0", 8000)))
    cluster, config = snapshot(*nodes)
    assert decide_all(cluster, config, [one(ask(gpu=1, mem=1000))])[0].node == "a"  # binpack
    cluster, config = snapshot(*nodes)
    cluster, config = apply_edits(
        cluster, config, parse_edits({"policies": {"node_scheduler_policy": "spread"}})
    )
    assert decide_all(cluster, config, [one(ask(gpu=1, mem=1000))])[0].node == "b"


@pytest.mark.parametrize(
    ("edits", "where"),
    [
        ({"cordon": ["NOPE"]}, "edits.cordon[0]"),
        ({"drain": "a"}, "edits.drain"),
        ({"add": [{"like": "a", "count": 0}]}, "edits.add[0].count"),
        ({"add": [{"like": "zz"}]}, "edits.add[0]"),
        ({"policies": {"node_scheduler_policy": "random"}}, "edits.policies.node_scheduler_policy"),
        ({"shrink": []}, "edits.shrink"),
    ],
)
def test_a_bad_edit_names_the_field(edits, where):
    cluster, config = snapshot(node("a", card("A0")))
    with pytest.raises(ScenarioError) as caught:
        apply_edits(cluster, config, parse_edits(edits))
    assert caught.value.where == where


def test_a_bad_pod_names_its_place():
    with pytest.raises(ScenarioError) as caught:
        parse_whatif({"pods": [pod("ok", None, ask(gpu=1)), {"name": "x"}]})
    assert caught.value.where == "pods[1].containers"


def test_capacity_counts_per_node_and_in_all_and_stops_at_the_limit():
    cluster, config = snapshot(
        node("a", card("A0", 8000), card("A1", 8000, used=(1, 6000, 0))), node("b", card("B0", 4000))
    )
    shape = one(ask(gpu=1, mem=3000))
    result = capacity(cluster, config, shape)
    assert result.as_dict() == {
        "total": 3,
        "more": False,
        "nodes": [{"node": "a", "pods": 2}, {"node": "b", "pods": 1}],
    }
    cluster, config = snapshot(node("a", card("A0", 8000)), node("b", card("B0", 4000)))
    assert capacity(cluster, config, shape, limit=2).as_dict()["more"] is True
    # the snapshot itself is not changed
    assert cluster.node("a").cards[0].used_memory == 0


def test_adding_nodes_keeps_the_pods_others_bound_and_the_copies_hold_none_of_them():
    """An `add` edit returns a new Cluster: the running pods (kube-scheduler's, HAMi's before
    the switch) stay on it, so accounting them again (idempotent, as every snapshot does)
    leaves their cards held; the copies start empty, gangs included."""
    raw = scenario([node("a", card("A0", 16000))], [])
    raw["running"] = [
        {
            "name": "old",
            "namespace": "ml",
            "node": "a",
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
            "annotations": {"hami.io/vgpu-devices-allocated": "A0,NVIDIA,15000,0:;"},
        }
    ]
    cluster, config, _ = parse_scenario(raw)
    cluster.node("a").cards[0].gangs = ("ml/old-group",)
    cluster, config = apply_edits(cluster, config, parse_edits({"add": [{"like": "a", "count": 1}]}))
    assert [p.key for p in cluster.running] == ["ml/old"]
    assert account_running(cluster) == []
    held = {c.uuid: (c.used_slots, c.used_memory, c.gangs) for n in cluster.nodes for c in n.cards}
    assert held == {"A0": (1, 15000, ("ml/old-group",)), "A0-whatif-1": (0, 0, ())}
    (decision,) = decide_all(cluster, config, [one(ask(gpu=1, mem=8000))])
    assert (decision.status, decision.node) == ("scheduled", "a-whatif-1")
