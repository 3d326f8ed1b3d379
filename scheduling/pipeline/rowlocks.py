"""Row locks, in the one global order that keeps the writers and the commits from deadlocking on
PostgreSQL (docs/architecture.md, "Lock order"). Every explicit row lock of the project is taken
through these helpers, so the order lives here:

0. the `CapacityVersion` row, updated alone in a transaction of its own (`CapacityVersion.bump`;
   the commit reads it unlocked, so a release never waits on a commit);
1. pods (`lock_pods`);
2. queues (`lock_queues`: the commit's, whose limits it re-checks; `share_queues`: the queues a
   submission names, `FOR KEY SHARE`), then namespace quotas (`lock_namespace_quotas`);
3. the node a write is about (`lock_node`);
4. cards (`lock_cards`);
5. evictions (`lock_evictions`), then nominations (deleted, not locked);
6. pod groups (`lock_pod_groups`): last, after the members, cards and evictions a group's
   phase is judged by (a commit's gang phases, a release's group, a submission's group). Held
   before its members are counted, so two writers of one group's phase and conditions take
   turns and the second counts what the first committed: neither writes over the other.

The queue tree's writes (`lock_queue_tree`: every queue `FOR UPDATE`), an operator's or a
PodGroup object's write of a group (`lock_pod_group`) and pods bound by other schedulers
(`lock_bound_pods`) are the only rows their transactions lock (one exception: the DRA pass's
store of a pod it placed, `services.assume_bound_pod`, locks the pod's cards first, then its
row; no writer locks such a row before cards); a ResourceQuota's own write locks its rows
alone too.

A transaction takes its locks by rising step, never back (one known exception:
`services.evictions.carry_out_local` takes its eviction before the victim's cards; a commit
cancelling that same eviction may meet it, which PostgreSQL aborts and `dbretry` runs again).
Within a step several rows are locked in primary-key order (namespace quotas: in their model's
order), the same order in every writer. No write changes a key column, so every lock but the
eviction's and the tree's is `FOR NO KEY UPDATE`, which leaves the `FOR KEY SHARE` locks of
foreign-key checks alone. `of_self`: a query that joins other tables (a pod's node, a card's
node) locks only its own rows; the joined ones are read, not locked.

On SQLite Django leaves the clause out: there `BEGIN IMMEDIATE` holds the whole database.
Each helper takes a queryset (the rows wanted) and gives it back locked, to be read as the
caller likes (`.get()`, `.first()`, `.values_list()`).
"""

from __future__ import annotations

from typing import TypeVar

from django.db import connection
from django.db.models import Model, QuerySet

from scheduling.models import (
    BoundPod,
    CapacityVersion,
    Card,
    Eviction,
    NamespaceQuota,
    Node,
    Pod,
    PodGroup,
    Queue,
)

Row = TypeVar("Row", bound=Model)

#: The steps, in the order a transaction takes them (0: `CapacityVersion`'s own methods; then
#: the helpers' models).
LOCK_ORDER: tuple[tuple[type[Model], ...], ...] = (
    (CapacityVersion,),
    (Pod,),
    (Queue, NamespaceQuota),
    (Node,),
    (Card,),
    (Eviction,),
    (PodGroup,),
)
#: Locked alone in their transactions: no place in the order.
LOCKED_ALONE: tuple[type[Model], ...] = (BoundPod,)


def _no_key(rows: QuerySet[Row], of_self: bool, skip_locked: bool = False) -> QuerySet[Row]:
    return rows.select_for_update(no_key=True, of=("self",) if of_self else (), skip_locked=skip_locked)


def lock_pods(rows: QuerySet[Pod], *, of_self: bool = False) -> QuerySet[Pod]:
    """Step 1: pods `FOR NO KEY UPDATE`, in primary-key order (the commit, every pod service,
    the wake)."""
    return _no_key(rows, of_self).order_by("pk")


def lock_node(rows: QuerySet[Node]) -> QuerySet[Node]:
    """Step 2: the node a report, a readiness change, a card move or a node's cordon is about,
    `FOR NO KEY UPDATE`; after its pods (none of these writes locks any), before its cards."""
    return _no_key(rows, False)


def lock_cards(rows: QuerySet[Card], *, of_self: bool = False, skip_locked: bool = False) -> QuerySet[Card]:
    """Step 3: cards `FOR NO KEY UPDATE`, in primary-key order; after any pod and node lock of
    the same transaction (every writer of the counters). `skip_locked`: the cards another
    transaction holds are left out, never waited for (a release: `pipeline.settle`)."""
    return _no_key(rows, of_self, skip_locked).order_by("pk")


def lock_evictions(rows: QuerySet[Eviction]) -> QuerySet[Eviction]:
    """Step 4: evictions `FOR UPDATE OF` the eviction only (the victim and preemptor joined
    are read, not locked), after the victim's pod row and before its cards' nominations."""
    return rows.select_for_update(of=("self",))


def lock_queues(rows: QuerySet[Queue]) -> QuerySet[Queue]:
    """Step 2: queues `FOR NO KEY UPDATE`, in primary-key order: the commit's (the leaf queues
    it writes on its pods and their ancestors with a limit), after its pods, before its cards,
    so two commits that could pass the same limit take turns."""
    return _no_key(rows, False).order_by("pk")


def share_queues(names: list[str]) -> dict[str, Queue]:
    """Step 2: the queues of these names `FOR KEY SHARE`, in primary-key order, by name: what a
    submission will point its pods and groups at. Many submissions share a queue at once; only
    the tree's writes (`lock_queue_tree`) wait for them, so a queue cannot be deleted under a
    pod joining it. A plain read on SQLite, where the transaction holds the database."""
    if not names:
        return {}
    rows = Queue.objects.filter(name__in=sorted(set(names))).order_by("pk")
    if connection.vendor != "postgresql":
        return {queue.name: queue for queue in rows}
    sql, params = rows.query.sql_with_params()
    return {queue.name: queue for queue in Queue.objects.raw(f"{sql} FOR KEY SHARE", params)}


def lock_queue_tree() -> list[Queue]:
    """Every queue `FOR UPDATE`, in primary-key order, alone in its transaction: a write to the
    tree (a queue created, changed or deleted) validates against the whole tree (no queue its
    own ancestor, the children's guarantees, no pods joining a queue being deleted), so it holds
    the whole tree; `FOR UPDATE` also waits for the submissions sharing a queue."""
    return list(Queue.objects.select_for_update().order_by("pk"))


def lock_pod_group(rows: QuerySet[PodGroup]) -> QuerySet[PodGroup]:
    """A pod group an operator or a PodGroup object changes, `FOR NO KEY UPDATE`, alone in its
    transaction (its first lock is its last: step 6 as any)."""
    return _no_key(rows, False)


def lock_pod_groups(rows: QuerySet[PodGroup]) -> QuerySet[PodGroup]:
    """Step 6: pod groups `FOR NO KEY UPDATE`, in primary-key order, last in the transaction,
    before their members are counted (the commit's gang phases, a release's groups, a
    submission's group it changes)."""
    return _no_key(rows, False).order_by("pk")


def lock_namespace_quotas(rows: QuerySet[NamespaceQuota]) -> QuerySet[NamespaceQuota]:
    """Step 2, after the queues: namespace quota rows `FOR NO KEY UPDATE` in their model's order
    (namespace, quota, resource): the rows of one ResourceQuota object (alone in its
    transaction), or the commit's, of the namespaces it places pods in."""
    return _no_key(rows, False)


def lock_bound_pods(rows: QuerySet[BoundPod]) -> QuerySet[BoundPod]:
    """Pods bound by other schedulers, `FOR NO KEY UPDATE` in primary-key order, alone in their
    transaction (the watcher's batches)."""
    return _no_key(rows, False).order_by("pk")
