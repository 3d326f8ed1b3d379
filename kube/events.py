"""Scheduling events (core/v1 Events) shown by `kubectl describe pod`, without flooding etcd.

A pod that waits is seen every cycle; writing an Event each time would swamp the API
server. So each (pod, reason) gets one Event, created once; later sightings patch its
`count`, `message` and `lastTimestamp` only when the text changed or `refresh_seconds`
have passed since the last write. An Event the server already dropped (TTL) is created
again.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from .api import ApiError, ApiUnavailable, KubeApi

log = logging.getLogger("hamiadmin.kube.events")

MAX_MESSAGE = 1024
#: `Event.actor` of what the kube agent records in hamiadmin's own Event table.
ACTOR = "kube-agent"


def stamp(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class PodRef:
    """The object an Event is about: a pod, or (`kind="Node"`, namespace `default`, where
    Kubernetes keeps node events) a node."""

    namespace: str
    name: str
    uid: str
    kind: str = "Pod"


@dataclass
class Written:
    """The Event last written for one (pod, reason)."""

    name: str
    message: str
    count: int
    first: str
    written_at: float


class EventRecorder:
    def __init__(
        self,
        api: KubeApi,
        component: str,
        instance: str = "",
        refresh_seconds: float = 300.0,
        clock=time.time,
    ):
        self.api, self.component, self.instance = api, component, instance
        self.refresh_seconds, self.clock = refresh_seconds, clock
        self.written: dict[tuple[str, str], Written] = {}
        self.lock = threading.Lock()  # `forget` comes from the watch thread

    def failed_scheduling(self, pod: PodRef, message: str) -> bool:
        return self.record(pod, "Warning", "FailedScheduling", message)

    def scheduled(self, pod: PodRef, node: str, cards: list[str]) -> bool:
        text = f"Successfully assigned {pod.namespace}/{pod.name} to {node}"
        if cards:
            text += f" with cards {', '.join(cards)}"
        return self.record(pod, "Normal", "Scheduled", text)

    def preempted(self, victim: PodRef, preemptor: str, cards: list[str], why: str) -> bool:
        """On the victim, once Kubernetes accepted its eviction: who took its place, on which cards."""
        text = f"Preempted by {preemptor} on card {', '.join(cards) or 'none'}"
        return self.record(victim, "Warning", "Preempted", f"{text}: {why}" if why else text)

    def preempting(self, preemptor: PodRef, victim: str, node: str, cards: list[str]) -> bool:
        text = f"Preempting {victim} on {node}"
        if cards:
            text += f" for cards {', '.join(cards)}"
        return self.record(preemptor, "Normal", "Preempting", text)

    def preemption_refused(self, preemptor: PodRef, victim: str, message: str) -> bool:
        """On the preemptor: Kubernetes (a PodDisruptionBudget) kept the victim; it plans again."""
        return self.record(
            preemptor, "Warning", "PreemptionRefused", f"evicting {victim} was refused: {message}"
        )

    def forget(self, uid: str) -> None:
        """The pod is gone or placed: drop what we remember of its events."""
        with self.lock:
            for key in [key for key in self.written if key[0] == uid]:
                del self.written[key]

    def record(self, pod: PodRef, event_type: str, reason: str, message: str) -> bool:
        """Write (create or patch) unless the same text was written less than `refresh_seconds`
        ago. True when something was written. API trouble is logged, never raised."""
        message = message[:MAX_MESSAGE]
        key = (pod.uid or f"{pod.namespace}/{pod.name}", reason)
        now = self.clock()
        with self.lock:
            previous = self.written.get(key)
        if previous and previous.message == message and now - previous.written_at < self.refresh_seconds:
            return False
        try:
            if previous is not None:
                try:
                    self.api.patch_event(
                        pod.namespace,
                        previous.name,
                        {"count": previous.count + 1, "message": message, "lastTimestamp": stamp(now)},
                    )
                    self._remember(
                        key, Written(previous.name, message, previous.count + 1, previous.first, now)
                    )
                    return True
                except ApiError as exc:
                    if exc.status != 404:
                        raise
            self._remember(key, self._create(pod, event_type, reason, message, now))
            return True
        except (ApiError, ApiUnavailable) as exc:
            log.warning("could not write event %s for %s/%s: %s", reason, pod.namespace, pod.name, exc)
            return False

    def _remember(self, key: tuple[str, str], written: Written) -> None:
        with self.lock:
            self.written[key] = written

    def _create(self, pod: PodRef, event_type: str, reason: str, message: str, now: float) -> Written:
        name = f"{pod.name[:200]}.{secrets.token_hex(8)}"
        first = stamp(now)
        event = {
            "metadata": {"name": name, "namespace": pod.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": pod.kind,
                "namespace": pod.namespace if pod.kind == "Pod" else None,
                "name": pod.name,
                "uid": pod.uid or None,
            },
            "type": event_type,
            "reason": reason,
            "message": message,
            "count": 1,
            "firstTimestamp": first,
            "lastTimestamp": first,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance or self.component,
        }
        self.api.create_event(pod.namespace, event)
        return Written(name, message, 1, first, now)
