"""Committing a placement to Kubernetes: SPEC 8 annotations, then the Binding.

The order matters to HAMi's device plugin, which reads the annotations when the kubelet
starts the pod: the annotations (`bind-phase: allocating`) go on first, then the Binding,
then `bind-phase: success`. Each annotation patch carries the resourceVersion just read,
so it never lands on a pod that changed under it; on 409 the pod is read again, checked
again, and the patch re-applied.

Outcomes: `bound`; `gone` (the pod was deleted or replaced: its cards are released);
`failed` (the API refused: `bind-phase: failed`, cards released, the same pod queued again
after `retry_after`; or bound elsewhere: released);
`unavailable` (no answer: nothing is changed, the caller tries again later, because the
Binding may or may not have happened and the next read will tell).

Every write names the incarnation it means (`expected_uid=row.uid`), so a late outcome for a
pod deleted and created again under the same name never touches the new one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from scheduling import metrics, services
from scheduling.models import Pod

from . import pods as pod_objects
from .api import ApiError, ApiUnavailable, KubeApi

log = logging.getLogger("hamiadmin.kube.binder")

BOUND, GONE, FAILED, UNAVAILABLE = "bound", "gone", "failed", "unavailable"


class PodGone(Exception):
    """The pod no longer exists as the one we placed (deleted, or a new uid)."""


class BoundElsewhere(Exception):
    def __init__(self, node: str):
        super().__init__(f"the pod is already bound to {node}")
        self.node = node


@dataclass
class BindResult:
    outcome: str
    detail: str = ""

    @property
    def bound(self) -> bool:
        return self.outcome == BOUND


def requeue(row: Pod, why: str, retry_after: float = 0.0) -> Pod | None:
    """Give the cards back and queue the same pod again, not before `retry_after` seconds."""
    log.warning("pod %s: %s; releasing its cards and queueing it again", row.key, why)
    return services.requeue_placed_pod(row, retry_after, why, expected_uid=row.uid)


class Binder:
    """`complete_phase`: write `bind-phase: success` after the Binding. Off for nodes run by
    HAMi's device plugin, which looks for the pod by `allocating` and completes it itself."""

    def __init__(self, api: KubeApi, complete_phase: bool = True, conflict_retries: int = 5, clock=time.time):
        self.api = api
        self.complete_phase = complete_phase
        self.conflict_retries = conflict_retries
        self.clock = clock

    def annotations(self, row: Pod, phase: str) -> dict[str, str]:
        placed = row.scheduled_at.timestamp() if row.scheduled_at else self.clock()
        return {
            pod_objects.NODE: row.node.name,
            pod_objects.TIME: str(int(placed)),
            pod_objects.TO_ALLOCATE: row.allocated,
            pod_objects.ALLOCATED: row.allocated,
            pod_objects.BIND_PHASE: phase,
            pod_objects.BIND_TIME: str(int(self.clock())),
        }

    def annotate(self, row: Pod, annotations: dict[str, str]) -> dict:
        """Merge-patch the annotations onto the pod we placed, re-reading on 409."""
        for _ in range(self.conflict_retries):
            try:
                current = self.api.get_pod(row.namespace, row.name)
            except ApiError as exc:
                if exc.status == 404:
                    raise PodGone() from exc
                raise
            if row.uid and pod_objects.uid_of(current) != row.uid:
                raise PodGone()
            node = pod_objects.node_of(current)
            if node and node != row.node.name:
                raise BoundElsewhere(node)
            version = current["metadata"].get("resourceVersion")
            patch = {"metadata": {"resourceVersion": version, "annotations": annotations}}
            try:
                return self.api.patch_pod(row.namespace, row.name, patch)
            except ApiError as exc:
                if exc.status == 404:
                    raise PodGone() from exc
                if exc.status != 409:
                    raise
                log.info("pod %s changed while annotating (409); reading it again", row.key)
        raise ApiError(409, "Conflict", f"pod kept changing: {self.conflict_retries} patches refused")

    def bind(self, row: Pod, retry_after: float = 0.0) -> BindResult:
        """Annotate, bind, mark success; see the module docstring for the outcomes.
        `retry_after`: how long a refused pod waits before the next cycle may place it."""
        node = row.node.name
        try:
            annotated = self.annotate(row, self.annotations(row, "allocating"))
            if pod_objects.node_of(annotated) != node:
                try:
                    self.api.bind_pod(row.namespace, row.name, row.uid, node)
                except ApiError as exc:
                    if exc.status != 409:
                        raise
                    # Bound already: by us (a retry after a lost answer) is success.
                    current = self.api.get_pod(row.namespace, row.name)
                    if pod_objects.node_of(current) != node:
                        raise BoundElsewhere(pod_objects.node_of(current) or "?") from exc
        except PodGone:
            services.release_pod(row, Pod.DELETED, expected_uid=row.uid)
            return BindResult(GONE, "the pod was deleted or replaced")
        except BoundElsewhere as exc:
            metrics.bind_failed("bound_elsewhere")
            services.release_pod(row, Pod.FAILED, expected_uid=row.uid)
            return BindResult(FAILED, str(exc))
        except ApiUnavailable as exc:
            log.warning("pod %s not bound yet, API server unavailable: %s", row.key, exc)
            return BindResult(UNAVAILABLE, str(exc))
        except ApiError as exc:
            metrics.bind_failed("refused")
            self._mark_failed(row)
            requeue(row, f"binding to {node} failed: {exc}", retry_after)
            return BindResult(FAILED, str(exc))
        # Bound: from here on nothing is undone, whatever the last patch meets.
        services.mark_bound(row, node, expected_uid=row.uid)
        log.info("pod %s bound to %s (%s)", row.key, node, row.allocated)
        if self.complete_phase:
            try:
                self.annotate(row, {pod_objects.BIND_PHASE: "success"})
            except (ApiError, ApiUnavailable, PodGone, BoundElsewhere) as exc:
                log.warning("pod %s is bound but bind-phase stays allocating: %s", row.key, exc)
                return BindResult(BOUND, f"bind-phase not updated: {exc}")
        return BindResult(BOUND)

    def _mark_failed(self, row: Pod) -> None:
        try:
            self.annotate(row, {pod_objects.BIND_PHASE: "failed", pod_objects.BIND_TIME: str(int(self.clock()))})
        except (ApiError, ApiUnavailable, PodGone, BoundElsewhere) as exc:
            log.info("pod %s: could not mark bind-phase failed: %s", row.key, exc)
