"""Evictions chosen by a cycle (`pipeline.commit` writes them `requested`), carried out and
settled.

- A victim hamiadmin runs itself (submitted through the API or the demo) is evicted here:
  its cards are given back and it goes back to the queue (pending), as a Job's controller
  would create it again after a Kubernetes eviction (`carry_out_local`).
- A Kubernetes pod is evicted by the kube agent through the Eviction API (`kube.evictor`),
  which reports back with `mark_evicting`, `refuse_eviction` (a PodDisruptionBudget said no:
  the preemptor's nominations go, so it tries the next victim set) or `victim_gone`.
- `settle_evictions` ends the ones whose victim released its cards (done), and those past
  the grace period (timed out: the preemptor's nominations go, and it tries again).

Lock order as everywhere: the victim pod first, then its cards (`pods._release_allocations`).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from scheduling.dbretry import retry_on_conflict
from scheduling.models import Allocation, Eviction, Nomination, Pod, record_event
from scheduling.models.events import Event
from scheduling.pipeline.options import option
from scheduling.pipeline.rowlocks import lock_evictions
from scheduling.pipeline.triggers import request_cycle

from .pods import (
    _pod_for_update,
    _release_allocations,
    back_to_pending,
    capacity_changed,
    group_after_release,
    release_pod,
)

log = logging.getLogger(__name__)


def _preemptor_key(eviction: Eviction) -> str:
    return eviction.preemptor.key if eviction.preemptor is not None else "a pod since deleted"


def pending_kube_evictions(limit: int = 50) -> list[Eviction]:
    """Requested evictions of Kubernetes pods, oldest first: the kube agent's work."""
    return list(
        Eviction.objects.filter(state=Eviction.REQUESTED, victim__origin=Pod.KUBERNETES)
        .select_related("victim", "preemptor")
        .order_by("created_at", "id")[:limit]
    )


def _end(eviction: Eviction, state: str, message: str, now) -> None:
    eviction.state, eviction.message, eviction.finished_at = state, message[:2000], now
    eviction.save(update_fields=["state", "message", "finished_at", "updated_at"])


def _give_up(eviction_id: int, states, state: str, message: str) -> Eviction | None:
    """End an eviction that is in one of `states` without its victim going (cancelled,
    refused): the row locked and ended, the preemptor's nominations dropped. None when it was
    not in those states. Runs in the caller's transaction."""
    eviction = (
        lock_evictions(Eviction.objects.select_related("victim", "preemptor"))
        .filter(pk=eviction_id, state__in=states)
        .first()
    )
    if eviction is not None:
        _end(eviction, state, message, timezone.now())
        _drop_nominations(eviction)
    return eviction


def _drop_nominations(eviction: Eviction) -> None:
    """The preemptor's cards are free for all again, and it is due at once (after the commit,
    in its own statement: no pod lock is taken while the eviction row is held)."""
    if eviction.preemptor_id is not None:
        Nomination.objects.filter(pod_id=eviction.preemptor_id).delete()
        preemptor = eviction.preemptor_id
        transaction.on_commit(
            lambda: Pod.objects.filter(pk=preemptor, status=Pod.PENDING).update(next_attempt_at=None),
            robust=True,
        )
        request_cycle(f"eviction of {eviction.victim.key} ended {eviction.state}")


@retry_on_conflict
def carry_out_local(ids: list[int] | None = None) -> int:
    """Evict the requested victims that are not Kubernetes pods: cards given back, the pod
    pending again with why. The number evicted."""
    queryset = Eviction.objects.filter(state=Eviction.REQUESTED).exclude(victim__origin=Pod.KUBERNETES)
    if ids is not None:
        queryset = queryset.filter(pk__in=ids)
    done = 0
    for eviction_id in queryset.order_by("victim_id").values_list("pk", flat=True):
        done += _evict_locally(eviction_id)
    return done


def _evict_locally(eviction_id: int) -> int:
    now = timezone.now()
    with transaction.atomic():
        eviction = Eviction.objects.select_related("preemptor").filter(pk=eviction_id).first()
        if eviction is None or eviction.state != Eviction.REQUESTED:
            return 0
        pod = _pod_for_update(eviction.victim_id)
        eviction = lock_evictions(Eviction.objects.select_related("preemptor")).get(pk=eviction_id)
        if eviction.state != Eviction.REQUESTED:
            return 0
        if pod.status not in Pod.BOUND:
            _end(eviction, Eviction.DONE, f"already {pod.status}", now)
            return 0
        preemptor = _preemptor_key(eviction)
        freed = _release_allocations(pod, now)
        verb = "moved for" if eviction.kind == Eviction.CONSOLIDATE else "preempted by"
        back_to_pending(pod, f"{verb} {preemptor}: {eviction.reason}")
        if pod.group_id is not None:
            group_after_release(pod.group_id, now)
        _end(eviction, Eviction.DONE, "evicted and requeued", now)
        _record_preempted(eviction, pod.key, "evicted")
        if freed:
            capacity_changed(f"evicted {pod.key}")
    return 1


def _record_preempted(eviction: Eviction, victim: str, verb: str) -> None:
    """The audit events of an eviction carried out: on the victim, and on its preemptor."""
    preemptor = _preemptor_key(eviction)
    record_event(
        Event.PREEMPTION,
        f"pod/{victim}",
        "Preempted",
        f"Preempted by {preemptor} on card {', '.join(eviction.cards)}: {eviction.reason}",
        actor="scheduler",
    )
    if eviction.preemptor_id is not None:
        record_event(
            Event.PREEMPTION,
            f"pod/{preemptor}",
            "Preempting",
            f"{verb} {victim} on {eviction.node}",
            actor="scheduler",
            severity=Event.NORMAL,
        )


@retry_on_conflict
def mark_evicting(eviction_id: int, message: str = "") -> bool:
    """Kubernetes accepted the eviction: the victim is terminating. Recorded as
    `carry_out_local` records its evictions, also when the deletion was settled (done) before
    this answer came. False if it was not requested."""
    updated = Eviction.objects.filter(pk=eviction_id, state=Eviction.REQUESTED).update(
        state=Eviction.EVICTING, message=message[:2000], updated_at=timezone.now()
    )
    eviction = Eviction.objects.select_related("victim", "preemptor").filter(pk=eviction_id).first()
    if eviction is not None and (updated or eviction.state == Eviction.DONE):
        _record_preempted(eviction, eviction.victim.key, "evicting")
    return bool(updated)


@retry_on_conflict
def cancel_eviction(eviction_id: int, why: str) -> bool:
    """A requested eviction no longer needed (its preemptor is gone or was placed elsewhere):
    it ends before anything is evicted, and the preemptor's nominations go."""
    with transaction.atomic():
        return _give_up(eviction_id, (Eviction.REQUESTED,), Eviction.CANCELLED, why) is not None


@retry_on_conflict
def refuse_eviction(eviction_id: int, message: str) -> bool:
    """The eviction was refused (a PodDisruptionBudget): it ends, the preemptor's nominations
    go, and a new cycle lets the preemptor try the next victim set (this victim is left out
    for `pipeline.preemption.REFUSED_COOLDOWN_SECONDS`)."""
    with transaction.atomic():
        eviction = _give_up(eviction_id, Eviction.ACTIVE, Eviction.REFUSED, message)
        if eviction is None:
            return False
        record_event(
            Event.PREEMPTION,
            f"pod/{_preemptor_key(eviction)}",
            "PreemptionRefused",
            f"evicting {eviction.victim.key} was refused: {message}",
            actor="scheduler",
        )
    return True


def victim_gone(eviction_id: int) -> bool:
    """Kubernetes no longer has the victim: its cards are given back as a deletion would."""
    eviction = Eviction.objects.select_related("victim").filter(pk=eviction_id).first()
    if eviction is None or eviction.state not in Eviction.ACTIVE:
        return False
    release_pod(eviction.victim_id, Pod.DELETED, expected_uid=eviction.victim.uid or None)
    Eviction.objects.filter(pk=eviction_id, state__in=Eviction.ACTIVE).update(
        state=Eviction.DONE, message="the pod was already gone", finished_at=timezone.now()
    )
    return True


def settle_evictions(now=None) -> dict[str, int]:
    """End the evictions whose victims released their cards (done) or outlived the grace
    period (timed out: the preemptor's nominations go and it plans again); delete expired
    nominations. Counts by what happened."""
    now = now or timezone.now()
    counts = {"done": 0, "timed_out": 0, "nominations_expired": 0}
    if not _anything_to_settle(now):
        return counts
    active = list(
        Eviction.objects.filter(state__in=Eviction.ACTIVE).values_list("pk", "victim_id", "created_at")
    )
    if active:
        holding = set(
            Allocation.objects.filter(pod_id__in={v for _, v, _ in active}, active=True).values_list(
                "pod_id", flat=True
            )
        )
        released = [pk for pk, victim, _ in active if victim not in holding]
        if released:
            counts["done"] = Eviction.objects.filter(pk__in=released, state__in=Eviction.ACTIVE).update(
                state=Eviction.DONE, finished_at=now, message="the victim released its cards"
            )
        deadline = now - timedelta(seconds=option("PREEMPT_GRACE_SECONDS"))
        late = [pk for pk, victim, created in active if victim in holding and created < deadline]
        for eviction in Eviction.objects.filter(pk__in=late, state__in=Eviction.ACTIVE).select_related(
            "victim", "preemptor"
        ):
            _end(
                eviction,
                Eviction.TIMED_OUT,
                "the victim did not release its cards within the grace period",
                now,
            )
            _drop_nominations(eviction)
            counts["timed_out"] += 1
    counts["nominations_expired"], _ = Nomination.objects.filter(expires_at__lte=now).delete()
    return counts


def _anything_to_settle(now) -> bool:
    """Whether an eviction is active or a nomination expired by `now`: one statement. A cycle
    settles after every commit, and most find nothing; the full settle costs three round trips
    and a transaction (~40 ms a 1,000-pod cycle at 5,000 nodes under load, issue 29)."""
    active = (
        Eviction.objects.filter(state__in=Eviction.ACTIVE).order_by().values("pk").query.sql_with_params()
    )
    expired = Nomination.objects.filter(expires_at__lte=now).order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT EXISTS({active[0]}) OR EXISTS({expired[0]})", [*active[1], *expired[1]])
        return bool(cursor.fetchone()[0])
