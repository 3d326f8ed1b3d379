"""Preemption respects the node rules (SPEC 10): victims are only chosen on a node the
preemptor could use once they leave, their cpu and memory freed in the trial fit."""

from __future__ import annotations

from scheduling.engine.batch.jobs import Job, Member
from scheduling.engine.batch.preempt import NODE_RULES_REFUSE, PREEMPTING
from scheduling.engine.decision import PENDING
from scheduling.engine.model import PodSpec
from scheduling.engine.noderules import accounting

from .test_preempt import World


def member(name: str, mem: int = 8000, requests: dict | None = None, **fields) -> Job:
    resources: dict = {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem}}
    if requests:
        resources["requests"] = requests
    spec = PodSpec(name, containers=[{"name": "main", "resources": resources}], **fields)
    return Job("default", 100, (0, name), [Member(spec)])


def full_world() -> World:
    w = World({"inference": [16000], "training": [16000]})
    w.cluster.node("inference").labels = {"pool": "inference"}
    w.cluster.node("training").labels = {"pool": "training"}
    w.run("cheap", "inference", {0: 12000}, priority=0)  # the cheaper victim, on the wrong pool
    w.run("dear", "training", {0: 14000}, priority=0)
    return w


def test_victims_are_chosen_only_on_a_node_the_selector_allows():
    w = full_world()
    decision = w.runner().run([member("big", node_selector={"pool": "training"})])[0].decision
    assert decision.status == PENDING and decision.batch.reason == PREEMPTING
    assert decision.preemption.node == "training"
    assert [v.pod for v in decision.preemption.victims] == ["default/dear"]


def test_no_victim_is_chosen_where_a_taint_refuses_the_pod_whoever_leaves():
    w = full_world()
    w.cluster.node("training").taints = [{"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}]
    decision = w.runner().run([member("big", node_selector={"pool": "training"})])[0].decision
    assert decision.preemption is not None and decision.preemption.tried
    assert NODE_RULES_REFUSE in decision.preemption.why


def test_a_victims_cpu_is_freed_in_the_trial_fit():
    w = World({"n1": [16000, 16000]})
    node = w.cluster.node("n1")
    node.allocatable = {"cpu": "2"}
    w.run("busy", "n1", {0: 1000}, priority=0)
    spec = PodSpec("default-busy", containers=[{"resources": {"requests": {"cpu": "2"}}}])
    held = accounting.footprint_of(spec)
    accounting.add(node, accounting.Footprint("default/busy", "default", {}, held.request))
    decision = w.runner().run([member("needs-cpu", mem=1000, requests={"cpu": "1"})])[0].decision
    assert decision.batch is not None and decision.batch.reason == PREEMPTING
    assert [v.pod for v in decision.preemption.victims] == ["default/busy"]
