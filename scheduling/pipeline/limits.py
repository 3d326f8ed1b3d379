"""Queue limits and namespace quotas, checked again by the commit under lock (docs/queues.md,
"Limits under overlap").

Planning holds a job back at a limit against the usage it read (`engine.batch.jobs`); two cycles
planned at once each miss the other's placements, so together they could pass a limit that each
kept alone. The commit therefore locks, after its pods (step 2 of the lock order,
docs/architecture.md), the leaf queues it writes on its pods with every ancestor that has a
limit, then the quota rows of the namespaces it places pods in; reads the usage under those
locks (a commit that adds to a queue or a namespace with a limit holds them too, so it reads
what the one before it wrote); and admits each placement, in queue order, against that usage
plus what this commit admitted before it. Where a queue keeps an idle guarantee (not lent), every
queue is locked and the placement is also checked against what the guarantees keep
(`QueueBook.over_kept`). A placement that would pass a limit is not written:
its pod stays pending with the verdict planning gives (`QueueLimitExceeded`,
`NamespaceQuotaExceeded`); a leaf queue deleted since planning leaves its pods pending with
`QueueNotFound`.

Only pods planned from queues are checked (`Attempt.queue_id`): the extender's one-pod plans
never read queues, here as in planning.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduling.engine.batch.jobs import NAMESPACE_QUOTA, QUEUE_LIMIT, QUEUE_NOT_FOUND
from scheduling.engine.batch.queues import RESOURCES, NamespaceBook, QueueBook, decision_usage
from scheduling.engine.decision import SCHEDULED
from scheduling.models import NamespaceQuota, Queue

from . import rowlocks
from .batch import load_book, namespace_usage
from .plan import Attempt

LIMIT_COLUMNS = tuple(f"limit_{resource}" for resource in RESOURCES)
GUARANTEE_COLUMNS = tuple(f"guarantee_{resource}" for resource in RESOURCES)


@dataclass
class Limits:
    """The limits that bind this commit's placements, with their usage as read under lock."""

    names: dict[int, str] = field(default_factory=dict)  # locked leaf queue pk -> name
    gone: set[int] = field(default_factory=set)  # leaf queues deleted since planning
    book: QueueBook | None = None  # None: no queue of these placements has a limit
    namespaces: NamespaceBook | None = None  # None: no quota in their namespaces

    def refusal(self, attempt: Attempt) -> tuple[str, str] | None:
        """(reason code, message) when this placement would pass a limit now, else None."""
        if attempt.queue_id is None or attempt.decision.status != SCHEDULED:
            return None
        if attempt.queue_id in self.gone:
            return (
                QUEUE_NOT_FOUND,
                "its queue was deleted since the cycle planned; the next cycle looks again",
            )
        used = decision_usage(attempt.decision)
        name = self.names.get(attempt.queue_id)
        if self.book is not None and name is not None:
            why = self.book.over_limit(name, used) or self.book.over_kept(name, used)
            if why is not None:
                return QUEUE_LIMIT, why
        if self.namespaces is not None:
            why = self.namespaces.over(attempt.decision.namespace, used)
            if why is not None:
                return NAMESPACE_QUOTA, why
        return None

    def take(self, attempt: Attempt, sign: int = 1) -> None:
        """Count an admitted placement (or, with `sign` -1, give it back: a gang not kept)."""
        if attempt.queue_id is None or attempt.decision.status != SCHEDULED:
            return
        used = decision_usage(attempt.decision)
        name = self.names.get(attempt.queue_id)
        if self.book is not None and name is not None:
            self.book.add(name, used, sign)
        if self.namespaces is not None:
            self.namespaces.add(attempt.decision.namespace, used, sign)


def lock_limits(attempts: list[Attempt]) -> Limits:
    """Lock what bounds these attempts (step 2: their leaf queues and limited ancestors, then
    their namespaces' quota rows) and read its usage; in the caller's transaction."""
    leaves = sorted({a.queue_id for a in attempts if a.queue_id is not None})
    if not leaves:
        return Limits()
    rows = list(_tree())
    width = len(LIMIT_COLUMNS)
    tree = {
        pk: (name, parent, any(v is not None for v in rest[:width])) for pk, name, parent, _, *rest in rows
    }
    placing = {a.queue_id for a in attempts if a.queue_id is not None and a.decision.status == SCHEDULED}
    limited = {pk for leaf in placing for pk in _chain(tree, leaf) if tree[pk][2]}
    # A guarantee kept empty for its queue (not lent) binds every placement of the cluster
    # (`QueueBook.over_kept`): then every queue is locked and read, as the tree writes do.
    keeping = placing and any(not lend and any(rest[width:]) for _, _, _, lend, *rest in rows)
    if keeping:
        limited |= set(tree)
    locked = _lock(set(leaves) | limited)
    out = Limits(
        names={pk: tree[pk][0] for pk in leaves if pk in locked and pk in tree},
        gone={pk for pk in leaves if pk not in locked},
    )
    if keeping or any(limited for _, _, limited in tree.values()):
        book = load_book()  # read under the locks: the tree and the usage as the last commit left them
        pks = {state.name: state.pk for state in book.queues.values()}
        for leaf in placing & set(out.names):
            for state in book.chain(out.names[leaf]):  # a parent changed since the read above
                pk = pks[state.name]
                if pk is not None and pk not in locked and any(v is not None for v in state.limit.values()):
                    locked |= _lock({pk})
        out.book = book
    namespaces = sorted(
        {a.decision.namespace for a in attempts if a.queue_id is not None and a.decision.status == SCHEDULED}
    )
    hard: dict[str, dict[str, int]] = {}
    for namespace, resource, value in rowlocks.lock_namespace_quotas(
        NamespaceQuota.objects.filter(namespace__in=namespaces)
    ).values_list("namespace", "resource", "hard"):
        mine = hard.setdefault(namespace, {})
        mine[resource] = min(value, mine.get(resource, value))  # two quotas: the tighter holds
    if hard:
        used = namespace_usage()
        out.namespaces = NamespaceBook(hard=hard, used={ns: used[ns] for ns in hard if ns in used})
    return out


def _tree():
    return Queue.objects.values_list(
        "pk", "name", "parent_id", "lend_guarantee", *LIMIT_COLUMNS, *GUARANTEE_COLUMNS
    )


def _chain(tree: dict, pk: int | None) -> list[int]:
    out: list[int] = []
    while pk is not None and pk in tree and pk not in out:
        out.append(pk)
        pk = tree[pk][1]
    return out


def _lock(pks: set[int]) -> set[int]:
    """The queues of `pks` that still exist, locked."""
    return set(rowlocks.lock_queues(Queue.objects.filter(pk__in=sorted(pks))).values_list("pk", flat=True))
