"""The decision-path component, fed straight from the engine (SPEC 9 output); no database."""

from __future__ import annotations

import json

from django.template import Context, Template

from scheduling.engine.scenario import run_scenario
from scheduling.templatetags.decision_path import decision_path, node_bars, waiting_reasons

from .conftest import WALKTHROUGH


def card(uuid, index, numa=0, memory=16000, used=None):
    """A SPEC 9 card; `used` is what its tenants already hold ({"slots", "memory", "cores"})."""
    return {"uuid": uuid, "index": index, "numa": numa, "memory": memory, "used": used}


def scenario(cards, chain, ask, node_policy=None, extra_nodes=()):
    annotations = {"hami.io/gpu-scheduler-policy": chain}
    if node_policy:
        annotations["hami.io/node-scheduler-policy"] = node_policy
    nodes = [{"name": "n1", "devices": [{k: v for k, v in c.items() if v is not None} for c in cards]}, *extra_nodes]
    pods = [{"name": "p", "annotations": annotations,
             "containers": [{"name": "main", "resources": {"limits": ask}}]}]  # fmt: skip
    return run_scenario({"nodes": nodes, "pods": pods})["pods"][0]


def render(payload) -> str:
    return Template("{% load decision_path %}{% pod_decision payload %}").render(Context({"payload": payload}))


def test_walkthrough_chain_filters_ranking_and_tiebreak():
    pod = run_scenario(json.loads(WALKTHROUGH.read_text()))["pods"][0]
    path = decision_path(pod)
    assert [(s.name, s.role) for s in path["steps"]] == [("mutex", "filter"), ("binpack", "sort key"), ("index", "tiebreak")]
    (container,) = path["containers"]
    assert [(r.card["uuid"], r.words) for r in container.removed] == [
        ("GPU-0", "has tenants and the chain has mutex"),
        ("GPU-1", "has tenants and the chain has mutex"),
    ]
    assert [(r.card["uuid"], r.card["chosen"], r.decided_by) for r in container.ranked] == [
        ("GPU-2", True, None), ("GPU-3", False, "index"),
    ]  # fmt: skip
    assert container.ranked[1].tied_on == ["binpack"]
    assert container.removed_by_stage == [("mutex", ["GPU-0", "GPU-1"])]


def test_a_chain_with_only_filters_shows_spread_as_the_default_key():
    pod = scenario([card("A", 0), card("B", 1, used={"slots": 1, "memory": 500})], "mutex", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 100})
    steps = [(s.name, s.role) for s in decision_path(pod)["steps"]]
    assert steps == [("mutex", "filter"), ("spread", "default"), ("index", "tiebreak")]


def test_ignored_names_are_shown_struck_through():
    pod = scenario([card("A", 0)], "binpack, sideways", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 100})
    html = render(pod)
    assert "<s>sideways</s>" in html and 'data-role="ignored"' in html


def test_the_key_that_decided_between_neighbours_is_named_with_its_values():
    cards = [card("A", 0, numa=1), card("B", 1, numa=0, memory=4000, used={"slots": 1}), card("C", 2, numa=0)]
    pod = scenario(cards, "numa,binpack", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000})
    ranked = decision_path(pod)["containers"][0].ranked
    assert [r.card["uuid"] for r in ranked] == ["B", "C", "A"]
    assert [r.decided_by for r in ranked] == [None, "binpack", "numa"]
    assert ranked[1].tied_on == ["numa"] and ranked[1].comparison.startswith("tied on numa; binpack:")
    assert ranked[2].comparison == "numa: 0 before 1 (lower NUMA first)"


def test_node_bars_follow_the_node_policy_whatever_the_stored_key_order():
    payload = {"node": "b", "policy": {"node": "spread"}, "node_scores": {"c": 3.0, "a": 1.0, "b": 1.0}}
    assert [(bar.node, bar.chosen) for bar in node_bars(payload)] == [("a", False), ("b", True), ("c", False)]
    payload["policy"]["node"] = "binpack"
    assert [bar.node for bar in node_bars(payload)] == ["c", "a", "b"]


def test_why_it_waits_puts_capacity_before_cards_the_pod_excluded():
    payload = {
        "failed_nodes": {"a100": "4/4 CardTypeMismatch", "v100": "2/2 ExclusiveDeviceAllocateConflict"},
        "policy": {"filters": ["mutex"]},
    }
    lines = waiting_reasons(payload)
    assert [line.words for line in lines] == [
        "2 of 2 cards on v100 already have tenants (mutex)",
        "4 of 4 cards on a100 are not of the type the pod asks for (use/nouse-gputype)",
    ]


def test_without_mutex_in_the_chain_a_busy_card_conflicts_with_a_whole_card_ask():
    """SPEC 4 checks 6 then 9: with no mutex in the chain, only a 100-core ask can fail this way."""
    busy = card("A", 0, used={"slots": 1, "memory": 1000})
    whole = scenario([busy], "binpack", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 100})
    assert whole["status"] == "pending"
    assert [line.words for line in waiting_reasons(whole)] == [
        "1 of 1 cards on n1 already have tenants and the pod asks for whole cards (100 cores)"
    ]
    mutex = scenario([busy], "mutex", {"nvidia.com/gpumem": 10})
    assert [line.words for line in waiting_reasons(mutex)] == ["1 of 1 cards on n1 already have tenants (mutex)"]


def test_a_pending_pod_renders_its_reasons_and_a_rejected_pod_its_error():
    full = card("A", 0, used={"slots": 1, "memory": 15500})
    pending = scenario([full], "spread", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000})
    assert pending["status"] == "pending"
    html = render(pending)
    assert "Why it waits" in html and "1 of 1 cards on n1 lack the free memory asked" in html
    rejected = scenario([card("A", 0)], "spread", {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 150})
    html = render(rejected)
    assert rejected["status"] == "rejected" and "gpucores" in html and 'data-testid="decision-error"' in html
