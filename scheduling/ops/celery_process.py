"""What every Celery process adds for operations: heartbeat files and a metrics port.

- Worker: a consumer bootstep touches the worker heartbeat file every
  HAMI_WORKER_HEARTBEAT_SECONDS (10) from the consumer's timer, which runs in the
  worker's main loop: a loop that hangs, or a worker that lost its broker, stops touching it.
- Beat: `HeartbeatScheduler` (settings CELERY_BEAT_SCHEDULER) touches the beat heartbeat
  file on every tick; beat ticks at least every SAFETY_CYCLE_SECONDS here.
- Logs: the project's LOGGING (JSON lines in production) instead of Celery's format;
  LOG_LEVEL, when set, wins over `-l`.
- Metrics: with HAMI_METRICS_PORT set, the process that runs tasks serves its counters
  and histograms there (scheduling.ops.metrics.serve_from_env): the prefork child, or the
  worker itself for the solo and thread pools.

`python -m scheduling.ops.liveness` reads the heartbeat files. Imported by hamiadmin.celery,
before Django is set up: no model imports here.
"""

from __future__ import annotations

import logging
import logging.config
import os
import time

from celery import bootsteps
from celery.beat import PersistentScheduler
from celery.signals import setup_logging, worker_init, worker_process_init

from scheduling.ops import liveness, metrics

log = logging.getLogger("hamiadmin.liveness")

HEARTBEAT_SECONDS = 10.0
FORKING_POOLS = ("prefork", "processes")


def heartbeat_seconds() -> float:
    try:
        return max(0.05, float(os.environ.get("HAMI_WORKER_HEARTBEAT_SECONDS", "") or HEARTBEAT_SECONDS))
    except ValueError:
        return HEARTBEAT_SECONDS


def _touch(role: str) -> None:
    path = liveness.heartbeat_file(role)
    try:
        liveness.touch(path)
    except OSError as exc:
        log.warning("%s heartbeat file %s not touched: %s", role, path, exc.strerror or exc)


class WorkerHeartbeat(bootsteps.StartStopStep):
    """Touch the worker heartbeat file while the consumer runs."""

    label = "hamiadmin heartbeat file"

    def __init__(self, parent, **kwargs):
        self.tref = None
        super().__init__(parent, **kwargs)

    def start(self, parent):
        _touch("worker")
        self.tref = parent.timer.call_repeatedly(heartbeat_seconds(), _touch, ("worker",), priority=10)

    def stop(self, parent):
        if self.tref is not None:
            parent.timer.cancel(self.tref)
            self.tref = None

    shutdown = stop


class HeartbeatScheduler(PersistentScheduler):
    """Celery's persistent scheduler that also touches the beat heartbeat file on each tick."""

    touched = 0.0

    def tick(self, *args, **kwargs):
        now = time.monotonic()
        if now - self.touched >= 1.0:  # tick can run many times a second when tasks are due
            self.touched = now
            _touch("beat")
        return super().tick(*args, **kwargs)


@setup_logging.connect
def use_project_logging(loglevel=None, **kwargs) -> None:
    """Connected, so Celery leaves the root logger to settings.LOGGING (worker and beat)."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    if loglevel and not os.environ.get("LOG_LEVEL"):
        logging.getLogger().setLevel(loglevel)


@worker_init.connect
def serve_worker_metrics(sender=None, **kwargs) -> None:
    """Thread and green pools run tasks in this process: serve its metrics. A forking pool
    runs them in its children, which serve theirs on worker_process_init instead."""
    pool = getattr(sender, "pool_cls", None)
    name = pool if isinstance(pool, str) else getattr(pool, "__module__", "") or ""
    if not any(word in name for word in (*FORKING_POOLS, "solo")):
        metrics.serve_from_env("worker")


@worker_process_init.connect
def serve_pool_process_metrics(**kwargs) -> None:
    """A prefork child (or the solo pool, in the worker itself) runs the tasks: serve here."""
    metrics.serve_from_env("worker process")


def install(app) -> None:
    app.steps["consumer"].add(WorkerHeartbeat)
