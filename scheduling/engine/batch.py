"""Batch scheduling in the engine's terms: which gang and queue a pod names, what a placement
costs a queue in vGPU units, the queue tree's limits and order, and the `Statement` that lets a
cycle try a gang and take it back.

Pure Python like the rest of the engine: the pipeline reads queues, groups and usage from the
database into these, and the simulator from a scenario.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .decision import PENDING, SCHEDULED, Decision
from .errors import PodInvalid

#: Resources a queue or quota counts, with their units.
RESOURCES = {"vgpus": "vGPUs", "gpumem": "MiB", "gpucores": "percent of a card"}
DEFAULT_QUEUE = "default"

#: Where a pod names its gang, in the order read (the first one present wins).
GROUP_ANNOTATIONS = ("hami.io/group-name", "scheduling.k8s.io/group-name")  # HAMi's, Volcano's
GROUP_LABELS = ("scheduling.x-k8s.io/pod-group",)  # scheduler-plugins coscheduling
MIN_MEMBER_ANNOTATION = "hami.io/group-min-member"
TIMEOUT_ANNOTATION = "hami.io/group-schedule-timeout-seconds"
#: Where a pod names its queue: HAMi's and Volcano's annotations, KAI's label.
QUEUE_ANNOTATIONS = ("hami.io/queue", "scheduling.volcano.sh/queue-name")
QUEUE_LABELS = ("kai.scheduler/queue",)
#: Kubernetes ResourceQuota resource names HAMi defines, as queue resources.
QUOTA_RESOURCES = {
    "nvidia.com/gpu": "vgpus",
    "nvidia.com/gpumem": "gpumem",
    "nvidia.com/gpucores": "gpucores",
}

SOURCE_OF = {
    "hami.io/group-name": "annotation",
    "scheduling.k8s.io/group-name": "volcano",
    "scheduling.x-k8s.io/pod-group": "coscheduling",
}

NAME_LIMIT = 253


def _name(value, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PodInvalid(where, "must be a non-empty name")
    value = value.strip()
    if len(value) > NAME_LIMIT or any(ord(ch) < 32 for ch in value):
        raise PodInvalid(where, f"must be a name of at most {NAME_LIMIT} printable characters")
    return value


def _count(value, where: str, least: int) -> int:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        raise PodInvalid(where, f"must be a whole number, got {str(value)[:40]!r}") from None
    if number < least or number > 1_000_000:
        raise PodInvalid(where, f"must be between {least} and 1000000, got {number}")
    return number


@dataclass(frozen=True, slots=True)
class GroupRef:
    """The gang a pod's metadata names; `min_member`/`timeout` only when the pod says them."""

    name: str
    source: str
    min_member: int | None = None
    timeout_seconds: int | None = None


def group_ref(annotations: dict, labels: dict | None = None) -> GroupRef | None:
    """The pod's gang, or None. Raises PodInvalid naming the annotation or label at fault."""
    annotations, labels = annotations or {}, labels or {}
    found = [(key, annotations[key]) for key in GROUP_ANNOTATIONS if key in annotations]
    found += [(key, labels[key]) for key in GROUP_LABELS if key in labels]
    if not found:
        for key in (MIN_MEMBER_ANNOTATION, TIMEOUT_ANNOTATION):
            if key in annotations:
                raise PodInvalid(key, "needs a group: set hami.io/group-name too")
        return None
    key, value = found[0]
    name = _name(value, key)
    for other, other_value in found[1:]:
        if isinstance(other_value, str) and other_value.strip() != name:
            raise PodInvalid(other, f"names group {str(other_value)[:60]!r} but {key} names {name!r}")
    min_member = None
    if MIN_MEMBER_ANNOTATION in annotations:
        min_member = _count(annotations[MIN_MEMBER_ANNOTATION], MIN_MEMBER_ANNOTATION, 1)
    timeout = None
    if TIMEOUT_ANNOTATION in annotations:
        timeout = _count(annotations[TIMEOUT_ANNOTATION], TIMEOUT_ANNOTATION, 1)
    return GroupRef(name=name, source=SOURCE_OF[key], min_member=min_member, timeout_seconds=timeout)


def queue_ref(annotations: dict, labels: dict | None = None) -> str | None:
    """The queue a pod's metadata names, or None (then its group's, its namespace's, `default`)."""
    annotations, labels = annotations or {}, labels or {}
    for key in QUEUE_ANNOTATIONS:
        if key in annotations:
            return _name(annotations[key], key)
    for key in QUEUE_LABELS:
        if key in labels:
            return _name(labels[key], key)
    return None


def quota_resource(name: str) -> str | None:
    """`requests.nvidia.com/gpumem` (or without the prefix, or `limits.`) as `gpumem`; else None."""
    for prefix in ("requests.", "limits.", ""):
        if name.startswith(prefix) and name[len(prefix) :] in QUOTA_RESOURCES:
            return QUOTA_RESOURCES[name[len(prefix) :]]
    return None


Usage = dict[str, int]


def zero() -> Usage:
    return dict.fromkeys(RESOURCES, 0)


def decision_usage(decision: Decision) -> Usage:
    """What a scheduled decision holds, in vGPU units: one `vgpus` per device granted, its MiB
    and cores summed, so a 2-card 4000 MiB ask is 8000 MiB and a percentage ask counts the MiB
    granted. App containers only: they are what allocations hold."""
    used = zero()
    if decision.status != SCHEDULED:
        return used
    for container in decision.containers:
        for device in container.devices:
            used["vgpus"] += 1
            used["gpumem"] += device.memory
            used["gpucores"] += device.cores
    return used


def add(into: Usage, other: Usage, sign: int = 1) -> None:
    for resource in RESOURCES:
        into[resource] = into.get(resource, 0) + sign * other.get(resource, 0)


UNITS = {"vgpus": "", "gpumem": " MiB", "gpucores": "%"}


@dataclass
class QueueState:
    """One queue of the tree as a cycle sees it: its figures and what its pods hold now."""

    name: str
    parent: str | None = None
    weight: float = 1.0
    guarantee: dict[str, int | None] = field(default_factory=dict)
    quota: dict[str, int | None] = field(default_factory=dict)
    limit: dict[str, int | None] = field(default_factory=dict)
    used: Usage = field(default_factory=zero)  # this queue and its children
    pk: int | None = None
    namespaces: list[str] = field(default_factory=list)  # whose pods join it when they name none


class QueueBook:
    """The queue tree with its usage, kept current as a cycle places (and takes back) pods.

    `over_limit` is Volcano's enqueue check: would this much more take the queue or an
    ancestor over its limit? `order_key` ranks leaf queues for the next job: queues below
    their guarantee first (most below first), then by used / weight-proportional share of
    `capacity` on the queue's dominant resource.
    """

    def __init__(self, queues: list[QueueState], capacity: Usage | None = None):
        self.queues = {queue.name: queue for queue in queues}
        if DEFAULT_QUEUE not in self.queues:
            self.queues[DEFAULT_QUEUE] = QueueState(DEFAULT_QUEUE)
        for queue in self.queues.values():
            if queue.parent is not None and queue.parent not in self.queues:
                queue.parent = None
        self.capacity = capacity or zero()
        self.parents = {queue.parent for queue in self.queues.values() if queue.parent}
        self.fair: dict[str, dict[str, float]] = {}  # `fair_shares`, once computed
        self.by_namespace = {
            namespace: queue.name
            for queue in sorted(self.queues.values(), key=lambda q: q.name, reverse=True)
            for namespace in queue.namespaces
            if queue.name not in self.parents
        }

    def leaf(self, name: str | None) -> str:
        """The queue a pod's queue name stands for: unknown names and parents mean `default`."""
        if name and name in self.queues and name not in self.parents:
            return name
        return DEFAULT_QUEUE

    def chain(self, name: str) -> list[QueueState]:
        """The queue and its ancestors, leaf first (a loop in the tree stops at the repeat)."""
        out, seen = [], set()
        current: str | None = name
        while current is not None and current not in seen and current in self.queues:
            seen.add(current)
            out.append(self.queues[current])
            current = self.queues[current].parent
        return out

    def over_limit(self, name: str, more: Usage) -> str | None:
        """Why `more` cannot join queue `name` (the first queue and resource over), else None."""
        for queue in self.chain(name):
            for resource in RESOURCES:
                cap = queue.limit.get(resource)
                ask = more.get(resource, 0)
                if cap is not None and ask and queue.used[resource] + ask > cap:
                    unit = UNITS[resource]
                    return (
                        f"queue {queue.name}: {resource} {queue.used[resource]} + {ask} > limit {cap}{unit}"
                    )
        return None

    def add(self, name: str, used: Usage, sign: int = 1) -> None:
        for queue in self.chain(name):
            add(queue.used, used, sign)

    def order_key(self, name: str) -> tuple:
        """Queues below their guarantee first (most below first); then by dominant share: the
        largest, over the resources, of used / fair share (`fair_shares`), lowest first. Before
        fair shares are computed, the share is the weight's part of the whole cluster."""
        queue = self.queues[name]
        below = [
            queue.used[r] / guaranteed
            for r in RESOURCES
            if (guaranteed := queue.guarantee.get(r)) and queue.used[r] < guaranteed
        ]
        if below:
            return (0, min(below), name)
        fair = self.fair.get(name)
        if fair is None:
            siblings = [
                q for q in self.queues.values() if q.parent == queue.parent and q.name not in self.parents
            ]
            total_weight = sum(q.weight for q in siblings) or 1.0
            fair = {r: self.capacity.get(r, 0) * queue.weight / total_weight for r in RESOURCES}
        shares = [
            queue.used[r] / fair[r] if fair[r] > 0 else (float("inf") if queue.used[r] else 0.0)
            for r in RESOURCES
            if self.capacity.get(r)
        ]
        return (1, max(shares, default=0.0), name)

    def children(self, parent: str | None) -> list[QueueState]:
        return sorted((q for q in self.queues.values() if q.parent == parent), key=lambda q: q.name)

    def fair_shares(self, wanting: set[str]) -> dict[str, dict[str, float]]:
        """Each queue's fair share per resource, top down: a parent's share (the cluster's
        capacity at the root) goes first to its children's guarantees (scaled down if they
        add up to more), then the rest by weight among the children that want more
        (water-filling: a child never gets more than it wants or its limit, and what it cannot
        take goes round again). A queue wants more when it, or a queue under it, is in
        `wanting` (has jobs waiting); otherwise it wants what it uses."""
        wants: set[str] = set()
        for name in wanting:
            wants.update(q.name for q in self.chain(name))
        fair: dict[str, dict[str, float]] = {}

        def split(parent: str | None, total: dict[str, float]) -> None:
            kids = self.children(parent)
            if not kids:
                return
            shares = {kid.name: dict.fromkeys(RESOURCES, 0.0) for kid in kids}
            for r in RESOURCES:
                caps = {}
                for kid in kids:
                    cap = float("inf") if kid.name in wants else float(kid.used[r])
                    if kid.limit.get(r) is not None:
                        cap = min(cap, float(kid.limit[r] or 0))
                    caps[kid.name] = cap
                guaranteed = {kid.name: float(kid.guarantee.get(r) or 0) for kid in kids}
                scale = min(1.0, total[r] / sum(guaranteed.values())) if sum(guaranteed.values()) else 1.0
                for kid in kids:
                    shares[kid.name][r] = min(guaranteed[kid.name] * scale, caps[kid.name])
                left = total[r] - sum(shares[k][r] for k in shares)
                open_kids = [kid for kid in kids if shares[kid.name][r] < caps[kid.name]]
                while left > 1e-9 and open_kids:
                    weight = sum(kid.weight for kid in open_kids)
                    handed = 0.0
                    still_open = []
                    for kid in open_kids:
                        part = left * kid.weight / weight
                        room = caps[kid.name] - shares[kid.name][r]
                        give = min(part, room)
                        shares[kid.name][r] += give
                        handed += give
                        if give < part:
                            continue  # full: its rest goes round again
                        still_open.append(kid)
                    left -= handed
                    if len(still_open) == len(open_kids):
                        break  # everyone took its whole part: nothing left over
                    open_kids = still_open
            for kid in kids:
                fair[kid.name] = shares[kid.name]
                split(kid.name, shares[kid.name])

        split(None, {r: float(self.capacity.get(r, 0)) for r in RESOURCES})
        self.fair = fair
        return fair


@dataclass
class NamespaceBook:
    """Namespace quotas (Kubernetes ResourceQuota on HAMi's resources) with their usage."""

    hard: dict[str, dict[str, int]] = field(default_factory=dict)  # namespace -> resource -> hard
    used: dict[str, Usage] = field(default_factory=dict)

    def over(self, namespace: str, more: Usage) -> str | None:
        """Why `more` cannot join `namespace` (the first resource over its hard limit), else None."""
        limits = self.hard.get(namespace)
        if not limits:
            return None
        used = self.used.setdefault(namespace, zero())
        for resource, hard in limits.items():
            ask = more.get(resource, 0)
            if ask and used[resource] + ask > hard:
                return f"namespace {namespace}: {resource} {used[resource]} + {ask} > hard {hard}{UNITS[resource]}"
        return None

    def add(self, namespace: str, more: Usage, sign: int = 1) -> None:
        add(self.used.setdefault(namespace, zero()), more, sign)


@dataclass(frozen=True, slots=True)
class Mark:
    """A point of a Statement to roll back to."""

    at: int


class Statement:
    """The placements a cycle has assumed on its snapshot, in order, so a gang that does not
    reach `min_member` can be taken back exactly (Volcano's statement, in our words).

    `assume` applies a scheduled decision to the scheduler's snapshot and to the queue book;
    `rollback(mark)` undoes everything assumed after `mark`, newest first. The scheduler's
    node versions only move forward, so no verdict cached for an assumed state is read again.
    """

    def __init__(self, scheduler, book: QueueBook | None = None, namespaces: NamespaceBook | None = None):
        self.scheduler = scheduler
        self.book = book
        self.namespaces = namespaces
        #: placements as (decision, queue, usage, gang); evictions as (None, preemptor, tenant, "")
        self.log: list[tuple] = []

    def mark(self) -> Mark:
        return Mark(len(self.log))

    def assume(self, decision: Decision, queue: str | None = None, gang: str = "") -> None:
        """Apply `decision` (scheduled) to the snapshot, the books, and with `gang` (the pod's
        group) to the cards' `gangs`, which `gang-spread` reads."""
        if decision.status != SCHEDULED:
            return
        used = decision_usage(decision)
        if gang:
            self._mark(decision, gang, 1)
        self.scheduler.assume(decision)
        if self.book is not None and queue is not None:
            self.book.add(queue, used)
        if self.namespaces is not None:
            self.namespaces.add(decision.namespace, used)
        self.log.append((decision, queue, used, gang))

    def rollback(self, mark: Mark) -> list[Decision]:
        """Undo what was assumed after `mark`; the decisions taken back, oldest first."""
        undone = []
        while len(self.log) > mark.at:
            decision, queue, used, gang = self.log.pop()
            if decision is None:
                self._give_back(queue, used, gang)
                continue
            if gang:
                self._mark(decision, gang, -1)
            self.scheduler.unassume(decision)
            if self.book is not None and queue is not None:
                self.book.add(queue, used, -1)
            if self.namespaces is not None:
                self.namespaces.add(decision.namespace, used, -1)
            undone.append(decision)
        undone.reverse()
        return undone

    def evict(self, tenant, preemptor) -> None:
        """Take a running tenant (`preempt.Tenant`) off its cards, its queue and namespace, and
        out of the preemptor's tenants, so later members see the freed cards."""
        unmarked = self._holdings(tenant, -1, ())
        preemptor.tenants.remove(tenant)
        self.log.append((None, preemptor, tenant, unmarked))

    def evicted(self, since: Mark | None = None) -> list:
        """The tenants evicted (after `since`), oldest first."""
        return [entry[2] for entry in self.log[since.at if since else 0 :] if entry[0] is None]

    def _give_back(self, preemptor, tenant, unmarked) -> None:
        self._holdings(tenant, 1, unmarked)
        preemptor.tenants.add(tenant)

    def _holdings(self, tenant, sign: int, unmarked) -> tuple[str, ...]:
        """Move a tenant's holdings off (-1) or back on (+1) its cards; its gang's `gang-spread`
        marks go with them (the cards unmarked on the way off are marked again on the way back)."""
        node = self.scheduler.cluster.node(tenant.node)
        node.shift(tenant.holdings, sign)
        by_uuid = {card.uuid: card for card in node.cards}
        removed = []
        for uuid, _, _ in tenant.holdings:
            card = by_uuid.get(uuid)
            if card is None:
                continue
            if sign < 0 and tenant.gang and tenant.gang in card.gangs:
                held = list(card.gangs)
                held.remove(tenant.gang)
                card.gangs = tuple(held)
                removed.append(uuid)
        for uuid in unmarked if sign > 0 else ():
            by_uuid[uuid].gangs = (*by_uuid[uuid].gangs, tenant.gang)
        node.touch()
        used = tenant.usage
        if self.book is not None:
            self.book.add(tenant.queue, used, sign)
        if self.namespaces is not None:
            self.namespaces.add(tenant.namespace, used, sign)
        return tuple(removed)

    def _mark(self, decision: Decision, gang: str, sign: int) -> None:
        node = self.scheduler.cluster.node(decision.node)
        by_uuid = {card.uuid: card for card in node.cards}
        for container in decision.containers:
            for device in container.devices:
                card = by_uuid[device.uuid]
                if sign > 0:
                    card.gangs = (*card.gangs, gang)
                else:
                    held = list(card.gangs)
                    held.remove(gang)
                    card.gangs = tuple(held)


def hold_back(decision: Decision, reason: str, message: str, **figures) -> None:
    """Turn a decision pending for a batch reason (gang, queue, quota): the card verdicts stay,
    the placement goes; `batch` says why, with the node it would have had."""
    would = decision.node if decision.status == SCHEDULED else None
    decision.status = PENDING
    decision.node = None
    decision.containers = []
    decision.init_containers = []
    decision.batch = {"reason": reason, "message": message, "would_fit_on": would, **figures}
