"""Waking only what can move (issue 29): a change of capacity wakes the backed-off pods whose
verdict it could alter, in the scheduling worker, off the request path.

A release, an uncordon, a report or a quota change moves the capacity version
(`CapacityVersion.bump`, one row, in its own short transaction after the writer's commit) and
asks for a cycle; it no longer touches the waiting pods. The next cycle, before it picks its
due pods, sees the version moved and looks at the backed-off pods **by spec**: pods of one
namespace with the same spec digest (`Pod.spec_hash`: annotations, containers, priority,
labels, scheduling fields) are decided alike, so one of each is decided on the worker's
standing snapshot (`pipeline.standing`), where the engine's per-shape verdicts are kept and
only the nodes that changed are looked at again: a shape whose inputs did not change costs
a lookup. Of every spec that now fits somewhere, the members of pod groups are all made
due (a gang is placed whole or not at all), single pods as many as the nodes it fits on
could take (`WAKE_PER_NODE` per node), first in queue order. While some stay asleep the next
cycle looks again, but only if the last look's pods made progress (one of them left the
queue): pods that fit but are held by a rule (a queue limit, a quota) do not bring the look
back cycle after cycle. The others sleep on until their back-off ends (the safety net).

A pod given back with a hold (`Pod.held_until`: a bind that failed retries after its
time) is not woken before it. Pods whose claims are named after themselves (ephemeral
volumes) cannot stand for each other and are woken whenever the version moves, as are specs the engine fails on. A
nominated preemptor is woken by its victims leaving (`services.evictions`), not here. Each
process keeps the version it last woke for, so a version is looked at once per process; two
workers may both wake a spec, which is harmless.
"""

from __future__ import annotations

import logging
import threading

from django.db import transaction
from django.db.models import Min, Q
from django.utils import timezone

from scheduling.engine.decision import SCHEDULED
from scheduling.models import CapacityVersion, Pod

from .rowlocks import lock_pods
from .standing import STANDING

log = logging.getLogger(__name__)


class _Seen:
    """The capacity version this process last woke pods for; while a look left pods of a
    fitting spec asleep, the single pods it woke (`woken`), to see whether they moved."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.version: int | None = None
        self.woken: list[int] = []


SEEN = _Seen()

#: Single pods of one spec woken per node its pod fits on (a node takes several: cards and
#: slots), and the most woken by one look; beyond them the next cycle looks again.
WAKE_PER_NODE = 8
WAKE_MAX = 5000


def backed_off(now):
    """The pending pods backing off that a change of capacity may wake: not parked, gated,
    extender pods, nor held (`Pod.held_until`: a placement given back waits its time)."""
    return (
        Pod.objects.filter(status=Pod.PENDING, parked=False, gated=False, next_attempt_at__gt=now)
        .exclude(origin=Pod.EXTENDER)
        .exclude(held_until__gt=now)
    )


def wake_movable(now=None) -> int:
    """Make due the backed-off pods whose spec fits somewhere now, if the capacity version
    moved since this process last looked (or the last look left some asleep and its pods
    moved); how many were woken."""
    now = now or timezone.now()
    version = CapacityVersion.read()
    with SEEN.lock:
        if SEEN.version == version and not (SEEN.woken and _moved(SEEN.woken)):
            SEEN.woken = []
            return 0
    groups = list(
        backed_off(now)
        .values("namespace", "spec_hash")
        .annotate(first=Min("pk"))
        .order_by("namespace", "spec_hash")
    )
    wake: list[tuple[str, str, int | None]] = []
    if groups:
        firsts = Pod.objects.in_bulk([group["first"] for group in groups])
        with STANDING.use() as (_, scheduler):
            for group in groups:
                pod = firsts.get(group["first"])
                if pod is None:
                    continue
                fits, cap = _moves(pod, scheduler)
                if fits:
                    wake.append((group["namespace"], group["spec_hash"], cap))
    woken, capped = _wake(wake, now) if wake else (0, [])
    with SEEN.lock:
        SEEN.version = version
        SEEN.woken = capped
    if woken:
        log.debug("capacity version %s: %d backed-off pods of %d specs woken", version, woken, len(wake))
    return woken


def _moved(pks: list[int]) -> bool:
    """Whether any of these woken pods left the queue (placed, or gone) since."""
    return Pod.objects.filter(pk__in=pks, status=Pod.PENDING).count() < len(pks)


def _moves(pod: Pod, scheduler) -> tuple[bool, int | None]:
    """Whether pods of `pod`'s spec may be placed now (or cannot be judged by one of them),
    and how many single pods of it to wake at most (None: every one)."""
    if not pod.spec_hash:
        return True, None  # no digest: it stands for nobody else
    spec = pod.as_spec()
    if spec.volumes:
        return True, None  # its claims may be named after itself
    try:
        decision = scheduler.decide(spec, keep=1)
    except Exception:  # noqa: BLE001 - the cycle itself will say what is wrong with it
        log.exception("judging %s for a wake failed", pod.key)
        return True, None
    if decision.status != SCHEDULED:
        return False, 0
    return True, WAKE_PER_NODE * max(1, decision.nodes_fit)


def _wake(specs: list[tuple[str, str, int | None]], now) -> tuple[int, list[int]]:
    """Make due the backed-off pods of these (namespace, digest, at most): every member of a
    pod group, and the first single pods in queue order up to the cap. Returns how many, and
    the single pods woken when some of a capped spec stay asleep (else none). All locked in
    one query in primary-key order first, as the commit locks pods, so a wake and a commit
    wait for each other at worst."""
    chosen: list[int] = []
    capped: list[int] = []
    whole = Q()
    for namespace, digest, cap in specs:
        if cap is None:
            whole |= Q(namespace=namespace, spec_hash=digest)
            continue
        whole |= Q(namespace=namespace, spec_hash=digest, group__isnull=False)
        limit = max(0, min(cap, WAKE_MAX - len(chosen)))
        singles = list(
            backed_off(now)
            .filter(namespace=namespace, spec_hash=digest, group__isnull=True)
            .order_by("-priority", "submitted_at", "id")
            .values_list("pk", flat=True)[: limit + 1]
        )
        if len(singles) > limit:
            capped += singles[:limit]
        chosen += singles[:limit]
    with transaction.atomic():
        rows = backed_off(now).filter(whole | Q(pk__in=chosen))
        locked = list(lock_pods(rows).values_list("pk", flat=True))
        if not locked:
            return 0, []
        return Pod.objects.filter(pk__in=locked).update(next_attempt_at=None), capped
