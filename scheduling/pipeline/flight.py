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

from django.db import DatabaseError

from scheduling.dbretry import lock_wait_ran_out

from . import collector, preemption, triggers, wake
from .commit import DECISIONS, commit_plan
from .cycle import plan_cycle
from .locks import cycle_lock, keep_alive
from .options import option
from .plan import CycleReport, worker_name
from .settle import settle_before_cycle
from .standing import STANDING

log = logging.getLogger(__name__)


def run_cycle(
    trigger: str = "",
    worker: str = "",
    limit: int | None = None,
    defer_decisions: bool = False,
    capacity_version: int | None = None,
) -> CycleReport:
    """Plan and commit one cycle. Cheap (one query) when nothing is due. After a commit, the
    victims it chose that hamiadmin runs itself are evicted, and evictions that ended are
    settled (housekeeping settles too, so a timed-out victim is noticed when all is idle).
    `defer_decisions`: the decision rows may be written after the commit (`decisionlog`);
    the caller then flushes them (`DECISIONS.flush`) before it reads them. `capacity_version`:
    the version read just before (`settle.settle_before_cycle`), which the cycle's wake then
    need not read again."""
    with collector.paused():  # the next refresh freezes what the cycle left (`collector`)
        plan = plan_cycle(
            limit=limit, trigger=trigger, worker=worker or worker_name(), capacity_version=capacity_version
        )
        if not plan.attempts:
            return CycleReport(duration_ms=(time.perf_counter() - plan.started) * 1000)
        keep_alive()  # before the commit's transaction, where a lease write would stay unseen
        return _commit(plan, defer_decisions)


def _commit(plan, defer_decisions: bool) -> CycleReport:
    """`run_cycle`'s commit of a plan with attempts, and what follows it."""
    try:
        report = commit_plan(plan, defer=defer_decisions)
    except DatabaseError as exc:
        if not lock_wait_ran_out(exc):
            raise
        # a row stayed locked past COMMIT_LOCK_TIMEOUT_MS: the commit rolled back whole;
        # plan again from the database (the kept snapshot holds this plan's placements)
        log.warning("a cycle's commit waited too long for a row lock; planning again: %s", exc)
        STANDING.spoil()
        return CycleReport(
            considered=len(plan.attempts), more=True, duration_ms=(time.perf_counter() - plan.started) * 1000
        )
    if report.placed and wake.SEEN.woken:
        report.more = True  # a wake left pods of a fitting spec asleep: look again now
    if report.evictions and preemption.hooks.carry_out is not None:
        preemption.hooks.carry_out(report.evictions)
    if preemption.hooks.settle is not None and option("PREEMPTION"):
        preemption.hooks.settle()
    return report


def run_requested_cycles(
    trigger: str = "requested", worker: str = "", max_cycles: int = 50
) -> list[CycleReport]:
    """Cycles until nothing more is asked for (or `max_cycles`, a guard against spinning),
    each after settling the decrements releases owe (`settle.settle_before_cycle`: one query
    on PostgreSQL when nothing is owed, which reads the capacity version too; none
    elsewhere), so its wake sees the capacity they free; a release that only owes asks for a
    cycle for that. A cycle's decision rows are
    written beside the next one's planning (`decisionlog`), all of them before the cycle lock
    is let go: the next holder's decisions come after them."""
    worker = worker or worker_name()
    reports: list[CycleReport] = []
    while len(reports) < max_cycles:
        with cycle_lock() as held:
            if not held:
                return reports
            try:
                kept = _cycles_while_held(held, reports, trigger, worker, max_cycles)
            finally:
                DECISIONS.flush(close=True)
            if not kept:
                log.warning("this worker lost the cycle lock's lease; leaving the cycles to others")
                return reports
        if not triggers.request_pending():
            break
    return reports


def _cycles_while_held(held, reports: list[CycleReport], trigger: str, worker: str, max_cycles: int) -> bool:
    """Cycles under one holding of the cycle lock, their reports appended to `reports` (the
    run's first is `trigger`'s, the rest follow-ups); False when the lock's lease was lost."""
    while len(reports) < max_cycles:
        if not held.renew():
            return False
        triggers.take_request()
        # what releases owe (`settle`): capacity this cycle's wake then sees
        version = settle_before_cycle()
        why = "follow-up" if reports else trigger
        report = run_cycle(trigger=why, worker=worker, defer_decisions=True, capacity_version=version)
        reports.append(report)
        if report.considered:
            log.info(
                "cycle %s (%s): %d considered, %d placed, %d pending, %d rejected, %d conflicts in %.0f ms",
                report.cycle_id,
                why,
                report.considered,
                len(report.placed),
                len(report.pending),
                len(report.rejected),
                len(report.conflicts),
                report.duration_ms,
            )
        if not (report.more or triggers.take_request()):
            break
    return True
