"""A scheduling cycle: one snapshot, the engine over many pods in memory, one commit.

Planning reads and writes nothing but memory (after four queries), so it can take its
time without holding a lock; the commit (pipeline.commit) re-checks what it places.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field

from django.utils import timezone

from scheduling.engine import Decision as EngineDecision
from scheduling.engine import PodSpec, Scheduler
from scheduling.engine.decision import REJECTED
from scheduling.engine.scheduler import ParsedPod, describe_policy

from ..snapshot import Snapshot, due_pods, load_snapshot
from .options import option

log = logging.getLogger(__name__)


@dataclass
class Attempt:
    """One pod decided in this cycle, with what the commit needs to check and write it."""

    pod_id: int
    key: str
    revision: int
    attempts: int
    decision: EngineDecision
    parsed: ParsedPod | None = None


@dataclass
class CyclePlan:
    """What a cycle decided in memory, not yet written."""

    snapshot: Snapshot | None
    attempts: list[Attempt]
    trigger: str = ""
    worker: str = ""
    started_at: object = None
    started: float = 0.0
    snapshot_ms: float = 0.0
    decide_ms: float = 0.0
    full: bool = False  # the queue had at least `limit` due pods: more may be waiting


@dataclass
class CycleReport:
    """What a committed cycle did, for commands, logs and tests."""

    cycle_id: int | None = None
    considered: int = 0
    placed: list[tuple[str, str, str]] = field(default_factory=list)  # (pod, node, allocated)
    pending: list[tuple[str, str]] = field(default_factory=list)  # (pod, reason)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (pod, error)
    conflicts: list[tuple[str, str]] = field(default_factory=list)  # (pod, why)
    skipped: list[str] = field(default_factory=list)  # changed since the snapshot
    more: bool = False  # worth running another cycle now
    snapshot_ms: float = 0.0
    decide_ms: float = 0.0
    commit_ms: float = 0.0
    duration_ms: float = 0.0


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def unexpected_failure(spec: PodSpec, config, exc: Exception) -> EngineDecision:
    """A pod the engine could not handle at all: shown as rejected, never a crashed worker."""
    return EngineDecision(
        name=spec.name,
        namespace=spec.namespace,
        status=REJECTED,
        policy=describe_policy(spec.annotations, config),
        error=f"scheduler error: {type(exc).__name__}: {exc}",
        error_field="",
    )


def plan_cycle(limit: int | None = None, trigger: str = "", worker: str = "", now=None) -> CyclePlan:
    """Decide the due pods in queue order against one snapshot, each seeing the ones before it."""
    started = time.perf_counter()
    started_at = timezone.now()
    limit = limit or option("CYCLE_MAX_PODS")
    rows = due_pods(limit, now)
    if not rows:
        return CyclePlan(None, [], trigger, worker, started_at, started)
    snapshot = load_snapshot()
    snapshot_done = time.perf_counter()
    scheduler = Scheduler(snapshot.cluster, snapshot.config)
    attempts = []
    for pod_id, namespace, name, uid, pod_annotations, containers, inits, revision, tries in rows:
        spec = PodSpec(
            name=name, namespace=namespace, annotations=pod_annotations, containers=containers,
            init_containers=inits, uid=uid,
        )  # fmt: skip
        try:
            decision, parsed = scheduler.decide_parsed(spec)
            scheduler.assume(decision)
        except Exception as exc:  # noqa: BLE001 - one odd pod must not stop the others
            log.exception("deciding %s/%s failed", namespace, name)
            decision, parsed = unexpected_failure(spec, snapshot.config, exc), None
        attempts.append(Attempt(pod_id, f"{namespace}/{name}", revision, tries, decision, parsed))
    decided = time.perf_counter()
    return CyclePlan(
        snapshot=snapshot,
        attempts=attempts,
        trigger=trigger,
        worker=worker,
        started_at=started_at,
        started=started,
        snapshot_ms=(snapshot_done - started) * 1000,
        decide_ms=(decided - snapshot_done) * 1000,
        full=len(rows) >= limit,
    )


def run_cycle(trigger: str = "", worker: str = "", limit: int | None = None) -> CycleReport:
    """Plan and commit one cycle. Cheap (one query) when nothing is due."""
    from .commit import commit_plan

    plan = plan_cycle(limit=limit, trigger=trigger, worker=worker or worker_name())
    if not plan.attempts:
        return CycleReport(duration_ms=(time.perf_counter() - plan.started) * 1000)
    return commit_plan(plan)
