"""What issue 29 keeps across decisions stays true after the nodes change: one verdict object
per kind of failure (`evaluate.failed_verdict`, `columns.Swept.verdict`), the touch log's
entries matched to nodes once per scheduler (`Scheduler._mine_since`) and the policies read
per annotations (`annotations.parse_policy`). Each decision here is compared with a fresh
scheduler's on the same cluster, which has nothing cached."""

import copy

from scheduling.engine.annotations import parse_policy
from scheduling.engine.chain import FILTERS, BaseFilter
from scheduling.engine.evaluate import evaluate_alone, failed_verdict
from scheduling.engine.model import Cluster, ClusterConfig
from scheduling.engine.requests import ContainerAsk
from scheduling.engine.scenario import parse_scenario
from scheduling.engine.scheduler import Scheduler

from .builders import ask, card, node, pod, scenario

GPU_POLICY = "hami.io/gpu-scheduler-policy"


def cluster_of(count: int) -> tuple[Cluster, ClusterConfig, list]:
    """`count` two-card nodes, every tenth full, and pods of one shape that fit the others."""
    nodes = [
        node(
            f"n{i:03d}",
            card(f"G{i}-0", used=(10, 15360, 100) if i % 10 == 0 else (1, 1000, 10)),
            card(f"G{i}-1", used=(0, 0, 0)),
        )
        for i in range(count)
    ]
    pods = [pod(f"p{i}", {GPU_POLICY: "binpack"}, ask(gpu=2, mem=2000)) for i in range(4)]
    return parse_scenario(scenario(nodes, pods))


def fresh_decision(cluster: Cluster, config: ClusterConfig, spec) -> dict:
    """The decision of a scheduler that has seen nothing, on a copy of the cluster as it is."""
    return Scheduler(copy.deepcopy(cluster), config, keep=None).decide(copy.deepcopy(spec)).as_dict()


def fill(cluster: Cluster, names: list[str]) -> None:
    """Every slot of the second card of each node named taken: a change the shape must see."""
    for name in names:
        target = cluster.node(name)
        target.cards[1].used_slots = target.cards[1].slots
        target.touch()


def test_a_changed_node_is_decided_again_by_its_new_cards():
    """A few nodes changed (checked one by one) and many (re-swept as columns): each
    decision after is what a scheduler with nothing cached decides, failures counted anew."""
    cluster, config, pods = cluster_of(100)
    scheduler = Scheduler(cluster, config, keep=None)
    first = scheduler.decide(pods[0]).as_dict()
    assert first["nodes_failed"] == 10
    fill(cluster, ["n001", "n002"])
    second = scheduler.decide(pods[1]).as_dict()
    assert second["nodes_failed"] == 12
    assert second == fresh_decision(cluster, config, pods[1])
    fill(cluster, [f"n{i:03d}" for i in range(3, 60)])
    third = scheduler.decide(pods[2]).as_dict()
    assert third == fresh_decision(cluster, config, pods[2])
    assert third["failed_reasons"]["n003"] != first["failed_reasons"].get("n003")


def test_a_node_of_another_cluster_touched_is_not_taken_for_ours():
    """The touch log is the process's: a node of another cluster with a name of ours changes
    nothing here, and ours changed after it still counts (the entries matched once each)."""
    cluster, config, pods = cluster_of(100)
    other, _, _ = cluster_of(100)
    scheduler = Scheduler(cluster, config, keep=None)
    before = scheduler.decide(pods[0]).as_dict()
    fill(other, ["n001", "n002", "n003"])
    assert scheduler.decide(pods[1]).as_dict() == {**before, "name": "p1"}
    fill(cluster, ["n004"])
    fill(other, ["n005"])
    after = scheduler.decide(pods[2]).as_dict()
    assert after == fresh_decision(cluster, config, pods[2])
    assert "n004" in after["failed_nodes"] and "n005" not in after["failed_nodes"]


def test_one_verdict_per_kind_of_failure_and_a_new_one_when_the_node_changes():
    cluster, _, _ = cluster_of(2)
    policy = parse_policy({}, ClusterConfig())
    target = cluster.node("n001")
    want = ContainerAsk("main", 2, 20000, 0, 0)  # more MiB than either card has
    before = evaluate_alone(target, want, [want], policy)
    assert before is evaluate_alone(target, want, [want], policy)
    assert before is failed_verdict(2, {"CardInsufficientMemory": 2})
    fill(cluster, ["n001"])
    after = evaluate_alone(target, want, [want], policy)
    assert after.failure is not None and after.failure.reasons == {
        "CardInsufficientMemory": 1,
        "CardTimeSlicingExhausted": 1,
    }


class _NeverFilter(BaseFilter):
    """A chain filter that refuses every card (registered by the test below only)."""

    name = "refuse-all"
    in_chain = True

    def rejects(self, card, used):
        return ("CardTypeMismatch", "type")


def test_a_policy_read_before_a_filter_is_registered_is_read_again_after(monkeypatch):
    annotations = {GPU_POLICY: "refuse-all,binpack"}
    before = parse_policy(annotations, ClusterConfig())
    assert before is parse_policy(dict(annotations), ClusterConfig())  # kept, by what it reads
    assert before.chain == ("binpack",) and before.ignored == ("refuse-all",)
    monkeypatch.setitem(FILTERS, _NeverFilter.name, _NeverFilter())
    after = parse_policy(annotations, ClusterConfig())
    assert after.chain == ("refuse-all", "binpack") and after.ignored == ()
    assert parse_policy(annotations, ClusterConfig(node_scheduler_policy="spread")).node_policy == "spread"
