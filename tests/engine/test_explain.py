"""The one reader of a decision (`engine.explain`), fed straight from the engine (SPEC 9 output)
or from payloads as they are stored; no database, no Django."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scheduling.engine import explain, reasons
from scheduling.engine.explain import decision_path, node_bars, waiting_reasons
from scheduling.engine.scenario import run_scenario

ROOT = Path(__file__).resolve().parents[2]
WALKTHROUGH = ROOT / "static" / "scheduling" / "examples" / "chain-mutex-binpack-t4.json"


def card(uuid, index, numa=0, memory=16000, used=None):
    """A SPEC 9 card; `used` is what its tenants already hold ({"slots", "memory", "cores"})."""
    return {"uuid": uuid, "index": index, "numa": numa, "memory": memory, "used": used}


def scenario(cards, chain, ask, node_policy=None, extra_nodes=()):
    annotations = {"hami.io/gpu-scheduler-policy": chain}
    if node_policy:
        annotations["hami.io/node-scheduler-policy"] = node_policy
    devices = [{k: v for k, v in c.items() if v is not None} for c in cards]
    nodes = [{"name": "n1", "devices": devices}, *extra_nodes]
    pods = [
        {
            "name": "p",
            "annotations": annotations,
            "containers": [{"name": "main", "resources": {"limits": ask}}],
        }
    ]
    return run_scenario({"nodes": nodes, "pods": pods})["pods"][0]


def test_walkthrough_chain_filters_ranking_and_tiebreak():
    pod = run_scenario(json.loads(WALKTHROUGH.read_text()))["pods"][0]
    path = decision_path(pod)
    steps = [(s.name, s.role) for s in path["steps"]]
    assert steps == [("mutex", "filter"), ("binpack", "sort key"), ("index", "tiebreak")]
    (container,) = path["containers"]
    assert [(r.card["uuid"], r.words) for r in container.removed] == [
        ("GPU-0", "has tenants and the chain has mutex"),
        ("GPU-1", "has tenants and the chain has mutex"),
    ]
    assert [(r.card["uuid"], r.card["chosen"], r.decided_by) for r in container.ranked] == [
        ("GPU-2", True, None),
        ("GPU-3", False, "index"),
    ]
    assert container.ranked[1].tied_on == ["binpack"]
    assert container.removed_by_stage == [("mutex", ["GPU-0", "GPU-1"])]


def test_a_chain_with_only_filters_shows_spread_as_the_default_key():
    busy = card("B", 1, used={"slots": 1, "memory": 500})
    pod = scenario([card("A", 0), busy], "mutex", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 100})
    steps = [(s.name, s.role) for s in decision_path(pod)["steps"]]
    assert steps == [("mutex", "filter"), ("spread", "default"), ("index", "tiebreak")]


def test_every_face_reads_the_chain_and_its_defaults_the_same_way():
    """A pod rejected before parsing has no policy; a stored policy without sort keys ranks by spread."""
    assert explain.policy_of({"policy": None}) == {} and explain.policy_of(None) == {}
    assert explain.chain_of(None) == [] and explain.chain_of({"gpu": None}) == []
    assert explain.chain_of({"gpu": ["mutex", "binpack"]}) == ["mutex", "binpack"]
    assert explain.sort_keys_of({"sort_keys": []}) == ["spread"] == explain.sort_keys_of(None)
    assert explain.sort_keys_of({"sort_keys": ["numa", "binpack"]}) == ["numa", "binpack"]
    assert explain.has_mutex({"filters": ["mutex"]}) and not explain.has_mutex(
        {"filters": ["topology-aware"]}
    )


def test_the_key_that_decided_between_neighbours_is_named_with_its_values():
    cards = [card("A", 0, numa=1), card("B", 1, numa=0, memory=4000, used={"slots": 1}), card("C", 2, numa=0)]
    pod = scenario(cards, "numa,binpack", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000})
    ranked = decision_path(pod)["containers"][0].ranked
    assert [r.card["uuid"] for r in ranked] == ["B", "C", "A"]
    assert [r.decided_by for r in ranked] == [None, "binpack", "numa"]
    assert ranked[1].tied_on == ["numa"] and ranked[1].comparison.startswith("tied on numa; binpack:")
    assert ranked[2].comparison == "numa: 0 before 1 (lower NUMA first)"


def test_node_bars_keep_the_engines_order_whatever_the_policy_says():
    """`node_order` is already in policy order; the reader does not sort it again."""
    payload = {"node": "b", "policy": {"node": "spread"}, "node_order": [["c", 3.0], ["a", 1.0], ["b", 1.0]]}
    assert [(bar.node, bar.score, bar.chosen) for bar in node_bars(payload)] == [
        ("c", 3.0, False),
        ("a", 1.0, False),
        ("b", 1.0, True),
    ]
    assert node_bars({"node_scores": {"a": 1.0}}) == [], "node_scores (a JSON object) is not read"


def test_node_bars_of_a_fresh_decision_follow_the_node_policy():
    def two_nodes(node_policy):
        other = {"name": "n0", "devices": [{"uuid": "X", "index": 0, "memory": 16000, "used": {"slots": 2}}]}
        return scenario([card("A", 0)], "spread", {"nvidia.com/gpumem": 1000}, node_policy, [other])

    spread, binpack = two_nodes("spread"), two_nodes("binpack")
    assert [bar.node for bar in node_bars(spread)] == ["n1", "n0"] and spread["node"] == "n1"
    assert [bar.node for bar in node_bars(binpack)] == ["n0", "n1"] and binpack["node"] == "n0"
    assert node_bars(binpack)[0].chosen


def test_why_it_waits_puts_capacity_before_cards_the_pod_excluded():
    payload = {
        "failed_reasons": {
            "a100": {"cards": 4, "reasons": {"CardTypeMismatch": 4}},
            "v100": {"cards": 2, "reasons": {"ExclusiveDeviceAllocateConflict": 2}},
        },
        "policy": {"filters": ["mutex"]},
    }
    assert [line.words for line in waiting_reasons(payload)] == [
        "2 of 2 cards on v100 already have tenants (mutex)",
        "4 of 4 cards on a100 are not of the type the pod asks for (use/nouse-gputype)",
    ]


def test_one_node_lists_its_reasons_by_code_with_the_node_card_count():
    failed = {"n1": {"cards": 4, "reasons": {"CardInsufficientMemory": 1, "CardCordoned": 2, "Weird": 1}}}
    lines = waiting_reasons({"failed_reasons": failed})
    assert [(line.code, line.n, line.m) for line in lines] == [
        ("CardCordoned", 2, 4),
        ("CardInsufficientMemory", 1, 4),
        ("Weird", 1, 4),
    ]
    assert lines[2].words == "1 of 4 cards on n1: Weird", "an unknown code is still shown, with its counts"


def test_without_mutex_in_the_chain_a_busy_card_conflicts_with_a_whole_card_ask():
    """SPEC 4 checks 6 then 9: with no mutex in the chain, only a 100-core ask can fail this way."""
    busy = card("A", 0, used={"slots": 1, "memory": 1000})
    whole = scenario(
        [busy], "binpack", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 100}
    )
    assert whole["status"] == "pending"
    assert [line.words for line in waiting_reasons(whole)] == [
        "1 of 1 cards on n1 already have tenants and the pod asks for whole cards (100 cores)"
    ]
    mutex = scenario([busy], "mutex", {"nvidia.com/gpumem": 10})
    assert [line.words for line in waiting_reasons(mutex)] == [
        "1 of 1 cards on n1 already have tenants (mutex)"
    ]


def test_the_counts_beyond_the_stored_top_k_are_shown_as_more():
    payload = {
        "nodes_fit": 5,
        "node_order": [["a", 2.0], ["b", 1.0]],
        "nodes_failed": 3,
        "failed_reasons": {"c": {"cards": 1, "reasons": {"CardCordoned": 1}}},
    }
    path = decision_path(payload)
    assert (path["more_fit"], path["more_failed"]) == (3, 2)
    assert path["status"] == "unknown" and path["steps"] == [] and path["containers"] == []


def test_the_reader_imports_no_django():
    probe = (
        "import sys, scheduling.engine.explain; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'rest_framework', 'celery'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_reason_code_has_its_words():
    codes = {value for name, value in vars(reasons).items() if name.isupper() and isinstance(value, str)}
    assert codes == reasons.CODES == set(explain.EXPLANATIONS)
