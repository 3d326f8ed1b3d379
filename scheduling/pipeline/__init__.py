"""The batch scheduling pipeline: snapshot -> decide many pods in memory -> commit once.

- `cycle`: plan a cycle (snapshot and engine, memory only) and run it.
- `commit`: the one transaction that re-checks capacity under row locks and writes.
- `flight`: single-flight running of cycles on request (Celery tasks and the loop).
- `loop`: the in-process scheduler thread for setups without Celery.
- `housekeeping`: not-ready nodes, bounded history.
"""

from .cycle import CyclePlan, CycleReport, plan_cycle, run_cycle

__all__ = ["CyclePlan", "CycleReport", "plan_cycle", "run_cycle"]
