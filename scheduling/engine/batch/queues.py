"""Queues and quotas in the engine's terms: what a placement costs in vGPU units, the queue
tree's limits, fair shares and order, and the namespace quotas.

Pure Python like the rest of the engine: the pipeline reads queues and usage from the database
into these, and the simulator from a scenario.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..decision import SCHEDULED, Decision

#: Resources a queue or quota counts, with their units.
RESOURCES = {"vgpus": "vGPUs", "gpumem": "MiB", "gpucores": "percent of a card"}
DEFAULT_QUEUE = "default"

#: Kubernetes ResourceQuota resource names HAMi defines, as queue resources.
QUOTA_RESOURCES = {
    "nvidia.com/gpu": "vgpus",
    "nvidia.com/gpumem": "gpumem",
    "nvidia.com/gpucores": "gpucores",
}


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
    #: KAI's lend-and-reclaim: other queues may use its idle guarantee and give it back by
    #: reclaim. By default (Volcano's) an idle guarantee is kept empty for the queue.
    lend_guarantee: bool = False

    def fresh(self) -> QueueState:
        """This queue's figures with nothing used: what a `QueueBook` starts from, before
        `QueueBook.add` sums each queue's own usage into its ancestors."""
        return replace(self, used=zero())


class QueueBook:
    """The queue tree with its usage, kept current as a cycle places (and takes back) pods.

    `over_limit` is Volcano's enqueue check: would this much more take the queue or an
    ancestor over its limit? `over_kept`: would it take capacity that other queues'
    guarantees keep empty for them? `fair_shares` splits the cluster (guarantee, quota, then
    weight, never past a limit) and `order_key` ranks leaf queues for the next job by it.
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
        self.kids: dict[str | None, list[QueueState]] = {}
        for queue in sorted(self.queues.values(), key=lambda q: q.name):
            self.kids.setdefault(queue.parent, []).append(queue)
        #: per queue, the resources its share is judged on (`judged_on`)
        self.judged = {
            queue.name: tuple(r for r in RESOURCES if queue.quota.get(r) is not None) or tuple(RESOURCES)
            for queue in self.queues.values()
        }
        #: whether any queue keeps a guarantee from the others (`over_kept` has work to do)
        self.keeping = any(
            not queue.lend_guarantee and any(queue.guarantee.get(r) for r in RESOURCES)
            for queue in self.queues.values()
        )

    def leaf(self, name: str | None) -> str:
        """The queue a pod's queue name stands for: unknown names and parents mean `default`."""
        if name and name in self.queues and name not in self.parents:
            return name
        return DEFAULT_QUEUE

    def join(self, named: str | None, namespace: str, where: str = "the pod") -> tuple[str | None, str]:
        """The leaf queue a pod joins, as the live cycle and `simulate` both decide it: the
        queue it (or its group, `where`) names, else its namespace's, else `default`; (None,
        why) when the named queue does not exist or is a parent (`QueueNotFound`)."""
        if named is None:
            return self.by_namespace.get(namespace, DEFAULT_QUEUE), ""
        if named not in self.queues:
            return None, f"{where} names queue {named!r}, which does not exist"
        if named in self.parents:
            return None, f"{where} names queue {named!r}, a parent queue: only leaf queues take pods"
        return named, ""

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

    def kept(self, queue: QueueState, resource: str, seen: set[str] | None = None) -> int:
        """What `queue` keeps empty for itself of `resource`: the unused part of its guarantee,
        unless it lends it (`lend_guarantee`); a queue that keeps nothing there keeps what its
        children keep (a loop in the tree is counted once)."""
        seen = set() if seen is None else seen
        if queue.name in seen:
            return 0
        seen.add(queue.name)
        guaranteed = queue.guarantee.get(resource)
        if guaranteed and not queue.lend_guarantee:
            return max(0, guaranteed - queue.used[resource])
        return sum(self.kept(kid, resource, seen) for kid in self.kids.get(queue.name, ()))

    def over_kept(self, name: str, more: Usage) -> str | None:
        """Why `more` cannot join queue `name` without taking capacity that other queues'
        guarantees keep empty (Volcano: a guarantee is never lent, even idle), else None.
        Counted on the whole cluster: what every queue uses, plus `more`, plus what the queues
        outside `name`'s chain keep, must fit the capacity. The queue's own chain keeps nothing
        from it."""
        if not self.keeping:
            return None
        chain = self.chain(name)
        mine = {queue.name for queue in chain}
        others = [
            sibling
            for queue in chain
            for sibling in self.kids.get(queue.parent, ())
            if sibling.name not in mine
        ]
        for resource in RESOURCES:
            ask, capacity = more.get(resource, 0), self.capacity.get(resource, 0)
            if not ask or not capacity:
                continue
            keeping = [(queue.name, n) for queue in others if (n := self.kept(queue, resource))]
            if not keeping:
                continue
            used = sum(queue.used[resource] for queue in self.kids.get(None, ()))
            kept = sum(n for _, n in keeping)
            if used + ask + kept > capacity:
                unit = UNITS[resource]
                whose = ", ".join(f"{queue} {n}{unit}" for queue, n in keeping)
                return (
                    f"queue {name}: cluster {resource} {used} + {ask} > {capacity} - {kept}{unit} "
                    f"kept for idle guarantees ({whose})"
                )
        return None

    def within_guarantee(self, name: str, more: Usage) -> bool:
        """Whether queue `name` names a guarantee and stays within it with `more` added, on
        every resource it names: such a queue may always take its guarantee back by reclaim."""
        queue = self.queues[name]
        named = [r for r in RESOURCES if queue.guarantee.get(r)]
        return bool(named) and all(queue.used[r] + more.get(r, 0) <= (queue.guarantee[r] or 0) for r in named)

    def below_guarantee(self, name: str, taken: Usage, keep: str) -> str | None:
        """Why taking `taken` from queue `name` for a job of queue `keep` would take `name`
        or an ancestor (outside `keep`'s chain) below its guarantee on a resource it names,
        else None. A guarantee in one resource protects the pods it covers in every resource:
        a queue guaranteed 6 vGPUs keeps 6 vGPU-pods, whatever their memory."""
        shared = {queue.name for queue in self.chain(keep)}
        for queue in self.chain(name):
            if queue.name in shared:
                break
            for r in RESOURCES:
                guaranteed = queue.guarantee.get(r)
                if guaranteed and taken.get(r, 0) and queue.used[r] - taken[r] < guaranteed:
                    return f"queue {queue.name}: {r} {queue.used[r]} - {taken[r]} < guarantee {guaranteed}{UNITS[r]}"
        return None

    def add(self, name: str, used: Usage, sign: int = 1) -> None:
        for queue in self.chain(name):
            add(queue.used, used, sign)

    def judged_on(self, name: str) -> tuple[str, ...]:
        """The resources a queue's dominant share is taken over: those its quota names (its
        deserved share is stated in them, as in Volcano's capacity plugin), else every one."""
        return self.judged.get(name, tuple(RESOURCES))

    def order_key(self, name: str) -> tuple:
        """Queues below their guarantee first (most below first); then by dominant share: the
        largest, over the resources it is judged on (`judged_on`), of used / fair share
        (`fair_shares`), lowest first. Before fair shares are computed, the share is the
        weight's part of the whole cluster."""
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
            siblings = [q for q in self.kids.get(queue.parent, ()) if q.name not in self.parents]
            total_weight = sum(q.weight for q in siblings) or 1.0
            fair = {r: self.capacity.get(r, 0) * queue.weight / total_weight for r in RESOURCES}
        shares = [
            queue.used[r] / fair[r] if fair[r] > 0 else (float("inf") if queue.used[r] else 0.0)
            for r in self.judged_on(name)
            if self.capacity.get(r)
        ]
        return (1, max(shares, default=0.0), name)

    def children(self, parent: str | None) -> list[QueueState]:
        return list(self.kids.get(parent, ()))

    def fair_shares(self, wanting: set[str]) -> dict[str, dict[str, float]]:
        """Each queue's fair share per resource, top down: a parent's share (the cluster's
        capacity at the root) is split among its children by `split_share` (docs/queues.md,
        "Fair share"). A queue wants more when it, or a queue under it, is in `wanting` (has
        jobs waiting); otherwise it wants what it uses."""
        wants: set[str] = set()
        for name in wanting:
            wants.update(q.name for q in self.chain(name))
        fair: dict[str, dict[str, float]] = {}

        def split(parent: str | None, total: dict[str, float]) -> None:
            kids = self.kids.get(parent, ())
            if not kids:
                return
            shares = {kid.name: dict.fromkeys(RESOURCES, 0.0) for kid in kids}
            for r in RESOURCES:
                claims = [
                    Claim(
                        kid.name,
                        weight=kid.weight,
                        guarantee=float(kid.guarantee.get(r) or 0),
                        quota=float(kid.quota.get(r) or 0),
                        limit=None if kid.limit.get(r) is None else float(kid.limit[r] or 0),
                        wants=float("inf") if kid.name in wants else float(kid.used[r]),
                        lends=kid.lend_guarantee,
                    )
                    for kid in kids
                ]
                for name, share in split_share(total[r], claims).items():
                    shares[name][r] = share
            for kid in kids:
                fair[kid.name] = shares[kid.name]
                split(kid.name, shares[kid.name])

        split(None, {r: float(self.capacity.get(r, 0)) for r in RESOURCES})
        self.fair = fair
        return fair


@dataclass(frozen=True)
class Claim:
    """One queue's figures on one resource, as `split_share` reads them: `wants` is unbounded
    for a queue with jobs waiting, else what it uses; `limit` None is unlimited."""

    name: str
    weight: float = 1.0
    guarantee: float = 0.0
    quota: float = 0.0
    limit: float | None = None
    wants: float = float("inf")
    lends: bool = False


def split_share(total: float, claims: list[Claim]) -> dict[str, float]:
    """Split `total` of one resource among sibling queues (water-filling, docs/queues.md
    "Fair share"). Each queue can take at most `room` = min(what it wants, its limit).

    1. Guarantees: a kept guarantee whole, used or not (it is never lent); a lent one
       (`lends`) up to `room`. Scaled down together when they add up to more than `total`.
    2. Quotas (deserved): each queue is topped up to min(quota, room); scaled down together
       when the top-ups add up to more than what is left.
    3. The rest by weight among the queues below their room; a queue that reaches its room
       stops, and what it could not take goes round again among the others.
    """
    room = {c.name: min(c.wants, c.limit if c.limit is not None else float("inf")) for c in claims}
    share = dict.fromkeys(room, 0.0)
    left = total

    def hand_out(asks: dict[str, float]) -> None:
        nonlocal left
        asked = sum(asks.values())
        scale = max(0.0, min(1.0, left / asked)) if asked > 0 else 0.0
        for name, ask in asks.items():
            share[name] += ask * scale
        left -= asked * scale

    first = {}
    for c in claims:
        kept = c.guarantee if not c.lends else min(c.guarantee, room[c.name])
        first[c.name] = min(kept, c.limit) if c.limit is not None else kept
    hand_out(first)
    hand_out({c.name: max(0.0, min(c.quota, room[c.name]) - share[c.name]) for c in claims})
    open_claims = [c for c in claims if share[c.name] < room[c.name]]
    while left > 1e-9 and open_claims:
        weight = sum(c.weight for c in open_claims)
        handed = 0.0
        still_open = []
        for c in open_claims:
            part = left * c.weight / weight
            give = min(part, room[c.name] - share[c.name])
            share[c.name] += give
            handed += give
            if give >= part:
                still_open.append(c)  # took its whole part: it may take more
        left -= handed
        if len(still_open) == len(open_claims):
            break  # everyone took its whole part: nothing left over
        open_claims = still_open
    return share


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
