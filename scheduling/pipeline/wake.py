"""Waking only what can move (issue 29): a change of capacity wakes the backed-off pods whose
verdict it could alter, in the scheduling worker, off the request path.

A release, an uncordon, a report or a quota change moves the capacity version
(`CapacityVersion.bump`, one row, in its own short transaction after the writer's commit) and
asks for a cycle; it no longer touches the waiting pods. The next cycle, before it picks its
due pods, sees the version moved and looks at the backed-off pods **by spec**: pods of one
namespace with the same spec digest (`Pod.spec_hash`: annotations, containers, priority,
labels, scheduling fields) are decided alike, so one of each is decided on the worker's
standing snapshot (`pipeline.standing`), where the engine's per-shape verdicts are kept and
only the nodes that changed are looked at again. The specs are kept from look to look
(`_Specs`): a look reads only the pending pods written since the last one, and sums every
backed-off pod up again only every `WAKE_REGROUP_SECONDS` (grouping 100,000 of them on each
change was most of a wake). A spec no node could ever take (too few or too small cards, even
all empty) is not decided again until a whole read of the standing snapshot finds nodes or
cards added, gone or built otherwise, or the config changes: a release, a cordon or a counter
report cannot help it. Of every spec that now fits somewhere, the members of pod groups are all made
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
import time
import weakref
from datetime import timedelta

from django.db import transaction
from django.db.models import Count, Min, Q
from django.utils import timezone

from scheduling.engine.decision import SCHEDULED
from scheduling.models import CapacityVersion, Pod

from . import pools
from .rowlocks import lock_pods
from .snapshot import Snapshot
from .standing import STANDING

log = logging.getLogger(__name__)


class _Seen:
    """The capacity version this process last woke pods for; while a look left pods of a
    fitting spec asleep, the single pods it woke (`woken`), to see whether they moved; and
    the specs of the backed-off pods as last summed up (`specs`, see `_Specs`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.version: int | None = None  # None: the next look sums the backed-off pods up whole
        self.woken: list[int] = []
        self.specs = _Specs()
        self.pool = ""  # the node pool whose pods it looks at (`pools`)


class _Specs:
    """The specs of the backed-off pods, kept from look to look instead of grouping every
    backed-off pod on each change (at 100,000 of them the grouping was most of a wake).

    `specs` maps (namespace, digest) to one pod of it (its id), the pod as read once
    (`PodSpec`, or None until read), and whether some of its pods are in pod groups. A look
    reads only the pending pods written since the last one (`updated_at`, on the pod status
    index), `WAKE_OVERLAP` back to catch a transaction that committed late, and adds the specs
    it has not seen; the whole set is summed up again every `WAKE_REGROUP_SECONDS` (or when
    the version is forgotten), which drops the specs no pod has any more. A spec kept after
    its last pod left costs one decision of its shape (a lookup) and, when it fits, one query
    that finds nobody."""

    def __init__(self) -> None:
        self.specs: dict[tuple[str, str], _Spec] = {}
        self.since = None  # pods written from this moment on are read again
        self.summed_at = float("-inf")  # monotonic time of the last whole summing up
        self.regroups = 0  # whole summings up, for tests and the bench

    def refresh(self, now, whole: bool) -> None:
        whole = whole or self.since is None or time.monotonic() - self.summed_at >= WAKE_REGROUP_SECONDS
        rows = backed_off(now)
        if whole:
            self.specs, self.summed_at = {}, time.monotonic()
            self.regroups += 1
        else:
            rows = rows.filter(updated_at__gte=self.since)
        self.since = now - WAKE_OVERLAP
        groups = rows.values("namespace", "spec_hash").annotate(first=Min("pk"), grouped=Count("group"))
        for group in groups.order_by():
            key = (group["namespace"], group["spec_hash"])
            kept = self.specs.get(key)
            if kept is None:
                self.specs[key] = _Spec(group["first"], group["grouped"] > 0)
            elif group["grouped"]:
                kept.grouped = True

    def pods(self) -> list[tuple[tuple[str, str], _Spec]]:
        """(key, spec) per spec, in key order, each with a pod of it: read for the new ones."""
        unread = [kept.first for kept in self.specs.values() if kept.pod is None]
        if unread:
            found = Pod.objects.in_bulk(unread)
            for (namespace, digest), kept in list(self.specs.items()):
                if kept.pod is None:
                    # gone since it was summed up: any pod of the spec stands for it as well
                    pod = (
                        found.get(kept.first)
                        or Pod.objects.filter(namespace=namespace, spec_hash=digest).first()
                    )
                    if pod is None:
                        del self.specs[(namespace, digest)]
                    else:
                        kept.pod = pod
        return sorted(self.specs.items())


class _Spec:
    """One spec of backed-off pods: one pod of it (`first`, read as `pod`), whether some of
    its pods are in pod groups, and, when no node could ever take it (`Decision.unschedulable`:
    too few cards, or cards too small, even all empty), the cluster it was judged on: the
    standing snapshot as last built (a whole read that finds the same nodes and cards keeps
    it, `StandingSnapshot._carry_over`), and the config (`_cluster`). Only a new whole read
    (cards or nodes added, gone or reshaped, labels, taints) or a new config can change that
    verdict, never a release, a cordon or a report of counters: until then it is not decided
    again (kube-scheduler's queueing hints, for its one reason no release can help)."""

    __slots__ = ("first", "grouped", "never", "pod")

    def __init__(self, first: int, grouped: bool) -> None:
        self.first = first
        self.pod: Pod | None = None
        self.grouped = grouped
        self.never: tuple | None = None


SEEN = _Seen()

#: Single pods of one spec woken per node its pod fits on (a node takes several: cards and
#: slots), and the most woken by one look; beyond them the next cycle looks again.
WAKE_PER_NODE = 8
WAKE_MAX = 5000
#: How far back a look reads the pods written since the last (a writer stamps `updated_at`
#: before it commits), and how often the backed-off pods are summed up whole (`_Specs`).
WAKE_OVERLAP = timedelta(seconds=5)
WAKE_REGROUP_SECONDS = 300.0


def backed_off(now):
    """The pending pods backing off that a change of capacity may wake: not parked, gated,
    extender pods, nor held (`Pod.held_until`: a placement given back waits its time); of
    this planner's node pool (`pools`), whose nodes its snapshot holds."""
    return (
        Pod.objects.filter(
            pools.pods_q(), status=Pod.PENDING, parked=False, gated=False, next_attempt_at__gt=now
        )
        .exclude(origin=Pod.EXTENDER)
        .exclude(held_until__gt=now)
    )


def wake_movable(now=None) -> int:
    """Make due the backed-off pods whose spec fits somewhere now, if the capacity version
    moved since this process last looked (or the last look left some asleep and its pods
    moved); how many were woken."""
    return wake_at_version(now)[0]


def wake_at_version(now=None, version: int | None = None) -> tuple[int, int]:
    """`wake_movable`, and the capacity version it read first: a cycle plans against that
    version (read before its snapshot; a move after it is seen by the commit), one round trip
    fewer than reading it again. `version`: as the caller read it moments before (an older
    version only wakes again next time, and makes the commit back nothing off)."""
    now = now or timezone.now()
    version = CapacityVersion.read() if version is None else version
    with SEEN.lock:
        if SEEN.pool != pools.current():  # a process plans one pool; a test may switch it
            SEEN.version, SEEN.woken, SEEN.specs, SEEN.pool = None, [], _Specs(), pools.current()
        if SEEN.version == version and not (SEEN.woken and _moved(SEEN.woken)):
            SEEN.woken = []
            return 0, version
        forgotten = SEEN.version is None
    SEEN.specs.refresh(now, whole=forgotten)
    specs = SEEN.specs.pods()
    wake: list[tuple[str, str, int | None, bool]] = []
    if specs:
        with STANDING.use() as (snapshot, scheduler):
            cluster = _cluster(snapshot)
            for (namespace, digest), kept in specs:
                if cluster is not None and _same(kept.never, cluster):
                    continue  # no node could ever take it, and no node changed but in counters
                assert kept.pod is not None  # `pods` read one for each spec it gives
                fits, cap, never = _moves(kept.pod, scheduler)
                kept.never = cluster if never else None
                if fits:
                    wake.append((namespace, digest, cap, kept.grouped))
    woken, capped = _wake(wake, now) if wake else (0, [])
    with SEEN.lock:
        SEEN.version = version
        SEEN.woken = capped
    if woken:
        log.debug("capacity version %s: %d backed-off pods of %d specs woken", version, woken, len(wake))
    return woken, version


def _moved(pks: list[int]) -> bool:
    """Whether any of these woken pods left the queue (placed, or gone) since."""
    return Pod.objects.filter(pk__in=pks, status=Pod.PENDING).count() < len(pks)


def _cluster(snapshot: Snapshot) -> tuple | None:
    """What a never-fitting verdict holds for: the standing snapshot (a whole read makes a new
    one; held weakly, so a replaced one is freed) and its config; None when this snapshot is
    not the standing one (read fresh: its cluster may be newer than the one kept)."""
    if snapshot is not STANDING.snapshot:
        return None
    return (weakref.ref(snapshot), snapshot.config)


def _same(judged: tuple | None, cluster: tuple) -> bool:
    """Whether a never-fitting verdict was reached on this very snapshot and config."""
    return judged is not None and judged[0]() is cluster[0]() and judged[1] == cluster[1]


def _moves(pod: Pod, scheduler) -> tuple[bool, int | None, bool]:
    """Whether pods of `pod`'s spec may be placed now (or cannot be judged by one of them),
    how many single pods of it to wake at most (None: every one), and whether no node could
    ever take it (`Decision.unschedulable`)."""
    if not pod.spec_hash:
        return True, None, False  # no digest: it stands for nobody else
    spec = pod.as_spec()
    if spec.volumes:
        return True, None, False  # its claims may be named after itself
    try:
        decision = scheduler.decide(spec, keep=1)
    except Exception:  # noqa: BLE001 - the cycle itself will say what is wrong with it
        log.exception("judging %s for a wake failed", pod.key)
        return True, None, False
    if decision.status != SCHEDULED:
        return False, 0, decision.unschedulable
    return True, WAKE_PER_NODE * max(1, decision.nodes_fit), False


def _wake(specs: list[tuple[str, str, int | None, bool]], now) -> tuple[int, list[int]]:
    """Make due the backed-off pods of these (namespace, digest, at most, some in groups):
    every member of a pod group, and the first single pods in queue order up to the cap. Returns how many, and
    the single pods woken when some of a capped spec stay asleep (else none). All locked in
    one query in primary-key order first, as the commit locks pods, so a wake and a commit
    wait for each other at worst."""
    chosen: list[int] = []
    capped: list[int] = []
    whole = Q()
    for namespace, digest, cap, grouped in specs:
        if cap is None:
            whole |= Q(namespace=namespace, spec_hash=digest)
            continue
        if grouped:
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
