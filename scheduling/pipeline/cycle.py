"""Planning a cycle: one snapshot, the engine over many pods in memory; nothing written.

Planning reads and writes nothing but memory (after four queries), so it can take its
time without holding a lock; the commit (`pipeline.commit`) re-checks what it places and
`pipeline.flight.run_cycle` runs the two. `plan_one` is the same for one pod among given
nodes (kube-scheduler's extender filter).
"""

from __future__ import annotations

import logging
import time

from django.utils import timezone

from scheduling.engine import Cluster, PodSpec, Scheduler
from scheduling.engine import Decision as EngineDecision
from scheduling.engine import Node as EngineNode
from scheduling.engine.decision import REJECTED
from scheduling.engine.pod import describe_policy

from .options import option
from .plan import Attempt, CyclePlan, worker_name
from .snapshot import Snapshot, due_pods, load_snapshot

log = logging.getLogger(__name__)


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
            name=name,
            namespace=namespace,
            annotations=pod_annotations,
            containers=containers,
            init_containers=inits,
            uid=uid,
        )
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


def restricted(snapshot: Snapshot, names: list[str]) -> Cluster:
    """The snapshot's nodes among `names`; a name hamiadmin does not know is a node without cards."""
    known = snapshot.cluster.by_name
    return Cluster([known[name] if name in known else EngineNode(name=name) for name in dict.fromkeys(names)])


def plan_one(row, names: list[str], trigger: str = "extender filter") -> CyclePlan:
    """A one-pod plan: `row` (a Pod) decided among the nodes `names` only, on a fresh snapshot."""
    started = time.perf_counter()
    snapshot = load_snapshot()
    scheduler = Scheduler(restricted(snapshot, names), snapshot.config)
    spec = row.as_spec()
    try:
        decision, parsed = scheduler.decide_parsed(spec)
    except Exception as exc:  # noqa: BLE001 - one odd pod must not fail the request
        log.exception("deciding %s failed", row.key)
        decision, parsed = unexpected_failure(spec, snapshot.config, exc), None
    return CyclePlan(
        snapshot=snapshot,
        attempts=[Attempt(row.pk, row.key, row.revision, row.attempts, decision, parsed)],
        trigger=trigger,
        worker=worker_name(),
        started_at=timezone.now(),
        started=started,
    )
