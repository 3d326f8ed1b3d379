"""HAMi's node lock: the `hami.io/mutex.lock` node annotation, held around a bind.

HAMi's device plugin finds the pod an `Allocate` call belongs to by this annotation (newer
plugins read the pod it names; without it, two pods binding to one node at once can swap
cards), and removes it once the pod's cards are handed out. So the binder takes the lock
before the SPEC 8 annotations and the Binding, and gives it back when a bind fails or when
nobody else will (`complete_phase`: no HAMi plugin on the node).

The value is HAMi's: `<RFC 3339 time>,<namespace>,<pod>`, e.g.
`2026-03-01T10:00:00Z,default,train` (an older form carries the time alone). The patch
carries the node's resourceVersion, so of two binders only one takes a free lock.

A lock held by another pod is honoured, unless it is stale, which is told in seconds, not
HAMi's five minutes (Project-HAMi/HAMi#1130):
- its pod no longer exists, or its bind has ended (`bind-phase` success or failed, the pod
  finished): at once, whatever its age;
- it is older than `expiry` seconds (`HAMI_NODE_LOCK_SECONDS`, default 15: a live bind takes
  well under a second, the device plugin's Allocate follows within the kubelet's admission);
- its value does not read, or its time is further in the future than `expiry`.
A stale lock is taken over, and `acquire` says why (the binder records it as an Event).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from scheduling.engine import encoding

from . import pods as pod_objects
from .api import ApiError, ApiUnavailable, KubeApi

log = logging.getLogger("hamiadmin.kube.nodelock")

KEY = "hami.io/mutex.lock"
SEPARATOR = ","
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


@dataclass(frozen=True)
class Holder:
    """What a lock's value says: when, and for which pod (empty in the time-only form)."""

    at: float
    namespace: str = ""
    name: str = ""

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.name}" if self.name else "no pod"


class NodeLocked(Exception):
    """Another pod's bind holds the node; nothing was changed. Try again shortly."""

    def __init__(self, node: str, holder: Holder, age: float):
        super().__init__(f"node {node} is locked by {holder.pod}'s bind ({age:.0f}s ago, {KEY})")
        self.node, self.holder, self.age = node, holder, age


def stamp(moment: float) -> str:
    return datetime.fromtimestamp(int(moment), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def lock_value(namespace: str, name: str, moment: float) -> str:
    """HAMi's value for a lock taken at `moment` by pod `namespace/name`."""
    return SEPARATOR.join((stamp(moment), namespace, name))


def parse_lock(value: str) -> Holder:
    """The lock's holder. Raises ValueError for a value HAMi would not read either."""
    parts = value.split(SEPARATOR)
    if len(parts) not in (1, 3):
        raise ValueError(f"expected TIME or TIME,NAMESPACE,POD, got {len(parts)} parts")
    if not _RFC3339.fullmatch(parts[0].strip()):
        raise ValueError(f"{parts[0]!r} is not an RFC 3339 time")
    at = datetime.fromisoformat(parts[0].strip().replace("Z", "+00:00")).timestamp()
    return Holder(at, *parts[1:]) if len(parts) == 3 else Holder(at)


def _names(value: str, namespace: str, name: str) -> bool:
    try:
        holder = parse_lock(value)
    except ValueError:
        return False
    return (holder.namespace, holder.name) == (namespace, name)


class NodeLock:
    def __init__(self, api: KubeApi, expiry: float = 15.0, clock=time.time, retries: int = 5):
        self.api, self.expiry, self.clock, self.retries = api, expiry, clock, retries

    def stale(self, value: str, namespace: str, name: str) -> str | None:
        """Why the lock `value` may be taken by pod `namespace/name`: "" when it already names
        that pod, a sentence when it is stale, None when it is another pod's live lock."""
        try:
            holder = parse_lock(value)
        except ValueError as exc:
            return f"its value {value!r} does not read ({exc})"
        if holder.namespace == namespace and holder.name == name:
            return ""
        age = self.clock() - holder.at
        if age > self.expiry:
            return f"{holder.pod}'s lock is {age:.0f}s old, older than {self.expiry:g}s"
        if age < -self.expiry:
            return f"{holder.pod}'s lock is dated {-age:.0f}s in the future"
        if not holder.name:
            raise NodeLocked("", holder, age)
        try:
            pod = self.api.get_pod(holder.namespace, holder.name)
        except ApiError as exc:
            if exc.status == 404:
                return f"{holder.pod}, which held it, no longer exists"
            raise
        phase = pod_objects.annotations_of(pod).get(encoding.BIND_PHASE)
        if phase in ("success", "failed") or pod_objects.final_status(pod):
            return f"{holder.pod}, which held it, has ended its bind (bind-phase {phase})"
        raise NodeLocked("", holder, age)

    def acquire(self, node: str, namespace: str, name: str) -> str:
        """Take the lock of `node` for pod `namespace/name`. Returns why a stale lock was taken
        over ("" when the node was free or already ours). Raises NodeLocked while another pod's
        bind holds it; ApiError / ApiUnavailable when the API server refuses or is away."""
        for _ in range(self.retries):
            current = self.api.get_node(node)
            metadata = current.get("metadata") or {}
            value = (metadata.get("annotations") or {}).get(KEY)
            why = ""
            if value is not None:
                try:
                    found = self.stale(value, namespace, name)
                except NodeLocked as exc:
                    raise NodeLocked(node, exc.holder, exc.age) from None
                why = found or ""
            patch = {
                "metadata": {
                    "resourceVersion": metadata.get("resourceVersion"),
                    "annotations": {KEY: lock_value(namespace, name, self.clock())},
                }
            }
            try:
                self.api.patch_node(node, patch)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                log.info("node %s changed while locking it (409); reading it again", node)
                continue
            if why:
                log.warning("node %s: took over %s: %s", node, KEY, why)
            return why
        raise ApiError(409, "Conflict", f"node {node} kept changing: {self.retries} lock patches refused")

    def release(self, node: str, namespace: str, name: str) -> bool:
        """Remove the lock of `node` if it names pod `namespace/name`. True when removed or not
        ours to remove; False when the API server did not let us (the lock then expires)."""
        for _ in range(self.retries):
            try:
                current = self.api.get_node(node)
                metadata = current.get("metadata") or {}
                value = (metadata.get("annotations") or {}).get(KEY)
                if value is None or not _names(value, namespace, name):
                    return True
                self.api.patch_node(
                    node,
                    {
                        "metadata": {
                            "resourceVersion": metadata.get("resourceVersion"),
                            "annotations": {KEY: None},
                        }
                    },
                )
                return True
            except ApiError as exc:
                if exc.status == 409:
                    continue
                log.warning("node %s: %s not released (it expires in %gs): %s", node, KEY, self.expiry, exc)
                return False
            except ApiUnavailable as exc:
                log.warning("node %s: %s not released (it expires in %gs): %s", node, KEY, self.expiry, exc)
                return False
        return False
