"""SPEC 1: inputs of the engine: the cluster snapshot, the cluster config and the pod.

`Card` holds the only card defaults (slots 10, cores 100, type NVIDIA, NUMA 0, healthy);
`CARD_DEFAULTS` reads them for whoever fills in a card that does not name them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from .encoding import VENDOR, pairs_to_links

CORDON_ANNOTATION = "hami.io/device-cordon"


def cordoned_uuids(annotations) -> set[str]:
    """The card UUIDs a node's `hami.io/device-cordon` annotation keeps from new pods."""
    value = annotations.get(CORDON_ANNOTATION, "") if isinstance(annotations, dict) else ""
    return {uuid.strip() for uuid in str(value or "").split(",") if uuid.strip()}


@dataclass(slots=True)
class Card:
    """One physical GPU. Capacities are fixed; `used_*` is what its tenants hold now."""

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


#: What a card that names none of these gets (SPEC 1, SPEC 9), read off `Card` itself.
CARD_DEFAULTS: dict[str, object] = {
    f.name: f.default for f in fields(Card) if f.name in ("slots", "cores", "numa", "health", "type")
}


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
    links: dict[frozenset, int] = field(default_factory=dict)
    version: int = 0
    pair_matrix: list[list[int]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.cards.sort(key=lambda card: card.index)
        cordoned = cordoned_uuids(self.annotations)
        for card in self.cards:
            if card.uuid in cordoned:
                card.cordoned = True
        uuids = [card.uuid for card in self.cards]
        rows = pairs_to_links(uuids, self.links)
        self.pair_matrix = [[rows[a].get(b, 0) for b in uuids] for a in uuids]

    def pair_score(self, a: str, b: str) -> int:
        return self.links.get(frozenset((a, b)), 0)

    def touch(self) -> None:
        self.version += 1


@dataclass
class Cluster:
    """A snapshot of every node; decisions read it, placements are applied to it."""

    nodes: list[Node] = field(default_factory=list)

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

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
