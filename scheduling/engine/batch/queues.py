"""Queues and quotas in the engine's terms: what a placement costs in vGPU units, the queue
tree's limits, fair shares and order, and the namespace quotas.

Pure Python like the rest of the engine: the pipeline reads queues and usage from the database
into these, and the simulator from a scenario.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
