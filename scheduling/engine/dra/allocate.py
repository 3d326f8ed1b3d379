"""DRA asks placed by the engine's own chain, and the claim status the driver reads.

One ledger: every allocated claim's results count on their devices (kube-scheduler's
included): `consumedCapacity.memory`/`cores` where given, the whole device where not (a
device without `allowMultipleAllocations` is held whole). Each ask is one engine container
(`nvidia.com/gpu` = count, `gpumem` = MiB, `gpucores` = cores) on a snapshot of the DRA
cards, the devices it may take passed as `nvidia.com/use-gpuuuid`, so the node and card
policies, weights and numa-bind annotations of the pod apply unchanged.

Alternatives are tried in order: each request's `firstAvailable` subrequests (first the
first, as kube-scheduler does), then for a `matchAttribute` constraint each value of the
attribute in sorted order; the first that the engine places, and whose devices each belong
to their own request's candidates and keep every `distinctAttribute` distinct, is taken.

Partitions: a device that draws on its pool's shared counters (`consumesCounters`) is in use
while its card holds anything (an allocated claim's result, or a placement of this cycle).
Before the engine decides, each request's candidates lose the devices that the counters in
use leave no room for (`CountersExhausted`); after, the devices it chose are put in use one
by one, and one that no longer fits beside the others is taken out of the candidates and the
engine decides again, so the result never exceeds a counter.
"""

from __future__ import annotations

import copy
import itertools
import uuid as uuidlib
from dataclasses import dataclass, field
from datetime import datetime

from ..annotations import USE_UUID, GroupRef, group_ref
from ..batch.jobs import GANG_UNSCHEDULABLE
from ..batch.preempt import preemptible
from ..decision import SCHEDULED, Decision
from ..errors import PodInvalid
from ..model import Cluster, ClusterConfig, Node, PodSpec, RunningPod
from ..noderules.accounting import account_running
from ..requests import GPU, GPUCORES, GPUMEM
from ..scheduler import Scheduler
from .cel import Selectors
from .claims import (
    CAPACITY_POLICY_INVALID,
    CLAIM_PENDING,
    CONSTRAINT_UNSATISFIED,
    COUNTERS_EXHAUSTED,
    DEVICE_TAINTED,
    DRA_UNSUPPORTED,
    POOL_INCOMPLETE,
    SELECTOR_ERROR,
    SELECTOR_MISMATCH,
    DraUnsupported,
    PodClaims,
    claim_names,
    cores_of,
    mib,
    read_claims,
)
from .inventory import CounterLedger, DraDevice, Inventory

#: How many combinations of alternatives and attribute values one pod may try.
MAX_TRIES = 64
#: shareIDs are derived, not random, so a simulation writes what the live cycle writes.
SHARE_NAMESPACE = uuidlib.UUID("6f1c9e4e-4d0a-4a43-9a57-2f3c1f0d7a11")


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


@dataclass
class DraPlacement:
    """Where a pod's claims go, or why it waits (`reason`: a code, `message`: the words)."""

    namespace: str
    name: str
    uid: str
    node: str | None = None
    decision: Decision | None = None
    #: claim name -> its allocation results (request, driver, pool, device, shareID, consumedCapacity)
    results: dict[str, list[dict]] = field(default_factory=dict)
    claims: PodClaims | None = None
    reason: str = ""
    message: str = ""
    #: the claims (object names) that are the pod's Workload API PodGroup's (KEP-5729), and
    #: the PodGroup as their consumer: they are reserved for it, not for the pod
    shared: frozenset[str] = frozenset()
    podgroup: dict | None = None

    @property
    def placed(self) -> bool:
        return self.node is not None

    def consumer(self, claim_name: str) -> dict:
        """Whom the claim is reserved for: the PodGroup for its shared claims, else the pod."""
        if claim_name in self.shared and self.podgroup is not None:
            return dict(self.podgroup)
        return {"resource": "pods", "name": self.name, "uid": self.uid}

    def status(self, claim_name: str, classes: dict[str, dict]) -> dict:
        """The claim's new `status`: its allocation (results, config, nodeSelector) unless it
        was allocated already, and `reservedFor` with this pod (or its PodGroup) added."""
        assert self.claims is not None and self.node is not None
        claim = self.claims.claims[claim_name]
        status = _dict(claim.get("status"))
        reserved = [dict(r) for r in status.get("reservedFor") or []]
        consumer = self.consumer(claim_name)
        if not any(r.get("uid") == consumer["uid"] for r in reserved):
            reserved.append(consumer)
        if claim_name in self.claims.allocated:
            return {"reservedFor": reserved}
        allocation = {
            "devices": {"results": self.results[claim_name], "config": _config(claim, classes)},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [self.node]}]}
                ]
            },
        }
        return {"allocation": allocation, "reservedFor": reserved}


def _config(claim: dict, classes: dict[str, dict]) -> list[dict]:
    """The allocation's `config`: each used class's config (`FromClass`, for its requests),
    then the claim's own (`FromClaim`), as kube-scheduler copies them."""
    devices = _dict(_dict(claim.get("spec")).get("devices"))
    by_class: dict[str, list[str]] = {}
    for request in devices.get("requests") or []:
        request = _dict(request)
        bodies = (
            [_dict(request.get("exactly"))] if request.get("exactly") else request.get("firstAvailable") or []
        )
        for body in bodies:
            name = (
                request.get("name") if request.get("exactly") else f"{request.get('name')}/{body.get('name')}"
            )
            by_class.setdefault(_dict(body).get("deviceClassName") or "", []).append(str(name))
    config = []
    for class_name, requests in by_class.items():
        for entry in _dict(_dict(classes.get(class_name)).get("spec")).get("config") or []:
            if _dict(entry).get("opaque"):
                config.append({"source": "FromClass", "requests": requests, "opaque": entry["opaque"]})
    for entry in devices.get("config") or []:
        entry = _dict(entry)
        if entry.get("opaque"):
            kept = {"source": "FromClaim", "opaque": entry["opaque"]}
            if entry.get("requests"):
                kept["requests"] = list(entry["requests"])
            config.append(kept)
    return config


def held(inventory: Inventory, claims) -> list[tuple[DraDevice, int, int]]:
    """What allocated claims hold: (device, MiB, cores) per result on a known device."""
    devices = inventory.by_key()
    holdings = []
    for claim in claims:
        allocation = _dict(_dict(_dict(claim).get("status")).get("allocation"))
        for result in _dict(allocation.get("devices")).get("results") or []:
            result = _dict(result)
            device = devices.get(
                (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            )
            if device is None:
                continue
            consumed = _dict(result.get("consumedCapacity"))
            if not device.shareable or not consumed:
                holdings.append((device, device.memory, device.cores))
                continue
            memory = mib(consumed["memory"], "consumedCapacity.memory") if "memory" in consumed else 0
            cores = cores_of(consumed["cores"], "consumedCapacity.cores") if "cores" in consumed else 0
            holdings.append((device, memory, cores))
    return holdings


#: Reasons preemption cannot help: the claims themselves, not capacity, keep the pod waiting.
NOT_CAPACITY = frozenset(
    {
        CLAIM_PENDING,
        SELECTOR_ERROR,
        SELECTOR_MISMATCH,
        DEVICE_TAINTED,
        CAPACITY_POLICY_INVALID,
        POOL_INCOMPLETE,
        DRA_UNSUPPORTED,
        GANG_UNSCHEDULABLE,
    }
)


#: The Workload API's group: a claim reserved for a PodGroup names it in `reservedFor`.
WORKLOAD_GROUP = "scheduling.k8s.io"
PODGROUPS = "podgroups"


def podgroup_name(pod: dict) -> str:
    """The Workload API PodGroup the pod names (`spec.schedulingGroup.podGroupName`), or ""."""
    name = _dict(_dict(pod.get("spec")).get("schedulingGroup")).get("podGroupName")
    return name if isinstance(name, str) else ""


def podgroup_consumer(podgroup: dict) -> dict:
    """The `reservedFor` entry of a claim reserved for the PodGroup (KEP-5729)."""
    meta = _dict(podgroup.get("metadata"))
    return {
        "apiGroup": WORKLOAD_GROUP,
        "resource": PODGROUPS,
        "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""),
    }


def group_claims(pod: dict, podgroup: dict) -> dict[str, str | None]:
    """The pod's claim entries that are its PodGroup's (KEP-5729: an entry of the PodGroup's
    `spec.resourceClaims` with every field equal): the pod's name for the claim -> the claim's
    object name; a template's generated claim is in the pod's `status.resourceClaimStatuses`
    or the PodGroup's (None while neither names it)."""
    fields = ("name", "resourceClaimName", "resourceClaimTemplateName")
    theirs = [
        tuple(_dict(e).get(f) for f in fields)
        for e in _dict(podgroup.get("spec")).get("resourceClaims") or []
    ]
    generated = {
        _dict(s).get("name"): _dict(s).get("resourceClaimName")
        for statuses in (_dict(podgroup.get("status")), _dict(pod.get("status")))
        for s in statuses.get("resourceClaimStatuses") or []
        if _dict(s).get("resourceClaimName")
    }
    found: dict[str, str | None] = {}
    for entry in _dict(pod.get("spec")).get("resourceClaims") or []:
        entry = _dict(entry)
        if tuple(entry.get(f) for f in fields) in theirs:
            found[str(entry.get("name"))] = entry.get("resourceClaimName") or generated.get(entry.get("name"))
    return found


def _group(pod: dict, podgroups: dict[tuple[str, str], int] | None = None) -> GroupRef | None:
    """The gang the pod names: its Workload API PodGroup (when `podgroups`, their minimums,
    are read and name it), else its annotations or labels."""
    meta = _dict(pod.get("metadata"))
    named = podgroup_name(pod)
    if podgroups is not None and named:
        minimum = podgroups.get((meta.get("namespace") or "default", named))
        if minimum is not None:
            return GroupRef(name=named, source="workload", min_member=minimum)
    try:
        return group_ref(_dict(meta.get("annotations")), _dict(meta.get("labels")))
    except (PodInvalid, AttributeError, TypeError):
        return None


def _bound(pod: dict) -> bool:
    phase = _dict(pod.get("status")).get("phase")
    return bool(_dict(pod.get("spec")).get("nodeName")) and phase not in ("Succeeded", "Failed")


def units(
    pending: list[dict], pods: list[dict], podgroups: dict[tuple[str, str], int] | None = None
) -> list[tuple[str, list[dict], int]]:
    """(gang "namespace/name" or "", its pending members, how many must fit), in the order of
    each unit's oldest pod (`pending` is in order). A gang's minimum is its `min-member` (a
    Workload API PodGroup's `minCount`, from `podgroups`: (namespace, name) -> minimum; else
    every pending member), less the members of `pods` already bound; a pod whose group
    annotation is malformed goes alone."""
    bound: dict[tuple[str, str], int] = {}
    for pod in pods:
        ref = _group(pod, podgroups)
        if ref is not None and _bound(pod):
            key = (_dict(pod.get("metadata")).get("namespace") or "default", ref.name)
            bound[key] = bound.get(key, 0) + 1
    found: dict[str, tuple[str, list[dict], int]] = {}
    for pod in pending:
        meta = _dict(pod.get("metadata"))
        namespace = meta.get("namespace") or "default"
        ref = _group(pod, podgroups)
        if ref is None:
            found[f"pod/{namespace}/{meta.get('name')}"] = ("", [pod], 1)
            continue
        gang, members, _ = found.setdefault(
            f"gang/{namespace}/{ref.name}", (f"{namespace}/{ref.name}", [], 0)
        )
        members.append(pod)
        wanted = ref.min_member or len(members)
        found[f"gang/{namespace}/{ref.name}"] = (
            gang,
            members,
            max(wanted - bound.get((namespace, ref.name), 0), 0),
        )
    return list(found.values())


def node_fields(cards: list[Node], nodes: list[dict]) -> None:
    """The Kubernetes Node objects' labels, taints, `unschedulable`, Ready condition and
    `status.allocatable` on the engine nodes of the same name, so the node rules (nodeSelector,
    node affinity, taints, resources) judge DRA pods as they judge any pod. A node with no
    object keeps its hostname label."""
    by_name = {_dict(n.get("metadata")).get("name"): n for n in nodes if isinstance(n, dict)}
    for node in cards:
        found = by_name.get(node.name)
        if found is None:
            continue
        spec, status = _dict(found.get("spec")), _dict(found.get("status"))
        labels = _dict(_dict(found.get("metadata")).get("labels"))
        node.labels = {**node.labels, **{str(k): str(v) for k, v in labels.items()}}
        node.taints = [_dict(t) for t in spec.get("taints") or [] if isinstance(t, dict)]
        node.unschedulable = spec.get("unschedulable") is True
        node.allocatable = {str(k): v for k, v in _dict(status.get("allocatable")).items()}
        for condition in status.get("conditions") or []:
            if _dict(condition).get("type") == "Ready":
                node.ready = condition.get("status") == "True"
        node.touch()


def pod_rules(pod: dict) -> dict:
    """The pod's node rules as `PodSpec` fields: labels, nodeSelector, affinity (node and
    pod), tolerations, topology spread, and its own containers' cpu, memory, ephemeral
    storage, hugepages and host ports (`plain_containers`; init containers as such). Pod
    affinity, spread and the resources judge against the pods running beside it
    (`DraAllocator(running=...)`), none where none are given."""
    spec = _dict(pod.get("spec"))
    affinity = {k: v for k, v in _dict(spec.get("affinity")).items() if isinstance(v, dict)}
    labels = _dict(_dict(pod.get("metadata")).get("labels"))
    return {
        "labels": {str(k): str(v) for k, v in labels.items()},
        "node_selector": _dict(spec.get("nodeSelector")),
        "affinity": affinity or None,
        "tolerations": [t for t in spec.get("tolerations") or [] if isinstance(t, dict)],
        "topology_spread_constraints": [
            t for t in spec.get("topologySpreadConstraints") or [] if isinstance(t, dict)
        ],
        "init_containers": plain_containers(spec.get("initContainers")),
    }


#: The resources of a pass pod's own containers the node rules count (its devices are its claims').
PLAIN_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def plain_containers(containers) -> list[dict]:
    """`containers` as the node rules read them: cpu, memory, ephemeral storage, hugepages
    and host ports only, named `pod/<name>` beside the claims' `claim/request` containers."""
    found = []
    for container in containers if isinstance(containers, list) else []:
        if not isinstance(container, dict):
            continue
        resources = _dict(container.get("resources"))
        kept = {}
        for kind in ("requests", "limits"):
            values = {
                str(name): value
                for name, value in _dict(resources.get(kind)).items()
                if name in PLAIN_RESOURCES or str(name).startswith("hugepages-")
            }
            if values:
                kept[kind] = values
        entry: dict = {"name": f"pod/{container.get('name') or ''}", "resources": kept}
        if isinstance(container.get("ports"), list):
            entry["ports"] = container["ports"]
        found.append(entry)
    return found


def running_of(pods: list[dict]) -> list[RunningPod]:
    """The bound, not ended Pod objects as the node rules count them beside the claims: no
    device annotations (what their claims hold is counted from the claims, and device-plugin
    cards are not the pass's)."""
    found = []
    for pod in pods:
        meta, spec = _dict(pod.get("metadata")), _dict(pod.get("spec"))
        node = spec.get("nodeName")
        if not isinstance(node, str) or not node:
            continue
        if _dict(pod.get("status")).get("phase") in ("Succeeded", "Failed"):
            continue
        affinity = spec.get("affinity")
        found.append(
            RunningPod(
                name=str(meta.get("name") or ""),
                node=node,
                namespace=str(meta.get("namespace") or "default"),
                labels={str(k): str(v) for k, v in _dict(meta.get("labels")).items()},
                affinity=affinity if isinstance(affinity, dict) and affinity else None,
                containers=[c for c in spec.get("containers") or [] if isinstance(c, dict)],
                init_containers=[c for c in spec.get("initContainers") or [] if isinstance(c, dict)],
            )
        )
    return found


def priority_of(pod: dict) -> int:
    found = _dict(pod.get("spec")).get("priority")
    return found if isinstance(found, int) and not isinstance(found, bool) else 0


def _stamp(text: str) -> float:
    """An RFC 3339 time as seconds, for ordering only (0 when unreadable)."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def released_status(claim: dict, gone: set[str]) -> dict:
    """The claim's `status` once the pods of uids `gone` left it: they leave `reservedFor`,
    and a claim reserved for nobody is deallocated (as kube-controller-manager does)."""
    status = copy.deepcopy(_dict(claim.get("status")))
    reserved = [r for r in status.get("reservedFor") or [] if _dict(r).get("uid") not in gone]
    if reserved:
        status["reservedFor"] = reserved
        return status
    status.pop("reservedFor", None)
    status.pop("allocation", None)
    return status


@dataclass
class DraTenant:
    """A bound pod holding DRA capacity through claims reserved for it alone: what leaves
    with it when it is preempted (a claim it shares stays with the others)."""

    namespace: str
    name: str
    uid: str
    node: str
    priority: int
    preemptible: bool
    started: str  # creationTimestamp: the youngest goes first among equals
    claims: list[str] = field(default_factory=list)
    holdings: list[tuple[DraDevice, int, int]] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def tenants_of(
    pods: list[dict], claims: dict[tuple[str, str], dict], inventory: Inventory
) -> list[DraTenant]:
    """The bound pods (not ended, not being deleted) whose claims are allocated on
    `inventory`'s devices and reserved for them alone."""
    found = []
    for pod in pods:
        meta, spec = _dict(pod.get("metadata")), _dict(pod.get("spec"))
        phase = _dict(pod.get("status")).get("phase")
        if not spec.get("nodeName") or meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
            continue
        namespace, uid = meta.get("namespace") or "default", meta.get("uid") or ""
        try:
            names = [name for _, name in claim_names(pod) if name]
        except DraUnsupported:
            continue
        tenant = DraTenant(
            namespace,
            str(meta.get("name") or ""),
            uid,
            str(spec["nodeName"]),
            priority_of(pod),
            preemptible(_dict(meta.get("annotations"))),
            str(meta.get("creationTimestamp") or ""),
        )
        for name in names:
            claim = claims.get((namespace, name))
            reserved = _dict(_dict(claim).get("status")).get("reservedFor") or []
            if claim is None or [_dict(r).get("uid") for r in reserved] != [uid]:
                continue
            holdings = held(inventory, [claim])
            if holdings:
                tenant.claims.append(name)
                tenant.holdings += holdings
        if tenant.holdings:
            found.append(tenant)
    return found


class DraAllocator:
    """One cycle's snapshot of the DRA cards, with every allocated claim counted, deciding
    pods one after another (each placement is assumed, so later pods see it)."""

    def __init__(
        self,
        inventory: Inventory,
        classes: dict[str, dict],
        claims: dict[tuple[str, str], dict],
        config: ClusterConfig | None = None,
        nodes: list[dict] | None = None,
        podgroups: dict[tuple[str, str], dict] | None = None,
    ):
        self.inventory = inventory
        self.classes = classes
        self.claims = claims
        #: the Workload API PodGroups by (namespace, name): their claims are the gang's
        self.podgroups = podgroups or {}
        self.selectors = Selectors()
        self.by_uuid = inventory.by_uuid()
        self.cluster = Cluster(nodes=inventory.nodes())
        node_fields(self.cluster.nodes, nodes or [])
        self.scheduler = Scheduler(self.cluster, config or ClusterConfig())
        by_uuid = {card.uuid: card for node in self.cluster.nodes for card in node.cards}
        #: the devices that draw on shared counters, with their cards (whose usage says in use)
        self.partitions = [(d, by_uuid[d.uuid]) for d in inventory.devices if d.partition]
        self._shift(held(inventory, claims.values()), 1)

    def beside(self, pods: list[dict]) -> list[tuple[RunningPod, PodInvalid]]:
        """Count the pods bound on our nodes (Pod objects; ended ones are skipped): their cpu,
        memory, pod slots and host ports, and their labels for pod affinity and topology
        spread, so the node rules judge the pass's pods as the cycle's. What their claims hold
        is counted from the claims. The pods that do not read, with why (not counted)."""
        names = {node.name for node in self.cluster.nodes}
        self.cluster.running = [pod for pod in running_of(pods) if pod.node in names]
        return account_running(self.cluster)

    def counters(self) -> CounterLedger:
        """The counters that the devices in use draw now: those whose card holds anything."""
        return CounterLedger(self.inventory, (d for d, card in self.partitions if card.used_slots > 0))

    def hold(self, holdings: list[tuple[DraDevice, int, int]]) -> None:
        """Count what others hold beside the claims (the cycle's placements not written yet)."""
        self._shift(holdings, 1)

    def _shift(self, holdings: list[tuple[DraDevice, int, int]], sign: int) -> None:
        for device, memory, cores in holdings:
            node = self.cluster.node(device.node)
            node.shift([(device.uuid, memory, cores)], sign)
            node.touch()  # always: a decision cached for the old usage must not be read

    def place(self, pod: dict) -> DraPlacement:
        """Decide `pod` (a Pod object with `spec.resourceClaims`) and, when placed, assume it."""
        meta = _dict(pod.get("metadata"))
        placement = DraPlacement(
            meta.get("namespace") or "default", meta.get("name") or "", meta.get("uid") or ""
        )
        pod = self._with_group_claims(pod, placement)
        try:
            asked = read_claims(pod, self.claims, self.classes, self.inventory, self.selectors)
        except DraUnsupported as exc:
            placement.reason, placement.message = exc.code, exc.message
            return placement
        placement.claims = asked
        if self.partitions:
            self._leave_out_exhausted(asked)
        if not asked.asks:
            placement.node = asked.node or None
            if placement.node is None:
                placement.reason, placement.message = CONSTRAINT_UNSATISFIED, "no claim names a node"
            return placement
        if any(not any(alt.candidates for alt in ask.alternatives) for ask in asked.asks):
            placement.reason, placement.message = self._why_none(asked)
            return placement
        last: tuple[str, str] = ("", "")
        for tries, chosen in enumerate(self._variants(asked)):
            if tries >= MAX_TRIES:
                break
            found = self._try(pod, asked, chosen)
            if isinstance(found, Decision):
                self.scheduler.assume(found)
                placement.decision, placement.node = found, found.node
                placement.results = self._results(placement, asked, chosen, found)
                return placement
            last = found
        placement.reason, placement.message = last if last[0] else self._why_none(asked)
        return placement

    def _with_group_claims(self, pod: dict, placement: DraPlacement) -> dict:
        """Mark on `placement` the pod's claims that are its PodGroup's (`group_claims`), and
        the pod as the claims read it: a template's claim named by the PodGroup's status only
        is added to the pod's `status.resourceClaimStatuses`."""
        podgroup = self.podgroups.get((placement.namespace, podgroup_name(pod)))
        if podgroup is None:
            return pod
        found = group_claims(pod, podgroup)
        if not found:
            return pod
        placement.podgroup = podgroup_consumer(podgroup)
        placement.shared = frozenset(name for name in found.values() if name)
        status = _dict(pod.get("status"))
        known = {_dict(s).get("name") for s in status.get("resourceClaimStatuses") or []}
        templated = {
            _dict(e).get("name")
            for e in _dict(pod.get("spec")).get("resourceClaims") or []
            if not _dict(e).get("resourceClaimName")
        }
        more = [
            {"name": entry, "resourceClaimName": name}
            for entry, name in found.items()
            if name and entry in templated and entry not in known
        ]
        if not more:
            return pod
        return {
            **pod,
            "status": {
                **status,
                "resourceClaimStatuses": [*(status.get("resourceClaimStatuses") or []), *more],
            },
        }

    def place_gang(self, pods: list[dict], minimum: int, gang: str) -> list[DraPlacement]:
        """All or nothing: place the gang's pending `pods` in order, each seeing the ones before
        (a claim they share, their PodGroup's among them, is allocated once, by the first, and
        joined by the others); when fewer than `minimum` fit,
        every placement is taken back and each member waits `GangUnschedulable`."""
        saved = dict(self.claims)
        placements = []
        for pod in pods:
            placement = self.place(pod)
            self.record(placement)
            placements.append(placement)
        placed = [p for p in placements if p.placed]
        if len(placed) >= minimum:
            return placements
        for placement in placed:
            if placement.decision is not None:
                self.scheduler.unassume(placement.decision)
        self.claims.clear()
        self.claims.update(saved)
        words = f"gang {gang}: {len(placed)} of {len(pods)} pending members fit, {minimum} must"
        for placement in placements:
            why = f"; this one: {placement.reason}: {placement.message}" if not placement.placed else ""
            placement.node, placement.decision, placement.results = None, None, {}
            placement.reason, placement.message = GANG_UNSCHEDULABLE, words + why
        return placements

    def preempt(self, pod: dict, tenants: list[DraTenant]) -> tuple[DraPlacement, list[DraTenant]]:
        """Card-level preemption for a pod that did not fit: on each node, the tenants of lower
        priority (preemptible ones only) leave one by one, lowest priority and youngest first,
        until the pod fits; then each is put back while the pod still fits without it. The
        cheapest set over the nodes wins: fewest victims, then the lowest priorities, then the
        node name. The victims' capacity is freed in the snapshot and the pod placed (and
        assumed); ([], the pod's placement as it stood) when no set works."""
        priority = priority_of(pod)
        by_node: dict[str, list[DraTenant]] = {}
        for tenant in tenants:
            if tenant.priority < priority and tenant.preemptible and tenant.holdings:
                by_node.setdefault(tenant.node, []).append(tenant)
        best: tuple[tuple, list[DraTenant]] | None = None
        for node, movable in sorted(by_node.items()):
            movable.sort(key=lambda t: (t.priority, -_stamp(t.started), t.key))
            chosen: list[DraTenant] = []
            for tenant in movable:
                self._shift(tenant.holdings, -1)
                chosen.append(tenant)
                if self._fits(pod):
                    break
            else:
                for tenant in chosen:
                    self._shift(tenant.holdings, 1)
                continue
            for tenant in sorted(chosen, key=lambda t: -t.priority):
                self._shift(tenant.holdings, 1)
                if self._fits(pod):
                    chosen.remove(tenant)
                else:
                    self._shift(tenant.holdings, -1)
            for tenant in chosen:
                self._shift(tenant.holdings, 1)
            cost = (len(chosen), sorted(t.priority for t in chosen), node)
            if best is None or cost < best[0]:
                best = (cost, chosen)
        if best is None:
            return self.place(pod), []
        victims = best[1]
        for tenant in victims:
            self._shift(tenant.holdings, -1)
            for name in tenant.claims:
                claim = copy.deepcopy(self.claims[(tenant.namespace, name)])
                claim["status"] = released_status(claim, {tenant.uid})
                self.claims[(tenant.namespace, name)] = claim
        return self.place(pod), victims

    def _fits(self, pod: dict) -> bool:
        placement = self.place(pod)
        if placement.decision is not None:
            self.scheduler.unassume(placement.decision)
        return placement.placed

    def record(self, placement: DraPlacement, written: dict[str, dict] | None = None) -> None:
        """Keep the claims of a placed pod as they now stand (`written`: as the API server
        answered the status writes; else as `DraPlacement.status` makes them), so a later pod
        of the same cycle that shares a claim finds it allocated and joins it."""
        if placement.claims is None or placement.node is None:
            return
        for name in placement.claims.claims:
            key = (placement.namespace, name)
            if written is not None and name in written:
                self.claims[key] = written[name]
                continue
            claim = copy.deepcopy(self.claims[key])
            # merged: a pod joining an allocated claim writes only `reservedFor`, and the
            # allocation must stay for the next pod sharing it (a third gang member)
            claim["status"] = {**_dict(claim.get("status")), **placement.status(name, self.classes)}
            self.claims[key] = claim

    def _leave_out_exhausted(self, asked: PodClaims) -> None:
        """Each request's candidates less the devices the counters in use leave no room for, and
        the partitions held whole already (so a request no partition is left for says so)."""
        ledger = self.counters()
        held_whole = {d.key for d in self.inventory.devices if d.key in ledger.keys and not d.shareable}
        for ask in asked.asks:
            for alternative in ask.alternatives:
                kept = [
                    d for d in alternative.candidates if d.key not in held_whole and not ledger.refuses(d)
                ]
                left_out = len(alternative.candidates) - len(kept)
                if left_out:
                    alternative.candidates = kept
                    alternative.refused[COUNTERS_EXHAUSTED] = (
                        alternative.refused.get(COUNTERS_EXHAUSTED, 0) + left_out
                    )

    def _why_none(self, asked: PodClaims) -> tuple[str, str]:
        for ask in asked.asks:
            for alternative in ask.alternatives:
                if alternative.candidates:
                    continue
                if self.inventory.incomplete:
                    pools = ", ".join(f"{k}: {v}" for k, v in sorted(self.inventory.incomplete.items()))
                    return POOL_INCOMPLETE, f"request {alternative.request}: no device; {pools}"
                refused = alternative.refused
                code = max(refused, key=lambda c: (refused[c], c)) if refused else SELECTOR_MISMATCH
                if COUNTERS_EXHAUSTED in refused:  # those passed every other test: the counters decide
                    code = COUNTERS_EXHAUSTED
                counts = ", ".join(f"{n} {c}" for c, n in sorted(alternative.refused.items()))
                return (
                    code,
                    f"claim {ask.claim} request {alternative.request}: no device fits ({counts or 'none published'})",
                )
        return CONSTRAINT_UNSATISFIED, "no combination of devices meets the claims' constraints"

    def _variants(self, asked: PodClaims):
        """Each ask's alternative in order, then each matchAttribute value: lists of
        (Alternative, candidates) per ask."""
        for combo in itertools.product(*(ask.alternatives for ask in asked.asks)):
            restricted = [list(alt.candidates) for alt in combo]
            constraints = []
            for claim, found in asked.constraints.items():
                for constraint in found:
                    if constraint.get("matchAttribute"):
                        constraints.append((claim, constraint))
            if not constraints:
                yield list(zip(combo, restricted, strict=True))
                continue
            # one value per matchAttribute constraint: the product of their values
            choices = []
            for claim, constraint in constraints:
                positions = self._positions(asked, claim, constraint)
                values = sorted(
                    {
                        repr(v)
                        for i in positions
                        for d in restricted[i]
                        if (v := d.attribute(constraint["matchAttribute"])) is not None
                    }
                )
                choices.append([(positions, constraint["matchAttribute"], value) for value in values])
            for picked in itertools.product(*choices):
                narrowed = [list(c) for c in restricted]
                for positions, attribute, value in picked:
                    for i in positions:
                        narrowed[i] = [d for d in narrowed[i] if repr(d.attribute(attribute)) == value]
                yield list(zip(combo, narrowed, strict=True))

    @staticmethod
    def _positions(asked: PodClaims, claim: str, constraint: dict) -> list[int]:
        named = set(constraint.get("requests") or [])
        return [
            i
            for i, ask in enumerate(asked.asks)
            if ask.claim == claim and (not named or ask.request in named)
        ]

    def _try(self, pod: dict, asked: PodClaims, chosen) -> Decision | tuple[str, str]:
        """`_decide`, then the counters. When a device the engine chose does not fit beside the
        devices in use and the ones chosen before it, the engine decides again without it, or
        without one of those before it on the same counter set: each way is tried, fewest
        devices left out first, at most `MAX_TRIES` decisions."""
        ways: list[frozenset[tuple[str, str, str]]] = [frozenset()]
        tried: set[frozenset[tuple[str, str, str]]] = set(ways)
        clashed = ""
        found: Decision | tuple[str, str] = CONSTRAINT_UNSATISFIED, "no combination was tried"
        for out in ways:
            if len(tried) > MAX_TRIES:
                break
            narrowed = [(alt, [d for d in candidates if d.key not in out]) for alt, candidates in chosen]
            found = self._decide(pod, asked, narrowed)
            if not isinstance(found, Decision):
                continue
            clash = self._counter_clash(found) if self.partitions else None
            if clash is None:
                return found
            clashed = clash[1]
            for device in (clash[0], *clash[2]):
                way = out | {device.key}
                if way not in tried:
                    tried.add(way)
                    ways.append(way)
        if clashed:
            return COUNTERS_EXHAUSTED, f"no devices left fit the shared counters together: {clashed}"
        return found

    def _counter_clash(self, decision: Decision) -> tuple[DraDevice, str, list[DraDevice]] | None:
        """The first device of `decision` that does not fit beside the devices in use and the
        ones chosen before it, with why and those chosen before it on its counter sets; None
        when all fit."""
        ledger = self.counters()
        before: list[DraDevice] = []
        for container in decision.containers:
            for grant in container.devices:
                device = self.by_uuid[grant.uuid]
                why = ledger.refuses(device)
                if why:
                    sets = {c.counter_set for c in device.consumes}
                    rivals = [
                        d
                        for d in before
                        if d.key[:2] == device.key[:2] and sets & {c.counter_set for c in d.consumes}
                    ]
                    return device, why, rivals
                ledger.add(device)
                before.append(device)
        return None

    def _decide(self, pod: dict, asked: PodClaims, chosen) -> Decision | tuple[str, str]:
        uuids = sorted({d.uuid for _, candidates in chosen for d in candidates})
        if not uuids or any(not candidates for _, candidates in chosen):
            return CONSTRAINT_UNSATISFIED, "no device of the claims' constraints is left for every request"
        meta = _dict(pod.get("metadata"))
        annotations = {str(k): str(v) for k, v in _dict(meta.get("annotations")).items()}
        annotations[USE_UUID] = ",".join(uuids)
        containers = []
        for ask, (alternative, _) in zip(asked.asks, chosen, strict=True):
            limits = {GPU: str(alternative.count)}
            if alternative.memory is not None:
                limits[GPUMEM] = str(alternative.memory)
            if alternative.cores is not None:
                limits[GPUCORES] = str(alternative.cores)
            containers.append({"name": f"{ask.claim}/{ask.request}", "resources": {"limits": limits}})
        containers += plain_containers(_dict(pod.get("spec")).get("containers"))
        pod_spec = PodSpec(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or "default"),
            uid=str(meta.get("uid") or ""),
            annotations=annotations,
            containers=containers,
            node_name=asked.node,
            **pod_rules(pod),
        )
        decision = self.scheduler.decide(pod_spec)
        if decision.status != SCHEDULED:
            words = decision.error or ", ".join(f"{code} {n}" for code, n in sorted(decision.reasons.items()))
            return (decision.error_code or "Unschedulable"), f"no node fits the claims: {words}"
        for container, (alternative, candidates) in zip(
            decision.containers[: len(chosen)], chosen, strict=True
        ):
            allowed = {d.uuid for d in candidates}
            if any(grant.uuid not in allowed for grant in container.devices):
                return CONSTRAINT_UNSATISFIED, (
                    f"request {alternative.request}: the requests of this pod select different devices; "
                    "placing them apart is not supported yet"
                )
        broken = self._distinct_broken(asked, decision)
        if broken:
            return CONSTRAINT_UNSATISFIED, broken
        return decision

    def _distinct_broken(self, asked: PodClaims, decision: Decision) -> str:
        for claim, found in asked.constraints.items():
            for constraint in found:
                attribute = constraint.get("distinctAttribute")
                if not attribute:
                    continue
                seen = []
                for i in self._positions(asked, claim, constraint):
                    seen += [
                        self.by_uuid[g.uuid].attribute(attribute) for g in decision.containers[i].devices
                    ]
                values = [repr(v) for v in seen]
                if len(set(values)) < len(values):
                    return f"claim {claim}: distinctAttribute {attribute} repeats on the devices chosen"
        return ""

    def _results(
        self, placement: DraPlacement, asked: PodClaims, chosen, decision: Decision
    ) -> dict[str, list[dict]]:
        results: dict[str, list[dict]] = {}
        claimed = decision.containers[: len(asked.asks)]  # the pod's own containers follow
        for ask, (alternative, _), container in zip(asked.asks, chosen, claimed, strict=True):
            for n, grant in enumerate(container.devices):
                device = self.by_uuid[grant.uuid]
                seed = f"{placement.namespace}/{placement.name}/{placement.uid}/{ask.claim}/{alternative.request}/{n}"
                capacity = [key for domain, key in device.capacity if domain == device.driver]
                results.setdefault(ask.claim, []).append(
                    result_of(
                        alternative.request,
                        device.driver,
                        device.pool,
                        device.name,
                        device.shareable,
                        capacity,
                        seed,
                        grant.memory,
                        grant.cores,
                    )
                )
        return results


def result_of(
    request: str,
    driver: str,
    pool: str,
    device: str,
    shareable: bool,
    capacity,
    seed: str,
    memory: int,
    cores: int,
) -> dict:
    """One allocation result as HAMi's driver reads it: on a shareable device a `shareID`
    (derived from `seed`, so a simulation writes what the live cycle writes) and the
    `consumedCapacity` of the capacities the device publishes (`memory` in Mi, `cores`)."""
    result: dict = {"request": request, "driver": driver, "pool": pool, "device": device}
    if shareable:
        result["shareID"] = str(uuidlib.uuid5(SHARE_NAMESPACE, seed))
        consumed = {}
        if "memory" in capacity:
            consumed["memory"] = f"{memory}Mi"
        if "cores" in capacity:
            consumed["cores"] = str(cores)
        if consumed:
            result["consumedCapacity"] = consumed
    return result


def claim_config(claim: dict, classes) -> list[dict]:
    """The allocation's `config` (`_config`): the classes' `FromClass`, then the claim's own."""
    return _config(claim, classes)
