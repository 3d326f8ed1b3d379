"""The plan of a cycle, as nouns: what was decided in memory (`CyclePlan` of `Attempt`s)
and what the commit then did (`CycleReport`). Like Volcano's Statement, the plan is made
by `cycle`, consumed by `commit`, and neither imports the other.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import datetime

from scheduling.engine import Decision as EngineDecision
from scheduling.engine.pod import ParsedPod
from scheduling.pipeline.snapshot import Snapshot


@dataclass
class Attempt:
    """One pod decided in this cycle, with what the commit needs to check and write it."""

    pod_id: int
    key: str
    revision: int
    attempts: int
    decision: EngineDecision
    parsed: ParsedPod | None = None
    #: The pod group (gang) it was placed with, and how many of the gang's placements in this
    #: cycle the commit must keep for any of them to be kept (0: not a gang, or no minimum left).
    group_id: int | None = None
    gang_needed: int = 0
    #: Its gang part, and per part how many of this cycle's placements must be kept
    #: (`engine.batch.jobs.Outcome.parts_needed`).
    part: str = ""
    parts_needed: dict = field(default_factory=dict)
    queue_id: int | None = None  # the leaf queue it was admitted to
    #: The tenants it evicts: (victim pod id, kind, why, node, card uuids); its decision is
    #: pending (`Preempting`) and `decision.preemption.grants` are the cards it is nominated to.
    victims: list[tuple[int, str, str, str, list[str]]] = field(default_factory=list)
    #: Tenants it moves (consolidation): (pod id, [(card uuid, MiB, cores)] at the new home).
    moves: list[tuple[int, list[tuple[str, int, int]]]] = field(default_factory=list)


@dataclass
class CyclePlan:
    """What a cycle decided in memory, not yet written."""

    snapshot: Snapshot | None
    attempts: list[Attempt]
    trigger: str = ""
    worker: str = ""
    started_at: datetime | None = None
    started: float = 0.0
    snapshot_ms: float = 0.0
    decide_ms: float = 0.0
    full: bool = False  # the queue had at least `limit` due pods: more may be waiting
    #: Pod groups whose phase this cycle's planning changed (pk -> (phase, reason, message)).
    groups: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    #: Keys of the pods nominated to cards when the cycle planned (their nominations go once placed).
    nominated: frozenset[str] = frozenset()
    #: `CapacityVersion` before the snapshot was read; None: back off regardless (one-pod plans).
    capacity_version: int | None = None


@dataclass
class CycleReport:
    """What a committed cycle did, for commands, logs and tests."""

    cycle_id: int | None = None
    considered: int = 0
    placed: list[tuple[str, str, str]] = field(default_factory=list)  # (pod, node, allocated)
    pending: list[tuple[str, str]] = field(default_factory=list)  # (pod, reason)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (pod, error)
    conflicts: list[tuple[str, str]] = field(default_factory=list)  # (pod, why)
    evictions: list[int] = field(default_factory=list)  # Eviction rows written
    skipped: list[str] = field(default_factory=list)  # changed since the snapshot
    more: bool = False  # worth running another cycle now
    snapshot_ms: float = 0.0
    decide_ms: float = 0.0
    commit_ms: float = 0.0
    duration_ms: float = 0.0


def worker_name() -> str:
    """Who ran a cycle, as recorded on it: host and process."""
    return f"{socket.gethostname()}:{os.getpid()}"
