"""What a committed cycle tells operators: metrics and one log line per decision.

Called once per commit (pipeline.commit), after the transaction, with the outcome the
commit gave each attempt, so the numbers and the lines match what was written.

Log lines (logger `hamiadmin.decisions`), fields passed as `extra` for the JSON formatter:
- INFO per decision: pod, outcome, node, cards (UUIDs), chain (the pod's GPU chain),
  duration_ms (engine time), reason (the one-line summary of a pod that waits or was
  refused), reasons (code -> nodes, for pending), cycle; for pending also unschedulable,
  closest (the closest nodes: node, missing, never) and would_fit (what would make it fit,
  in words).
- DEBUG per card of the chosen node: pod, node, container, uuid, score, eligible, reason
  (the failed check, or null), chosen.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from scheduling.engine import explain
from scheduling.engine.decision import CONFLICT, PENDING, REJECTED, SCHEDULED
from scheduling.ops import metrics

log = logging.getLogger("hamiadmin.decisions")


def attempt_reasons(outcome: str, decision, why: str) -> list[str]:
    """The reason labels one decision counts under (bounded: see scheduling.ops.metrics)."""
    if outcome == SCHEDULED:
        return [metrics.NONE]
    if outcome == PENDING and decision.batch is not None:
        return [metrics.reason_code(decision.batch.reason)]
    if outcome == PENDING:
        return sorted({metrics.reason_code(code) for code in decision.reasons}) or [metrics.NO_NODES]
    if outcome == REJECTED:
        if (decision.error or "").startswith("scheduler error:"):  # cycle.unexpected_failure
            return [metrics.SCHEDULER_ERROR]
        if decision.asks_no_gpu:
            return [metrics.NO_GPU]
        return [metrics.INVALID]
    # conflict: `why` is "<uuid> <code>" when a card check failed, else a sentence
    return [metrics.reason_code(why.rsplit(" ", 1)[-1] if why else "")]


def summary(outcome: str, decision, why: str) -> str | None:
    if outcome == CONFLICT:
        return f"placement on {decision.node} lost a race ({why})"
    if outcome == SCHEDULED:
        return None
    return decision.reason_text()


def record_commit(report, outcomes, gang_waits=()) -> None:
    """Metrics and log lines for the committed `outcomes`: (attempt, outcome, conflict text).

    Never raises: the cycle is committed, and reporting on it must not look like a failure.
    """
    try:
        _record(report, outcomes)
        for seconds in gang_waits:
            metrics.observe_gang_wait(seconds)
    except Exception:  # noqa: BLE001
        logging.getLogger(__name__).exception(
            "recording cycle %s for metrics and logs failed", report.cycle_id
        )


def _record(report, outcomes) -> None:
    # a labelled child is looked up once per label set and the attempts counted once per
    # set: a lookup takes the metric's lock and builds its key (~2% of a 1,000-pod cycle)
    durations: dict[str, Any] = {}
    attempts: Counter[tuple[str, str]] = Counter()
    for attempt, outcome, why in outcomes:
        decision = attempt.decision
        histogram = durations.get(outcome)
        if histogram is None:
            histogram = durations[outcome] = metrics.DECISION_DURATION.labels(outcome)
        histogram.observe(max(0.0, decision.duration_ms) / 1000)
        for reason in attempt_reasons(outcome, decision, why):
            attempts[outcome, reason] += 1
        log_decision(attempt, outcome, why, report.cycle_id)
    for labels, count in attempts.items():
        metrics.SCHEDULING_ATTEMPTS.labels(*labels).inc(count)
    metrics.CYCLE_DURATION.observe(max(0.0, report.duration_ms) / 1000)


def waiting_fields(decision) -> dict:
    """What a pending decision's log line adds: `unschedulable`, the closest nodes (name, cards
    missing, never) and `would_fit`, what would make it fit in words (`explain.what_would_fit`;
    no tenants: naming them would cost a query per line)."""
    explained = {
        "closest_nodes": decision.closest,
        "unschedulable": decision.unschedulable,
        "unschedulable_reason": decision.never,
    }
    return {
        "unschedulable": decision.unschedulable,
        "closest": [
            {"node": close["node"], "missing": close["missing"], "never": close["never"]}
            for close in decision.closest
        ],
        "would_fit": explain.what_would_fit(explained),
    }


def log_decision(attempt, outcome: str, why: str, cycle_id) -> None:
    if not log.isEnabledFor(logging.INFO):
        return  # the line's fields (chain, closest nodes, what would fit) cost more than the line
    decision = attempt.decision
    placed = outcome in (SCHEDULED, CONFLICT)
    node = decision.node if placed else None
    cards = (
        [device.uuid for container in decision.containers for device in container.devices] if placed else []
    )
    reason = summary(outcome, decision, why)
    fields = {
        "pod": attempt.key,
        "outcome": outcome,
        "node": node,
        "cards": cards,
        "chain": explain.chain_of(decision.policy),
        "duration_ms": round(decision.duration_ms, 3),
        "reason": reason,
        "cycle": cycle_id,
    }
    if outcome == PENDING:
        fields["reasons"] = dict(sorted(decision.reasons.items()))
        fields.update(waiting_fields(decision))
    if outcome == REJECTED and decision.error_field:
        fields["field"] = decision.error_field
    where = f" on {node} ({', '.join(cards)})" if node else ""
    log.info("pod %s %s%s%s", attempt.key, outcome, where, f": {reason}" if reason else "", extra=fields)
    if outcome == SCHEDULED and log.isEnabledFor(logging.DEBUG):
        for container in decision.containers:
            for card in container.cards:
                log.debug(
                    "pod %s on %s, container %s: card %s score %.4f%s",
                    attempt.key,
                    node,
                    container.name,
                    card.uuid,
                    card.score,
                    "" if card.eligible else f" not eligible ({card.reason})",
                    extra={
                        "pod": attempt.key,
                        "node": node,
                        "container": container.name,
                        "uuid": card.uuid,
                        "score": round(card.score, 6),
                        "eligible": card.eligible,
                        "reason": card.reason,
                        "chosen": card.chosen,
                    },
                )
