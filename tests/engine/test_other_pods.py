"""`OtherPods`: PodTopologySpread and InterPodAffinity judged with some pods leaving (a
preemption's trial fit) say what counting the cluster again without them says."""

from __future__ import annotations

import random

from scheduling.engine.model import Node, PodSpec
from scheduling.engine.noderules import NodeRules, accounting, other_pods

APPS = ("a", "b", "c")
KEYS = ("zone", "kubernetes.io/hostname", "rack")


def terms(rng: random.Random) -> dict | None:
    affinity = {}
    for kind in rng.sample(["podAffinity", "podAntiAffinity"], rng.randint(0, 2)):
        required = [
            {"labelSelector": {"matchLabels": {"app": rng.choice(APPS)}}, "topologyKey": rng.choice(KEYS)}
            for _ in range(rng.randint(1, 2))
        ]
        affinity[kind] = {"requiredDuringSchedulingIgnoredDuringExecution": required}
    return affinity or None


def world(rng: random.Random) -> list[Node]:
    nodes = []
    for i in range(rng.randint(1, 8)):
        labels = {"kubernetes.io/hostname": f"n{i}"}
        if rng.random() < 0.9:
            labels["zone"] = rng.choice(["z1", "z2", "z3"])
        if rng.random() < 0.5:
            labels["rack"] = rng.choice(["r1", "r2", ""])
        node = Node(name=f"n{i}", cards=[], labels=labels)
        for j in range(rng.randint(0, 4)):
            pod = PodSpec(
                f"p{i}-{j}",
                namespace=rng.choice(["default", "other"]),
                labels={"app": rng.choice(APPS)},
                affinity=terms(rng) if rng.random() < 0.3 else None,
            )
            accounting.add(node, accounting.footprint_of(pod))
        nodes.append(node)
    return nodes


def newcomer(rng: random.Random) -> NodeRules:
    spread = [
        {
            "maxSkew": rng.randint(1, 2),
            "topologyKey": rng.choice(["zone", "rack"]),
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": rng.choice(APPS)}},
            "minDomains": rng.choice([1, 1, 4]),
        }
    ]
    return NodeRules.of(
        PodSpec(
            "me",
            labels={"app": rng.choice(APPS)},
            affinity=terms(rng),
            topology_spread_constraints=spread if rng.random() < 0.6 else [],
        )
    )


def footprints(nodes: list[Node]) -> list:
    return [(node, fp) for node in nodes if node.held is not None for fp in node.held.pods.values()]


def barring(nodes: list[Node], rules: NodeRules) -> list:
    return [
        (node, fp)
        for node, fp in footprints(nodes)
        if any(t.matches(rules.namespace, rules.labels) for t in fp.anti_affinity)
    ]


def test_judging_with_pods_leaving_is_counting_again_without_them():
    rng = random.Random(27)
    judged = refused = 0
    for _ in range(600):
        nodes = world(rng)
        rules = newcomer(rng)
        counted = other_pods(rules, nodes, barring(nodes, rules))
        if counted is None:
            continue
        pods = footprints(nodes)
        leaving = rng.sample(pods, rng.randint(0, min(4, len(pods))))
        target = rng.choice(nodes)
        trial = counted.refuse(target, leaving)
        for node, fp in leaving:
            accounting.remove(node, fp.key)
        again = other_pods(rules, nodes, barring(nodes, rules))
        assert trial == (again.refuse(target) if again is not None else None)
        judged += 1
        refused += trial is not None
    assert judged > 300 and 0 < refused < judged  # both answers were exercised
