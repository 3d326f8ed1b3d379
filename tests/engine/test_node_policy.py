"""SPEC 7: the node score, binpack and spread across nodes, ties by name, `top`."""

import pytest

from .builders import (
    GPU_POLICY,
    NODE_POLICY,
    ask,
    card,
    container,
    node,
    picked,
    pod,
    run,
    run_one,
)

ONE_GIB = ask(gpu=1, mem=1000)


def test_node_score_is_predicted_utilization_over_all_cards_after_placement():
    one = node(
        "n1",
        card("G0", 10000, slots=5, used=(2, 3000, 30)),
        card("G1", 20000, slots=10),
    )
    out = run_one([one], pod("p", None, ask(gpu=1, mem=2000, cores=20)))
    expected = 10 * ((2 + 1) / 15 + (30 + 20) / 200 + (3000 + 2000) / 30000)
    assert out["node_scores"]["n1"] == pytest.approx(expected, abs=1e-3)


def test_node_score_sums_every_container_of_the_pod():
    one = node("n1", card("G0", 10000), card("G1", 10000))
    containers = [container("a", ask(gpu=2, mem=1000, cores=10)), container("b", ask(gpu=1, mem=3000))]
    out = run_one([one], pod("p", None, containers=containers))
    expected = 10 * (3 / 20 + 20 / 200 + 5000 / 20000)
    assert out["node_scores"]["n1"] == pytest.approx(expected, abs=1e-3)


def test_node_score_counts_cards_that_cannot_be_taken():
    """Unhealthy and cordoned cards are still cards of the node: they weigh in the totals."""
    one = node("n1", card("G0", 10000), card("G1", 10000, health=False), card("G2", 10000), cordon="G2")
    out = run_one([one], pod("p", None, ask(gpu=1, mem=3000, cores=30)))
    assert out["node_scores"]["n1"] == pytest.approx(10 * (1 / 30 + 30 / 300 + 3000 / 30000), abs=1e-3)


def loaded_and_empty():
    return [node("empty", card("E0"), card("E1")), node("loaded", card("L0", used=(3, 6000, 30)), card("L1"))]


@pytest.mark.parametrize("policy, expected", [("binpack", "loaded"), ("spread", "empty")])
def test_binpack_takes_the_highest_node_score_spread_the_lowest(policy, expected):
    out = run_one(loaded_and_empty(), pod("p", {NODE_POLICY: policy}, ONE_GIB))
    assert out["node"] == expected
    scores = out["node_scores"]
    assert set(scores) == {"empty", "loaded"}
    assert scores["loaded"] > scores["empty"]
    best_first = sorted(scores, key=scores.get, reverse=policy == "binpack")
    assert list(scores) == best_first


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_equal_nodes_tie_by_name(policy):
    nodes = [node("zeta", card("Z0")), node("alpha", card("A0")), node("mid", card("M0"))]
    out = run_one(nodes, pod("p", {NODE_POLICY: policy}, ONE_GIB))
    assert out["node"] == "alpha"
    assert list(out["node_scores"]) == ["alpha", "mid", "zeta"]


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_node_scores_within_1e_9_tie_by_name(policy):
    """One MiB more on a 10^11 MiB card moves the node score by 1e-10: still a tie."""
    heavier = "b" if policy == "binpack" else "a"
    nodes = [
        node(name, card(f"{name}-0", 10**11, used=(0, 1 if name == heavier else 0, 0))) for name in ("b", "a")
    ]
    out = run_one(nodes, pod("p", {NODE_POLICY: policy}, ONE_GIB))
    assert out["node"] == "a"


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_node_scores_more_than_1e_9_apart_decide(policy):
    heavier = "b" if policy == "binpack" else "a"
    nodes = [
        node(name, card(f"{name}-0", 10**9, used=(0, 1 if name == heavier else 0, 0))) for name in ("b", "a")
    ]
    out = run_one(nodes, pod("p", {NODE_POLICY: policy}, ONE_GIB))
    assert out["node"] == "b"


def two_t4_nodes():
    return [node(name, *(card(f"{name}-gpu{i}") for i in range(4))) for name in ("node1", "node2")]


def test_story_node_binpack_keeps_both_pods_on_node1():
    pods = [pod("pod1", None, ask(gpu=1)), pod("pod2", None, ask(gpu=1))]
    first, second = run(two_t4_nodes(), pods, node_scheduler_policy="binpack")
    assert (first["node"], second["node"]) == ("node1", "node1")


def test_story_node_spread_moves_pod2_to_node2():
    pods = [pod("pod1", None, ask(gpu=1)), pod("pod2", None, ask(gpu=1))]
    first, second = run(two_t4_nodes(), pods, node_scheduler_policy="spread")
    assert (first["node"], second["node"]) == ("node1", "node2")


@pytest.mark.parametrize("chain, second_card", [("binpack", "node1-gpu0"), ("spread", "node1-gpu1")])
def test_story_gpu_policy_for_two_fifth_card_pods(chain, second_card):
    fifth = ask(gpu=1, cores=20, pct=20)
    pods = [pod("pod1", {GPU_POLICY: chain}, fifth), pod("pod2", {GPU_POLICY: chain}, fifth)]
    first, second = run([two_t4_nodes()[0]], pods)
    assert picked(first) == ["node1-gpu0"]
    assert picked(second) == [second_card]


def test_node_scores_list_every_fitting_node_and_failed_nodes_the_rest():
    nodes = [
        node("a", card("A0")),
        node("b", card("B0", health=False)),
        node("c", card("C0", used=(1, 2000, 0))),
        node("d", card("D0", slots=1, used=(1, 1000, 0))),
    ]
    out = run_one(nodes, pod("p", None, ONE_GIB))
    assert out["node"] == "c"
    assert list(out["node_scores"]) == ["c", "a"]
    assert out["failed_nodes"] == {"b": "1/1 CardNotHealth", "d": "1/1 CardTimeSlicingExhausted"}
    assert (out["nodes_fit"], out["nodes_failed"]) == (2, 2)


def test_top_keeps_k_best_node_scores_and_k_failed_nodes_counts_stay_complete():
    nodes = [
        node("a", card("A0")),
        node("b", card("B0", used=(1, 2000, 0))),
        node("c", card("C0", used=(2, 4000, 0))),
        node("x", card("X0", health=False)),
        node("y", card("Y0", health=False)),
        node("z", card("Z0", health=False)),
    ]
    full = run(nodes, [pod("p", None, ONE_GIB)])[0]
    top = run(nodes, [pod("p", None, ONE_GIB)], top=2)[0]
    assert list(full["node_scores"]) == ["c", "b", "a"]
    assert list(top["node_scores"]) == ["c", "b"]
    assert top["node_scores"]["c"] == pytest.approx(full["node_scores"]["c"], abs=1e-3)
    assert len(top["failed_nodes"]) == 2
    assert len(full["failed_nodes"]) == 3
    assert (top["nodes_fit"], top["nodes_failed"]) == (3, 3)
    assert top["node"] == full["node"] == "c"


def test_top_keeps_the_best_in_spread_order_too():
    nodes = [
        node("a", card("A0")),
        node("b", card("B0", used=(1, 2000, 0))),
        node("c", card("C0", used=(2, 4000, 0))),
    ]
    out = run(nodes, [pod("p", {NODE_POLICY: "spread"}, ONE_GIB)], top=1)[0]
    assert list(out["node_scores"]) == ["a"]
    assert out["nodes_fit"] == 3


def test_pods_see_the_placements_before_them():
    """Each pod takes a whole card; the third finds both cards' memory taken (check 7 before 9)."""
    one = node("n1", card("G0"), card("G1"))
    first, second, third = run([one], [pod(f"p{i}", None, ask(gpu=1)) for i in range(3)])
    assert {picked(first)[0], picked(second)[0]} == {"G0", "G1"}
    assert third["status"] == "pending"
    assert third["failed_nodes"]["n1"] == "2/2 CardInsufficientMemory"
