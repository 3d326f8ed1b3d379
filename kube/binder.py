"""Committing a placement to Kubernetes: SPEC 8 annotations, then the Binding.

The order matters to HAMi's device plugin, which reads the annotations when the kubelet
starts the pod: the annotations (`bind-phase: allocating`) go on first, then the Binding,
then `bind-phase: success`. Each annotation patch carries the resourceVersion just read,
so it never lands on a pod that changed under it; on 409 the pod is read again, checked
again, and the patch re-applied.

Before the Binding, the pod's claims get what VolumeBinding chose on the node (`prebind`:
`volume.kubernetes.io/selected-node`, or a volume's `spec.claimRef`); a claim or volume
changed since the pod was placed fails the bind.

Outcomes: `bound`; `gone` (the pod was deleted or replaced: its cards are released);
`failed` (the API refused: `bind-phase: failed`, cards released, the same pod queued again
after `retry_after`; or bound elsewhere: released);
`unavailable` (no answer: nothing is changed, the caller tries again later, because the
Binding may or may not have happened and the next read will tell).

Every write names the incarnation it means (`expected_uid=row.uid`), so a late outcome for a
pod deleted and created again under the same name never touches the new one.

A leader killed between the Binding and the last patch leaves a pod bound with
`bind-phase: allocating`; `repair` (run by the next leader) finishes it when hamiadmin holds
its placement on that node, and marks it `failed` otherwise.

Around it all, HAMi's node lock (`kube.nodelock`, `hami.io/mutex.lock`): taken before the
first annotation, given back when the bind fails, and after `bind-phase: success` when
`complete_phase` is on; with it off, HAMi's device plugin gives it back once it has handed
out the cards. While another pod's live bind holds the node the outcome is `locked`
(nothing changed; the caller tries again on its next pass). A stale lock (its pod gone or
done, or older than `HAMI_NODE_LOCK_SECONDS`) is taken over and recorded as an Event
(`NodeLockTakenOver` on `node/<name>`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from enum import StrEnum

from django.conf import settings

from scheduling import services
from scheduling.engine import encoding
from scheduling.models import Event, Pod, record_event
from scheduling.ops import metrics

from . import pods as pod_objects
from .api import ApiError, ApiUnavailable, KubeApi
from .draclaims import ClaimConflict, ClaimWriter, claims_of
from .drastate import DraState
from .events import ACTOR
from .nodelock import KEY as NODE_LOCK
from .nodelock import NodeLock, NodeLocked
from .volumes import VolumeConflict, bindings, prebind

log = logging.getLogger("hamiadmin.kube.binder")


class BindOutcome(StrEnum):
    """What became of one bind (`BindResult.outcome`). GATED: the pod still has
    `spec.schedulingGates`, so the API server refuses its Binding (409); it is neither
    annotated nor bound, its cards are given back and it waits for the gates to go."""

    BOUND = "bound"
    GONE = "gone"
    FAILED = "failed"
    UNAVAILABLE = "unavailable"
    LOCKED = "locked"
    GATED = "gated"


#: `bind-phase` values that end a bind; any other on a bound pod is a bind left half-done.
SETTLED_PHASES = ("success", "failed")
#: `Event.reason` of a repaired bind: finished (hamiadmin holds the placement) or failed.
BIND_COMPLETED, BIND_ABANDONED = "BindCompleted", "BindFailed"
#: `Event.reason` (kind `bind_repaired`) of a stale node lock taken over: a binder's leftover.
NODE_LOCK_TAKEN_OVER = "NodeLockTakenOver"
_FROM_SETTINGS = object()


def half_done(pod: dict) -> bool:
    """Bound in Kubernetes, not ended, and its `bind-phase` is there but neither success nor
    failed: a binder stopped between the Binding and its last patch. A pod without any
    `bind-phase` was bound by someone else and is not ours to touch."""
    phase = pod_objects.annotations_of(pod).get(encoding.BIND_PHASE)
    return (
        bool(pod_objects.node_of(pod))
        and not pod_objects.final_status(pod)
        and phase is not None
        and phase not in SETTLED_PHASES
    )


class PodGone(Exception):
    """The pod no longer exists as the one we placed (deleted, or a new uid)."""


class Gated(Exception):
    """The pod still has scheduling gates: Kubernetes refuses to bind it."""

    def __init__(self, gates: list):
        names = ", ".join(str(g.get("name", g)) if isinstance(g, dict) else str(g) for g in gates)
        super().__init__(f"the pod has scheduling gates ({names}); it is bound once they go")


class BoundElsewhere(Exception):
    def __init__(self, node: str):
        super().__init__(f"the pod is already bound to {node}")
        self.node = node


def node_name(row: Pod) -> str:
    """The node of a placed pod's row (read with it: `select_related("node")`)."""
    if row.node is None:
        raise ValueError(f"pod {row.key} is placed on no node")
    return row.node.name


@dataclass
class BindResult:
    """A bind's outcome, or for a half-done bind repaired, the repair's `Event.reason`
    (BIND_COMPLETED or BIND_ABANDONED), with the detail."""

    outcome: BindOutcome | str
    detail: str = ""

    @property
    def bound(self) -> bool:
        return self.outcome == BindOutcome.BOUND


def requeue(row: Pod, why: str, retry_after: float = 0.0) -> Pod | None:
    """Give the cards back and queue the same pod again, not before `retry_after` seconds."""
    log.warning("pod %s: %s; releasing its cards and queueing it again", row.key, why)
    return services.requeue_placed_pod(row, retry_after, why, expected_uid=row.uid)


class Binder:
    """`complete_phase`: write `bind-phase: success` after the Binding. Off for nodes run by
    HAMi's device plugin, which looks for the pod by `allocating` and completes it itself.
    `node_lock`: HAMi's node lock (default: `HAMI_NODE_LOCK_SECONDS`, off at 0)."""

    def __init__(
        self,
        api: KubeApi,
        complete_phase: bool = True,
        conflict_retries: int = 5,
        clock=time.time,
        node_lock=_FROM_SETTINGS,
    ):
        self.api = api
        self.complete_phase = complete_phase
        self.conflict_retries = conflict_retries
        self.clock = clock
        if node_lock is _FROM_SETTINGS:
            seconds = float(settings.HAMIADMIN.get("NODE_LOCK_SECONDS", 15))
            node_lock = NodeLock(api, seconds, clock) if seconds > 0 else None
        self.node_lock: NodeLock | None = node_lock  # type: ignore[assignment]
        #: the DRA informers' state (`HAMI_DRA`): a pod placed on DRA devices gets its claims
        #: allocated and reserved before the Binding (`kube.draclaims`)
        self.dra: DraState | None = None

    def annotations(self, row: Pod, phase: str) -> dict[str, str]:
        """SPEC 8's six placement annotations for `row` (`encoding.placement_annotations`), and
        what its device family writes beside them (`Pod.extra_annotations`: NVIDIA's
        `hami.io/vgpu-mig-allocations` for MIG instances)."""
        placed = row.scheduled_at.timestamp() if row.scheduled_at else None
        written = encoding.placement_annotations(node_name(row), row.allocated, placed, phase, self.clock())
        extra = row.extra_annotations if isinstance(row.extra_annotations, dict) else {}
        written.update({key: value for key, value in extra.items() if isinstance(value, str)})
        return written

    def annotate(self, row: Pod, annotations: dict[str, str], refuse_gated: bool = False) -> dict:
        """Merge-patch the annotations onto the pod we placed, re-reading on 409. `refuse_gated`:
        raise Gated, writing nothing, while the unbound pod still has scheduling gates."""
        return self._annotate(
            row.namespace, row.name, row.uid, node_name(row), lambda current: annotations, refuse_gated
        )

    def _annotate(
        self, namespace: str, name: str, uid: str, node: str, annotations_for, refuse_gated: bool = False
    ) -> dict:
        """Merge-patch `annotations_for(current pod)` onto the pod of that uid, unless it is bound
        to another node (or, with `refuse_gated`, gated); re-read on 409. An empty patch writes
        nothing (the pod is returned)."""
        for _ in range(self.conflict_retries):
            try:
                current = self.api.get_pod(namespace, name)
            except ApiError as exc:
                if exc.status == 404:
                    raise PodGone() from exc
                raise
            if uid and pod_objects.uid_of(current) != uid:
                raise PodGone()
            bound_to = pod_objects.node_of(current)
            if bound_to and bound_to != node:
                raise BoundElsewhere(bound_to)
            if refuse_gated and not bound_to and pod_objects.gates_of(current):
                raise Gated(pod_objects.gates_of(current))
            annotations = annotations_for(current)
            if not annotations:
                return current
            version = current["metadata"].get("resourceVersion")
            patch = {"metadata": {"resourceVersion": version, "annotations": annotations}}
            try:
                return self.api.patch_pod(namespace, name, patch)
            except ApiError as exc:
                if exc.status == 404:
                    raise PodGone() from exc
                if exc.status != 409:
                    raise
                log.info("pod %s/%s changed while annotating (409); reading it again", namespace, name)
        raise ApiError(409, "Conflict", f"pod kept changing: {self.conflict_retries} patches refused")

    def bind(self, row: Pod, retry_after: float = 0.0) -> BindResult:
        """Annotate, bind, mark success; see the module docstring for the outcomes.
        `retry_after`: how long a refused pod waits before the next cycle may place it."""
        node = node_name(row)
        held, refused = self._lock(row, retry_after)
        if refused is not None:
            return refused
        result = self._bind(row, retry_after)
        if (
            held
            and self.node_lock is not None
            and (result.outcome != BindOutcome.BOUND or self.complete_phase)
        ):
            # Bound with complete_phase off: HAMi's device plugin gives the lock back after
            # handing out the cards. Anything else: nobody will, so we do (or it expires).
            self.node_lock.release(node, row.namespace, row.name)
        return result

    def _lock(self, row: Pod, retry_after: float) -> tuple[bool, BindResult | None]:
        """Take the node lock: (held, the result when the bind cannot go on). A node Kubernetes
        does not know has no lock to take (nor a device plugin to read one): the bind goes on."""
        if self.node_lock is None:
            return False, None
        node = node_name(row)
        try:
            why = self.node_lock.acquire(node, row.namespace, row.name)
        except NodeLocked as exc:
            log.info("pod %s waits to bind: %s", row.key, exc)
            return False, BindResult(BindOutcome.LOCKED, str(exc))
        except ApiUnavailable as exc:
            log.warning("pod %s not bound yet, API server unavailable: %s", row.key, exc)
            return False, BindResult(BindOutcome.UNAVAILABLE, str(exc))
        except ApiError as exc:
            if exc.status == 404:
                log.warning("pod %s: node %s has no Node object to lock; binding unlocked", row.key, node)
                return False, None
            metrics.bind_failed("refused")
            requeue(row, f"locking node {node} ({NODE_LOCK}) failed: {exc}", retry_after)
            return False, BindResult(BindOutcome.FAILED, str(exc))
        if why:
            record_event(
                Event.BIND_REPAIRED,
                f"node/{node}",
                NODE_LOCK_TAKEN_OVER,
                f"took over {NODE_LOCK} to bind pod {row.key}: {why}",
                actor=ACTOR,
            )
        return True, None

    def _bind(self, row: Pod, retry_after: float) -> BindResult:
        node = node_name(row)
        annotated = None
        try:
            annotated = self.annotate(row, self.annotations(row, "allocating"), refuse_gated=True)
            if pod_objects.node_of(annotated) != node:
                special = self.prebind(row, node)
                try:
                    self._bind_to(row, node)
                except ApiUnavailable:
                    raise  # bound or not, the next read tells: the claim stays for now
                except Exception:
                    if special is not None and self.dra is not None:
                        # refused: the special claim goes, as kube-scheduler's Unreserve deletes it
                        ClaimWriter(self.api, self.dra).drop(row.namespace, *special)
                    raise
        except PodGone:
            services.release_pod(row, Pod.DELETED, expected_uid=row.uid)
            return BindResult(BindOutcome.GONE, "the pod was deleted or replaced")
        except Gated as exc:
            if annotated is not None:  # refused by the Binding: the annotations went on first
                self._mark_failed(row)
            requeue(row, str(exc), retry_after)
            return BindResult(BindOutcome.GATED, str(exc))
        except BoundElsewhere as exc:
            metrics.bind_failed("bound_elsewhere")
            services.release_pod(row, Pod.FAILED, expected_uid=row.uid)
            return BindResult(BindOutcome.FAILED, str(exc))
        except ApiUnavailable as exc:
            log.warning("pod %s not bound yet, API server unavailable: %s", row.key, exc)
            return BindResult(BindOutcome.UNAVAILABLE, str(exc))
        except VolumeConflict as exc:
            metrics.bind_failed("refused")
            self._mark_failed(row)
            what = "resource claims" if isinstance(exc, ClaimConflict) else "volumes"
            requeue(row, f"{what} for {node}: {exc}", retry_after)
            return BindResult(BindOutcome.FAILED, str(exc))
        except ApiError as exc:
            metrics.bind_failed("refused")
            self._mark_failed(row)
            requeue(row, f"binding to {node} failed: {exc}", retry_after)
            return BindResult(BindOutcome.FAILED, str(exc))
        # Bound: from here on nothing is undone, whatever the last patch meets.
        services.mark_bound(row, node, expected_uid=row.uid)
        log.info("pod %s bound to %s (%s)", row.key, node, row.allocated)
        if self.complete_phase:
            try:
                self.annotate(row, {encoding.BIND_PHASE: "success"})
            except (ApiError, ApiUnavailable, PodGone, BoundElsewhere) as exc:
                log.warning("pod %s is bound but bind-phase stays allocating: %s", row.key, exc)
                return BindResult(BindOutcome.BOUND, f"bind-phase not updated: {exc}")
        return BindResult(BindOutcome.BOUND)

    def _bind_to(self, row: Pod, node: str) -> None:
        """The Binding; a 409 because we bound it already (a retry after a lost answer) is
        success. Raises Gated, BoundElsewhere, ApiError, ApiUnavailable."""
        try:
            self.api.bind_pod(row.namespace, row.name, row.uid, node)
        except ApiError as exc:
            if exc.status != 409:
                raise
            current = self.api.get_pod(row.namespace, row.name)
            if not pod_objects.node_of(current) and pod_objects.gates_of(current):
                raise Gated(pod_objects.gates_of(current)) from exc
            if pod_objects.node_of(current) != node:
                raise BoundElsewhere(pod_objects.node_of(current) or "?") from exc

    def prebind(self, row: Pod, node: str) -> tuple[str, str] | None:
        """kube-scheduler's VolumeBinding PreBind (`kube.volumes.prebind`): the claims the pod
        stores get the volume or provisioner chosen on `node`, before the Binding; then its
        ResourceClaims their allocation (`kube.draclaims`, DynamicResources' PreBind), the
        special claim of its extended resources created first. The special claim created
        (name, uid), or None. Raises VolumeConflict (a ClaimConflict for a ResourceClaim) when
        one changed since the pod was placed."""
        labels = row.node.labels if row.node is not None and isinstance(row.node.labels, dict) else {}
        planned = bindings(row.scheduling, row.namespace, row.name, node, labels)
        if planned:
            prebind(self.api, row.namespace, node, planned)
        if self.dra is not None and claims_of(row).get("requests"):
            writer = ClaimWriter(self.api, self.dra)
            writer.prebind(row, node)
            return writer.special
        return None

    def _mark_failed(self, row: Pod) -> None:
        try:
            self.annotate(row, {encoding.BIND_PHASE: "failed", encoding.BIND_TIME: str(int(self.clock()))})
        except (ApiError, ApiUnavailable, PodGone, BoundElsewhere) as exc:
            log.info("pod %s: could not mark bind-phase failed: %s", row.key, exc)

    def repair(self, pod: dict) -> BindResult | None:
        """Finish or fail a bind left half-done (`half_done`) by a binder that stopped between
        the Binding and its last patch (a leader killed). The reason recorded (as `outcome`)
        and its message, or None when the pod, read again, needs nothing.

        - hamiadmin holds the pod (same uid) placed on the node it is bound to: the row is
          marked bound and the SPEC 8 annotations the row implies are written where missing or
          different, with `bind-phase: success` (left `allocating` when `complete_phase` is off:
          HAMi's device plugin completes it). `BindCompleted`.
        - anything else (no row, released, placed elsewhere or not at all): `bind-phase: failed`,
          as a refused Binding gets, so HAMi's device plugin allocates nothing hamiadmin does
          not account for. `BindFailed`.

        Either is recorded as a `bind_repaired` Event. Raises ApiError / ApiUnavailable.
        """
        namespace, name = pod_objects.key_of(pod)
        uid, node = pod_objects.uid_of(pod), pod_objects.node_of(pod)
        phase = pod_objects.annotations_of(pod).get(encoding.BIND_PHASE)
        row = (
            Pod.objects.select_related("node")
            .filter(namespace=namespace, name=name, uid=uid, status__in=Pod.BOUND, node__name=node)
            .first()
        )
        wrote: dict[str, str] = {}

        def completion(current: dict) -> dict[str, str]:
            wrote.clear()
            if not half_done(current):
                return {}
            assert row is not None  # completion is used only for a row that holds the pod
            wanted = self.annotations(row, "success" if self.complete_phase else "allocating")
            have = pod_objects.annotations_of(current)
            missing = {
                key: value
                for key, value in wanted.items()
                if key != encoding.BIND_TIME and have.get(key) != value
            }
            if missing:
                missing[encoding.BIND_TIME] = wanted[encoding.BIND_TIME]
            wrote.update(missing)
            return missing

        def failure(current: dict) -> dict[str, str]:
            wrote.clear()
            if not half_done(current):
                return {}
            wrote.update({encoding.BIND_PHASE: "failed", encoding.BIND_TIME: str(int(self.clock()))})
            return dict(wrote)

        subject = f"pod/{namespace}/{name}"
        try:
            if row is not None:
                services.mark_bound(row, node, expected_uid=row.uid)
                if not completion(pod):
                    return None  # as the cache shows it, nothing to write: no need to read it again
                self._annotate(namespace, name, uid, node, completion)
                if not wrote:
                    return None
                done = "bind-phase success" if self.complete_phase else "the placement annotations"
                message = (
                    f"bound to {node} with bind-phase {phase!r} and placed there by hamiadmin "
                    f"({row.allocated}): wrote {done}"
                )
                record_event(
                    Event.BIND_REPAIRED, subject, BIND_COMPLETED, message, actor=ACTOR, severity=Event.NORMAL
                )
                log.info("pod %s: half-done bind to %s completed", subject, node)
                return BindResult(BIND_COMPLETED, message)
            self._annotate(namespace, name, uid, node, failure)
        except (PodGone, BoundElsewhere):
            return None  # it changed meanwhile; the next look decides again
        if not wrote:
            return None
        held = Pod.objects.select_related("node").filter(namespace=namespace, name=name, uid=uid).first()
        if held is None:
            why = "hamiadmin has no row of this pod"
        elif held.node is None:
            why = f"hamiadmin holds no placement of it ({held.status})"
        else:
            why = f"hamiadmin placed it on {held.node.name} ({held.status})"
        message = f"bound to {node} with bind-phase {phase!r}, but {why}: wrote bind-phase failed"
        record_event(Event.BIND_REPAIRED, subject, BIND_ABANDONED, message, actor=ACTOR)
        log.warning("pod %s: half-done bind to %s marked failed: %s", subject, node, why)
        return BindResult(BIND_ABANDONED, message)
