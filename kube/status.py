"""The pod status the ecosystem reads: the `PodScheduled` condition and `nominatedNodeName`.

Cluster Autoscaler and Karpenter add nodes only for pods whose `PodScheduled` condition is
`False` with reason `Unschedulable`; `kubectl get pods` and dashboards read the same. So, as
kube-scheduler does, every pod of ours that waits carries:

- `Unschedulable`, with the one-line reason of its latest decision (`0/3 nodes are available:
  1 Insufficient cpu, ...`);
- `SchedulingGated` while `spec.schedulingGates` holds it (kube-scheduler's message);
- `SchedulerError` when it cannot be judged at all (a malformed field, named in the message):
  no new node would help it, so autoscalers must not act on it.

A preemptor whose victims are leaving carries `status.nominatedNodeName` (the node its
nominations hold cards on), cleared when it has none left. The Binding sets `PodScheduled=True`
itself (the API server does) and, from Kubernetes 1.34, clears `nominatedNodeName`; on older
servers `clear_nomination` does after a bind.

Writes go through `pods/status` as a JSON merge patch, and only when the verdict changes:
the pod's own status (the informer's copy) is compared first. A merge patch replaces the
`conditions` list whole, so it carries every condition and the resourceVersion they were read
at; a 409 means the pod changed meanwhile, and the next pass compares again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from .api import ApiError, ApiUnavailable, KubeApi
from .pods import key_of, meta, uid_of

log = logging.getLogger("hamiadmin.kube.status")

POD_SCHEDULED = "PodScheduled"
UNSCHEDULABLE, SCHEDULING_GATED, SCHEDULER_ERROR = "Unschedulable", "SchedulingGated", "SchedulerError"
#: kube-scheduler's message for a gated pod, word for word.
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
#: The longest condition message written (the API server takes more; `describe` shows less).
MAX_MESSAGE = 1024


@dataclass(frozen=True)
class Verdict:
    """What a waiting pod's status says: the `PodScheduled=False` reason and message, and the
    node it is nominated to ("" when none)."""

    reason: str
    message: str
    nominated: str = ""


def _status(pod: dict) -> dict:
    found = pod.get("status") if isinstance(pod, dict) else None
    return found if isinstance(found, dict) else {}


def _conditions(pod: dict) -> list:
    found = _status(pod).get("conditions")
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def shown(pod: dict) -> Verdict | None:
    """The verdict the pod's status shows now (None: no `PodScheduled=False` condition)."""
    for condition in _conditions(pod):
        if condition.get("type") == POD_SCHEDULED and condition.get("status") == "False":
            nominated = _status(pod).get("nominatedNodeName") or ""
            return Verdict(condition.get("reason") or "", condition.get("message") or "", nominated)
    return None


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodStatusWriter:
    """Writes a waiting pod's verdict when it differs from what the pod shows (or from what was
    last written, until the watch brings the pod back)."""

    def __init__(self, api: KubeApi, may_write: Callable[[], bool]):
        self.api, self.may_write = api, may_write
        self.written: dict[str, Verdict] = {}  # uid -> the verdict last written
        self.lock = threading.Lock()

    def forget(self, uid: str) -> None:
        with self.lock:
            self.written.pop(uid, None)

    def write(self, pod: dict, verdict: Verdict) -> bool:
        """Patch the pod's status to `verdict` unless it shows it already. True when written."""
        uid = uid_of(pod)
        verdict = Verdict(verdict.reason, verdict.message[:MAX_MESSAGE], verdict.nominated)
        with self.lock:
            if shown(pod) == verdict or self.written.get(uid) == verdict:
                return False
        if not self.may_write():
            return False
        conditions = [c for c in _conditions(pod) if c.get("type") != POD_SCHEDULED]
        before = next((c for c in _conditions(pod) if c.get("type") == POD_SCHEDULED), None)
        since = before.get("lastTransitionTime") if before and before.get("status") == "False" else None
        conditions.append(
            {
                "type": POD_SCHEDULED,
                "status": "False",
                "reason": verdict.reason,
                "message": verdict.message,
                "lastProbeTime": None,
                "lastTransitionTime": since or stamp(),
            }
        )
        status: dict = {"conditions": conditions}
        if verdict.nominated or _status(pod).get("nominatedNodeName"):
            status["nominatedNodeName"] = verdict.nominated or None
        if self._patch(pod, status):
            with self.lock:
                self.written[uid] = verdict
            return True
        return False

    def clear_nomination(self, pod: dict) -> bool:
        """After a Binding: drop a `nominatedNodeName` the API server left (before 1.34)."""
        if not _status(pod).get("nominatedNodeName"):
            return False
        self.forget(uid_of(pod))
        return self._patch(pod, {"nominatedNodeName": None}, versioned=False)

    def _patch(self, pod: dict, status: dict, versioned: bool = True) -> bool:
        namespace, name = key_of(pod)
        patch: dict = {"status": status}
        version = meta(pod).get("resourceVersion")
        if versioned and version:
            patch["metadata"] = {"resourceVersion": version}
        try:
            self.api.patch_pod_status(namespace, name, patch)
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("pod %s/%s: status not written: %s", namespace, name, exc)
            return False
        except ApiUnavailable as exc:
            log.warning("pod %s/%s: status not written, API server unavailable: %s", namespace, name, exc)
            return False
        return True
