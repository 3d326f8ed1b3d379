"""Running cycles: `run_cycle` (plan, then commit) and, for whoever asked, one at a time
across all workers, `run_requested_cycles`.

The holder of the cycle lock keeps running cycles while there is a reason to: the queue
had more due pods than one cycle takes, a placement lost a race, or someone asked for a
cycle while this one ran (the request flag, see scheduling.pipeline.triggers). A caller that cannot
get the lock leaves: the holder sees its request. After releasing, the holder looks at the
flag once more, so a request made between its last look and the release is not lost.
"""

from __future__ import annotations

import logging
import time

from . import preemption, triggers
from .commit import commit_plan
from .cycle import plan_cycle
from .locks import cycle_lock
from .options import option
from .plan import CycleReport, worker_name

log = logging.getLogger(__name__)


def run_cycle(trigger: str = "", worker: str = "", limit: int | None = None) -> CycleReport:
    """Plan and commit one cycle. Cheap (one query) when nothing is due. After a commit, the
    victims it chose that hamiadmin runs itself are evicted, and evictions that ended are
    settled (housekeeping settles too, so a timed-out victim is noticed when all is idle)."""
    plan = plan_cycle(limit=limit, trigger=trigger, worker=worker or worker_name())
    if not plan.attempts:
        return CycleReport(duration_ms=(time.perf_counter() - plan.started) * 1000)
    report = commit_plan(plan)
    if report.evictions and preemption.hooks.carry_out is not None:
        preemption.hooks.carry_out(report.evictions)
    if preemption.hooks.settle is not None and option("PREEMPTION"):
        preemption.hooks.settle()
    return report


def run_requested_cycles(
    trigger: str = "requested", worker: str = "", max_cycles: int = 50
) -> list[CycleReport]:
    """Cycles until nothing more is asked for (or `max_cycles`, a guard against spinning)."""
    worker = worker or worker_name()
    reports: list[CycleReport] = []
    while len(reports) < max_cycles:
        with cycle_lock() as held:
            if not held:
                return reports
            while len(reports) < max_cycles:
                triggers.take_request()
                report = run_cycle(trigger=trigger, worker=worker)
                reports.append(report)
                if report.considered:
                    log.info(
                        "cycle %s (%s): %d considered, %d placed, %d pending, %d rejected, %d conflicts in %.0f ms",
                        report.cycle_id,
                        trigger,
                        report.considered,
                        len(report.placed),
                        len(report.pending),
                        len(report.rejected),
                        len(report.conflicts),
                        report.duration_ms,
                    )
                trigger = "follow-up"
                if not (report.more or triggers.take_request()):
                    break
        if not triggers.request_pending():
            break
    return reports
