"""The per-node rules over columns (`noderules.columns.refusals`) give every node the failure
`NodeRules.refuse` gives it, node by node, in random worlds: labels, taints, cordons,
allocatable, running pods holding cpu and host ports, and pods asking every kind of rule;
and again after nodes change and their rows are refreshed."""

from __future__ import annotations

import random

import pytest

from scheduling.engine.model import Card, Node, PodSpec, RunningPod
from scheduling.engine.noderules import NodeRules, accounting
from scheduling.engine.noderules.columns import NodeColumns, refusals

KEYS = ("pool", "zone", "gen")
VALUES = ("a", "b", "c", "7", "12")
TAINTS = (
    {"key": "dedicated", "value": "x", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "y", "effect": "NoSchedule"},
    {"key": "gpu", "value": "", "effect": "NoExecute"},
    {"key": "soft", "value": "", "effect": "PreferNoSchedule"},
)


def node_fields(rng: random.Random, node: Node) -> None:
    node.labels = {k: rng.choice(VALUES) for k in KEYS if rng.random() < 0.7}
    node.taints = rng.sample(TAINTS, rng.randint(0, 2)) if rng.random() < 0.4 else []
    node.unschedulable = rng.random() < 0.1
    node.allocatable = {}
    if rng.random() < 0.7:
        node.allocatable = {"cpu": str(rng.randint(1, 8)), "pods": str(rng.randint(1, 4))}
        if rng.random() < 0.3:
            node.allocatable["example.com/fpga"] = str(rng.randint(0, 2))


def world(rng: random.Random, size: int) -> list[Node]:
    nodes = []
    for i in range(size):
        node = Node(
            name=f"n{i:03d}",
            cards=[Card(uuid=f"n{i}-{j}", index=j, memory=8000) for j in range(rng.randint(0, 3))],
        )
        node_fields(rng, node)
        nodes.append(node)
    for k in range(size):
        node = rng.choice(nodes)
        running = RunningPod(
            name=f"r{k}",
            namespace="default",
            node=node.name,
            containers=[
                {
                    "name": "c",
                    "resources": {"requests": {"cpu": str(rng.randint(0, 3))}},
                    "ports": [{"containerPort": 80, "hostPort": rng.choice((0, 80, 443))}],
                }
            ],
        )
        accounting.add(node, accounting.footprint_of(running, running=True))
    return nodes


def expression(rng: random.Random) -> dict:
    op = rng.choice(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"))
    entry: dict = {"key": rng.choice(KEYS), "operator": op}
    if op in ("In", "NotIn"):
        entry["values"] = rng.sample(VALUES, rng.randint(1, 2))
    elif op in ("Gt", "Lt"):
        entry["values"] = [str(rng.randint(0, 13))]
    return entry


def pod(rng: random.Random, names: list[str]) -> PodSpec:
    spec = PodSpec(name="p", namespace="default", containers=[{"name": "main", "resources": {}}])
    requests: dict = {}
    if rng.random() < 0.6:
        requests["cpu"] = str(rng.randint(1, 6))
    if rng.random() < 0.2:
        requests["example.com/fpga"] = "1"
    spec.containers[0]["resources"]["requests"] = requests
    if rng.random() < 0.3:
        spec.containers[0]["ports"] = [{"containerPort": 80, "hostPort": rng.choice((80, 443))}]
    if rng.random() < 0.4:
        spec.node_selector = {rng.choice(KEYS): rng.choice(VALUES)}
    if rng.random() < 0.4:
        terms = []
        for _ in range(rng.randint(1, 2)):
            term: dict = {"matchExpressions": [expression(rng) for _ in range(rng.randint(0, 2))]}
            if rng.random() < 0.3:
                term["matchFields"] = [
                    {
                        "key": "metadata.name",
                        "operator": rng.choice(("In", "NotIn")),
                        "values": rng.sample(names, 2),
                    }
                ]
            terms.append(term)
        spec.affinity = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        }
    if rng.random() < 0.5:
        spec.tolerations = rng.choice(
            (
                [{"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"}],
                [{"key": "dedicated", "operator": "Exists"}],
                [{"operator": "Exists"}],
                [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}],
                [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}],
            )
        )
    if rng.random() < 0.2:
        spec.node_name = rng.choice(names + ["elsewhere"])
    return spec


def check(rules: NodeRules, nodes: list[Node], columns: NodeColumns) -> None:
    found = refusals(rules, columns)
    for i, node in enumerate(nodes):
        expected = rules.refuse(node)
        got = None if found is None or found[0][i] < 0 else found[1][found[0][i]]
        assert got == expected, (node.name, expected, got)


@pytest.mark.parametrize("seed", range(25))
def test_columns_refuse_as_the_rules_do(seed):
    rng = random.Random(seed)
    nodes = world(rng, 40)
    columns = NodeColumns(nodes)
    names = [node.name for node in nodes]
    for _ in range(15):
        check(NodeRules.read(pod(rng, names)), nodes, columns)
    # nodes change (labels, taints, cordons, pods placed and gone); their rows are refreshed
    for _ in range(10):
        node = rng.choice(nodes)
        if rng.random() < 0.5:
            node_fields(rng, node)
        else:
            spec = pod(rng, names)
            spec.name = f"placed-{rng.random()}"
            accounting.add(node, NodeRules.read(spec).footprint(spec.key))
        columns.refresh(nodes.index(node), node)
        check(NodeRules.read(pod(rng, names)), nodes, columns)


def test_failures_are_shared_between_nodes_that_fail_alike():
    nodes = [
        Node(name=f"n{i}", labels={"pool": "a"}, cards=[Card(uuid=f"u{i}", index=0, memory=8000)])
        for i in range(50)
    ]
    spec = PodSpec(name="p", namespace="default", node_selector={"pool": "b"})
    code, failures = refusals(NodeRules.read(spec), NodeColumns(nodes))
    assert len(failures) == 1 and (code == 0).all()
    assert failures[0].rule == "NodeAffinity" and failures[0].cards == 1


# --- the rules that read other pods ------------------------------------------------------------

ZONES = ("z1", "z2", "z3")
APPS = ("web", "db", "cache")


def pod_world(rng: random.Random, size: int) -> list[Node]:
    nodes = []
    for i in range(size):
        labels = {"kubernetes.io/hostname": f"h{i}"}
        if rng.random() < 0.9:
            labels["zone"] = rng.choice(ZONES)
        if rng.random() < 0.5:
            labels["pool"] = rng.choice(("a", "b"))
        node = Node(name=f"h{i:03d}", labels=labels, cards=[Card(uuid=f"h{i}", index=0, memory=8000)])
        if rng.random() < 0.2:
            node.taints = [TAINTS[0]]
        nodes.append(node)
    for k in range(size):
        node = rng.choice(nodes)
        running = RunningPod(
            name=f"r{k}",
            namespace=rng.choice(("default", "other")),
            node=node.name,
            labels={"app": rng.choice(APPS)},
            affinity=_anti(rng.choice(APPS), rng.choice(("zone", "kubernetes.io/hostname")))
            if rng.random() < 0.2
            else None,
        )
        accounting.add(node, accounting.footprint_of(running, running=True))
    return nodes


def _anti(app: str, key: str) -> dict:
    term = {"topologyKey": key, "labelSelector": {"matchLabels": {"app": app}}}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def social_pod(rng: random.Random) -> PodSpec:
    app = rng.choice(APPS)
    spec = PodSpec(name="p", namespace="default", labels={"app": app})
    if rng.random() < 0.5:
        spec.topology_spread_constraints = [
            {
                "maxSkew": rng.randint(1, 2),
                "topologyKey": rng.choice(("zone", "kubernetes.io/hostname")),
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": rng.choice(APPS)}},
                "minDomains": rng.choice((1, 1, 4)),
                "nodeAffinityPolicy": rng.choice(("Honor", "Ignore")),
                "nodeTaintsPolicy": rng.choice(("Honor", "Ignore")),
            }
        ]
    affinity: dict = {}
    if rng.random() < 0.4:
        affinity.update(_anti(rng.choice(APPS), rng.choice(("zone", "kubernetes.io/hostname"))))
    if rng.random() < 0.3:
        term = {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": rng.choice(APPS)}}}
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    spec.affinity = affinity or None
    if rng.random() < 0.3:
        spec.node_selector = {"pool": "a"}
    return spec


@pytest.mark.parametrize("seed", range(25))
def test_spread_and_pod_affinity_over_columns_refuse_as_the_rules_do(seed):
    from scheduling.engine.noderules import refusals as node_refusals
    from scheduling.engine.noderules.columns import other_pod_refusals

    rng = random.Random(seed)
    nodes = pod_world(rng, 30)
    columns = NodeColumns(nodes)
    for _ in range(15):
        rules = NodeRules.read(social_pod(rng))
        holders = [
            (node, fp)
            for node in nodes
            if node.held is not None
            for fp in node.held.pods.values()
            if any(term.matches(rules.namespace, rules.labels) for term in fp.anti_affinity)
        ]
        expected = node_refusals(rules, nodes, nodes, holders)
        assert other_pod_refusals(rules, columns, holders) == expected


@pytest.mark.parametrize("seed", range(4))
def test_a_scheduler_decides_alike_node_by_node_and_over_columns(seed):
    """The same stream of pods with spread, pod (anti-)affinity and existing anti-affinity,
    placed one after another: decided node by node (as under `SWEEP_NODES`) and over columns,
    every decision is the same, kept whole or to three nodes."""
    from scheduling.engine.model import Cluster
    from scheduling.engine.scheduler import Scheduler

    rng = random.Random(seed)
    specs = [social_pod(rng) for _ in range(40)]
    for i, spec in enumerate(specs):
        spec.name = f"p{i}"
        spec.containers = [
            {"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}
        ]
    for keep in (None, 3):
        answers = []
        for sweep_nodes in (10**9, 1):
            scheduler = Scheduler(Cluster(nodes=pod_world(random.Random(seed), 80)), keep=keep)
            scheduler.SWEEP_NODES = sweep_nodes
            answers.append([scheduler.schedule(spec).as_dict() for spec in specs])
        for one, other in zip(*answers, strict=True):
            one.pop("duration_ms", None), other.pop("duration_ms", None)
            assert one == other
        assert any(d["reasons"].get("InterPodAffinity") for d in answers[0])
        assert any(d["reasons"].get("PodTopologySpread") for d in answers[0])
