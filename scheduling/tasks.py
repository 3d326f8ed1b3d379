"""Celery tasks: cycles on request and on a safety period, and housekeeping.

Cycles are single-flight (scheduling.pipeline.locks), so any number of workers may take these
tasks; a task that finds the lock held leaves its request to the holder.
"""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task
from celery.signals import worker_ready

from scheduling import services
from scheduling.pipeline import pools, triggers
from scheduling.services import simulations

from .pipeline.flight import run_requested_cycles
from .pipeline.housekeeping import housekeeping as run_housekeeping


def _summary(reports) -> dict:
    return {
        "cycles": sum(1 for report in reports if report.considered),
        "placed": sum(len(report.placed) for report in reports),
        "pending": sum(len(report.pending) for report in reports),
    }


@shared_task(name=triggers.RUN_CYCLE_TASK, ignore_result=True)
def run_cycle(trigger: str = "requested") -> dict:
    """Sent (debounced) by writes that change what can be placed; see scheduling.pipeline.triggers."""
    triggers.clear_queued()
    return _summary(run_requested_cycles(str(trigger)[:100]))


@shared_task(name="scheduling.safety_cycle", ignore_result=True)
def safety_cycle() -> dict:
    """Every SAFETY_CYCLE_SECONDS from beat: catches lost triggers and expired back-offs."""
    return _summary(run_requested_cycles("safety"))


@shared_task(name="scheduling.housekeeping", ignore_result=True)
def housekeeping() -> dict:
    """Not-ready nodes, bounded history and the consistency check; drift it finds (ghost
    allocations, counters off their allocations, placements holding no card) is repaired."""
    done = run_housekeeping()
    if any(key.startswith("drift_") for key in done):
        repair = services.repair_consistency(actor="housekeeping")
        done["repaired"] = asdict(repair)
    return done


@shared_task(name=simulations.SIMULATE_TASK, ignore_result=True)
def simulate(job: str, scenario: dict, top: int | None = None) -> None:
    """A scenario too big to answer in the request (POST simulate/ said 202); see scheduling.simulations."""
    simulations.run(job, scenario, top)


@worker_ready.connect
def catch_up(sender=None, **kwargs) -> None:
    """A starting worker runs a cycle: whatever a dead worker left pending is picked up. A
    node pool's planner asks on its pool's queue (`pipeline.pools`)."""
    run_cycle.apply_async(("worker started",), queue=pools.pool_queue(pools.current()))
