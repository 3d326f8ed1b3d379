"""SPEC 1: inputs of the engine: the cluster snapshot, the cluster config and the pod.

`Card` holds the only card defaults (slots 10, cores 100, type NVIDIA, NUMA 0, healthy);
`CARD_DEFAULTS` reads them for whoever fills in a card that does not name them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from .encoding import VENDOR, pair_key, pairs_to_links

if TYPE_CHECKING:
    from .families import Partition

CORDON_ANNOTATION = "hami.io/device-cordon"


def cordoned_uuids(annotations) -> set[str]:
    """The card UUIDs a node's `hami.io/device-cordon` annotation keeps from new pods."""
    value = annotations.get(CORDON_ANNOTATION, "") if isinstance(annotations, dict) else ""
    return {uuid.strip() for uuid in str(value or "").split(",") if uuid.strip()}


class TouchLog:
    """Every `Node.touch()` in the process, in order, so a scheduler's per-shape indexes update
    only the nodes that changed since they last looked instead of visiting every node.

    Process-wide rather than per cluster: the same `Node` may sit in several clusters (a cycle's
    restricted snapshot, a what-if copy) and code outside the engine touches nodes directly.
    Readers keep a position; `since` answers None once the entries after it were dropped (the
    log keeps at most `keep` entries), and the reader then re-checks every node instead.
    An entry is the node's `id()` and name, not the node, so the log keeps no snapshot alive;
    a reader takes an entry as its own node's when the id and name match one of its nodes
    (an id reused after a node was freed only costs a needless re-check).
    """

    def __init__(self, keep: int = 1 << 16):
        self.keep = keep
        self.base = 0  # position of entries[0]
        self.entries: list[tuple[int, str]] = []
        self.lock = threading.Lock()

    @property
    def position(self) -> int:
        return self.base + len(self.entries)

    def append(self, node: Node) -> None:
        with self.lock:
            self.entries.append((id(node), node.name))
            if len(self.entries) > self.keep:
                drop = len(self.entries) - self.keep // 2
                del self.entries[:drop]
                self.base += drop

    def since(self, position: int) -> tuple[list[tuple[int, str]], int] | None:
        """The nodes touched from `position` on and the position after them; None when some
        of them were dropped already."""
        with self.lock:
            if position < self.base:
                return None
            return self.entries[position - self.base :], self.base + len(self.entries)


TOUCHES = TouchLog()


@dataclass(slots=True)
class Card:
    """One physical GPU. Capacities are fixed; `used_*` is what its tenants hold now.

    `partition`: how a card cut into fixed instances is cut, and the instances its tenants
    hold (NVIDIA MIG, `families.mig.Geometry`); None for a card shared by vGPU shares."""

    uuid: str
    index: int
    memory: int
    type: str = VENDOR
    slots: int = 10
    cores: int = 100
    numa: int = 0
    health: bool = True
    cordoned: bool = False
    mode: str = ""
    used_slots: int = 0
    used_memory: int = 0
    used_cores: int = 0
    #: The pod groups (`namespace/name`) of its tenants, once per vGPU: what `gang-spread` reads.
    gangs: tuple[str, ...] = ()
    partition: Partition | None = None
    #: The device family it belongs to (`families`): only an ask of that family takes it.
    family: str = "nvidia"


#: What a card that names none of these gets (SPEC 1, SPEC 9), read off `Card` itself.
CARD_DEFAULTS: dict[str, object] = {
    f.name: f.default for f in fields(Card) if f.name in ("slots", "cores", "numa", "health", "type")
}


_ZERO_MATRICES: dict[int, tuple[tuple[int, ...], ...]] = {}


def _zero_matrix(size: int) -> tuple[tuple[int, ...], ...]:
    matrix = _ZERO_MATRICES.get(size)
    if matrix is None:
        matrix = _ZERO_MATRICES[size] = tuple((0,) * size for _ in range(size))
    return matrix


@dataclass(slots=True)
class Node:
    """A machine with cards. `links` maps an unordered UUID pair to its pair score (SPEC 6.8).

    `version` increases whenever anything that a decision reads on this node changes, so
    cached node verdicts can be reused until then.
    """

    name: str
    cards: list[Card] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    ready: bool = True
    links: dict[tuple[str, str], int] = field(default_factory=dict)
    version: int = 0
    pair_matrix: Sequence[Sequence[int]] = field(default_factory=list, repr=False)
    #: Kubernetes node fields (SPEC 10), in the API's own forms: `taints` as
    #: `{"key", "value", "effect"}` dicts, `unschedulable` as `spec.unschedulable`,
    #: `allocatable` as resource name -> quantity (`"4"`, `"500m"`, `"16Gi"`, or a number);
    #: a resource absent from `allocatable` is not limited (extended resources aside).
    taints: list[dict] = field(default_factory=list)
    unschedulable: bool = False
    allocatable: dict[str, object] = field(default_factory=dict)
    #: The job a planning cycle holds this node for (`Scheduler.reserve`), "" when none: no
    #: other pod is placed on it until it is released. Planning's state, never the cluster's.
    reserved_for: str = ""
    #: What the pods on it hold (`noderules.accounting.NodeHeld`: cpu, memory, pods, ports,
    #: their labels), changed only through that module; None until a pod is counted on it.
    held: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.cards.sort(key=lambda card: card.index)
        cordoned = cordoned_uuids(self.annotations)
        for card in self.cards:
            if card.uuid in cordoned:
                card.cordoned = True
        if not self.links:
            # no links: every pair scores 0; one shared read-only matrix per card count
            self.pair_matrix = _zero_matrix(len(self.cards))
            return
        uuids = [card.uuid for card in self.cards]
        rows = pairs_to_links(uuids, self.links)
        self.pair_matrix = [[rows[a].get(b, 0) for b in uuids] for a in uuids]

    def pair_score(self, a: str, b: str) -> int:
        return self.links.get(pair_key(a, b), 0)

    def shift(
        self, holdings: Iterable[tuple[str, int, int]], sign: int, instances: Iterable[tuple[str, Any]] = ()
    ) -> None:
        """Add (`sign` 1) or take off (-1) vGPU holdings, one (card uuid, MiB, cores) per vGPU,
        on this node's usage counters; a uuid it has no card for is skipped. On a card cut into
        instances (MIG) each holding is an instance: the next of `instances` (card uuid,
        instance) named for that card, else the one its MiB and cores pick. It does not
        touch the node: a caller that keeps the change does (one that restores it at once,
        to try a fit, need not)."""
        by_uuid = {card.uuid: card for card in self.cards}
        exact: dict[str, list] = {}
        for uuid, instance in instances:
            exact.setdefault(uuid, []).append(instance)
        for uuid, memory, cores in holdings:
            card = by_uuid.get(uuid)
            if card is not None:
                card.used_slots += sign
                card.used_memory += sign * memory
                card.used_cores += sign * cores
                if card.partition is not None:
                    card.partition = _shift_instance(card.partition, exact.get(uuid), memory, cores, sign)

    def hold_instances(self, instances: Iterable[tuple[str, Any]], sign: int) -> None:
        """Take (`sign` 1) or give back (-1) these exact (card uuid, instance) on cards cut into
        instances, their usage counters left as they are (they count the pod already)."""
        by_uuid = {card.uuid: card for card in self.cards}
        for uuid, instance in instances:
            card = by_uuid.get(uuid)
            if card is not None and card.partition is not None:
                partition = card.partition
                card.partition = partition.take(instance) if sign > 0 else partition.free(instance)

    def touch(self) -> None:
        """Call after changing anything a decision reads on this node (usage, health, cordons)."""
        self.version += 1
        TOUCHES.append(self)


def _shift_instance(
    partition: Partition, named: list | None, memory: int, cores: int, sign: int
) -> Partition:
    """`partition` with one instance more (`sign` 1) or less: the first of `named` (consumed),
    else the one a vGPU of `memory` MiB and `cores` picks."""
    if named:
        instance = named.pop(0)
        return partition.take(instance) if sign > 0 else partition.free(instance)
    return partition.take_memory(memory, cores) if sign > 0 else partition.free_memory(memory, cores)


@dataclass(slots=True)
class RunningPod:
    """A pod already bound to a node by someone else (kube-scheduler, HAMi before the switch),
    in the Kubernetes API's own forms (SPEC 10 `running`): it holds the node's cpu, memory, pod
    count and host ports, counts for pod (anti-)affinity and topology spread, and, where its
    annotations carry `hami.io/vgpu-devices-allocated`, holds those cards' slots, MiB and cores."""

    name: str
    node: str
    namespace: str = "default"
    labels: dict[str, str] = field(default_factory=dict)
    affinity: dict | None = None
    containers: list[dict] = field(default_factory=list)
    init_containers: list[dict] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Cluster:
    """A snapshot of every node; decisions read it, placements are applied to it. `running`
    are the pods others bound (`RunningPod`)."""

    nodes: list[Node] = field(default_factory=list)
    running: list[RunningPod] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.nodes.sort(key=lambda node: node.name)
        self.by_name = {node.name: node for node in self.nodes}

    def node(self, name: str) -> Node:
        return self.by_name[name]


@dataclass(frozen=True, slots=True)
class ResourceDefaults:
    """SPEC 2 defaults: what a container gets for a resource it does not name."""

    memory_percentage: int = 100
    cores: int = 0
    exclusive_cores: int = 100


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The cluster's default policies and resources; `closest_nodes` is how many of the nodes
    that came closest a pending decision keeps with their card tables (`engine.closeness`)."""

    node_scheduler_policy: str = "binpack"
    gpu_scheduler_policy: str = "spread"
    resources: ResourceDefaults = ResourceDefaults()
    closest_nodes: int = 5


@dataclass(slots=True)
class PodSpec:
    """A pod as Kubernetes (or a scenario) gives it: annotations and container specs as dicts."""

    name: str
    namespace: str = "default"
    annotations: dict[str, str] = field(default_factory=dict)
    containers: list[dict] = field(default_factory=list)
    init_containers: list[dict] = field(default_factory=list)
    uid: str = ""
    #: Kubernetes scheduling fields (SPEC 10), in the API's own forms: `node_selector` map,
    #: `affinity` (`nodeAffinity`, `podAffinity`, `podAntiAffinity`), `tolerations`,
    #: `topology_spread_constraints`, `scheduling_gates` (the gates' names). cpu, memory,
    #: extended resources and host ports are read from `containers`/`init_containers`.
    labels: dict[str, str] = field(default_factory=dict)
    node_name: str = ""
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: dict | None = None
    tolerations: list[dict] = field(default_factory=list)
    topology_spread_constraints: list[dict] = field(default_factory=list)
    scheduling_gates: list[str] = field(default_factory=list)
    #: `volumes` as the pod spec writes them (`VolumeBinding` reads the claims they name), and
    #: the claims, volumes and storage classes they are judged against: a
    #: `noderules.volumes.Storage`, or its SPEC 10 form (`persistentVolumeClaims`,
    #: `persistentVolumes`, `storageClasses`) as `Pod.scheduling` stores it; None: the
    #: volumes are not judged (no one gave their storage).
    volumes: list[dict] = field(default_factory=list)
    storage: Any = None
    #: What the watcher read of the pod's ResourceClaims (`Pod.scheduling["resourceClaims"]`:
    #: the claims, the request each DRA container stands for, and a `hold` while they cannot
    #: be asked for, `claimhold`); None for a pod without claims.
    claims: Any = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
