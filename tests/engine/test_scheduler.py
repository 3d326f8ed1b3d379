"""SPEC 7 node order (binpack and spread across nodes, ties by name, `top`) and the engine's
Python entry point, `Scheduler(cluster, config)` over plain dataclasses."""

import pytest

from scheduling.engine import Card, Cluster, ClusterConfig, Node, PodSpec, Scheduler

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


# -- the Python entry point --------------------------------------------------------------------


def t4_cluster() -> Cluster:
    cards = [
        Card(uuid="GPU-0", index=0, memory=15360, used_slots=2, used_memory=2000),
        Card(uuid="GPU-1", index=1, memory=15360, used_slots=1, used_memory=1000),
        Card(uuid="GPU-2", index=2, memory=15360),
        Card(uuid="GPU-3", index=3, memory=15360),
    ]
    return Cluster([Node(name="t4-node", cards=cards)])


def one_gib_pod(name: str, chain: str) -> PodSpec:
    return PodSpec(
        name=name, annotations={GPU_POLICY: chain}, containers=[container("main", ask(gpu=1, mem=1000))]
    )


def test_decide_explains_without_changing_the_snapshot():
    cluster = t4_cluster()
    scheduler = Scheduler(cluster, ClusterConfig())
    first = scheduler.decide(one_gib_pod("a", "mutex,binpack"))
    again = scheduler.decide(one_gib_pod("b", "mutex,binpack"))
    assert first.node == again.node == "t4-node"
    assert [d.uuid for d in first.containers[0].devices] == ["GPU-2"]
    assert [d.uuid for d in again.containers[0].devices] == ["GPU-2"]
    assert cluster.node("t4-node").cards[2].used_slots == 0


def test_schedule_applies_each_placement_for_the_next_pod():
    cluster = t4_cluster()
    scheduler = Scheduler(cluster, ClusterConfig())
    first = scheduler.schedule(one_gib_pod("a", "mutex,binpack"))
    second = scheduler.schedule(one_gib_pod("b", "mutex,binpack"))
    assert [d.uuid for d in first.containers[0].devices] == ["GPU-2"]
    assert [d.uuid for d in second.containers[0].devices] == ["GPU-3"]
    gpu2 = cluster.node("t4-node").cards[2]
    assert (gpu2.used_slots, gpu2.used_memory, gpu2.used_cores) == (1, 1000, 0)
    third = scheduler.schedule(one_gib_pod("c", "mutex,binpack"))
    assert third.status == "pending"
    assert third.reasons == {"ExclusiveDeviceAllocateConflict": 4}


def test_cluster_config_defaults_are_node_binpack_card_spread():
    config = ClusterConfig()
    assert (config.node_scheduler_policy, config.gpu_scheduler_policy) == ("binpack", "spread")
    decision = Scheduler(t4_cluster(), config).decide(
        PodSpec(name="p", containers=[container("main", ask(gpu=1, mem=1000))])
    )
    assert decision.policy["node"] == "binpack"
    assert decision.policy["sort_keys"] == ["spread"]
    assert [d.uuid for d in decision.containers[0].devices] == ["GPU-2"]


def test_rejected_decision_names_the_field():
    decision = Scheduler(t4_cluster()).decide(
        PodSpec(name="p", containers=[container("main", ask(gpu=1, pct=101))])
    )
    assert decision.status == "rejected"
    assert decision.error_field == "containers[0].resources.limits.nvidia.com/gpumem-percentage"
    assert decision.allocated is None
