"""Leader election on a coordination.k8s.io/v1 Lease: only one agent writes at a time.

The rule (the one client-go uses): the holder renews the Lease every `retry_period`;
another candidate takes it over only after it has seen the same record, unchanged, for a
whole `lease_duration` by its own clock, so clocks that disagree cannot cause a takeover.
Every write carries the resourceVersion read before it, so two candidates racing for an
expired Lease cannot both win: the loser gets 409 and stays a follower. A leader that
cannot renew for `renew_deadline` stops leading before its Lease can expire for others.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from .api import ApiError, ApiUnavailable, KubeApi

log = logging.getLogger("hamiadmin.kube.leader")


def micro_time(moment: float) -> str:
    """RFC 3339 with microseconds, as Kubernetes writes MicroTime."""
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquire, renew and, on a clean stop, release one Lease. `leading` is set while we lead."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock=time.monotonic,
        wall_clock=time.time,
    ):
        if not renew_deadline < lease_duration:
            raise ValueError("renew_deadline must be shorter than lease_duration")
        self.api = api
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration, self.renew_deadline, self.retry_period = (
            lease_duration,
            renew_deadline,
            retry_period,
        )
        self.clock, self.wall_clock = clock, wall_clock
        self.leading = threading.Event()
        self._observed: tuple | None = None  # (holder, renewTime, resourceVersion) last seen
        self._observed_at = 0.0
        self._renewed_at = 0.0

    def is_leader(self) -> bool:
        return self.leading.is_set()

    def _spec(self, lease: dict | None, taking_over: bool) -> dict:
        now = micro_time(self.wall_clock())
        spec = dict((lease or {}).get("spec") or {})
        transitions = int(spec.get("leaseTransitions") or 0)
        if taking_over:
            spec["acquireTime"] = now
            if lease is not None:
                transitions += 1
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=max(1, int(round(self.lease_duration))),
            renewTime=now,
            leaseTransitions=transitions,
        )
        return spec

    def try_acquire_or_renew(self) -> bool:
        """One round: True when we hold the Lease afterwards. Never raises for API trouble."""
        try:
            return self._round()
        except ApiError as exc:
            if exc.status != 409:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        except ApiUnavailable as exc:
            log.warning("lease %s/%s: API server unavailable: %s", self.namespace, self.name, exc)
            return False

    def _round(self) -> bool:
        lease = self.api.get_lease(self.namespace, self.name)
        now = self.clock()
        if lease is None:
            body = {
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(None, True),
            }
            self.api.create_lease(self.namespace, body)
            log.info("lease %s/%s created; %s leads", self.namespace, self.name, self.identity)
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), lease["metadata"].get("resourceVersion"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        if holder and holder != self.identity:
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            if now - self._observed_at < duration:
                return False
            log.info("lease %s/%s held by %s expired; taking over", self.namespace, self.name, holder)
        body = {"metadata": dict(lease["metadata"]), "spec": self._spec(lease, holder != self.identity)}
        updated = self.api.replace_lease(self.namespace, self.name, body)
        new_spec = updated.get("spec") or {}
        self._observed = (
            self.identity,
            new_spec.get("renewTime"),
            updated["metadata"].get("resourceVersion"),
        )
        self._observed_at = self.clock()
        return True

    def step(self) -> None:
        """Try once and update `leading`: lose it only after `renew_deadline` without a renewal."""
        if self.try_acquire_or_renew():
            if not self.leading.is_set():
                log.info("%s is now the leader (lease %s/%s)", self.identity, self.namespace, self.name)
            self._renewed_at = self.clock()
            self.leading.set()
        elif self.leading.is_set() and self.clock() - self._renewed_at >= self.renew_deadline:
            log.warning(
                "%s lost the lease %s/%s: no renewal for %.0fs",
                self.identity,
                self.namespace,
                self.name,
                self.renew_deadline,
            )
            self.leading.clear()

    def run(self, stop: threading.Event) -> None:
        """Keep trying until `stop`; then release the Lease if we hold it."""
        while not stop.is_set():
            self.step()
            stop.wait(self.retry_period)
        self.release()

    def release(self) -> None:
        """Give the Lease up (empty holder), so a successor need not wait for it to expire."""
        if not self.leading.is_set():
            return
        self.leading.clear()
        try:
            lease = self.api.get_lease(self.namespace, self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = dict(lease["spec"])
            spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=micro_time(self.wall_clock()))
            self.api.replace_lease(self.namespace, self.name, {"metadata": lease["metadata"], "spec": spec})
            log.info("%s released the lease %s/%s", self.identity, self.namespace, self.name)
        except (ApiError, ApiUnavailable) as exc:
            log.warning("could not release the lease %s/%s: %s", self.namespace, self.name, exc)
