"""Prometheus metrics: the series are defined here, once.

Two kinds, kept apart on purpose:

- **Events** (counters, histograms) are recorded by the process where they happen: the
  commit of a cycle (`pipeline.observe`) and the kube binder. Celery workers and the kube
  agent serve theirs on `HAMI_METRICS_PORT`; the web process serves its own on `/metrics`
  (everything, in the embedded setup where cycles run in the web process).
- **Cluster state** (pending pods, card usage and capacity, report age) is read from the
  database when `/metrics` is scraped (`scheduling.ops.scrape`), so it is right whichever
  process scheduled, and the workers never export it twice.

Label values are bounded: reasons are the SPEC 4 codes plus a few fixed words, outcomes
the four decision outcomes; only the per-card and per-node gauges grow with the cluster.
"""

from __future__ import annotations

import logging
import os

from prometheus_client import Counter, Histogram
from prometheus_client import start_http_server as _start_http_server

from scheduling.engine import reasons as codes
from scheduling.engine.batch.jobs import BATCH_REASONS
from scheduling.engine.decision import OUTCOMES

log = logging.getLogger(__name__)

PORT_ENV = "HAMI_METRICS_PORT"
MIB = 1024 * 1024
#: The classic text format that generate_latest writes (every Prometheus 2 and 3 reads it).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: SPEC 4 reason codes, the only reasons the engine writes into a decision's summary, and the
#: batch reasons (gang, queue, quota) that keep a pod pending whatever its cards say.
REASON_CODES = codes.CODES | frozenset(BATCH_REASONS)
NONE = "none"  # scheduled
NO_NODES = "NoNodes"  # pending with no node at all to look at
OTHER = "Other"  # anything outside the fixed set (never a free text label)
INVALID = "InvalidSpec"  # rejected: the spec does not parse, parked until it changes
NO_GPU = "NoGPURequest"  # rejected for good: asks no GPU (SPEC 2)
SCHEDULER_ERROR = "SchedulerError"  # rejected: the engine failed on this pod

SCHEDULING_ATTEMPTS = Counter(
    "hamiadmin_scheduling_attempts",
    "Decisions committed, by outcome and reason. A pending decision counts once for each "
    "reason code in its summary; scheduled decisions have reason 'none'.",
    ["outcome", "reason"],
)
CYCLE_DURATION = Histogram(
    "hamiadmin_cycle_duration_seconds",
    "Wall time of a committed cycle with at least one pod: queue, snapshot, engine, commit.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
GANG_WAIT = Histogram(
    "hamiadmin_gang_wait_seconds",
    "Time from a pod group's creation to the commit that gave min_member of its pods cards.",
    buckets=(0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 14400),
)
DECISION_DURATION = Histogram(
    "hamiadmin_decision_duration_seconds",
    "Engine time to decide one pod (filter and score every node), by outcome.",
    ["outcome"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)
BIND_FAILURES = Counter(
    "hamiadmin_bind_failures",
    "Placements Kubernetes did not take: the API refused the binding or the annotations "
    "('refused'), or the pod was bound to another node ('bound_elsewhere').",
    ["reason"],
)
BIND_REASONS = ("refused", "bound_elsewhere")
AUTH_FAILURES = Counter(
    "hamiadmin_auth_failures",
    "Credentials refused in the web process, by kind: sign-in forms ('login', 'admin'), API "
    "tokens ('api'), extender tokens ('extender'), metrics tokens ('metrics').",
    ["kind"],
)
AUTH_THROTTLED = Counter(
    "hamiadmin_auth_throttled",
    "Attempts answered 429 because their client address had too many failed credentials, by kind.",
    ["kind"],
)
#: What a credential was for (hamiadmin/auth_failures.py); the only values of `kind`.
AUTH_KINDS = ("login", "admin", "api", "extender", "metrics")
DB_RETRIES = Counter(
    "hamiadmin_db_retries",
    "Transactions run again because PostgreSQL aborted them as a deadlock victim ('deadlock') "
    "or for a serialization failure ('serialization'). The lock order should keep this at 0.",
    ["kind"],
)
ADMISSIONS = Counter(
    "hamiadmin_webhook_admissions",
    "AdmissionReviews answered by the admission webhook (kube/webhook), by webhook ('mutate', "
    "'validate') and outcome: 'patched' or 'unchanged' (mutate), 'allowed', 'warned' (allowed "
    "with warnings) or 'denied' (validate), 'skipped' (not a GPU pod of this scheduler, not a "
    "create), 'malformed' (not an AdmissionReview), 'error' (answered allowed after a failure).",
    ["webhook", "outcome"],
)
#: The only label values of ADMISSIONS.
WEBHOOKS = ("mutate", "validate")
ADMISSION_OUTCOMES = ("patched", "unchanged", "allowed", "warned", "denied", "skipped", "malformed", "error")
CARD_CLAIMS_REFUSED = Counter(
    "hamiadmin_refused_card_claims",
    "Cards an agent reported that belong to another node; refused card by card (see the events).",
)

CONSISTENCY_KINDS = (
    "counter_drift",
    "over_capacity",
    "ghost_allocation",
    "unbacked_placement",
    "unknown_bound_pod",
    "vanished_pod",
)
CONSISTENCY_FOUND = Counter(
    "hamiadmin_consistency_findings",
    "Drift found by the consistency check (housekeeping, manage.py check_consistency), by kind: "
    "counters that differ from the allocations, cards over capacity, allocations held for a "
    "pod that is not placed (ghosts), placed pods holding no card; with the kube agent or "
    "--kubernetes, pods bound in Kubernetes but not placed here and placed pods Kubernetes "
    "no longer has. Should stay at 0.",
    ["kind"],
)
CONSISTENCY_REPAIRED = Counter(
    "hamiadmin_consistency_repairs",
    "Drift repaired by manage.py check_consistency --repair (or the housekeeping), by kind.",
    ["kind"],
)

#: HAMi's vGPU monitor read by the kube agent (kube/vgpumonitor.py), by outcome.
VGPU_MONITOR_OUTCOMES = ("read", "unreachable", "no_monitor", "bad_line", "unknown_card", "refused")
VGPU_MONITOR_READS = Counter(
    "hamiadmin_vgpu_monitor_reads",
    "HAMi vGPU monitor reads by the kube agent (HAMI_VGPU_MONITOR), by outcome: monitors read, "
    "monitors that did not answer, HAMi nodes without a running monitor pod, lines that did "
    "not parse, card UUIDs not of the node, cards whose values were out of range.",
    ["outcome"],
)


def vgpu_monitor_read(outcome: str, count: int = 1) -> None:
    VGPU_MONITOR_READS.labels(outcome if outcome in VGPU_MONITOR_OUTCOMES else OTHER).inc(count)


def consistency_found(kind: str, count: int) -> None:
    CONSISTENCY_FOUND.labels(kind if kind in CONSISTENCY_KINDS else OTHER).inc(count)


def consistency_repaired(kind: str, count: int) -> None:
    CONSISTENCY_REPAIRED.labels(kind if kind in CONSISTENCY_KINDS else OTHER).inc(count)


def count_claim_refused() -> None:
    CARD_CLAIMS_REFUSED.inc()


def _initialise_series() -> None:
    """Create the known label sets at 0, so rate() sees the first increment."""
    SCHEDULING_ATTEMPTS.labels("scheduled", NONE)
    for reason in (*sorted(REASON_CODES), NO_NODES, OTHER):
        SCHEDULING_ATTEMPTS.labels("pending", reason)
    for reason in (INVALID, NO_GPU, SCHEDULER_ERROR):
        SCHEDULING_ATTEMPTS.labels("rejected", reason)
    for outcome in OUTCOMES:
        DECISION_DURATION.labels(outcome)
    for reason in BIND_REASONS:
        BIND_FAILURES.labels(reason)
    for kind in AUTH_KINDS:
        AUTH_FAILURES.labels(kind)
        AUTH_THROTTLED.labels(kind)
    for kind in ("deadlock", "serialization"):
        DB_RETRIES.labels(kind)
    for webhook in WEBHOOKS:
        for outcome in ADMISSION_OUTCOMES:
            ADMISSIONS.labels(webhook, outcome)
    for kind in CONSISTENCY_KINDS:
        CONSISTENCY_FOUND.labels(kind)
        CONSISTENCY_REPAIRED.labels(kind)
    for outcome in VGPU_MONITOR_OUTCOMES:
        VGPU_MONITOR_READS.labels(outcome)


_initialise_series()


def reason_code(text: str) -> str:
    """A reason label from a code; anything else becomes OTHER, so labels stay bounded."""
    return text if text in REASON_CODES else OTHER


def observe_gang_wait(seconds: float) -> None:
    GANG_WAIT.observe(max(0.0, seconds))


def bind_failed(reason: str) -> None:
    BIND_FAILURES.labels(reason if reason in BIND_REASONS else OTHER).inc()


def admission(webhook: str, outcome: str) -> None:
    """One AdmissionReview answered; unknown values become OTHER, so labels stay bounded."""
    ADMISSIONS.labels(
        webhook if webhook in WEBHOOKS else OTHER, outcome if outcome in ADMISSION_OUTCOMES else OTHER
    ).inc()


def auth_failed(kind: str) -> None:
    AUTH_FAILURES.labels(kind if kind in AUTH_KINDS else OTHER).inc()


def auth_throttled(kind: str) -> None:
    AUTH_THROTTLED.labels(kind if kind in AUTH_KINDS else OTHER).inc()


# --- a port for processes without the web app (Celery workers, the kube agent) --------

_served: dict[int, int] = {}  # pid -> port: one server per process, also after a fork


def metrics_port() -> int | None:
    """HAMI_METRICS_PORT as a port number; None when unset or empty (no server)."""
    value = os.environ.get(PORT_ENV, "").strip()
    if not value:
        return None
    try:
        port = int(value)
    except ValueError:
        raise ValueError(f"{PORT_ENV}: not a port number: {value!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"{PORT_ENV}: not a port number: {value!r}")
    return port


def serve_from_env(who: str = "process") -> int | None:
    """Serve this process's event series on HAMI_METRICS_PORT, if set. The port, or None.

    A port already taken (a second prefork child) is logged, not fatal: scheduling goes on.
    """
    try:
        port = metrics_port()
    except ValueError as exc:
        log.error("metrics not served: %s", exc)
        return None
    if port is None:
        return None
    pid = os.getpid()
    if pid in _served:
        return _served[pid]
    try:
        _start_http_server(port, addr=os.environ.get("HAMI_METRICS_ADDR", "0.0.0.0"))
    except OSError as exc:
        log.warning(
            "metrics not served on port %d for %s %d: %s (one process per worker pod: "
            "--concurrency 1, or --pool solo/threads)",
            port,
            who,
            pid,
            exc.strerror or exc,
        )
        return None
    _served[pid] = port
    log.info("metrics of %s %d served on port %d", who, pid, port)
    return port
