"""The engine's Python entry point: `Scheduler(cluster, config)` over plain dataclasses."""

from scheduling.engine import Card, Cluster, ClusterConfig, Node, PodSpec, Scheduler

from .builders import GPU_POLICY, ask, container


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
        PodSpec(name="p", containers=[container("main", ask(gpu=1, pct=0))])
    )
    assert decision.status == "rejected"
    assert decision.error_field == "containers[0].resources.limits.nvidia.com/gpumem-percentage"
    assert decision.allocated is None
