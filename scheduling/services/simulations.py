"""Simulations sized before they run: small ones in the request, big ones in the background.

The engine's work for a scenario grows with pods x (nodes + cards): every pod is checked
against every node and card; plus what the chain's choices may take (topology-aware weighs
card combinations on every node for a multi-card container: `engine.cost`). Up to
SIMULATE_SYNC_MAX_WORK units the API answers in the request; up to SIMULATE_MAX_WORK it
queues a **job** and answers 202 with the job's URL; above that it refuses (413).

An estimate can be wrong, so the run itself is bounded too: one in the request stops after
SIMULATE_SYNC_SECONDS (`engine.budget`, a 413 naming it), and each web process runs at most
SIMULATE_SYNC_CONCURRENCY at once (the next is a 503 at once, never a web thread waiting),
so viewers cannot take every web thread from agents and probes.

A job runs in a Celery worker when REDIS_URL is set (queue SIMULATE_QUEUE, `simulations`,
which the shipped manifests give a worker of its own so a simulation never delays a
scheduling cycle; time limit SIMULATE_TIME_LIMIT_SECONDS); without Redis (the embedded
default) in one background thread of this process, one job at a time, under the same limit.
Its state and answer live in the "shared" cache for SIMULATE_RESULT_SECONDS: Redis, where web
and workers meet, or this process's memory. The answer is kept gzip-compressed, as the
finished document the result URL serves.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum

from celery import current_app
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.cache import caches
from django.utils import timezone

from scheduling.engine import budget
from scheduling.engine.cost import choice_work
from scheduling.engine.scenario import parse_scenario, run_scenario
from scheduling.pipeline.preemption import scenario_settings

log = logging.getLogger("hamiadmin.simulations")


class SimulationStatus(StrEnum):
    """Where a queued simulation job is (its state's `status`). The state keeps the plain
    value (`.value`), so what the cache holds reads the same without this class."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


STATUSES = tuple(status.value for status in SimulationStatus)


def option(name: str):
    return settings.HAMIADMIN[name]


@dataclass(frozen=True)
class Work:
    """How much the engine has to do for a scenario: pods x (nodes + cards) units, plus the
    steps the chain's choices may take (`engine.cost`)."""

    pods: int
    nodes: int
    cards: int
    choices: int = 0

    @property
    def units(self) -> int:
        return self.pods * (self.nodes + self.cards) + self.choices

    def __str__(self) -> str:
        checks = f"{self.pods} pods x ({self.nodes} nodes + {self.cards} cards)"
        if self.choices:
            checks += f" + {self.choices} card-choice steps (topology-aware combinations)"
        return f"{checks} = {self.units} work units"


def measure(raw) -> Work:
    """The work of a scenario as posted, before it is read; what is not a list counts 0 (the
    parser refuses it). Cheap, so a huge scenario is refused before it is parsed."""
    if not isinstance(raw, dict):
        return Work(0, 0, 0)
    listed_nodes, listed_pods = raw.get("nodes"), raw.get("pods")
    nodes: list = listed_nodes if isinstance(listed_nodes, list) else []
    pods: list = listed_pods if isinstance(listed_pods, list) else []
    cards: int = sum(
        len(node["devices"])
        for node in nodes
        if isinstance(node, dict) and isinstance(node.get("devices"), list)
    )
    return Work(pods=len(pods), nodes=len(nodes), cards=cards)


def weigh(raw) -> Work:
    """`measure` plus the chain's choices, read from the parsed scenario. Raises
    ScenarioProblems for a malformed one (the caller's 400)."""
    work = measure(raw)
    cluster, config, pods = parse_scenario(raw)
    return Work(work.pods, work.nodes, work.cards, choice_work(cluster, config, pods))


class SimulationsBusy(Exception):
    """This process already runs SIMULATE_SYNC_CONCURRENCY simulations in requests."""


_sync_slots: tuple[int, threading.BoundedSemaphore] | None = None


def _slots() -> threading.BoundedSemaphore:
    """The process's SIMULATE_SYNC_CONCURRENCY slots (made again when the setting changes)."""
    global _sync_slots
    wanted = max(1, option("SIMULATE_SYNC_CONCURRENCY"))
    with _runner_lock:
        if _sync_slots is None or _sync_slots[0] != wanted:
            _sync_slots = (wanted, threading.BoundedSemaphore(wanted))
        return _sync_slots[1]


def run_now(raw, top: int | None) -> dict:
    """A simulation answered in the request: at most SIMULATE_SYNC_CONCURRENCY at once in this
    process (else SimulationsBusy at once), each stopped after SIMULATE_SYNC_SECONDS
    (`budget.OverBudget`)."""
    slots = _slots()
    if not slots.acquire(blocking=False):
        raise SimulationsBusy(
            f"{option('SIMULATE_SYNC_CONCURRENCY')} simulations already run in this process "
            "(HAMI_SIMULATE_SYNC_CONCURRENCY); try again shortly"
        )
    try:
        with budget.deadline(option("SIMULATE_SYNC_SECONDS"), "HAMI_SIMULATE_SYNC_SECONDS"):
            return run_scenario(raw, top=top, **scenario_settings())
    finally:
        slots.release()


# --- jobs ---------------------------------------------------------------------------------


def _key(job: str) -> str:
    return f"simulation:{job}"


def _now() -> str:
    return timezone.now().isoformat()


def _save(job: str, state: dict) -> None:
    caches["shared"].set(_key(job), state, option("SIMULATE_RESULT_SECONDS"))


SIMULATE_TASK = "scheduling.simulate"


def submit(raw: dict, top: int | None, owner: int, work: Work) -> dict:
    """Queue a validated scenario; the job's state (`id`, `status`, `work`, ...)."""
    job = uuid.uuid4().hex
    state = {
        "id": job,
        "status": SimulationStatus.QUEUED.value,
        "owner": owner,
        "work": work.units,
        "submitted_at": _now(),
        "started_at": None,
        "finished_at": None,
        "error": None,
    }
    _save(job, state)
    if settings.REDIS_URL:
        limit = option("SIMULATE_TIME_LIMIT_SECONDS")
        current_app.send_task(  # by name: scheduling.tasks imports this module, not the other way
            SIMULATE_TASK,
            (job, raw, top),
            queue=option("SIMULATE_QUEUE"),
            soft_time_limit=limit,
            time_limit=limit + 10,
            expires=option("SIMULATE_RESULT_SECONDS"),
        )
    else:
        _local_runner().submit(run, job, raw, top)
    return state


def run(job: str, raw: dict, top: int | None) -> None:
    """Run a queued job and keep its answer (or why it failed) under its id."""
    state = read(job)
    if state is None:
        log.warning("simulation %s expired before it ran", job)
        return
    state.update(status=SimulationStatus.RUNNING.value, started_at=_now())
    _save(job, state)
    limit = option("SIMULATE_TIME_LIMIT_SECONDS")
    try:
        with budget.deadline(limit, "HAMI_SIMULATE_TIME_LIMIT_SECONDS"):
            result = run_scenario(raw, top=top, **scenario_settings())
    except (SoftTimeLimitExceeded, budget.OverBudget):
        log.warning("simulation %s stopped after %s s (HAMI_SIMULATE_TIME_LIMIT_SECONDS)", job, limit)
        state.update(
            status=SimulationStatus.FAILED.value,
            finished_at=_now(),
            error=f"stopped after {limit} s (HAMI_SIMULATE_TIME_LIMIT_SECONDS)",
        )
        _save(job, state)
        return
    except Exception as exc:  # noqa: BLE001 - the submitter reads why, the log keeps the trace
        log.exception("simulation %s failed", job)
        state.update(
            status=SimulationStatus.FAILED.value,
            finished_at=_now(),
            error=f"{type(exc).__name__}: {exc}"[:1000],
        )
        _save(job, state)
        return
    state.update(status=SimulationStatus.DONE.value, finished_at=_now())
    document = json.dumps({**public(state), "result": result}, separators=(",", ":")).encode()
    state["document"] = gzip.compress(document, compresslevel=5)
    _save(job, state)
    log.info("simulation %s done: %d pods, %d bytes", job, len(result["pods"]), len(document))


def read(job: str) -> dict | None:
    """A job's state (with `document`, the gzip-compressed answer, once done), or None."""
    return caches["shared"].get(_key(job))


def public(state: dict) -> dict:
    """What the result URL shows of a job's state."""
    return {
        key: state[key]
        for key in ("id", "status", "work", "submitted_at", "started_at", "finished_at", "error")
    }


_runner: ThreadPoolExecutor | None = None
_runner_lock = threading.Lock()


def _local_runner() -> ThreadPoolExecutor:
    """One background thread of this process (embedded default: no worker to send jobs to)."""
    global _runner
    with _runner_lock:
        if _runner is None:
            _runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="simulation")
        return _runner
