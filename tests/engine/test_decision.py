"""The Decision and its SPEC 9 pod object: failed nodes as data, node order as a list, and why
a rejected pod is rejected (by code, not by its words)."""

import pytest

from scheduling.engine import Card, Cluster, Decision, Node, PodSpec, Scheduler
from scheduling.engine.errors import NO_GPU

from .builders import GPU_POLICY, NODE_POLICY, ask, card, container, node, pod, run, run_one

ONE_GIB = ask(gpu=1, mem=1000)

#: Every key of SPEC 9's pod object as it was before `failed_reasons` and `node_order`.
SPEC_KEYS = {
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


def text_of(failed: dict) -> str:
    """The SPEC 4 failure text that a `failed_reasons` entry says."""
    return ", ".join(f"{n}/{failed['cards']} {code}" for code, n in sorted(failed["reasons"].items()))


def failing_nodes():
    """Five nodes that fail a mutex pod asking 2 x 1000 MiB, each in its own way."""
    return [
        node(
            "a",
            card("A0", 8000, used=(1, 1000, 0)),
            card("A1", 8000, used=(0, 7500, 0)),
            card("A2", 8000, used=(2, 2000, 0)),
            card("A3", 8000, used=(0, 7800, 0)),
        ),
        node("b", card("B0", health=False), card("B1"), card("B2"), cordon="B1,B2"),
        node("c", card("C0")),
        node("d", card("D0"), card("D1", health=False), card("D2", used=(1, 1000, 0))),
        node("e", card("E0", slots=1, used=(1, 1000, 0)), card("E1", slots=1, used=(1, 1000, 0))),
    ]


def test_failed_reasons_are_the_counts_the_failure_text_says():
    out = run_one(failing_nodes(), pod("p", {GPU_POLICY: "mutex"}, ask(gpu=2, mem=1000)))
    assert out["status"] == "pending"
    assert out["failed_reasons"] == {
        "a": {"cards": 4, "reasons": {"CardInsufficientMemory": 2, "ExclusiveDeviceAllocateConflict": 2}},
        "b": {"cards": 3, "reasons": {"CardCordoned": 2, "CardNotHealth": 1}},
        "c": {"cards": 1, "reasons": {"NodeInsufficientDevice": 1}},
        "d": {
            "cards": 3,
            "reasons": {
                "AllocatedCardsInsufficientRequest": 1,
                "CardNotHealth": 1,
                "ExclusiveDeviceAllocateConflict": 1,
            },
        },
        "e": {"cards": 2, "reasons": {"CardTimeSlicingExhausted": 2}},
    }
    for name, failed in out["failed_reasons"].items():
        assert text_of(failed) == out["failed_nodes"][name]


def test_failed_reasons_sum_into_the_cluster_reasons():
    out = run_one(failing_nodes(), pod("p", {GPU_POLICY: "mutex"}, ask(gpu=2, mem=1000)))
    totals: dict[str, int] = {}
    for failed in out["failed_reasons"].values():
        for code, n in failed["reasons"].items():
            totals[code] = totals.get(code, 0) + n
    assert out["reasons"] == totals


def test_failed_reasons_keep_the_nodes_of_failed_nodes_under_top():
    out = run(failing_nodes(), [pod("p", {GPU_POLICY: "mutex"}, ask(gpu=2, mem=1000))], top=2)[0]
    assert list(out["failed_nodes"]) == list(out["failed_reasons"]) == ["a", "b"]
    assert (
        text_of(out["failed_reasons"]["b"])
        == out["failed_nodes"]["b"]
        == "2/3 CardCordoned, 1/3 CardNotHealth"
    )
    assert out["nodes_failed"] == 5


def test_a_node_that_is_not_ready_fails_every_card():
    cluster = Cluster([Node("n1", [Card("G0", 0, 8000), Card("G1", 1, 8000)], ready=False)])
    decision = Scheduler(cluster).decide(PodSpec("p", containers=[container("main", ONE_GIB)]))
    assert decision.as_dict()["failed_reasons"] == {"n1": {"cards": 2, "reasons": {"NodeNotReady": 2}}}
    assert decision.failed_nodes == [("n1", "2/2 NodeNotReady")]


def scored_nodes():
    return [
        node("a", card("A0")),
        node("b", card("B0", used=(1, 2000, 0))),
        node("c", card("C0", used=(2, 4000, 0))),
        node("d", card("D0", used=(1, 2000, 0))),
        node("x", card("X0", health=False)),
    ]


@pytest.mark.parametrize(
    "policy, order", [("binpack", ["c", "b", "d", "a"]), ("spread", ["a", "b", "d", "c"])]
)
def test_node_order_lists_node_scores_in_policy_order(policy, order):
    out = run_one(scored_nodes(), pod("p", {NODE_POLICY: policy}, ONE_GIB))
    assert [name for name, _ in out["node_order"]] == list(out["node_scores"]) == order
    assert [[name, out["node_scores"][name]] for name in order] == out["node_order"]
    assert out["node"] == order[0]


def test_node_order_keeps_the_top_entries_of_node_scores():
    out = run(scored_nodes(), [pod("p", {NODE_POLICY: "spread"}, ONE_GIB)], top=2)[0]
    assert out["node_order"] == [[name, score] for name, score in out["node_scores"].items()]
    assert [name for name, _ in out["node_order"]] == ["a", "b"]
    assert out["nodes_fit"] == 4


#: The keys beyond SPEC 9's: the failed nodes as data, the node order, init containers,
#: warnings, and for a pending pod the closest nodes and whether it can never fit.
EXTRA_KEYS = {
    "failed_reasons",
    "node_order",
    "init_containers",
    "warnings",
    "closest_nodes",
    "unschedulable",
    "unschedulable_reason",
    "verdict",
    "node_reasons",
}


def test_the_pod_object_keeps_every_spec_key_and_adds_the_extra_ones():
    scheduled, pending, rejected = run(
        [node("n1", card("G0"))],
        [pod("s", None, ONE_GIB), pod("p", None, ask(gpu=2)), pod("r", None, ask(gpu=0))],
    )
    for out in (scheduled, pending, rejected):
        assert set(out) == SPEC_KEYS | EXTRA_KEYS
        assert out["warnings"] == [] and out["init_containers"] == []
        assert out["closest_nodes"] == [] or out is pending
    assert (rejected["failed_reasons"], rejected["node_order"]) == ({}, [])
    assert scheduled["failed_reasons"] == {} and pending["node_order"] == []


def test_a_pod_asking_no_gpu_is_told_apart_by_its_code():
    scheduler = Scheduler(Cluster([Node("n1", [Card("G0", 0, 8000)])]))
    no_gpu = scheduler.decide(
        PodSpec("cpu", containers=[{"name": "main", "resources": {"limits": {"cpu": "1"}}}])
    )
    bad = scheduler.decide(PodSpec("bad", containers=[container("main", ask(gpu=0))]))
    assert (no_gpu.status, no_gpu.error_code, no_gpu.asks_no_gpu) == ("rejected", NO_GPU, True)
    assert (bad.status, bad.error_code, bad.asks_no_gpu) == ("rejected", None, False)


def test_asks_no_gpu_reads_the_code_not_the_message():
    worded = Decision(
        "p", "default", "rejected", error="containers: asks for no GPU", error_field="containers"
    )
    coded = Decision("p", "default", "rejected", error="anything", error_field="x", error_code=NO_GPU)
    assert not worded.asks_no_gpu
    assert coded.asks_no_gpu


def test_warnings_reach_the_decision_as_field_and_message():
    scheduler = Scheduler(Cluster([Node("n1", [Card("G0", 0, 8000)])]))
    decision = scheduler.decide(
        PodSpec(
            "p",
            annotations={GPU_POLICY: "binpack,fastest"},
            containers=[container("main", ask(gpu=1, mem=1000, cores=200))],
        )
    )
    assert decision.status == "scheduled"
    policy, cores = decision.warnings
    assert policy.startswith("annotations.hami.io/gpu-scheduler-policy: unknown policy 'fastest' ignored")
    assert cores == (
        "containers[0].resources.limits.nvidia.com/gpucores: container 'main': 200 is above 100, taken as 100"
    )
    assert decision.as_dict()["warnings"] == decision.warnings
    assert [d.cores for d in decision.containers[0].devices] == [100]


def test_a_rejected_pod_has_no_warnings():
    scheduler = Scheduler(Cluster([Node("n1", [Card("G0", 0, 8000)])]))
    decision = scheduler.decide(PodSpec("p", containers=[container("main", ask(gpu=0, cores=200))]))
    assert (decision.status, decision.warnings, decision.as_dict()["warnings"]) == ("rejected", [], [])


def test_init_containers_are_in_allocated_but_not_in_containers_nor_in_usage():
    """SPEC 2 + 8: an init container's cards come first in `allocated`; they are not app
    containers (no allocation rows) and the snapshot does not keep them as usage."""
    cluster = Cluster([Node("n1", [Card("G0", 0, 8000), Card("G1", 1, 8000)])])
    scheduler = Scheduler(cluster)
    spec = PodSpec(
        "p",
        annotations={GPU_POLICY: "binpack"},
        containers=[container("main", ask(gpu=1, mem=1000))],
        init_containers=[{"name": "clone"}, container("warm", ask(gpu=2, mem=6000, cores=20))],
    )
    decision = scheduler.schedule(spec)
    assert decision.allocated == ";G0,NVIDIA,6000,20:G1,NVIDIA,6000,20:;G0,NVIDIA,1000,0:;"
    assert [c.name for c in decision.containers] == ["main"]
    assert [(c.name, [d.uuid for d in c.devices]) for c in decision.init_containers] == [
        ("clone", []),
        ("warm", ["G0", "G1"]),
    ]
    g0, g1 = cluster.node("n1").cards
    assert (g0.used_slots, g0.used_memory, g0.used_cores) == (1, 1000, 0)
    assert (g1.used_slots, g1.used_memory, g1.used_cores) == (0, 0, 0)
