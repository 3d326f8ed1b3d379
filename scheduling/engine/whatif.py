"""What-if against a cluster snapshot: edits, then decisions, then capacity. Nothing is kept.

Callers (the what-if API, `manage.py simulate --live`, the Simulator's live mode) load a
fresh snapshot, apply `Edits` to it here and decide their pods against it, so nothing in
the database moves. The edits, each checked with the field at fault named:

- `cordon`: card UUIDs that take no new pod (as `hami.io/device-cordon` does);
- `drain`: node names that take no new pod (every card cordoned: the node is being drained);
- `empty`: node names whose tenants are gone (usage zero: what if they finished);
- `add`: `[{"like": node, "count": N}]`, N more nodes with the cards of `node`, empty,
  named `<node>-whatif-<i>` (card UUIDs `<uuid>-whatif-<i>`);
- `policies`: `{"node_scheduler_policy", "gpu_scheduler_policy"}`, the cluster defaults.

`capacity` answers "how many more pods of this ask fit now": per node, as many as the node
takes one after another (a pod's placement changes only its own node, so the total is the
sum over nodes), up to `limit` in all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from .decision import SCHEDULED, Decision
from .encoding import pair_key
from .errors import Problems, ScenarioError
from .model import Card, Cluster, ClusterConfig, Node, PodSpec
from .scenario import parse_pod_entry
from .scheduler import Scheduler

#: The most nodes one `add` edit may add in all, and the most pods capacity counts.
MAX_ADDED_NODES = 1000
MAX_CAPACITY = 10_000
NODE_POLICIES = ("binpack", "spread")


@dataclass
class Edits:
    cordon: list[str] = field(default_factory=list)
    drain: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    add: list[tuple[str, int]] = field(default_factory=list)
    policies: dict[str, str] = field(default_factory=dict)

    @property
    def any(self) -> bool:
        return bool(self.cordon or self.drain or self.empty or self.add or self.policies)


EDIT_KINDS = ("add", "cordon", "drain", "empty", "policies")
POLICY_KEYS = ("node_scheduler_policy", "gpu_scheduler_policy")


def _names(raw: Mapping, key: str) -> list[str]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ScenarioError(f"edits.{key}", "must be a list of names")
    return list(value)


def _adds(raw: object, found: Problems) -> list[tuple[str, int]]:
    """`add`'s `(like, count)` pairs, each bad one noted in `found`."""
    if not isinstance(raw, list):
        found.note("edits.add", "must be a list of {like, count}")
        return []
    adds = []
    for i, add in enumerate(raw):
        if not isinstance(add, Mapping) or not isinstance(add.get("like"), str):
            found.note(f"edits.add[{i}].like", "must name an existing node")
            continue
        count = add.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_ADDED_NODES:
            found.note(f"edits.add[{i}].count", f"must be an integer from 1 to {MAX_ADDED_NODES}")
            continue
        adds.append((add["like"], count))
    if sum(count for _, count in adds) > MAX_ADDED_NODES:
        found.note("edits.add", f"at most {MAX_ADDED_NODES} nodes in all")
    return adds


def _policies(raw: object, found: Problems) -> dict[str, str]:
    """`policies`' names, each bad one noted in `found`."""
    if not isinstance(raw, Mapping):
        found.note("edits.policies", "must be an object")
        return {}
    policies = {}
    for key, value in raw.items():
        where = f"edits.policies.{key}"
        if key not in POLICY_KEYS:
            found.note(where, f"unknown ({', '.join(POLICY_KEYS)})")
        elif not isinstance(value, str) or not value.strip():
            found.note(where, "must be a policy name")
        elif key == "node_scheduler_policy" and value not in NODE_POLICIES:
            found.note(where, f"must be binpack or spread, got {value!r}")
        else:
            policies[key] = value
    return policies


def parse_edits(raw: object) -> Edits:
    """Edits from their JSON form; bad ones raise ScenarioProblems naming each `edits.<field>`."""
    if raw is None:
        return Edits()
    if not isinstance(raw, Mapping):
        raise ScenarioError("edits", "must be an object")
    found = Problems()
    for key in raw:
        if key not in EDIT_KINDS:
            found.note(f"edits.{key}", f"unknown edit (known: {', '.join(EDIT_KINDS)})")
    edits = Edits(
        cordon=found.check(_names, raw, "cordon") or [],
        drain=found.check(_names, raw, "drain") or [],
        empty=found.check(_names, raw, "empty") or [],
        add=_adds(raw.get("add", []), found),
        policies=_policies(raw.get("policies", {}), found),
    )
    found.raise_any()
    return edits


def _copy_node(node: Node, name: str, suffix: str) -> Node:
    cards = [
        replace(
            card,
            uuid=f"{card.uuid}{suffix}",
            used_slots=0,
            used_memory=0,
            used_cores=0,
            cordoned=False,
            gangs=(),
            partition=card.partition.emptied() if card.partition is not None else None,
        )
        for card in node.cards
    ]
    links = {pair_key(f"{a}{suffix}", f"{b}{suffix}"): score for (a, b), score in node.links.items()}
    return Node(name=name, cards=cards, labels=dict(node.labels), ready=node.ready, links=links)


def apply_edits(cluster: Cluster, config: ClusterConfig, edits: Edits) -> tuple[Cluster, ClusterConfig]:
    """The snapshot with `edits` applied. Changes `cluster`'s cards in place (callers pass a
    snapshot of their own) and returns a new Cluster when nodes are added, with the same
    `running` pods (the added nodes hold none); an edit naming a node or card the snapshot
    does not have raises ScenarioError naming it."""
    cards: dict[str, Card] = {card.uuid: card for node in cluster.nodes for card in node.cards}
    for i, uuid in enumerate(edits.cordon):
        if uuid not in cards:
            raise ScenarioError(f"edits.cordon[{i}]", f"no card {uuid!r} in the cluster")
        cards[uuid].cordoned = True
    for key, names in (("drain", edits.drain), ("empty", edits.empty), ("add", [n for n, _ in edits.add])):
        for i, name in enumerate(names):
            if name not in cluster.by_name:
                raise ScenarioError(f"edits.{key}[{i}]", f"no node {name!r} in the cluster")
    for name in edits.drain:
        for card in cluster.node(name).cards:
            card.cordoned = True
    for name in edits.empty:
        for card in cluster.node(name).cards:
            card.used_slots = card.used_memory = card.used_cores = 0
            if card.partition is not None:
                card.partition = card.partition.emptied()
    for node in cluster.nodes:
        node.touch()
    if "node_scheduler_policy" in edits.policies:
        config = replace(config, node_scheduler_policy=edits.policies["node_scheduler_policy"])
    if "gpu_scheduler_policy" in edits.policies:
        config = replace(config, gpu_scheduler_policy=edits.policies["gpu_scheduler_policy"])
    if not edits.add:
        return cluster, config
    nodes = list(cluster.nodes)
    taken = set(cluster.by_name)
    for like, count in edits.add:
        source = cluster.node(like)
        made = 0
        i = 0
        while made < count:
            i += 1
            name = f"{like}-whatif-{i}"
            if name in taken:
                continue
            taken.add(name)
            nodes.append(_copy_node(source, name, f"-whatif-{i}"))
            made += 1
    return Cluster(nodes, running=list(cluster.running)), config


def decide_all(cluster: Cluster, config: ClusterConfig, pods: list[PodSpec]) -> list[Decision]:
    """Each pod in order against the snapshot, each seeing the placements before it."""
    scheduler = Scheduler(cluster, config)
    return [scheduler.schedule(pod) for pod in pods]


@dataclass
class Capacity:
    """How many more pods of one ask fit: per node (nodes taking none left out), in all,
    and whether `limit` cut the count short (`more`: at least `total`)."""

    total: int = 0
    per_node: dict[str, int] = field(default_factory=dict)
    more: bool = False
    first: Decision | None = None  # the decision for one pod, for the reasons when none fit

    def as_dict(self) -> dict:
        return {
            "total": self.total,
            "more": self.more,
            "nodes": [{"node": name, "pods": n} for name, n in sorted(self.per_node.items())],
        }


def capacity(cluster: Cluster, config: ClusterConfig, pod: PodSpec, limit: int = 1000) -> Capacity:
    """How many more copies of `pod` fit now (SPEC 7's node order decides nothing here: each
    node is filled alone, by the pod's own chain, on a copy of its cards), counting at most
    `limit`. `cluster` is left as it is."""
    limit = max(1, min(limit, MAX_CAPACITY))
    result = Capacity()
    result.first = Scheduler(cluster, config).decide(pod)
    for node in cluster.nodes:
        copy = Node(
            name=node.name,
            cards=[replace(card) for card in node.cards],
            labels=node.labels,
            ready=node.ready,
            links=node.links,
        )
        alone = Scheduler(Cluster([copy]), config, cached_shapes=1)
        while result.total < limit:
            decision = alone.schedule(pod)
            if decision.status != SCHEDULED:
                break
            result.per_node[node.name] = result.per_node.get(node.name, 0) + 1
            result.total += 1
        if result.total >= limit:
            result.more = True
            break
    return result


#: The most pods one what-if request decides.
MAX_PODS = 200


def parse_whatif(raw: object) -> tuple[list[PodSpec], Edits]:
    """`{"pods": [pod, ...], "edits": {...}}`, and a `job` read by `engine.batch.whatif` (pods in the shape of a scenario's, with their
    Kubernetes fields, SPEC 10, shaped as `engine.podschema` says); bad parts raise
    ScenarioProblems naming every one at once (`pods[1].containers`, `pods[0].annotatons`,
    `pods[0].tolerations[0].effect`, `edits.cordon[0]`)."""
    if not isinstance(raw, Mapping):
        raise ScenarioError("", "a what-if must be an object with pods and optional edits")
    found = Problems()
    for key in raw:
        if key not in ("pods", "edits", "job"):
            found.note(str(key), "unknown field (known: pods, edits, job)")
    pods = raw.get("pods")
    if not isinstance(pods, list) or not pods:
        found.note("pods", "required: a non-empty list of pods")
        pods = []
    elif len(pods) > MAX_PODS:
        raise ScenarioError("pods", f"at most {MAX_PODS} pods")
    parsed = [found.check(parse_pod_entry, pod, f"pods[{i}]") for i, pod in enumerate(pods)]
    edits = found.check(parse_edits, raw.get("edits"))
    found.raise_any()
    return [pod for pod in parsed if pod is not None], edits
