"""The node rules through any stream of placements decide as a plain reference does: every
node checked afresh by SPEC 10's rules written out (cordon, taints, node selector, cpu and
pod count with the running and placed pods counted), then its cards (`evaluate_node`), the
ranking in SPEC 7's order. Small worlds go node by node, large ones through the columnar
sweep and the re-sweeps, so caching, the index and the sweep are all checked against it."""

from __future__ import annotations

import random

import pytest

from scheduling.engine.chain import TOLERANCE
from scheduling.engine.evaluate import evaluate_node
from scheduling.engine.model import Card, Cluster, ClusterConfig, Node, PodSpec, RunningPod
from scheduling.engine.noderules import account_running
from scheduling.engine.pod import parse_pod
from scheduling.engine.scheduler import Scheduler

POOLS = ("a", "b")
TAINTS = (
    {"key": "dedicated", "value": "x", "effect": "NoSchedule"},
    {"key": "gpu", "value": "", "effect": "NoExecute"},
)


def world(rng: random.Random, size: int) -> tuple[Cluster, dict[str, int]]:
    nodes = []
    for i in range(size):
        fields: dict = {"labels": {"pool": rng.choice(POOLS)}}
        if rng.random() < 0.15:
            fields["unschedulable"] = True
        if rng.random() < 0.25:
            fields["taints"] = [rng.choice(TAINTS)]
        if rng.random() < 0.7:
            fields["allocatable"] = {"cpu": str(rng.randint(1, 8)), "pods": str(rng.randint(1, 6))}
        cards = [
            Card(uuid=f"n{i}-{j}", index=j, memory=rng.choice((8000, 16000)))
            for j in range(rng.randint(1, 4))
        ]
        nodes.append(Node(f"n{i:03}", cards=cards, **fields))
    running = []
    cpu: dict[str, int] = {}
    for k in range(size):
        node = rng.choice(nodes)
        amount = rng.randint(0, 3)
        running.append(
            RunningPod(
                f"r{k}", node=node.name, containers=[{"resources": {"requests": {"cpu": str(amount)}}}]
            )
        )
        cpu[node.name] = cpu.get(node.name, 0) + amount
    cluster = Cluster(nodes=nodes, running=running)
    account_running(cluster)
    return cluster, cpu


def a_pod(rng: random.Random, k: int) -> PodSpec:
    limits = {"nvidia.com/gpu": rng.randint(1, 2), "nvidia.com/gpumem": rng.choice((2000, 6000, 12000))}
    resources: dict = {"limits": limits, "requests": {"cpu": str(rng.randint(0, 3))}}
    fields: dict = {}
    if rng.random() < 0.5:
        fields["node_selector"] = {"pool": rng.choice(POOLS)}
    if rng.random() < 0.5:
        fields["tolerations"] = [
            rng.choice(({"key": "dedicated", "value": "x"}, {"key": "gpu", "operator": "Exists"}))
        ]
    if rng.random() < 0.2:
        fields["tolerations"] = [
            *fields.get("tolerations", []),
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
        ]
    return PodSpec(f"p{k}", containers=[{"name": "main", "resources": resources}], **fields)


def tolerated(pod: PodSpec, taint: dict) -> bool:
    for t in pod.tolerations:
        if t.get("key") == taint["key"] and (
            t.get("operator") == "Exists" or t.get("value") == taint["value"]
        ):
            return True
    return False


def reference(cluster: Cluster, cpu: dict[str, int], pods: dict[str, int], pod: PodSpec):
    """(ranking, {node: rule or card counts}, reasons) with every rule written out."""
    parsed = parse_pod(pod, ClusterConfig())
    sign = -1.0 if parsed.policy.node_policy == "binpack" else 1.0
    asked = int(pod.containers[0]["resources"]["requests"]["cpu"]) * 1000
    fitting, failed, reasons = [], {}, {}
    for node in cluster.nodes:
        rule = None
        if node.unschedulable and not tolerated(
            pod, {"key": "node.kubernetes.io/unschedulable", "value": ""}
        ):
            rule = "NodeUnschedulable"
        elif any(not tolerated(pod, taint) for taint in node.taints):
            rule = "TaintToleration"
        elif any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
            rule = "NodeAffinity"
        elif (
            "cpu" in node.allocatable
            and asked
            and asked > int(node.allocatable["cpu"]) * 1000 - cpu.get(node.name, 0) * 1000
        ):
            rule = "NodeResourcesFit"
        elif "pods" in node.allocatable and pods.get(node.name, 0) + 1 > int(node.allocatable["pods"]):
            rule = "NodeResourcesFit"
        if rule is not None:
            failed[node.name] = rule
            reasons[rule] = reasons.get(rule, 0) + 1
            continue
        verdict = evaluate_node(node, parsed.gpu_inits, list(parsed.apps), parsed.policy)
        if verdict.failure is None:
            fitting.append((sign * verdict.score, node.name, verdict.score))
        else:
            failed[node.name] = dict(verdict.failure.reasons)
            for reason, n in verdict.failure.reasons.items():
                reasons[reason] = reasons.get(reason, 0) + n
    keyed = sorted(fitting)
    ranking, start = [], 0
    while start < len(keyed):
        end = start
        while end < len(keyed) and keyed[end][0] - keyed[start][0] < TOLERANCE:
            end += 1
        ranking.extend((name, score) for _, name, score in sorted(keyed[start:end], key=lambda item: item[1]))
        start = end
    return ranking, failed, reasons


@pytest.mark.parametrize("size", [6, 80])
@pytest.mark.parametrize("seed", range(6))
def test_a_stream_of_placements_decides_as_the_reference(seed, size):
    rng = random.Random(seed * 1000 + size)
    cluster, cpu = world(rng, size)
    pods: dict[str, int] = {}
    for running in cluster.running:
        pods[running.node] = pods.get(running.node, 0) + 1
    scheduler = Scheduler(cluster)
    for k in range(40):
        pod = a_pod(rng, k)
        decision = scheduler.decide(pod)
        ranking, failed, reasons = reference(cluster, cpu, pods, pod)
        assert decision.node_ranking == ranking
        assert decision.reasons == reasons
        got = {
            name: (f.rule if hasattr(f, "rule") else dict(f.reasons)) for name, f in decision.node_failures
        }
        assert got == failed
        if decision.node is not None and rng.random() < 0.8:
            scheduler.assume(decision)
            cpu[decision.node] = cpu.get(decision.node, 0) + int(
                pod.containers[0]["resources"]["requests"]["cpu"]
            )
            pods[decision.node] = pods.get(decision.node, 0) + 1
