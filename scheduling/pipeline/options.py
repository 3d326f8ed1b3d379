"""The pipeline's knobs, read from settings.HAMIADMIN (which reads the environment)."""

from __future__ import annotations

from django.conf import settings

DEFAULTS = {
    "SINGLE_FLIGHT": True,
    # Node-pool shards (pipeline.pools).
    "NODE_POOLS": [],
    "NODE_POOL_LABEL": "hami.io/node-pool",
    "NODE_POOL": "",
    "CYCLE_MAX_PODS": 1000,
    "DECISION_TOP": 20,
    "CLOSEST_NODES": 5,
    "DECISIONS_PER_POD": 20,
    "BACKOFF_BASE_SECONDS": 0.5,
    "BACKOFF_MAX_SECONDS": 30.0,
    "LOOP_POLL_SECONDS": 0.5,
    "TRIGGER_DEBOUNCE_MS": 100,
    "HOUSEKEEPING_SECONDS": 30.0,
    "SAFETY_CYCLE_SECONDS": 5.0,
    "HEARTBEAT_TIMEOUT_SECONDS": 60.0,
    "CYCLE_LOCK": "auto",
    "CYCLE_LOCK_TIMEOUT_SECONDS": 3.0,
    # A holder that moves no lease deadline for this long loses the cycle lock (pipeline.locks).
    "CYCLE_LOCK_LEASE_SECONDS": 15.0,
    # The longest a commit waits for a row another transaction holds (PostgreSQL).
    "COMMIT_LOCK_TIMEOUT_MS": 2000,
    "CYCLES_KEPT": 10000,
    "FINISHED_PODS_KEPT_HOURS": 168.0,
    "FAULT_COMMIT_PAUSE_SECONDS": 0.0,
    # A job still unplaced after this long holds the nodes it came closest on, per cycle
    # (engine.jobs); empty or negative: never.
    "RESERVE_AFTER_SECONDS": 300.0,
    # Preemption and reclaim (engine.preempt, docs/preemption.md).
    "PREEMPTION": True,
    "RECLAIM": True,
    "PREEMPT_DRY_RUN": False,
    "PREEMPT_MIN_RUNTIME_SECONDS": 0.0,
    "PREEMPT_PROTECT_PRIORITY": 2_000_000_000,
    "PREEMPT_MAX_CARDS_PER_CYCLE": 64,
    "PREEMPT_GRACE_SECONDS": 120.0,
    "CONSOLIDATION": False,
    # The standing snapshot (pipeline.standing): kept between cycles, read whole this often.
    "SNAPSHOT_KEEP": True,
    "SNAPSHOT_REBUILD_SECONDS": 300.0,
    "GC_FREEZE": True,
    # A cycle's decision rows written after its commit, beside the next planning (decisionlog).
    "DECISIONS_AFTER_COMMIT": True,
}


def option(name: str):
    return getattr(settings, "HAMIADMIN", {}).get(name, DEFAULTS[name])
