"""What a cycle reads for batch scheduling: the queue tree with its usage, the namespace quotas,
and the gangs of the due pods; in a few aggregate queries, whatever the number of pods.

Usage is counted from the active Allocation rows (one row per vGPU), never from the pods'
asks: `vgpus` is the row count, `gpumem` and `gpucores` their sums (HAMi's quota bugs came
from counting asks once per pod instead of per vGPU).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.db.models import Count, Q, Sum

from scheduling.engine.annotations import subgroup_of
from scheduling.engine.batch.queues import (
    DEFAULT_QUEUE,
    RESOURCES,
    NamespaceBook,
    QueueBook,
    QueueState,
    Usage,
    zero,
)
from scheduling.models import Allocation, Card, NamespaceQuota, Pod, PodGroup, Queue


def _usage_rows(key: str, rows) -> dict[str, Usage]:
    out: dict[str, Usage] = {}
    for row in rows:
        used = out.setdefault(row[key] or "", zero())
        used["vgpus"] += row["vgpus"]
        used["gpumem"] += row["gpumem"] or 0
        used["gpucores"] += row["gpucores"] or 0
    return out


def _active_by(key: str) -> dict[str, Usage]:
    rows = (
        Allocation.objects.filter(active=True)
        .values(key)
        .annotate(vgpus=Count("id"), gpumem=Sum("memory"), gpucores=Sum("cores"))
        .order_by()
    )
    return _usage_rows(key, rows)


def queue_usage() -> dict[str, Usage]:
    """What each queue's pods hold now (its own pods only; `QueueBook` adds children up),
    by queue name; pods of no queue count for `default`."""
    usage = _active_by("pod__queue__name")
    if "" in usage:
        unnamed = usage.pop("")
        mine = usage.setdefault(DEFAULT_QUEUE, zero())
        for resource in RESOURCES:
            mine[resource] += unnamed[resource]
    return usage


def namespace_usage() -> dict[str, Usage]:
    return _active_by("pod__namespace")


def cluster_capacity() -> Usage:
    """Every reported card's slots, memory and cores, as the share of `QueueBook.order_key`."""
    total = Card.objects.filter(present=True).aggregate(
        vgpus=Sum("slots"), gpumem=Sum("memory"), gpucores=Sum("cores")
    )
    return {resource: int(total[resource] or 0) for resource in RESOURCES}


def queue_states(usage: dict[str, Usage] | None = None) -> list[QueueState]:
    """Every queue with its own usage (not yet summed up the tree)."""
    usage = queue_usage() if usage is None else usage
    states = []
    for queue in Queue.objects.select_related("parent").order_by("name"):
        states.append(
            QueueState(
                name=queue.name,
                parent=queue.parent.name if queue.parent else None,
                weight=queue.weight,
                guarantee=queue.figures("guarantee"),
                quota=queue.figures("quota"),
                limit=queue.figures("limit"),
                used=dict(usage.get(queue.name, zero())),
                pk=queue.pk,
                namespaces=[str(n) for n in queue.namespaces or [] if isinstance(n, str)],
                lend_guarantee=queue.lend_guarantee,
            )
        )
    return states


def snapshot_capacity(snapshot) -> Usage:
    """`cluster_capacity` from a snapshot's cards (the present ones, as it sums) instead of a
    scan of every card row (35 ms a cycle at 20,000 nodes). Kept on the snapshot: a card's
    size changes only by a whole read, which builds a new snapshot or finds them alike."""
    if snapshot.capacity is None:
        cards = [card for node in snapshot.cluster.nodes for card in node.cards]
        snapshot.capacity = {
            "vgpus": sum(card.slots for card in cards),
            "gpumem": sum(card.memory for card in cards),
            "gpucores": sum(card.cores for card in cards),
        }
    return dict(snapshot.capacity)


#: How long a node pool's planner reuses the whole cluster's capacity (`pool_capacity`), s.
POOL_CAPACITY_SECONDS = 10.0


def pool_capacity(snapshot, now: float | None = None) -> Usage:
    """`cluster_capacity` for a node pool's planner, whose snapshot holds its pool's cards
    only: read again at most every POOL_CAPACITY_SECONDS, kept on the snapshot. The scan of
    every card row cost it ~35 ms a cycle at 20,000 nodes, and the whole cluster's capacity
    moves only when cards come, go or change size (reports): a pool's queue shares then lag
    a node that joins or leaves elsewhere by at most that long."""
    now = time.monotonic() if now is None else now
    kept = snapshot.cluster_capacity
    if kept is None or now - kept[0] >= POOL_CAPACITY_SECONDS:
        kept = snapshot.cluster_capacity = (now, cluster_capacity())
    return dict(kept[1])


def load_book(usage: dict[str, Usage] | None = None, capacity: Usage | None = None) -> QueueBook:
    """The queue tree with usage summed into every ancestor, for one cycle; `usage` when the
    caller has read `queue_usage` already, `capacity` when it has the cluster's."""
    states = queue_states(usage)
    book = QueueBook([s.fresh() for s in states])
    for state in states:
        book.add(state.name, state.used)
    book.capacity = cluster_capacity() if capacity is None else capacity
    return book


def load_namespace_book() -> NamespaceBook:
    hard: dict[str, dict[str, int]] = {}
    for namespace, resource, value in NamespaceQuota.objects.values_list("namespace", "resource", "hard"):
        mine = hard.setdefault(namespace, {})
        mine[resource] = min(value, mine.get(resource, value))  # two quotas: the tighter holds
    if not hard:
        return NamespaceBook()
    return NamespaceBook(hard=hard, used=namespace_usage())


@dataclass
class GangState:
    """One gang of the due pods: its figures and how many of its members are where."""

    pk: int
    key: str
    min_member: int
    queue: str | None
    priority: int
    created_at: object
    timeout_seconds: int | None
    on_timeout: str
    phase: str
    min_resources: Usage
    known: int = 0  # members that are neither finished nor rejected
    placed: int = 0  # members scheduled or running
    #: The node label whose one value holds every member ("" for none), and that value where
    #: members are placed already ("" when none are): `engine.batch.jobs.Gang`.
    topology_key: str = ""
    domain: str = ""
    finished: int = 0  # members that ended (succeeded, failed, deleted)
    #: Its parts' own minimums (`PodGroup.subgroups`), and per part its members placed and
    #: known, read from their labels (`engine.annotations.subgroup_of`).
    subgroups: dict[str, int] = field(default_factory=dict)
    parts_placed: dict[str, int] = field(default_factory=dict)
    parts_known: dict[str, int] = field(default_factory=dict)


def subgroup_minimums(subgroups) -> dict[str, int]:
    """A row's `subgroups` ([{name, min_member}]) as {name: minimum}; malformed entries, which
    the writers refuse, are skipped."""
    out: dict[str, int] = {}
    for part in subgroups if isinstance(subgroups, list) else ():
        if (
            isinstance(part, dict)
            and isinstance(part.get("name"), str)
            and isinstance(part.get("min_member"), int)
        ):
            out[part["name"]] = part["min_member"]
    return out


def load_gangs(group_ids) -> dict[int, GangState]:
    """The gangs `group_ids`, with their member counts, in two queries."""
    group_ids = sorted({pk for pk in group_ids if pk is not None})
    if not group_ids:
        return {}
    gangs = {}
    for group in PodGroup.objects.filter(pk__in=group_ids).select_related("queue"):
        gangs[group.pk] = GangState(
            pk=group.pk,
            key=group.key,
            min_member=group.min_member,
            queue=group.queue.name if group.queue else None,
            priority=group.priority,
            created_at=group.created_at,
            timeout_seconds=group.schedule_timeout_seconds,
            on_timeout=group.on_timeout,
            phase=group.phase,
            min_resources=group.min_resources(),
            topology_key=group.topology_key,
            subgroups=subgroup_minimums(group.subgroups),
        )
        parts = sum(gangs[group.pk].subgroups.values())
        gangs[group.pk].min_member = max(group.min_member, parts)  # as the engine's Gang reads it
    counts = (
        Pod.objects.filter(group_id__in=group_ids)
        .exclude(status=Pod.REJECTED)
        .values("group_id")
        .annotate(
            known=Count("id", filter=~Q(status__in=Pod.FINISHED)),
            placed=Count("id", filter=Q(status__in=Pod.BOUND)),
            finished=Count("id", filter=Q(status__in=Pod.FINISHED)),
        )
        .order_by()
    )
    for row in counts:
        gang = gangs.get(row["group_id"])
        if gang is not None:
            gang.known, gang.placed, gang.finished = row["known"], row["placed"], row["finished"]
    keyed = {pk: gang for pk, gang in gangs.items() if gang.topology_key and gang.placed}
    if keyed:
        placed_on = (
            Pod.objects.filter(group_id__in=sorted(keyed), status__in=Pod.BOUND)
            .exclude(node=None)
            .values_list("group_id", "node__labels")
        )
        for group_id, labels in placed_on:
            gang = keyed[group_id]
            gang.domain = gang.domain or str((labels or {}).get(gang.topology_key) or "")
    parted = {pk: gang for pk, gang in gangs.items() if gang.subgroups}
    if parted:
        members = (
            Pod.objects.filter(group_id__in=sorted(parted))
            .exclude(status__in=(*Pod.FINISHED, Pod.REJECTED))
            .values_list("group_id", "status", "annotations", "labels")
        )
        for group_id, status, annotations, labels in members:
            gang = parted[group_id]
            part = subgroup_of(annotations, labels, gang.subgroups)
            gang.parts_known[part] = gang.parts_known.get(part, 0) + 1
            if status in Pod.BOUND:
                gang.parts_placed[part] = gang.parts_placed.get(part, 0) + 1
    return gangs


def fair_share_book(usage: dict[str, Usage] | None = None) -> QueueBook:
    """The queue book with fair shares computed as the next cycle would: the queues that have
    pending pods want more (for `/api/v1/queues/` and the Queues page)."""
    book = load_book(usage)
    waiting = (
        Pod.objects.filter(status=Pod.PENDING, parked=False).values_list("queue__name", flat=True).distinct()
    )
    book.fair_shares({book.leaf(name) for name in waiting})
    return book
