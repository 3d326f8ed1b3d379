"""What-if for a whole job against the live cluster (issue 32; `engine.batch.whatif`): the
next cycle's queue book, namespace quotas, running tenants and open nominations, on a
snapshot of the request's own, after the what-if's edits. Nothing is written."""

from __future__ import annotations

from django.utils import timezone

from scheduling.engine import Scheduler
from scheduling.engine.batch.jobs import JobRunner
from scheduling.engine.batch.preempt import Preemptor, Tenants
from scheduling.engine.batch.whatif import JobAsk, decide_job
from scheduling.engine.model import PodSpec
from scheduling.engine.whatif import Edits, apply_edits

from . import preemption
from .batch import load_book, load_namespace_book
from .snapshot import load_snapshot


def job_whatif(pods: list[PodSpec], edits: Edits, job: JobAsk, top: int | None = None) -> dict:
    """(the pods' decisions, the job's answer) as the next cycle would decide the job now:
    `{"snapshot", "decisions", "job"}`; tenants on nodes the edits empty are gone."""
    now = timezone.now()
    snapshot = load_snapshot()
    cluster, config = apply_edits(snapshot.cluster, snapshot.config, edits)
    scheduler = Scheduler(cluster, config, keep=top)
    book = load_book()
    emptied = set(edits.empty)

    def tenants() -> Tenants:
        found = preemption.load_tenants(now)
        if not emptied:
            return found
        kept = [t for node, mine in found.by_node.items() if node not in emptied for t in mine]
        return Tenants(kept, found.gang_min, found.gang_budget, found.part_min)

    rules = preemption.rules()
    runner = JobRunner(
        scheduler,
        book,
        load_namespace_book(),
        preemptor=Preemptor(scheduler, book, tenants, rules) if rules.enabled else None,
        nominations=preemption.load_nominations(now),
    )
    decisions, answer = decide_job(runner, pods, job)
    return {
        "snapshot": {"nodes": len(cluster.nodes), "cards": sum(len(n.cards) for n in cluster.nodes)},
        "decisions": decisions,
        "job": answer,
    }
