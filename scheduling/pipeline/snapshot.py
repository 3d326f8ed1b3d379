"""One cycle's view of the cluster: nodes, present cards and their usage, in three queries.

The engine decides against plain dataclasses; this module is the only place that turns
rows into them, so every cycle (and every worker) sees the cluster the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from django.db.models import Q
from django.utils import timezone

from scheduling.engine import Card as EngineCard
from scheduling.engine import Cluster, ClusterConfig
from scheduling.engine import Node as EngineNode
from scheduling.engine.encoding import links_to_pairs
from scheduling.models import Allocation, Card, Node, Pod, SchedulerConfig

from .options import option

#: The card columns the engine reads, in `engine_card`'s order: the snapshot and the commit's
#: re-check under lock build the engine's cards from the same columns.
ENGINE_CARD_COLUMNS = (
    "uuid",
    "index",
    "type",
    "slots",
    "memory",
    "cores",
    "numa",
    "health",
    "mode",
    "cordoned",
)
USED_COLUMNS = ("used_slots", "used_memory", "used_cores")
CARD_COLUMNS = ("id", "node_id", "links", *ENGINE_CARD_COLUMNS, *USED_COLUMNS)


def engine_card(values, used=(0, 0, 0)) -> EngineCard:
    """An engine card from the `ENGINE_CARD_COLUMNS` of a card row, with `used` (slots, MiB, cores)."""
    uuid, index, card_type, slots, memory, cores, numa, health, mode, cordoned = values
    return EngineCard(
        uuid=uuid,
        index=index,
        memory=memory,
        type=card_type,
        slots=slots,
        cores=cores,
        numa=numa,
        health=health,
        cordoned=cordoned,
        mode=mode,
        used_slots=used[0],
        used_memory=used[1],
        used_cores=used[2],
    )


@dataclass
class Snapshot:
    """The engine's cluster plus the row ids a commit needs to write back."""

    cluster: Cluster
    config: ClusterConfig
    node_ids: dict[str, int] = field(default_factory=dict)
    card_ids: dict[str, int] = field(default_factory=dict)


NODE_COLUMNS = ("id", "name", "labels", "annotations", "ready")


def current_config() -> ClusterConfig:
    """The config in force, with `closest_nodes` from the CLOSEST_NODES option (how many close
    nodes a pending decision keeps with their card tables)."""
    return replace(SchedulerConfig.current(), closest_nodes=option("CLOSEST_NODES"))


def card_rows():
    """Every present card as a row of CARD_COLUMNS."""
    return Card.objects.filter(present=True).values_list(*CARD_COLUMNS)


def node_rows():
    """Every node as a row of NODE_COLUMNS."""
    return Node.objects.values_list(*NODE_COLUMNS)


def engine_node(row, cards) -> EngineNode:
    """An engine node from a row of NODE_COLUMNS and its card rows (CARD_COLUMNS)."""
    _, name, labels, annotations, ready = row
    return EngineNode(
        name=name,
        cards=[engine_card(card[3:13], card[13:16]) for card in cards],
        annotations=annotations if isinstance(annotations, dict) else {},
        labels=labels if isinstance(labels, dict) else {},
        ready=ready,
        links=links_to_pairs([(card[3], card[2]) for card in cards]),
    )


def build_snapshot(cards, nodes, config: ClusterConfig) -> Snapshot:
    """A snapshot from rows of CARD_COLUMNS and NODE_COLUMNS (a node without rows has no cards)."""
    per_node: dict[int, list] = {}
    card_ids: dict[str, int] = {}
    for row in cards:
        per_node.setdefault(row[1], []).append(row)
        card_ids[row[3]] = row[0]
    engine_nodes = []
    node_ids: dict[str, int] = {}
    for row in nodes:
        engine_nodes.append(engine_node(row, per_node.get(row[0], [])))
        node_ids[row[1]] = row[0]
    return Snapshot(cluster=Cluster(engine_nodes), config=config, node_ids=node_ids, card_ids=card_ids)


def load_snapshot(config: ClusterConfig | None = None) -> Snapshot:
    """Nodes, present cards with their counters, and the config in force (`current_config`).

    Cordon comes from `Card.cordoned` and from the node annotation `hami.io/device-cordon`
    (the engine's Node applies the annotation). Absent cards are left out; a not-ready node
    is kept so that pods see `NodeNotReady` for it. Cycles keep theirs up to date instead
    (`pipeline.standing`); this reads it whole.
    """
    return build_snapshot(card_rows(), node_rows(), config or current_config())


def mark_gangs(cluster: Cluster) -> None:
    """Each card's `gangs`: the pod groups of its tenants, once per vGPU, for `gang-spread`
    (one query over the active allocations of grouped pods; only when a due pod needs it)."""
    held: dict[str, list[str]] = {}
    rows = Allocation.objects.filter(active=True, pod__group__isnull=False, card__present=True).values_list(
        "card__uuid", "pod__group__namespace", "pod__group__name"
    )
    for uuid, namespace, name in rows:
        held.setdefault(uuid, []).append(f"{namespace}/{name}")
    if not held:
        return
    for node in cluster.nodes:
        touched = False
        for card in node.cards:
            if card.uuid in held:
                card.gangs = tuple(held[card.uuid])
                touched = True
        if touched:
            node.touch()


def card_tenants(uuids) -> dict[str, list[tuple[str, int, int]]]:
    """Who holds each of the cards `uuids` now: card UUID -> [(pod `ns/name`, MiB, cores)], a
    pod's vGPUs on one card summed, largest first. One query, for the few cards a pending
    pod's explanation names (the close nodes' `free` hints), not for the whole cycle."""
    uuids = [uuid for uuid in dict.fromkeys(uuids) if uuid]
    if not uuids:
        return {}
    held: dict[str, dict[str, list[int]]] = {}
    rows = Allocation.objects.filter(active=True, card__uuid__in=uuids, card__present=True).values_list(
        "card__uuid", "pod__namespace", "pod__name", "memory", "cores"
    )
    for uuid, namespace, name, memory, cores in rows:
        entry = held.setdefault(uuid, {}).setdefault(f"{namespace}/{name}", [0, 0])
        entry[0] += memory
        entry[1] += cores
    return {
        uuid: sorted(((pod, m, c) for pod, (m, c) in pods.items()), key=lambda t: (-t[1], t[0]))
        for uuid, pods in held.items()
    }


POD_COLUMNS = (
    "id",
    "namespace",
    "name",
    "uid",
    "annotations",
    "containers",
    "init_containers",
    "revision",
    "attempts",
    "labels",
    "group_id",
    "priority",
    "submitted_at",
)


def due_pods(limit: int, now=None):
    """Pending pods in queue order (priority high to low, then submission), skipping parked
    pods, pods still backing off, and extender pods (placed only when kube-scheduler's filter
    call offers its nodes). One query; rows as tuples of POD_COLUMNS."""
    now = now or timezone.now()
    return list(
        Pod.objects.filter(status=Pod.PENDING, parked=False)
        .exclude(origin=Pod.EXTENDER)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .order_by("-priority", "submitted_at", "id")
        .values_list(*POD_COLUMNS)[:limit]
    )


def gang_members(group_ids, but) -> list:
    """The other pending members of gangs `group_ids` (rows of POD_COLUMNS), backing off or
    not: a gang is tried with all its members as soon as one of them is due."""
    if not group_ids:
        return []
    return list(
        Pod.objects.filter(status=Pod.PENDING, parked=False, group_id__in=sorted(group_ids))
        .exclude(origin=Pod.EXTENDER)
        .exclude(pk__in=sorted(but))
        .order_by("-priority", "submitted_at", "id")
        .values_list(*POD_COLUMNS)
    )
