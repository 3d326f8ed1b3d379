"""The in-process scheduler: a thread that runs cycles when woken and on a short poll.

Used where no Celery worker runs (`make run`, `manage.py schedule`). Writes in this process
wake it at once through `scheduling.pipeline.triggers`; the poll (LOOP_POLL_SECONDS) picks up pods
submitted or freed by other processes, and housekeeping runs every HOUSEKEEPING_SECONDS.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import close_old_connections, connection

from scheduling.pipeline import triggers

from .flight import run_requested_cycles
from .housekeeping import housekeeping
from .options import option

log = logging.getLogger(__name__)


class SchedulerLoop(threading.Thread):
    def __init__(self, poll: float | None = None, housekeeping_every: float | None = None, on_cycle=None):
        super().__init__(name="hamiadmin-scheduler", daemon=True)
        self.poll = poll if poll is not None else option("LOOP_POLL_SECONDS")
        self.housekeeping_every = (
            housekeeping_every if housekeeping_every is not None else option("HOUSEKEEPING_SECONDS")
        )
        self.on_cycle = on_cycle
        self.wakeup = threading.Event()
        self.stopping = threading.Event()
        self.cycles = 0

    def run(self) -> None:
        triggers.attach_local_loop(self.wakeup)
        last_housekeeping = time.monotonic()
        try:
            while not self.stopping.is_set():
                self.wakeup.clear()
                close_old_connections()
                try:
                    for report in run_requested_cycles("loop"):
                        self.cycles += 1
                        if self.on_cycle and report.considered:
                            self.on_cycle(report)
                    if time.monotonic() - last_housekeeping >= self.housekeeping_every:
                        last_housekeeping = time.monotonic()
                        housekeeping()
                except Exception:  # noqa: BLE001 - keep scheduling; the next cycle starts from the database
                    log.exception("scheduling cycle failed")
                    time.sleep(min(self.poll, 1.0))
                self.wakeup.wait(self.poll)
        finally:
            triggers.detach_local_loop(self.wakeup)
            connection.close()

    def stop(self, timeout: float = 10) -> None:
        self.stopping.set()
        self.wakeup.set()
        self.join(timeout)
