"""Evictions of Kubernetes pods that a cycle chose as victims, carried out through the
Eviction API (policy/v1), so Kubernetes enforces the PodDisruptionBudgets (hamiadmin reads
none).

A cycle that preempts writes one `Eviction` row per victim, `requested`. While it leads, the
watcher agent asks the API server to evict each Kubernetes victim (`Evictor.run_once`), and
what Kubernetes answers decides the row (`scheduling.services.evictions`):

- 200/201: `evicting`. The pod terminates; the pod watch sees it deleted and releases its
  cards (`PodSync`); `settle_evictions` (before the next cycle) marks the row `done`.
  Events: `Preempted` (Warning) on the victim, naming the preemptor and the cards;
  `Preempting` (Normal) on the preemptor, naming the victim and the node.
- 429: a PodDisruptionBudget has no disruption left. `refused`: the preemptor's
  nominations go and it plans again, without this victim for a while; `PreemptionRefused`
  (Warning) on the preemptor.
- 404, or 409 (the uid precondition: the pod meant is gone, another of its name may have
  taken its place): `victim_gone`, the row's cards are released as for a deleted pod.
- anything else (5xx, no answer): left `requested`, tried again after a back-off per row;
  no answer also ends the pass.

A preemptor that is no longer pending (deleted, rejected, placed elsewhere) needs no room:
its evictions still requested are cancelled, nothing is evicted. Under `PREEMPT_DRY_RUN`
nothing is evicted, whatever rows are there: each is only logged, once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from enum import StrEnum
from typing import TypeGuard

from scheduling.models import Eviction, Pod
from scheduling.pipeline.options import option
from scheduling.services import evictions

from .api import ApiError, ApiUnavailable, KubeApi
from .events import EventRecorder, PodRef
from .informer import Backoff

log = logging.getLogger("hamiadmin.kube.evictor")


class EvictionOutcome(StrEnum):
    """What one eviction request came to (`Evictor.evict`; a pass counts them): Kubernetes
    accepted it, a PodDisruptionBudget refused it, the victim was gone, it was cancelled (its
    preemptor went away), it is tried again later, or the API server was unavailable."""

    ACCEPTED = "accepted"
    REFUSED = "refused"
    GONE = "gone"
    CANCELLED = "cancelled"
    RETRY = "retry"
    UNAVAILABLE = "unavailable"


#: Kubernetes' default `terminationGracePeriodSeconds`.
DEFAULT_TERMINATION_GRACE = 30


def always() -> bool:
    return True


class Evictor:
    """One pass at a time over the requested evictions of Kubernetes pods.

    `lookup(namespace, name)`: the cached Kubernetes pod (the agent's informer), to read the
    termination grace period it asks for."""

    def __init__(
        self,
        api: KubeApi,
        events: EventRecorder,
        may_write: Callable[[], bool] = always,
        lookup: Callable[[str, str], dict | None] | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        clock=time.monotonic,
    ):
        self.api, self.events, self.may_write, self.lookup = api, events, may_write, lookup
        self.backoff_base, self.backoff_cap, self.clock = backoff_base, backoff_cap, clock
        self.retry_at: dict[int, tuple[int, float]] = {}  # eviction id -> (failures, not before)
        self.dry_run_logged: set[int] = set()

    def run_once(self) -> dict[EvictionOutcome, int]:
        """Evict the victims requested; counts by outcome."""
        pending = evictions.pending_kube_evictions()
        counts: dict[EvictionOutcome, int] = {}
        ids = {eviction.pk for eviction in pending}
        self.retry_at = {pk: due for pk, due in self.retry_at.items() if pk in ids}
        if option("PREEMPT_DRY_RUN"):
            for eviction in pending:
                if eviction.pk not in self.dry_run_logged:
                    self.dry_run_logged.add(eviction.pk)
                    log.info("dry run: would evict %s", describe(eviction))
            return counts
        now = self.clock()
        for eviction in pending:
            if not self.may_write():
                break
            if now < self.retry_at.get(eviction.pk, (0, 0.0))[1]:
                continue
            outcome = self.evict(eviction, now)
            counts[outcome] = counts.get(outcome, 0) + 1
            if outcome == EvictionOutcome.UNAVAILABLE:
                break
        return counts

    def evict(self, eviction: Eviction, now: float) -> EvictionOutcome:
        victim, preemptor = eviction.victim, eviction.preemptor
        if preemptor is None or preemptor.status != Pod.PENDING:
            why = "its preemptor was deleted" if preemptor is None else f"its preemptor is {preemptor.status}"
            evictions.cancel_eviction(eviction.pk, why)
            log.info("eviction of %s cancelled: %s", victim.key, why)
            return EvictionOutcome.CANCELLED
        try:
            self.api.evict_pod(victim.namespace, victim.name, victim.uid, self.grace_period(victim))
        except ApiUnavailable as exc:
            self._later(eviction.pk, now)
            log.warning("eviction of %s not sent, API server unavailable: %s", victim.key, exc)
            return EvictionOutcome.UNAVAILABLE
        except ApiError as exc:
            return self._answered(eviction, exc, now)
        self.retry_at.pop(eviction.pk, None)
        # The pod may be deleted, and even settled, before this line: the events are written
        # whatever the row says now, since Kubernetes did evict it for this preemptor.
        evictions.mark_evicting(eviction.pk, "Kubernetes accepted the eviction")
        log.info("evicting %s", describe(eviction))
        self.events.preempted(self.ref(victim), preemptor.key, list(eviction.cards), eviction.reason)
        if self.in_kubernetes(preemptor):
            self.events.preempting(self.ref(preemptor), victim.key, eviction.node, list(eviction.cards))
        return EvictionOutcome.ACCEPTED

    def _answered(self, eviction: Eviction, exc: ApiError, now: float) -> EvictionOutcome:
        victim, preemptor = eviction.victim, eviction.preemptor
        if exc.status == 429:
            message = exc.message or str(exc)
            self.retry_at.pop(eviction.pk, None)
            if evictions.refuse_eviction(eviction.pk, message):
                log.info("eviction of %s refused: %s", victim.key, message)
                if self.in_kubernetes(preemptor):
                    self.events.preemption_refused(self.ref(preemptor), victim.key, message)
            return EvictionOutcome.REFUSED
        if exc.status in (404, 409):
            self.retry_at.pop(eviction.pk, None)
            evictions.victim_gone(eviction.pk)
            log.info("eviction of %s: the pod is gone (%s)", victim.key, exc)
            return EvictionOutcome.GONE
        delay = self._later(eviction.pk, now)
        log.warning("eviction of %s failed, tried again in %.1f s: %s", victim.key, delay, exc)
        return EvictionOutcome.RETRY

    def _later(self, eviction_id: int, now: float) -> float:
        failures, _ = self.retry_at.get(eviction_id, (0, 0.0))
        backoff = Backoff(self.backoff_base, self.backoff_cap)
        backoff.failures = failures
        delay = backoff.next_delay()
        self.retry_at[eviction_id] = (failures + 1, now + delay)
        return delay

    def grace_period(self, victim: Pod) -> int | None:
        """The pod's own termination grace period, unless it asks for more than half of
        PREEMPT_GRACE_SECONDS: then that half, so it has released its cards before the
        preemption times out. None (the pod's own) when the pod is not in the cache."""
        obj = self.lookup(victim.namespace, victim.name) if self.lookup else None
        if obj is None or (obj.get("metadata") or {}).get("uid") != victim.uid:
            return None
        asked = (obj.get("spec") or {}).get("terminationGracePeriodSeconds")
        asked = DEFAULT_TERMINATION_GRACE if asked is None else asked
        limit = int(float(option("PREEMPT_GRACE_SECONDS")) / 2)
        return limit if isinstance(asked, int) and asked > limit else None

    @staticmethod
    def in_kubernetes(pod: Pod | None) -> TypeGuard[Pod]:
        return pod is not None and pod.origin == Pod.KUBERNETES and bool(pod.uid)

    @staticmethod
    def ref(pod: Pod) -> PodRef:
        return PodRef(pod.namespace, pod.name, pod.uid)


def describe(eviction: Eviction) -> str:
    preemptor = eviction.preemptor.key if eviction.preemptor is not None else "a pod since deleted"
    cards = ", ".join(eviction.cards) or "no card"
    return f"{eviction.victim.key} on {eviction.node} ({cards}) for {preemptor}: {eviction.reason}"
