"""One cycle's view of the cluster: nodes, present cards and their usage, in three queries.

The engine decides against plain dataclasses; this module is the only place that turns
rows into them, so every cycle (and every worker) sees the cluster the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.db import connection
from django.db.models import BooleanField, F, JSONField, Q, TextField, Value
from django.utils import timezone

from scheduling.engine import Card as EngineCard
from scheduling.engine import Cluster, ClusterConfig
from scheduling.engine import Node as EngineNode
from scheduling.engine.encoding import ALLOCATED, links_to_pairs
from scheduling.engine.errors import ScenarioError
from scheduling.engine.families import family_of_card, mig
from scheduling.engine.model import RunningPod
from scheduling.engine.noderules import account_running
from scheduling.models import Allocation, BoundPod, Card, Node, Pod, SchedulerConfig

from . import pools
from .options import option

log = logging.getLogger(__name__)

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
    "mig_profiles",
)
USED_COLUMNS = ("used_slots", "used_memory", "used_cores")
CARD_COLUMNS = ("id", "node_id", "links", *ENGINE_CARD_COLUMNS, *USED_COLUMNS)
#: Where a card row (CARD_COLUMNS) holds `engine_card`'s columns, the usage counters, the
#: UUID and the links: read by name, so a column added to the row moves them all.
ENGINE_FIELDS = slice(
    CARD_COLUMNS.index(ENGINE_CARD_COLUMNS[0]), CARD_COLUMNS.index(ENGINE_CARD_COLUMNS[-1]) + 1
)
USED_FIELDS = slice(CARD_COLUMNS.index(USED_COLUMNS[0]), CARD_COLUMNS.index(USED_COLUMNS[-1]) + 1)
CARD_UUID, CARD_LINKS = CARD_COLUMNS.index("uuid"), CARD_COLUMNS.index("links")


def engine_card(values, used=(0, 0, 0)) -> EngineCard:
    """An engine card from the `ENGINE_CARD_COLUMNS` of a card row, with `used` (slots, MiB, cores)."""
    uuid, index, card_type, slots, memory, cores, numa, health, mode, cordoned, profiles = values
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
        partition=_partition(uuid, mode, profiles),
        family=family_of_card(card_type, mode),
    )


def _partition(uuid: str, mode: str, profiles) -> mig.Geometry | None:
    """A MIG card's geometry from its stored `migProfiles` (none held: the running pods'
    reservations take theirs when counted); None for another card or unreadable profiles."""
    if mode != mig.MODE or not profiles:
        return None
    try:
        return mig.Geometry(mig.read_profiles(profiles, f"card {uuid}.mig_profiles"))
    except ScenarioError as exc:
        log.warning("card %s: MIG profiles not read, shared as vGPUs: %s", uuid, exc)
        return None


@dataclass
class Snapshot:
    """The engine's cluster plus the row ids a commit needs to write back."""

    cluster: Cluster
    config: ClusterConfig
    node_ids: dict[str, int] = field(default_factory=dict)
    card_ids: dict[str, int] = field(default_factory=dict)
    #: The cards' summed slots, MiB and cores (`batch.snapshot_capacity`), once asked.
    capacity: dict[str, int] | None = None
    #: A node pool's planner: the whole cluster's (`batch.pool_capacity`), with when it was
    #: read (`time.monotonic()`).
    cluster_capacity: tuple[float, dict[str, int]] | None = None
    #: Taken before the pods others bound were read (`bound_mark`): a commit of a plan made on
    #: it looks for such pods written since (`bound_written_since`).
    bound_mark: int | datetime | None = None


NODE_COLUMNS = ("id", "name", "labels", "annotations", "ready", "taints", "unschedulable", "allocatable")


def current_config() -> ClusterConfig:
    """The config in force, with `closest_nodes` from the CLOSEST_NODES option (how many close
    nodes a pending decision keeps with their card tables)."""
    return replace(SchedulerConfig.current(), closest_nodes=option("CLOSEST_NODES"))


def card_rows(pool: str = ""):
    """Every present card (of node pool `pool`, `pools`; '': the whole cluster) as a row of
    CARD_COLUMNS."""
    return Card.objects.filter(pools.nodes_q(pool, prefix="node__"), present=True).values_list(*CARD_COLUMNS)


def node_rows(pool: str = ""):
    """Every node (of node pool `pool`, `pools`; '': the whole cluster) as a row of NODE_COLUMNS."""
    return Node.objects.filter(pools.nodes_q(pool)).values_list(*NODE_COLUMNS)


def engine_node(row, cards) -> EngineNode:
    """An engine node from a row of NODE_COLUMNS and its card rows (CARD_COLUMNS)."""
    _, name, labels, annotations, ready, taints, unschedulable, allocatable = row
    return EngineNode(
        name=name,
        cards=[engine_card(card[ENGINE_FIELDS], card[USED_FIELDS]) for card in cards],
        annotations=annotations if isinstance(annotations, dict) else {},
        labels=labels if isinstance(labels, dict) else {},
        ready=ready,
        links=links_to_pairs([(card[CARD_UUID], card[CARD_LINKS]) for card in cards]),
        taints=taints if isinstance(taints, list) else [],
        unschedulable=bool(unschedulable),
        allocatable=allocatable if isinstance(allocatable, dict) else {},
    )


#: What `running_pods` reads of each running pod, in `running_pod`'s order: hamiadmin's own
#: placed pods (their affinity inside `scheduling`, no allocation annotation: their cards
#: hold them already) and the pods others bound, in one UNION ALL.
OWN_RUNNING_COLUMNS = (
    "namespace",
    "name",
    "node__name",
    "labels",
    "scheduling",
    "containers",
    "init_containers",
    "held",
    "extra_annotations",
    "reserved",
    "mine",
)
BOUND_RUNNING_COLUMNS = (
    "namespace",
    "name",
    "node_name",
    "labels",
    "affinity",
    "containers",
    "init_containers",
    "held",
    "extra",
    "mig_allocations",
    "mine",
)


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _listing(value) -> list:
    return value if isinstance(value, list) else []


def _own_rows(node_ids: Iterable[int] | None = None, pool: str = ""):
    rows = Pod.objects.filter(pools.nodes_q(pool, prefix="node__"), status__in=Pod.BOUND, node__isnull=False)
    if node_ids is not None:
        rows = rows.filter(node_id__in=sorted(set(node_ids)))
    marks = {
        "held": Value("", output_field=TextField()),
        "reserved": Value("", output_field=TextField()),
        "mine": Value(True, output_field=BooleanField()),
    }
    return rows.order_by().annotate(**marks).values_list(*OWN_RUNNING_COLUMNS)


def _bound_rows(pool: str = ""):
    marks = {
        "held": F("allocated"),
        "extra": Value({}, output_field=JSONField()),
        "mine": Value(False, output_field=BooleanField()),
    }
    rows = BoundPod.objects.filter(pools.node_names_q(pool=pool)).exclude(phase__in=BoundPod.ENDED)
    rows = rows.order_by().annotate(**marks)
    return rows.values_list(*BOUND_RUNNING_COLUMNS)


def running_pod(row) -> RunningPod:
    """A row of OWN_RUNNING_COLUMNS or BOUND_RUNNING_COLUMNS as the engine's `RunningPod`."""
    namespace, name, node, labels, affinity, containers, init_containers, allocated, extra, reserved, mine = (
        row
    )
    if mine:
        affinity = _mapping(affinity).get("affinity")  # an own pod's column is `Pod.scheduling`
    return RunningPod(
        name=name,
        node=node,
        namespace=namespace,
        labels=_mapping(labels),
        affinity=affinity if isinstance(affinity, dict) and affinity else None,
        containers=_listing(containers),
        init_containers=_listing(init_containers),
        annotations={
            **({ALLOCATED: allocated} if allocated else {}),
            **{key: value for key, value in _mapping(extra).items() if isinstance(value, str)},
            **({mig.ALLOCATIONS: reserved} if reserved else {}),
        },
    )


def own_running(node_ids: Iterable[int] | None = None, pool: str = "") -> list[RunningPod]:
    """hamiadmin's own placed pods (scheduled or running) as `RunningPod`s (`node_ids`: only
    those nodes' pods): their cpu, memory, pod slot, ports, labels and anti-affinity count on
    their node. Without their `hami.io/vgpu-devices-allocated`: their cards hold them already."""
    return [running_pod(row) for row in _own_rows(node_ids, pool)]


def running_pods(pool: str = "") -> tuple[list[RunningPod], list[RunningPod]]:
    """`Cluster.running` in one query: (the pods others bound that still hold their node, as
    `RunningPod`s with HAMi's allocation annotation when they have one; hamiadmin's own placed
    pods, `own_running`). A pod others bound that hamiadmin placed itself is left out: it
    counts once, as its own. `pool`: only the pods on that node pool's nodes."""
    bound: list[RunningPod] = []
    own: list[RunningPod] = []
    for row in _bound_rows(pool).union(_own_rows(pool=pool), all=True):
        (own if row[-1] else bound).append(running_pod(row))
    mine = {pod.key for pod in own}
    return [pod for pod in bound if pod.key not in mine], own


def count_running(
    cluster: Cluster, pods: Iterable[RunningPod] | None = None, nodes: Iterable[str] | None = None
) -> None:
    """Apply `cluster.running` to its nodes (the engine's `account_running`, idempotent; `pods`
    and `nodes`: only those nodes, holding exactly those pods): the one place a snapshot does
    it. A running pod that does not read is left out and logged."""
    for pod, problem in account_running(cluster, pods, nodes):
        log.warning("running pod %s on %s is not counted: %s", pod.key, pod.node, problem)


def build_snapshot(cards, nodes, config: ClusterConfig, running: list[RunningPod] | None = None) -> Snapshot:
    """A snapshot from rows of CARD_COLUMNS and NODE_COLUMNS (a node without rows has no cards)
    and the running pods (`running_pods`), counted on their nodes."""
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
    cluster = Cluster(engine_nodes, running=list(running or ()))
    if cluster.running:
        count_running(cluster)
    return Snapshot(cluster=cluster, config=config, node_ids=node_ids, card_ids=card_ids)


#: The oldest transaction still running, as a 64-bit xid (`txid_current()`'s numbering).
HORIZON = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"


def written_since(model, horizon: int):
    """`model`'s rows written at or after `horizon` (PostgreSQL: their `written` mark)."""
    return model.objects.order_by().extra(where=["written >= %s"], params=[horizon])


def bound_mark() -> int | datetime:
    """Where a read of the pods others bound starts: on PostgreSQL the oldest transaction
    running (a row written after it carries a `written` mark at or after it), elsewhere the
    time (SQLite: the one machine's clock every writer stamps `updated_at` with)."""
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {HORIZON}")  # noqa: S608 - our own expression
        return cursor.fetchone()[0]


def bound_written_since(snapshot: Snapshot) -> set[str]:
    """The nodes where a pod others bound holding cards (HAMi's allocation, a DRA pass's
    claims) was written since `snapshot` read them (its `bound_mark`) and not as the snapshot
    counted it: the cards' counters do not show what it holds. A row written since the mark
    may be one the read saw (PostgreSQL's mark is the oldest transaction running, anywhere on
    the server, so it trails the read when another session keeps a transaction open): one on
    the same node with the same allocation as counted is left out. Pods hamiadmin placed
    itself count as its own and are left out (`others_on`)."""
    mark = snapshot.bound_mark
    if mark is None:
        return set()
    rows = (
        written_since(BoundPod, mark)
        if isinstance(mark, int)
        else BoundPod.objects.filter(updated_at__gte=mark)
    )
    rows = rows.exclude(allocated="", mig_allocations="").exclude(phase__in=BoundPod.ENDED)
    written = list(rows.values_list("namespace", "name", "node_name", "allocated", "mig_allocations"))
    if not written:
        return set()
    keys = {f"{namespace}/{name}" for namespace, name, *_ in written}
    counted = {
        pod.key: (pod.node, pod.annotations.get(ALLOCATED, ""), pod.annotations.get(mig.ALLOCATIONS, ""))
        for pod in snapshot.cluster.running
        if pod.key in keys
    }
    return others_on(
        [
            (namespace, name, node)
            for namespace, name, node, allocated, reserved in written
            if counted.get(f"{namespace}/{name}") != (node, allocated, reserved)
        ]
    )


def others_on(late: list[tuple[str, str, str]]) -> set[str]:
    """The nodes of the bound pods `late` ((namespace, name, node)) that are not hamiadmin's
    own placed pods (the watcher writes those as bound too)."""
    if not late:
        return set()
    ours = set(
        Pod.objects.filter(
            namespace__in={namespace for namespace, _, _ in late},
            name__in={name for _, name, _ in late},
            status__in=Pod.BOUND,
        ).values_list("namespace", "name")
    )
    return {node for namespace, name, node in late if (namespace, name) not in ours}


def load_snapshot(config: ClusterConfig | None = None, pool: str = "") -> Snapshot:
    """Nodes, present cards with their counters, and the config in force (`current_config`).

    Cordon comes from `Card.cordoned` and from the node annotation `hami.io/device-cordon`
    (the engine's Node applies the annotation). Absent cards are left out; a not-ready node
    is kept so that pods see `NodeNotReady` for it. Cycles keep theirs up to date instead
    (`pipeline.standing`); this reads it whole.

    `pool`: only that node pool's nodes, as its planner sees them (`pools`). The default, the
    whole cluster, is what every reader but a planner wants, a process that plans a pool
    included: `simulate`, the what-ifs and the extender judge a pod against every node, its
    pool's selector counted among the node rules.
    """
    mark = bound_mark()
    bound, own = running_pods(pool)
    snapshot = build_snapshot(card_rows(pool), node_rows(pool), config or current_config(), [*bound, *own])
    snapshot.bound_mark = mark
    return snapshot


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
    "scheduling",
)


def due_pods(limit: int, now=None):
    """Pending pods in queue order (priority high to low, then submission), skipping parked
    pods, gated pods (never tried until their gates go), pods still backing off, extender
    pods (placed only when kube-scheduler's filter call offers its nodes), and the pods of
    another planner's node pool (`pools`). One query; rows as tuples of POD_COLUMNS."""
    now = now or timezone.now()
    return list(
        Pod.objects.filter(pools.pods_q(), status=Pod.PENDING, parked=False, gated=False)
        .exclude(origin=Pod.EXTENDER)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .order_by("-priority", "submitted_at", "id")
        .values_list(*POD_COLUMNS)[:limit]
    )


def gang_members(group_ids, but) -> list:
    """The other pending members of gangs `group_ids` (rows of POD_COLUMNS), backing off or
    not: a gang is tried with all its members as soon as one of them is due. A gated member
    is not: it waits for its gates."""
    if not group_ids:
        return []
    return list(
        Pod.objects.filter(status=Pod.PENDING, parked=False, gated=False, group_id__in=sorted(group_ids))
        .exclude(origin=Pod.EXTENDER)
        .exclude(pk__in=sorted(but))
        .order_by("-priority", "submitted_at", "id")
        .values_list(*POD_COLUMNS)
    )
