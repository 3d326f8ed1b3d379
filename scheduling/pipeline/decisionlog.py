"""A cycle's decision rows written after its commit, beside the next cycle's planning.

Why: a decision row carries the engine's explanation (~5-6 KB of JSON). Writing 1,000 of them
was the largest part of a cycle's commit on PostgreSQL (the server parses each into `jsonb`,
compresses it and indexes the row: 130-210 ms a 1,000-pod cycle, with the COMMIT's WAL flush
of them after), and the worker waited for it holding the pods' and cards' row locks (issue
29). Written by a thread of their own on its own connection once the commit is done, the
server does that work while the worker plans the next cycle.

What stays the same: the placement, the pod's status, reason, verdict and back-off, the
allocations and counters are the commit's, in one transaction. What is weaker: a worker that
dies between a commit and its decisions' write loses that cycle's decision rows (the pods
keep their reason and verdict); until they are written (one cycle at most) a pod's latest
decision is the one before. At most one write is in flight, and any other write of decisions
waits for it first, so a pod's decisions keep their order by id. A pod deleted (or a cycle
pruned) before its row is written loses that row only.

Only where it helps and is safe: on PostgreSQL, outside any transaction of the caller's (a
test's transaction holds rows no other connection sees), for a cycle of at least
`commit.DECISIONS_LATER_FROM` pods (a waking pod's small cycle writes its few rows at once)
that chose no victims (its evictions point at its decisions, in the commit), and while
`DECISIONS_AFTER_COMMIT` is on. The writer keeps its connection between the writes of a run
of cycles and closes it at the run's end. Callers that read decisions after a run of cycles
call `flush`; `run_requested_cycles` does before it lets the cycle lock go, so the next
holder's decisions come after these.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import DEFAULT_DB_ALIAS, IntegrityError, close_old_connections, connections, transaction

from ..models import Cycle, Pod
from .options import option

log = logging.getLogger(__name__)

#: How many times a write is tried when rows point at a pod or cycle gone meanwhile.
TRIES = 3


def deferrable() -> bool:
    """Whether decision rows may be written after their commit, from here, now."""
    db = connections[DEFAULT_DB_ALIAS]
    return bool(option("DECISIONS_AFTER_COMMIT")) and db.vendor == "postgresql" and not db.in_atomic_block


def _close_connection() -> None:
    """Close this thread's database connection (run on the writer thread)."""
    connections[DEFAULT_DB_ALIAS].close()


class DecisionLog:
    """The one writer thread of this process (made on first use, and again after a fork);
    `write` puts rows in, inside the transaction it is given (`commit.insert_rows`)."""

    def __init__(self, write: Callable[[list[dict]], None]) -> None:
        self._insert = write
        self._guard = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._pid = 0
        self._pending: Future | None = None
        #: rows written after their commit, and rows dropped (pod or cycle gone), since start
        self.written = 0
        self.dropped = 0

    def submit(self, rows: list[dict]) -> None:
        """Write `rows` (Decision fields by attribute name) on the writer thread, after any
        write still in flight."""
        if not rows:
            return
        self.flush()
        with self._guard:
            if self._executor is None or self._pid != os.getpid():
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hamiadmin-decisions")
                self._pid = os.getpid()
            self._pending = self._executor.submit(self._write, rows)

    def flush(self, close: bool = False) -> None:
        """Wait for the write in flight, if any (a write's failure is logged, never raised).
        `close`: then close the writer's connection too (kept open between a run's writes)."""
        if self._pid != os.getpid():  # made before a fork: that thread is not here
            return
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()
        if close and self._executor is not None:
            self._executor.submit(_close_connection).result()

    def _write(self, rows: list[dict]) -> None:
        close_old_connections()
        try:
            for _ in range(TRIES):
                try:
                    with transaction.atomic():
                        self._insert(rows)
                    self.written += len(rows)
                    return
                except IntegrityError:
                    rows = self._still_there(rows)
            log.error("%d decision rows not written: their pods kept going as they were written", len(rows))
            self.dropped += len(rows)
        except Exception:  # noqa: BLE001 - a lost explanation must not stop the scheduler
            log.exception("%d decision rows not written", len(rows))
            self.dropped += len(rows)
            _close_connection()

    def _still_there(self, rows: list[dict]) -> list[dict]:
        """`rows` less those whose pod is gone; a cycle gone is left unnamed."""
        pods = set(Pod.objects.filter(pk__in={row["pod_id"] for row in rows}).values_list("pk", flat=True))
        cycles = set(
            Cycle.objects.filter(pk__in={row["cycle_id"] for row in rows if row["cycle_id"]}).values_list(
                "pk", flat=True
            )
        )
        kept = [
            {**row, "cycle_id": row["cycle_id"] if row["cycle_id"] in cycles else None}
            for row in rows
            if row["pod_id"] in pods
        ]
        self.dropped += len(rows) - len(kept)
        return kept
