"""The batch scheduling pipeline: snapshot -> decide many pods in memory -> commit once.

- `snapshot`: the cluster and the due pods, read in a few queries.
- `plan`: the nouns: `Attempt`, `CyclePlan` (decided in memory), `CycleReport` (committed).
- `cycle`: plan a cycle (snapshot and engine, memory only), or one pod among given nodes.
- `commit`: the one transaction that re-checks capacity under row locks and writes.
- `observe`: the metrics and log lines of a commit.
- `flight`: `run_cycle` (plan + commit) and single-flight running of cycles on request.
- `triggers` and `locks`: asking for a cycle (Redis flag + Celery task by name), the cycle lock.
- `loop`: the in-process scheduler thread for setups without Celery.
- `housekeeping`: not-ready nodes, bounded history.
"""

from .cycle import plan_cycle
from .flight import run_cycle
from .plan import CyclePlan, CycleReport

__all__ = ["CyclePlan", "CycleReport", "plan_cycle", "run_cycle"]
