"""Planning a cycle: one snapshot, the engine over many pods in memory; nothing written.

Planning reads and writes nothing but memory (after four queries), so it can take its
time without holding a lock; the commit (`pipeline.commit`) re-checks what it places and
`pipeline.flight.run_cycle` runs the two. `plan_one` is the same for one pod among given
nodes (kube-scheduler's extender filter).
"""

from __future__ import annotations

import logging
import time
from typing import cast

from django.utils import timezone

from scheduling.engine import Cluster, PodSpec, Scheduler
from scheduling.engine import Decision as EngineDecision
from scheduling.engine import Node as EngineNode
from scheduling.engine.annotations import GPU_POLICY
from scheduling.engine.batch.consolidate import Consolidator
from scheduling.engine.batch.jobs import (
    GANG_TIMED_OUT,
    GANG_UNSCHEDULABLE,
    NAMESPACE_QUOTA,
    NOT_ENOUGH_PODS,
    QUEUE_LIMIT,
    Gang,
    GangTerms,
    JobRunner,
    Member,
    Pending,
    assemble_jobs,
)
from scheduling.engine.batch.preempt import Preemptor, Tenant
from scheduling.engine.batch.queues import QueueBook
from scheduling.engine.chain import gang_filter_names
from scheduling.engine.decision import REJECTED, Evicted
from scheduling.engine.pod import describe_policy
from scheduling.models import PodGroup
from scheduling.models.pods import spec_fields

from . import pools, preemption
from .batch import GangState, load_book, load_gangs, load_namespace_book, pool_capacity, snapshot_capacity
from .locks import keep_alive
from .options import option
from .plan import Attempt, CyclePlan, worker_name
from .snapshot import POD_COLUMNS, Snapshot, due_pods, gang_members, load_snapshot, mark_gangs
from .standing import STANDING
from .wake import wake_at_version

log = logging.getLogger(__name__)


def rejected(spec: PodSpec, config, error: str, field: str = "", code: str | None = None) -> EngineDecision:
    """A pod turned away before or instead of the engine's verdict, as a rejected decision."""
    return EngineDecision(
        name=spec.name,
        namespace=spec.namespace,
        status=REJECTED,
        policy=describe_policy(spec.annotations, config),
        error=error,
        error_field=field,
        error_code=code,
    )


def unexpected_failure(spec: PodSpec, config, exc: Exception) -> EngineDecision:
    """A pod the engine could not handle at all: shown as rejected, never a crashed worker."""
    return rejected(spec, config, f"scheduler error: {type(exc).__name__}: {exc}")


def plan_cycle(
    limit: int | None = None,
    trigger: str = "",
    worker: str = "",
    now=None,
    capacity_version: int | None = None,
) -> CyclePlan:
    """Decide the due pods against one snapshot, as jobs from queues (`engine.jobs`): single
    pods and gangs, each seeing the placements before it. `capacity_version`: the version as
    the caller just read it (else read here)."""
    started = time.perf_counter()
    started_at = timezone.now()
    now = now or started_at
    limit = limit or option("CYCLE_MAX_PODS")
    # capacity moved: the backed-off pods it lets in are due now; the version it read is the
    # one planned against (read before the snapshot is brought up to date)
    _, capacity_version = wake_at_version(now, capacity_version)
    rows = due_pods(limit, now)
    if not rows:
        return CyclePlan(None, [], trigger, worker, started_at, started)
    full = len(rows) >= limit
    gangs = load_gangs(row[COL["group_id"]] for row in rows)
    rows += gang_members(gangs, {row[0] for row in rows})
    with STANDING.use(since=started) as (snapshot, scheduler):  # the wake's refresh will do
        # a pool's planner sees its pool's cards only: shares are of the whole cluster's
        book = load_book(capacity=pool_capacity(snapshot) if pools.current() else snapshot_capacity(snapshot))
        namespaces = load_namespace_book()
        if uses_gang_spread(rows, snapshot.config):
            mark_gangs(snapshot.cluster)
        snapshot_done = time.perf_counter()
        groups_changed = expire_gangs(gangs, now)
        attempts, nominated = plan_jobs(rows, gangs, book, namespaces, snapshot, scheduler, now)
    groups_changed.update(gang_verdicts(gangs, attempts))
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
        full=full,
        groups=groups_changed,
        nominated=nominated,
        capacity_version=capacity_version,
    )


def plan_jobs(rows, gangs, book, namespaces, snapshot: Snapshot, scheduler: Scheduler, now):
    """The due rows decided as jobs (`engine.jobs`) on `scheduler`, each seeing the
    placements before it: an attempt per pod, and the keys of the pods nominated to cards."""

    keep = max(1, option("DECISION_TOP"))  # what the commit stores of a decision

    def decide(spec: PodSpec):
        keep_alive()  # the cycle lock's lease: this holder is making progress
        try:
            return scheduler.decide_parsed(spec, keep=keep)
        except Exception as exc:  # noqa: BLE001 - one odd pod must not stop the others
            log.exception("deciding %s failed", spec.key)
            STANDING.spoil()  # it may have stopped half way through changing a node
            return unexpected_failure(spec, snapshot.config, exc), None

    jobs, held = build_jobs(rows, gangs, book, snapshot.config, now)
    reserve_after = option("RESERVE_AFTER_SECONDS")
    rules = preemption.rules()
    preemptor = (
        Preemptor(scheduler, book, lambda: preemption.load_tenants(now), rules) if rules.enabled else None
    )
    consolidator = (
        Consolidator(preemptor, decide, preemption.movable_specs())
        if preemptor is not None and option("CONSOLIDATION")
        else None
    )
    nominations = preemption.load_nominations(now)
    nominated = frozenset(nominations)
    runner = JobRunner(
        scheduler,
        book,
        namespaces,
        reserve_after_seconds=reserve_after if reserve_after and reserve_after > 0 else None,
        decide=decide,
        preemptor=preemptor,
        nominations=nominations,
        consolidator=consolidator,
    )
    attempts = [attempt_of(row, decision, None, None) for row, decision in held]
    for outcome in runner.run(jobs):
        row = outcome.member.ref
        queue = book.queues.get(outcome.job.queue)
        attempts.append(
            attempt_of(
                row,
                outcome.decision,
                outcome.parsed,
                queue.pk if queue is not None else None,
                outcome.gang_needed,
            )
        )
        attempts[-1].victims = [
            (cast(int, t.ref), v.kind, v.why, t.node, v.cards) for t, v in victims_of(outcome)
        ]
        attempts[-1].moves = moves_of(outcome)
        attempts[-1].part, attempts[-1].parts_needed = outcome.part, outcome.parts_needed
        preempting = outcome.decision.preemption
        if rules.dry_run and preempting is not None and preempting.dry_run:
            log.info("dry run: %s %s", outcome.member.spec.key, preempting.message)
    return attempts, nominated


COL = {name: i for i, name in enumerate(POD_COLUMNS)}


def victims_of(outcome) -> list[tuple[Tenant, Evicted]]:
    """(tenant, its victim in the decision's `preemption.victims`) per victim of an outcome."""
    preemption = outcome.decision.preemption
    if not outcome.victims or preemption is None:
        return []
    by_pod = {victim.pod: victim for victim in preemption.victims}
    return [(tenant, by_pod[tenant.key]) for tenant in outcome.victims]


def moves_of(outcome) -> list[tuple[int, list[tuple[str, int, int]]]]:
    """(pod id, grants at its new home) per tenant an outcome moves (consolidation)."""
    preemption = outcome.decision.preemption
    if not outcome.victims or preemption is None:
        return []
    refs = {tenant.key: tenant.ref for tenant in outcome.victims}
    return [(refs[move.pod], list(move.grants)) for move in preemption.moves or ()]


def uses_gang_spread(rows, config) -> bool:
    """Whether a due pod's chain (its own, or the cluster's) may name a filter that reads the
    pod's group (`Filter.needs_gang`: gang-spread)."""
    names = gang_filter_names()
    if any(name in config.gpu_scheduler_policy for name in names):
        return True
    chains = (str((row[COL["annotations"]] or {}).get(GPU_POLICY, "")) for row in rows)
    return any(name in chain for chain in chains for name in names)


def spec_of(row) -> PodSpec:
    """A due row (POD_COLUMNS) as the engine's pod, with its labels and Kubernetes scheduling
    fields (SPEC 10, `Pod.scheduling`)."""
    labels = row[COL["labels"]]
    return PodSpec(
        name=row[COL["name"]],
        namespace=row[COL["namespace"]],
        annotations=row[COL["annotations"]],
        containers=row[COL["containers"]],
        init_containers=row[COL["init_containers"]],
        uid=row[COL["uid"]],
        labels=labels if isinstance(labels, dict) else {},
        **spec_fields(row[COL["scheduling"]]),
    )


def attempt_of(row, decision, parsed, queue_id, gang_needed: int = 0) -> Attempt:
    return Attempt(
        row[COL["id"]],
        f"{row[COL['namespace']]}/{row[COL['name']]}",
        row[COL["revision"]],
        row[COL["attempts"]],
        decision,
        parsed,
        group_id=row[COL["group_id"]],
        gang_needed=gang_needed,
        queue_id=queue_id,
    )


def build_jobs(rows, gangs: dict[int, GangState], book: QueueBook, config, now):
    """Jobs from the due rows (`engine.batch.jobs.assemble_jobs`, as `simulate` builds them):
    one per single pod, one per gang; and (row, decision) for pods a batch rule rejects or
    holds before any card is looked at."""
    pending: list[Pending] = []
    held = []
    terms: dict[int, GangTerms] = {}
    for row in rows:
        spec = spec_of(row)
        gang = gangs.get(row[COL["group_id"]])
        if gang is not None and gang.phase == PodGroup.FAILED and gang.on_timeout == PodGroup.REJECT:
            held.append((row, timed_out_decision(spec, config, gang)))
            continue
        submitted = row[COL["submitted_at"]]
        entry = Pending(
            Member(spec, row),
            row[COL["priority"]],
            (submitted, row[0]),
            (now - submitted).total_seconds(),
        )
        if gang is not None:
            entry.group = terms.get(gang.pk)
            if entry.group is None:
                info = Gang(
                    gang.key,
                    gang.min_member,
                    gang.known,
                    gang.placed,
                    gang.min_resources,
                    topology_key=gang.topology_key,
                    domain=gang.domain,
                    finished=gang.finished,
                    subgroups=gang.subgroups,
                    parts_placed=gang.parts_placed,
                    parts_known=gang.parts_known,
                )
                entry.group = terms[gang.pk] = GangTerms(
                    info,
                    gang.queue or None,
                    gang.priority,
                    (gang.created_at, -gang.pk),
                    (now - gang.created_at).total_seconds(),
                )
        pending.append(entry)
    jobs, refused = assemble_jobs(pending, book, config)
    held.extend((member.ref, decision) for member, decision in refused)
    return jobs, held


def timed_out_decision(spec: PodSpec, config, gang: GangState) -> EngineDecision:
    """A member of a gang that timed out with `on_timeout: reject`: rejected, parked until its
    spec changes (or an operator requeues it)."""
    error = (
        f"gang {gang.key} did not reach min_member {gang.min_member} within "
        f"{gang.timeout_seconds} s; its pods are rejected (on_timeout: reject)"
    )
    return rejected(spec, config, error, "schedule_timeout_seconds", GANG_TIMED_OUT)


def expire_gangs(gangs: dict[int, GangState], now) -> dict[int, tuple[str, str, str]]:
    """Gangs still below `min_member` past their `schedule_timeout_seconds`: failed."""
    changed = {}
    for gang in gangs.values():
        if gang.timeout_seconds is None or gang.placed >= gang.min_member or gang.phase == PodGroup.FAILED:
            continue
        waited = (now - gang.created_at).total_seconds()
        if waited > gang.timeout_seconds:
            message = (
                f"{gang.placed}/{gang.min_member} members placed after {waited:.0f} s "
                f"(schedule timeout {gang.timeout_seconds} s)"
            )
            changed[gang.pk] = (PodGroup.FAILED, "ScheduleTimeout", message)
            gang.phase = PodGroup.FAILED
    return changed


def gang_verdicts(gangs: dict[int, GangState], attempts: list[Attempt]) -> dict[int, tuple[str, str, str]]:
    """Each gang's phase after planning: `inqueue` with the verdict when it is held back;
    `running` is set by the commit, which knows what it kept."""
    changed = {}
    for attempt in attempts:
        gang = gangs.get(attempt.group_id) if attempt.group_id is not None else None
        if gang is None or gang.pk in changed or gang.phase == PodGroup.FAILED:
            continue
        hold = attempt.decision.batch
        if hold is None:
            continue
        if hold.reason == NOT_ENOUGH_PODS:
            changed[gang.pk] = (PodGroup.PENDING, NOT_ENOUGH_PODS, hold.message)
        elif hold.reason in (GANG_UNSCHEDULABLE, QUEUE_LIMIT, NAMESPACE_QUOTA):
            changed[gang.pk] = (PodGroup.INQUEUE, hold.reason, hold.message)
    return changed


def restricted(snapshot: Snapshot, names: list[str]) -> Cluster:
    """The snapshot's nodes among `names`, with the running pods on them; a name hamiadmin
    does not know is a node without cards."""
    known = snapshot.cluster.by_name
    wanted = dict.fromkeys(names)
    return Cluster(
        [known[name] if name in known else EngineNode(name=name) for name in wanted],
        running=[pod for pod in snapshot.cluster.running if pod.node in wanted],
    )


def plan_one(
    row, names: list[str], trigger: str = "extender filter", spec: PodSpec | None = None
) -> CyclePlan:
    """A one-pod plan: `row` (a Pod) decided among the nodes `names` only, on a fresh snapshot;
    as `spec` says when given (the extender leaves some of its fields to kube-scheduler)."""
    started = time.perf_counter()
    snapshot = load_snapshot()
    scheduler = Scheduler(restricted(snapshot, names), snapshot.config)
    spec = spec or row.as_spec()
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
