"""What-if for a whole job (issue 32): would this gang start now, where, and whom would it
evict? The pods of a what-if with a `job` are one job, decided as the next cycle would decide
it (`JobRunner`: its queue, its priority, all-or-nothing up to `min_member`, preemption and
reclaim over the running tenants, the open nominations held), on a snapshot of its own.

    {"pods": [...], "job": {"name": "train", "namespace": "ml", "queue": "research",
                            "priority": 100, "min_member": 4,
                            "subgroups": {"master": 1, "worker": 3}}}

Every field of `job` is optional: `name` "whatif", the first pod's namespace, the queue the
pods name (else their namespace's, else `default`), priority 0, `min_member` every pod, no
`subgroups` (the job's parts and each one's own minimum; a pod's part is read from its labels
as a cycle reads it, `annotations.subgroup_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..decision import SCHEDULED, Decision
from ..errors import Problems, ScenarioError
from ..model import PodSpec
from .jobs import Gang, GangTerms, JobRunner, Member, Pending, assemble_jobs
from .scenario import parse_priority, parse_subgroups

JOB_KEYS = ("name", "namespace", "queue", "priority", "min_member", "subgroups")


@dataclass(frozen=True)
class JobAsk:
    """The job a what-if's pods form."""

    name: str = "whatif"
    namespace: str | None = None
    queue: str | None = None
    priority: int = 0
    min_member: int | None = None
    subgroups: tuple[tuple[str, int], ...] = ()


def parse_job(raw: object) -> JobAsk | None:
    """A what-if's `job` (None when it has none); raises ScenarioProblems naming every bad field."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ScenarioError("job", f"must be an object of {', '.join(JOB_KEYS)}")
    found = Problems()
    for key in raw:
        if key not in JOB_KEYS:
            found.note(f"job.{key}", f"unknown field (known: {', '.join(JOB_KEYS)})")
    texts = {}
    for key in ("name", "namespace", "queue"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            found.note(f"job.{key}", f"must be a non-empty name, got {value!r}")
        texts[key] = value.strip() if isinstance(value, str) and value.strip() else None
    priority = found.check(parse_priority, raw.get("priority", 0), "job.priority")
    least = raw.get("min_member")
    if least is not None and (isinstance(least, bool) or not isinstance(least, int) or least < 1):
        found.note("job.min_member", f"must be a whole number >= 1, got {least!r}")
    subgroups = parse_subgroups(raw.get("subgroups"), "job.subgroups", found)
    found.raise_any()
    return JobAsk(
        name=texts["name"] or "whatif",
        namespace=texts["namespace"],
        queue=texts["queue"],
        priority=priority or 0,
        min_member=least,
        subgroups=subgroups,
    )


def decide_job(runner: JobRunner, pods: list[PodSpec], job: JobAsk) -> tuple[list, dict]:
    """The pods decided as one job by `runner` (its scheduler a snapshot of the caller's own,
    which this changes): (a decision per pod, in order; the job's answer: whether it starts,
    how many members are placed of `min_member`, its verdict and the evictions it causes)."""
    namespace = job.namespace or (pods[0].namespace if pods else "default")
    pods = [spec if spec.namespace == namespace else replace(spec, namespace=namespace) for spec in pods]
    least = min(job.min_member or len(pods), len(pods)) if pods else 0
    gang = Gang(f"{namespace}/{job.name}", least, len(pods), subgroups=dict(job.subgroups))
    least = gang.min_member  # at least its parts' minimums together
    terms = GangTerms(gang, job.queue, job.priority, (0,))
    pending = [Pending(Member(spec, i), job.priority, (i,), group=terms) for i, spec in enumerate(pods)]
    config = runner.scheduler.config
    jobs, refused = assemble_jobs(pending, runner.book, config)
    decided: dict[object, Decision] = {member.ref: decision for member, decision in refused}
    evictions: list[dict] = []
    verdict = None
    queue = jobs[0].queue if jobs else None
    for outcome in runner.run(jobs):
        decided[outcome.member.ref] = outcome.decision
        preemption = outcome.decision.preemption
        if outcome.victims and preemption is not None:
            evictions += [
                {"by": outcome.member.spec.key, **victim.as_dict()} for victim in preemption.victims
            ]
        if verdict is None and outcome.decision.status != SCHEDULED:
            verdict = outcome.decision.reason_text()
    for _, decision in refused:
        verdict = verdict or decision.reason_text()
    decisions = [decided[i] for i in range(len(pods))]
    placed = sum(1 for decision in decisions if decision.status == SCHEDULED)
    preempting = sum(1 for d in decisions if d.preemption is not None and not d.preemption.tried)
    answer = {
        "name": gang.key,
        "queue": queue,
        "priority": job.priority,
        "min_member": least,
        "subgroups": dict(job.subgroups),
        "members": len(pods),
        "placed": placed,
        "starts": placed >= least > 0,
        "starts_after_evictions": placed < least <= placed + preempting and bool(evictions),
        "verdict": None if placed >= least > 0 else verdict,
        "evictions": evictions,
    }
    return decisions, answer
