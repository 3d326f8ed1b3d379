"""Node-pool shards: planners that each own the pods selecting one labelled node pool.

Why: one planner decides every pod against every node, one cycle at a time. With pools, a
planner process started with `HAMI_NODE_POOL=a` plans only the pods whose `nodeSelector`
names `hami.io/node-pool: a` (the label is `HAMI_NODE_POOL_LABEL`), against only the nodes
carrying that label value; planners of different pools run their cycles at the same time,
each under its own cycle lock, triggers and Celery queue. A planner started without a pool
(the usual one) plans every other pod, against every node: the pods that select no pool, or
one no planner runs for (`HAMI_NODE_POOLS`, the pools planners run for, the same list on the
web tier and every worker).

A pod joins a pool by selecting it, so the pool is a constraint the engine already honours:
`simulate`, the what-ifs and the explanations judge it as the planner does, and a pod of a
pool lands nowhere else whoever plans it. Dedicated pools are tainted as well, as in
Kubernetes (`hami.io/node-pool=a:NoSchedule`, tolerated by the pool's pods): then the
planner without a pool, which sees every node, places nothing there either.

What stays shared is kept correct at the commit, not by the split (docs/architecture.md):
cards by row locks and the re-check; queue limits and namespace quotas by the locked re-count
of `pipeline.limits`; a gang by placing it whole or not at all. A gang whose members do not
all select one pool (a launcher of no pool beside workers of pool `a`, or workers of `a` and
`b`) is planned by the planner without a pool, which sees every node (`pods_q`).
"""

from __future__ import annotations

import zlib

from django.core.exceptions import ImproperlyConfigured
from django.db.models import Exists, OuterRef, Q

from .options import option

#: The Celery queue of a pool's cycle tasks (`pool_queue`); the planner without a pool takes
#: Celery's default queue.
QUEUE_PREFIX = "hamiadmin-pool-"


def label() -> str:
    """The node label naming a node's pool (HAMI_NODE_POOL_LABEL)."""
    return option("NODE_POOL_LABEL")


def pools() -> list[str]:
    """The pools planners run for (HAMI_NODE_POOLS), in the order given, without repeats."""
    return list(dict.fromkeys(str(name) for name in option("NODE_POOLS") or () if name))


def current() -> str:
    """This process's pool ('' for the planner without one). A pool that is not one of
    `pools()` is a configuration error: nobody would signal its planner."""
    pool = option("NODE_POOL") or ""
    if pool and pool not in pools():
        raise ImproperlyConfigured(
            f"HAMI_NODE_POOL={pool!r} is not one of HAMI_NODE_POOLS ({', '.join(pools()) or 'empty'})"
        )
    return pool


def suffix(pool: str | None = None) -> str:
    """What a pool's cycle lock and trigger keys add to the unsharded ones ('' without a pool)."""
    pool = current() if pool is None else pool
    return f":{pool}" if pool else ""


def number(pool: str | None = None) -> int:
    """A pool's number, for its advisory lock and lease row: 0 without a pool, else a positive
    31-bit digest of its name (never 0 or 1, the unsharded lease row)."""
    pool = current() if pool is None else pool
    if not pool:
        return 0
    return max(2, zlib.crc32(pool.encode()) & 0x7FFFFFFF)


def pool_queue(pool: str) -> str | None:
    """The Celery queue a pool's cycle tasks go to (None: Celery's default queue)."""
    return f"{QUEUE_PREFIX}{pool}" if pool else None


def _selector(prefix: str = "") -> str:
    return f"{prefix}scheduling__nodeSelector__{label()}"


def _not_selecting(pool: str, prefix: str = "") -> Q:
    """Pods that do not select `pool` (no pool selector at all included)."""
    return ~Q(**{_selector(prefix): pool}) | Q(**{f"{_selector(prefix)}__isnull": True})


def _gang_strays(pool: str, prefix: str = "") -> Q:
    """Pods with a gang member (pending or placed) that does not select `pool`."""
    from scheduling.models import Pod

    members = Pod.objects.filter(
        _not_selecting(pool), group_id=OuterRef(f"{prefix}group_id"), status__in=(Pod.PENDING, *Pod.BOUND)
    )
    return Q(Exists(members))


def pods_q(pool: str | None = None, prefix: str = "") -> Q:
    """The pods a pool's planner plans, as a filter on `Pod` (`prefix`: the path to the pod):
    those selecting `pool`; for the planner without a pool, those selecting none of `pools()`.
    Without pools, every pod (an empty Q).

    A gang whose members do not all select the same pool (some another pool, or none) is
    the planner without a pool's, every member of it: that planner sees every node, so it
    can place each member in the pool it selects, where a pool's planner would judge the
    others against its own nodes only and never fit the gang whole."""
    pool = current() if pool is None else pool
    if pool:
        return Q(**{_selector(prefix): pool}) & ~_gang_strays(pool, prefix)
    named = pools()
    if not named:
        return Q()
    rest = ~Q(**{f"{_selector(prefix)}__in": named}) | Q(**{f"{_selector(prefix)}__isnull": True})
    for name in named:
        rest |= Q(**{_selector(prefix): name}) & _gang_strays(name, prefix)
    return rest


def planners_of(scheduling, grouped: bool) -> set[str]:
    """The planners that may plan a pod with these scheduling fields (`pods_q`, in Python):
    the pool its `nodeSelector` names when that is one of `pools()`, else the planner without
    a pool (''); for a pod in a gang, that one too (its gang is the planner without a pool's when
    its members do not all select one pool). Without pools, ''."""
    named = pools()
    selector = scheduling.get("nodeSelector") if isinstance(scheduling, dict) else None
    chosen = selector.get(label()) if isinstance(selector, dict) else None
    if not named or chosen not in named:
        return {""}
    return {chosen, ""} if grouped else {chosen}


def nodes_q(pool: str | None = None, prefix: str = "") -> Q:
    """The nodes a pool's planner sees, as a filter on `Node` (`prefix`: the path to the node):
    those labelled with the pool; every node for the planner without a pool (an empty Q)."""
    pool = current() if pool is None else pool
    if not pool:
        return Q()
    return Q(**{f"{prefix}labels__{label()}": pool})


def in_pool(labels, pool: str | None = None) -> bool:
    """Whether a node with `labels` is one the pool's planner sees (`nodes_q`, in Python)."""
    pool = current() if pool is None else pool
    return not pool or (isinstance(labels, dict) and labels.get(label()) == pool)


def node_names_q(field: str = "node_name", pool: str | None = None) -> Q:
    """`nodes_q` for rows that name their node (`field`) rather than point at it."""
    pool = current() if pool is None else pool
    if not pool:
        return Q()
    from scheduling.models import Node

    return Q(Exists(Node.objects.filter(nodes_q(pool), name=OuterRef(field))))
