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
a lookup. The pods of every spec that now fits somewhere are made due; the others sleep on
until their back-off ends (the safety net, as before).

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
    """The capacity version this process last woke pods for."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.version: int | None = None


SEEN = _Seen()


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
    moved since this process last looked; how many were woken."""
    now = now or timezone.now()
    version = CapacityVersion.read()
    with SEEN.lock:
        if SEEN.version == version:
            return 0
    groups = list(
        backed_off(now)
        .values("namespace", "spec_hash")
        .annotate(first=Min("pk"))
        .order_by("namespace", "spec_hash")
    )
    wake: list[tuple[str, str]] = []
    if groups:
        firsts = Pod.objects.in_bulk([group["first"] for group in groups])
        with STANDING.use() as (_, scheduler):
            for group in groups:
                pod = firsts.get(group["first"])
                if pod is None:
                    continue
                if _moves(pod, scheduler):
                    wake.append((group["namespace"], group["spec_hash"]))
    woken = _wake(wake, now) if wake else 0
    with SEEN.lock:
        SEEN.version = version
    if woken:
        log.debug("capacity version %s: %d backed-off pods of %d specs woken", version, woken, len(wake))
    return woken


def _moves(pod: Pod, scheduler) -> bool:
    """Whether pods of `pod`'s spec may be placed now (or cannot be judged by one of them)."""
    if not pod.spec_hash:
        return True  # no digest: it stands for nobody else
    spec = pod.as_spec()
    if spec.volumes:
        return True  # its claims may be named after itself
    try:
        return scheduler.decide(spec, keep=1).status == SCHEDULED
    except Exception:  # noqa: BLE001 - the cycle itself will say what is wrong with it
        log.exception("judging %s for a wake failed", pod.key)
        return True


def _wake(specs: list[tuple[str, str]], now) -> int:
    """Make the backed-off pods of these (namespace, digest) due: all locked in one query in
    primary-key order first, as the commit locks pods, so a wake and a commit wait for each
    other at worst."""
    which = Q()
    for namespace, digest in specs:
        which |= Q(namespace=namespace, spec_hash=digest)
    with transaction.atomic():
        rows = backed_off(now).filter(which)
        if not list(lock_pods(rows).values_list("pk", flat=True)):
            return 0
        return rows.update(next_attempt_at=None)
