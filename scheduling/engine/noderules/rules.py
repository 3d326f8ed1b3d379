"""One pod's node rules (SPEC 10): kube-scheduler's filters, in SPEC order, each a small
function named after the plugin it mirrors, returning its message or None.

`NodeRules.read(pod)` reads and validates the pod's fields once (PodInvalid naming the field);
`refuse(node)` is the first of the per-node rules that refuses it, as a `RuleFailure`:
`NodeUnschedulable`, `NodeName`, `TaintToleration`, `NodeAffinity`, `NodePorts`,
`NodeResourcesFit`, `VolumeBinding` (`volumes`; a pod-wide refusal such as a missing claim
refuses every node under it first, as kube-scheduler's PreFilter does). They depend only on
the node (its version moves whenever any of them could change), so their verdict is cached
with the card verdicts; `key` is what of the pod they read, part of the pod's shape.
`PodTopologySpread` and `InterPodAffinity` read the other nodes and are decided per decision
(`interpod`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import PodInvalid
from ..fit import NodeFailure
from ..model import Node, PodSpec
from ..quantity import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, STANDARD
from ..reasons import (
    NODE_AFFINITY,
    NODE_NAME,
    NODE_PORTS,
    NODE_RESOURCES_FIT,
    NODE_RULES,
    NODE_UNSCHEDULABLE,
    TAINT_TOLERATION,
    VOLUME_BINDING,
)
from ..requests import FAMILY_OF_RESOURCE as GPU_RESOURCES
from . import accounting
from .interpod import PodAffinity, Spread, pod_affinity, spreads
from .terms import (
    NO_EXECUTE,
    NO_SCHEDULE,
    NodeTerm,
    Toleration,
    _dict,
    _list,
    node_term,
    node_terms,
    string_map,
    taint_words,
    tolerations,
    untolerated,
)
from .volumes import NO_VOLUMES, PodVolumes, Storage, read_storage, resolve

#: SPEC 10's order: a node counts under the first of these it fails.
ORDER = NODE_RULES
RULES = frozenset(ORDER)

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": NO_SCHEDULE}
WORDS = {
    NODE_UNSCHEDULABLE: "node(s) were unschedulable",
    NODE_NAME: "node(s) didn't match the requested node name",
    NODE_AFFINITY: "node(s) didn't match Pod's node affinity/selector",
    NODE_PORTS: "node(s) didn't have free ports for the requested pod ports",
}


@dataclass(frozen=True, slots=True)
class RuleFailure(NodeFailure):
    """A node refused by a node rule: counted once under `rule` in the reasons (no card
    reasons); `messages` are kube-scheduler's words (`Insufficient cpu`, `Insufficient
    memory`, ...), what the one-line summary counts nodes under."""

    rule: str = ""
    messages: tuple[str, ...] = ()
    #: what would make the node pass (`NodeRules.hints`), written for the nodes a pending
    #: decision keeps: "tolerate dedicated=team-b", "free 2 cpu on node-3"
    hints: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return f"{self.rule}: {', '.join(self.messages)}"


def shortage_words(resource: str) -> str:
    """kube-scheduler's words for a resource a node has too little of."""
    return "Too many pods" if resource == PODS else f"Insufficient {resource}"


def rule_failure(rule: str, messages: tuple[str, ...], cards: int = 0) -> RuleFailure:
    return RuleFailure(cards, {rule: 1}, rule=rule, messages=messages)


@dataclass(frozen=True, slots=True)
class NodeRules:
    """A pod's node rules, read. `key` holds what they read of the pod (pods with equal keys
    get equal per-node verdicts)."""

    namespace: str = "default"
    labels: dict[str, str] = field(default_factory=dict)
    node_name: str = ""
    selector: tuple[tuple[str, str], ...] = ()
    required: tuple[NodeTerm, ...] | None = None
    preferred: tuple[tuple[int, NodeTerm], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    request: tuple[tuple[str, int], ...] = ((PODS, 1),)
    ports: tuple[accounting.Port, ...] = ()
    spread: tuple[Spread, ...] = ()
    pods: PodAffinity = PodAffinity()
    gated: bool = False
    volumes: PodVolumes = NO_VOLUMES

    @classmethod
    def of(cls, pod: PodSpec) -> NodeRules:
        """`read`, or `PLAIN` at once for a pod that writes none of the fields (GPU resources only)."""
        if (
            pod.labels
            or pod.node_name
            or pod.node_selector
            or pod.affinity
            or pod.tolerations
            or pod.topology_spread_constraints
            or pod.scheduling_gates
            or pod.volumes
            or not _gpu_only(pod.containers)
            or not _gpu_only(pod.init_containers)
        ):
            return cls.read(pod)
        return PLAIN

    @classmethod
    def read(cls, pod: PodSpec) -> NodeRules:
        """The pod's node rules; PodInvalid naming the field for what does not read."""
        labels = string_map(pod.labels, "labels")
        affinity = _dict(pod.affinity, "affinity")
        node = _dict(affinity.get("nodeAffinity"), "affinity.nodeAffinity")
        at = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        required = None
        if node.get("requiredDuringSchedulingIgnoredDuringExecution") is not None:
            selector = _dict(node["requiredDuringSchedulingIgnoredDuringExecution"], at)
            required = node_terms(selector.get("nodeSelectorTerms"), f"{at}.nodeSelectorTerms")
        soft = "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
        preferred = []
        for i, entry in enumerate(_list(node.get("preferredDuringSchedulingIgnoredDuringExecution"), soft)):
            entry = _dict(entry, f"{soft}[{i}]")
            weight = entry.get("weight")
            if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
                raise PodInvalid(
                    f"{soft}[{i}].weight", f"must be a whole number from 1 to 100, got {weight!r}"
                )
            preferred.append((weight, node_term(entry.get("preference"), f"{soft}[{i}].preference")))
        if not isinstance(pod.node_name or "", str):
            raise PodInvalid("nodeName", f"must be a string, got {pod.node_name!r}")
        footprint = accounting.footprint_of(pod)
        gates = _list(pod.scheduling_gates, "schedulingGates")
        return cls(
            namespace=pod.namespace,
            labels=labels,
            node_name=pod.node_name or "",
            selector=tuple(sorted(string_map(pod.node_selector, "nodeSelector").items())),
            required=required,
            preferred=tuple(preferred),
            tolerations=tolerations(pod.tolerations, "tolerations"),
            request=tuple(sorted(footprint.request.items())),
            ports=footprint.ports,
            spread=spreads(pod.topology_spread_constraints, "topologySpreadConstraints", labels),
            pods=pod_affinity(pod.affinity, "affinity", pod.namespace, labels),
            gated=bool(gates),
            volumes=_volumes(pod),
        )

    @property
    def key(self) -> tuple:
        """What the per-node rules read of the pod."""
        return (
            self.node_name,
            self.selector,
            self.required,
            self.tolerations,
            self.request,
            self.ports,
            self.volumes,
        )

    @property
    def plain(self) -> bool:
        """Whether the per-node rules read nothing of the pod beyond its being one pod."""
        return self.key == _PLAIN_KEY

    def footprint(self, key: str) -> accounting.Footprint:
        """What the pod holds of a node once placed there."""
        return accounting.Footprint(
            key=key,
            namespace=self.namespace,
            labels=self.labels,
            request=dict(self.request),
            ports=self.ports,
            anti_affinity=self.pods.anti_affinity,
        )

    @property
    def dynamic(self) -> bool:
        """Whether the pod has hard spread constraints or required pod (anti-)affinity."""
        return any(c.hard for c in self.spread) or bool(self.pods.affinity or self.pods.anti_affinity)

    @property
    def prefers(self) -> bool:
        """Whether anything of the pod ranks nodes (preferences)."""
        return bool(self.preferred or self.pods.preferred or any(not c.hard for c in self.spread))

    # --- the filters, in SPEC order -----------------------------------------------------------

    def node_unschedulable(self, node: Node) -> str | None:
        if node.unschedulable and not any(t.tolerates(UNSCHEDULABLE_TAINT) for t in self.tolerations):
            return WORDS[NODE_UNSCHEDULABLE]
        return None

    def node_name_rule(self, node: Node) -> str | None:
        if self.node_name and node.name != self.node_name:
            return WORDS[NODE_NAME]
        return None

    def taint_toleration(self, node: Node) -> str | None:
        if not node.taints:
            return None
        taint = untolerated(node.taints, self.tolerations, (NO_SCHEDULE, NO_EXECUTE))
        return None if taint is None else f"node(s) had untolerated taint {taint_words(taint)}"

    def matches_node(self, node: Node) -> bool:
        """nodeSelector and the required node affinity terms (ORed), as `NodeAffinity` reads them."""
        labels = node.labels
        for key, value in self.selector:
            if labels.get(key) != value:
                return False
        if self.required is not None:
            return any(term.matches(node.name, labels) for term in self.required)
        return True

    def node_affinity(self, node: Node) -> str | None:
        return None if self.matches_node(node) else WORDS[NODE_AFFINITY]

    def node_ports(self, node: Node) -> str | None:
        if not self.ports or node.held is None:
            return None
        return WORDS[NODE_PORTS] if accounting.port_conflict(self.ports, node.held.ports) else None

    def node_resources_fit(self, node: Node) -> tuple[str, ...]:
        """kube-scheduler's messages for each resource that does not fit (none: it fits). A
        resource the pod asks 0 of is not checked; `pods` always is (the pod is one)."""
        if not node.allocatable and node.held is None and all(name in STANDARD for name, _ in self.request):
            return ()
        limits = accounting.capacity(node)
        requested = node.held.requested if node.held is not None else {}
        missing = []
        for name, asked in self.request:
            if not asked:
                continue
            limit = limits.get(name)
            if limit is None:
                if name in STANDARD:
                    continue  # not limited
                limit = 0  # an extended resource the node does not have
            if asked > limit - requested.get(name, 0):
                missing.append(shortage_words(name))
        return tuple(missing)

    def refuse(self, node: Node) -> RuleFailure | None:
        """The first per-node rule that refuses `node`, or None when it passes them all. Asked
        of every node a decision re-checks, so each rule is guarded by what makes it moot."""
        if self.volumes.refusal:  # VolumeBinding's PreFilter: the pod can go nowhere
            return rule_failure(VOLUME_BINDING, (self.volumes.refusal,), len(node.cards))
        if node.unschedulable:
            message = self.node_unschedulable(node)
            if message is not None:
                return rule_failure(NODE_UNSCHEDULABLE, (message,), len(node.cards))
        if self.node_name and node.name != self.node_name:
            return rule_failure(NODE_NAME, (WORDS[NODE_NAME],), len(node.cards))
        if node.taints:
            message = self.taint_toleration(node)
            if message is not None:
                return rule_failure(TAINT_TOLERATION, (message,), len(node.cards))
        if (self.selector or self.required is not None) and not self.matches_node(node):
            return rule_failure(NODE_AFFINITY, (WORDS[NODE_AFFINITY],), len(node.cards))
        if self.ports:
            message = self.node_ports(node)
            if message is not None:
                return rule_failure(NODE_PORTS, (message,), len(node.cards))
        if node.allocatable or node.held is not None:
            missing = self.node_resources_fit(node)
            if missing:
                return rule_failure(NODE_RESOURCES_FIT, missing, len(node.cards))
        elif any(name not in STANDARD for name, asked in self.request if asked):
            return rule_failure(NODE_RESOURCES_FIT, self.node_resources_fit(node), len(node.cards))
        if self.volumes.needs:
            unmounted = self.volumes.refuse(node.name, node.labels)
            if unmounted:
                return rule_failure(VOLUME_BINDING, unmounted, len(node.cards))
        return None

    def hints(self, node: Node, failure: RuleFailure) -> tuple[str, ...]:
        """What would make `node` pass the rule `failure` names, in words."""
        name, rule = node.name, failure.rule
        if rule == NODE_UNSCHEDULABLE:
            return (f"uncordon {name}",)
        if rule == NODE_NAME:
            return (f"the pod names node {self.node_name} (nodeName)",)
        if rule == TAINT_TOLERATION:
            taint = untolerated(node.taints, self.tolerations, (NO_SCHEDULE, NO_EXECUTE)) or {}
            value = taint.get("value") or ""
            return (f"tolerate {taint.get('key', '')}{'=' + value if value else ''}",)
        if rule == NODE_AFFINITY:
            wanted = [f"{k}={v}" for k, v in self.selector if node.labels.get(k) != v]
            if wanted:
                return (f"label {name} {', '.join(wanted)}",)
            return (f"{name} does not match the pod's required node affinity",)
        if rule == NODE_PORTS:
            taken = node.held.ports if node.held is not None else {}
            ports = sorted(
                {f"{n}/{p}" for ip, p, n in self.ports if accounting.port_conflict(((ip, p, n),), taken)}
            )
            return (f"free host port {', '.join(ports)} on {name}",)
        if rule == NODE_RESOURCES_FIT:
            limits = accounting.capacity(node)
            requested = node.held.requested if node.held is not None else {}
            out = []
            for resource, asked in self.request:
                limit = limits.get(resource, None if resource in STANDARD else 0)
                if not asked or limit is None:
                    continue
                short = asked - (limit - requested.get(resource, 0))
                if short > 0:
                    out.append(f"free {_amount_words(resource, short)} on {name}")
            return tuple(out)
        if rule == VOLUME_BINDING:
            return self.volumes.hints(name, node.labels)
        return ()

    def counts_for_spread(self, node: Node, honor_affinity: bool, honor_taints: bool) -> bool:
        """Whether `node` counts toward a spread constraint's domains under its node policies."""
        if honor_affinity and not self.matches_node(node):
            return False
        return not (
            honor_taints
            and node.taints
            and untolerated(node.taints, self.tolerations, (NO_SCHEDULE, NO_EXECUTE))
        )


#: The rules of a pod that writes none of the fields: what every node restriction still
#: applies to it (cordons, taints, the pod count).
PLAIN = NodeRules()
_PLAIN_KEY = PLAIN.key


def _volumes(pod: PodSpec) -> PodVolumes:
    """The pod's claims resolved against its storage (`volumes.resolve`)."""
    if not pod.volumes:
        return NO_VOLUMES
    storage = pod.storage
    if isinstance(storage, dict):
        storage = read_storage(storage)
    elif storage is not None and not isinstance(storage, Storage):
        raise PodInvalid("storage", f"must be an object, got {type(storage).__name__}")
    return resolve(pod.namespace, pod.name, pod.volumes, storage)


def _gpu_only(containers) -> bool:
    """Whether every container asks only SPEC 2 GPU resources and no ports (the rules then
    read nothing of it but its pod count)."""
    if not containers:
        return True
    if not isinstance(containers, list):
        return False
    for container in containers:
        if not isinstance(container, dict) or container.get("ports") or container.get("restartPolicy"):
            return False
        resources = container.get("resources")
        if not resources:
            continue
        if not isinstance(resources, dict):
            return False
        for section in resources.values():
            if isinstance(section, dict) and any(name not in GPU_RESOURCES for name in section):
                return False
    return True


def resource_words(name: str) -> str:
    return {CPU: "cpu", MEMORY: "memory", EPHEMERAL_STORAGE: "ephemeral-storage"}.get(name, name)


def _amount_words(resource: str, amount: int) -> str:
    """`amount` of `resource` (canonical units) as a person writes it: `2 cpu`, `500m cpu`,
    `3Gi memory`, `1 pod slot`."""
    if resource == CPU:
        return f"{amount // 1000} cpu" if amount % 1000 == 0 else f"{amount}m cpu"
    if resource in (MEMORY, EPHEMERAL_STORAGE):
        for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount >= size:
                return f"{-(-amount // size)}{unit} {resource}"
        return f"{amount} bytes {resource}"
    if resource == PODS:
        return f"{amount} pod slot{'s' if amount != 1 else ''}"
    return f"{amount} {resource}"
