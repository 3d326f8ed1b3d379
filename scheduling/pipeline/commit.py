"""The commit of a cycle: one short transaction that re-checks every placement under lock.

Rows are locked in a fixed order, pods then cards, each by primary key and FOR NO KEY
UPDATE, so concurrent commits (and the service writes, which lock in the same order)
cannot deadlock; the node rows are only key-share locked by the pods' foreign key, which
a report's NO KEY UPDATE lock on its node does not block (docs/architecture.md, "Lock
order"). Should PostgreSQL still abort the commit as a deadlock victim, the whole commit
runs again (`dbretry`): it re-checks under lock, so a retry is always safe. Each
placement is re-checked in queue order with the engine's own `check_card` against the
locked counters plus what this commit already added: the rules are the engine's, the
numbers are the database's. A placement that no longer fits is not written; its pod
stays pending with a `conflict` decision and is tried again in the next cycle.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Count
from django.utils import timezone

from scheduling.engine import Card as EngineCard
from scheduling.engine.decision import PENDING, REJECTED, SCHEDULED
from scheduling.engine.fit import check_card
from scheduling.engine.jobs import GANG_TIMED_OUT
from scheduling.engine.model import cordoned_uuids

from ..dbretry import retry_on_conflict
from ..models import Allocation, Card, Cycle, Decision, Pod, PodGroup
from .observe import record_commit
from .options import option
from .plan import Attempt, CyclePlan, CycleReport
from .snapshot import ENGINE_CARD_COLUMNS, USED_COLUMNS, engine_card

POD_FIELDS = [
    "status",
    "node_id",
    "scheduled_at",
    "attempts",
    "reason",
    "error",
    "error_field",
    "parked",
    "next_attempt_at",
    "allocated",
    "revision",
    "queue_id",
    "updated_at",
]
COUNTERS = ["used_slots", "used_memory", "used_cores"]

#: What `lock_cards` reads of each card, after its key, presence and node.
CARD_VALUES = (*ENGINE_CARD_COLUMNS, *USED_COLUMNS)


@dataclass(slots=True)
class LockedCard:
    """A card row as locked by the commit, in the engine's terms."""

    pk: int
    engine: EngineCard
    present: bool
    node: str
    node_ready: bool
    used: list[int]


def lock_cards(pks: list[int]) -> dict[str, LockedCard]:
    """SELECT ... FOR UPDATE on the cards, by primary key (the deadlock-free order)."""
    if not pks:
        return {}
    rows = (
        Card.objects.select_for_update(of=("self",), no_key=True)
        .filter(pk__in=pks)
        .order_by("pk")
        .values_list("pk", "present", "node__name", "node__ready", "node__annotations", *CARD_VALUES)
    )
    cards = {}
    for pk, present, node, ready, node_annotations, *values in rows:
        capacity, used = values[: len(ENGINE_CARD_COLUMNS)], values[len(ENGINE_CARD_COLUMNS) :]
        engine = engine_card(capacity)
        if engine.uuid in cordoned_uuids(node_annotations):
            engine.cordoned = True
        cards[engine.uuid] = LockedCard(pk, engine, present, node, ready, list(used))
    return cards


def recheck(attempt: Attempt, cards: dict[str, LockedCard], added: dict[int, list[int]]):
    """This attempt's usage per card pk if it still fits, else (None, why)."""
    decision, parsed = attempt.decision, attempt.parsed
    if parsed is None:  # only a scheduled decision is re-checked, and the engine parsed its pod
        return None, "the pod was not parsed"
    mine: dict[int, list[int]] = {}
    for ask, container in zip(parsed.apps, decision.containers, strict=True):
        if ask is None:
            continue
        for device in container.devices:
            card = cards.get(device.uuid)
            if card is None or not card.present:
                return None, f"{device.uuid} is no longer reported"
            if card.node != decision.node:
                return None, f"{device.uuid} is now on {card.node}"
            if not card.node_ready:
                return None, f"{card.node} NodeNotReady"
            before = added.get(card.pk, (0, 0, 0))
            own = mine.setdefault(card.pk, [0, 0, 0])
            used = (
                card.used[0] + before[0] + own[0],
                card.used[1] + before[1] + own[1],
                card.used[2] + before[2] + own[2],
            )
            failed = check_card(card.engine, ask, device.memory, parsed.policy, used)
            if failed is not None:
                return None, f"{device.uuid} {failed[0]}"
            own[0] += 1
            own[1] += device.memory
            own[2] += device.cores
    return mine, ""


def _prepared(model, names: list[str]):
    """(quoted column names, row -> list of database values) for these attribute names."""
    db = connections[DEFAULT_DB_ALIAS]
    fields = [model._meta.get_field(name) for name in names]
    quoted = [db.ops.quote_name(field.column) for field in fields]

    def values(row: dict) -> list:
        return [
            field.get_db_prep_save(row[field.attname] if field.attname in row else field.get_default(), db)
            for field in fields
        ]

    return db, quoted, values


def update_rows(model, names: list[str], rows: list[dict]) -> None:
    """UPDATE `names` of each row (a dict with `id`) as one prepared statement run for all
    rows: executemany, pipelined on PostgreSQL. Django's bulk_update builds a CASE per field
    and row, which takes seconds for a thousand pods; this takes milliseconds."""
    if not rows:
        return
    db, quoted, values = _prepared(model, names)
    assignments = ", ".join(f"{column} = %s" for column in quoted)
    with db.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {db.ops.quote_name(model._meta.db_table)} SET {assignments} WHERE id = %s",
            [[*values(row), row["id"]] for row in rows],
        )


def insert_rows(model, rows: list[dict]) -> None:
    """INSERT rows (dicts by attribute name) as one prepared statement run for all rows."""
    if not rows:
        return
    names = [field.attname for field in model._meta.concrete_fields if not field.primary_key]
    db, quoted, values = _prepared(model, names)
    marks = ", ".join(["%s"] * len(quoted))
    with db.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {db.ops.quote_name(model._meta.db_table)} ({', '.join(quoted)}) VALUES ({marks})",
            [values(row) for row in rows],
        )


def backoff_until(attempts: int, now):
    """Exponential back-off after `attempts` tries, capped; capacity changes cut it short."""
    base, cap = option("BACKOFF_BASE_SECONDS"), option("BACKOFF_MAX_SECONDS")
    return now + timedelta(seconds=min(cap, base * 2 ** min(max(attempts - 1, 0), 30)))


def pause_for_fault_test() -> None:
    """Test-only hook: hold the open transaction so a test can kill the process here."""
    pause = option("FAULT_COMMIT_PAUSE_SECONDS")
    if pause > 0:
        sys.stderr.write("hamiadmin: commit paused\n")
        sys.stderr.flush()
        time.sleep(pause)


@retry_on_conflict
def commit_plan(plan: CyclePlan) -> CycleReport:
    """Write the plan in one transaction: allocations, counters, pods, decisions, the cycle."""
    commit_started = time.perf_counter()
    now = timezone.now()
    top = option("DECISION_TOP")
    report = CycleReport(
        considered=len(plan.attempts), snapshot_ms=plan.snapshot_ms, decide_ms=plan.decide_ms
    )
    snapshot = plan.snapshot
    if snapshot is None:  # a plan with attempts was planned on a snapshot (plan_cycle, plan_one)
        raise ValueError("a plan with attempts needs its snapshot")
    node_ids = snapshot.node_ids
    with transaction.atomic():
        locked = {
            pk: (status, parked, revision, attempts)
            for pk, status, parked, revision, attempts in Pod.objects.select_for_update(no_key=True)
            .filter(pk__in=sorted(a.pod_id for a in plan.attempts))
            .order_by("pk")
            .values_list("pk", "status", "parked", "revision", "attempts")
        }
        fresh: list[Attempt] = []
        for attempt in plan.attempts:
            row = locked.get(attempt.pod_id)
            if row is None or row[0] != Pod.PENDING or row[1] or row[2] != attempt.revision:
                report.skipped.append(attempt.key)
                continue
            attempt.attempts = row[3]
            fresh.append(attempt)

        card_ids = snapshot.card_ids
        wanted = sorted(
            {
                card_ids[device.uuid]
                for attempt in fresh
                if attempt.decision.status == SCHEDULED
                for container in attempt.decision.containers
                for device in container.devices
            }
        )
        cards = lock_cards(wanted)
        added: dict[int, list[int]] = {}
        verdicts = recheck_all(fresh, cards, added)
        outcomes: list[tuple[Attempt, str, str]] = [(a, *verdicts[id(a)]) for a in fresh]

        conflicted = any(outcome == Decision.CONFLICT for _, outcome, _ in outcomes)
        cycle = Cycle.objects.create(
            started_at=plan.started_at or now,
            trigger=plan.trigger[:100],
            worker=plan.worker[:200],
            considered=len(plan.attempts),
            placed=sum(outcome == SCHEDULED for _, outcome, _ in outcomes),
            pending=sum(outcome in (PENDING, Decision.CONFLICT) for _, outcome, _ in outcomes),
            rejected=sum(outcome == REJECTED for _, outcome, _ in outcomes),
            conflicts=sum(outcome == Decision.CONFLICT for _, outcome, _ in outcomes),
            skipped=len(report.skipped),
            nodes=len(node_ids),
            snapshot_ms=plan.snapshot_ms,
            decide_ms=plan.decide_ms,
        )

        allocations, pods, decisions = [], [], []
        for attempt, outcome, why in outcomes:
            decision = attempt.decision
            pod: dict[str, Any] = {
                "id": attempt.pod_id,
                "status": Pod.PENDING,
                "node_id": None,
                "scheduled_at": None,
                "attempts": attempt.attempts + 1,
                "reason": "",
                "error": "",
                "error_field": "",
                "parked": False,
                "next_attempt_at": None,
                "allocated": "",
                "revision": locked[attempt.pod_id][2] + 1,
                "queue_id": attempt.queue_id,
                "updated_at": now,
            }
            payload = decision.as_dict(top=top)
            if outcome == SCHEDULED and decision.node is not None:
                pod.update(
                    status=Pod.SCHEDULED,
                    node_id=node_ids[decision.node],
                    scheduled_at=now,
                    allocated=decision.allocated,
                    reason=decision.reason_text(),
                )
                for index, container in enumerate(decision.containers):
                    for device in container.devices:
                        allocations.append(
                            {
                                "pod_id": attempt.pod_id,
                                "container_index": index,
                                "container_name": container.name[:253],
                                "card_id": cards[device.uuid].pk,
                                "memory": device.memory,
                                "cores": device.cores,
                                "active": True,
                                "created_at": now,
                                "released_at": None,
                            }
                        )
                report.placed.append((attempt.key, decision.node, decision.allocated or ""))
            elif outcome == Decision.CONFLICT:
                pod["reason"] = f"placement on {decision.node} lost a race ({why}); retrying"
                payload["conflict"] = why
                report.conflicts.append((attempt.key, why))
            elif outcome == REJECTED:
                pod.update(
                    status=Pod.REJECTED
                    if decision.asks_no_gpu or decision.error_code == GANG_TIMED_OUT
                    else Pod.PENDING,
                    parked=True,
                    error=decision.error or "",
                    error_field=(decision.error_field or "")[:300],
                    reason=decision.reason_text(),
                )
                report.rejected.append((attempt.key, pod["error"]))
            else:
                pod["reason"] = decision.reason_text()
                if not conflicted:
                    pod["next_attempt_at"] = backoff_until(pod["attempts"], now)
                report.pending.append((attempt.key, pod["reason"]))
            pods.append(pod)
            decisions.append(
                {
                    "pod_id": attempt.pod_id,
                    "cycle_id": cycle.pk,
                    "outcome": outcome,
                    "node": decision.node or "",
                    "reason": pod["reason"],
                    "error": decision.error or "",
                    "payload": payload,
                    "duration_ms": decision.duration_ms,
                    "created_at": now,
                }
            )

        insert_rows(Allocation, allocations)
        pause_for_fault_test()
        counters = [
            {"id": pk, **{name: locked_card.used[i] + added[pk][i] for i, name in enumerate(COUNTERS)}}
            for pk, locked_card in sorted((card.pk, card) for card in cards.values())
            if pk in added
        ]
        update_rows(Card, COUNTERS, counters)
        update_rows(Pod, POD_FIELDS, pods)
        insert_rows(Decision, decisions)
        gang_waits = write_gang_phases(plan, outcomes, now)
        report.commit_ms = (time.perf_counter() - commit_started) * 1000
        report.duration_ms = (time.perf_counter() - plan.started) * 1000
        Cycle.objects.filter(pk=cycle.pk).update(
            finished_at=timezone.now(), commit_ms=report.commit_ms, duration_ms=report.duration_ms
        )
    report.cycle_id = cycle.pk
    report.more = plan.full or conflicted
    record_commit(report, outcomes, gang_waits)
    return report


def recheck_all(fresh: list[Attempt], cards: dict[str, LockedCard], added: dict[int, list[int]]) -> dict:
    """Each attempt's (outcome, conflict text), re-checked in queue order; `added` grows by what
    is kept. A gang's placements are checked together and kept only if at least `gang_needed`
    of them still fit; otherwise none of them is, and each says which member and card failed."""
    verdicts: dict[int, tuple[str, str]] = {}
    gangs: dict[int, list[Attempt]] = {}
    for attempt in fresh:
        if attempt.decision.status == SCHEDULED and attempt.group_id is not None and attempt.gang_needed:
            gangs.setdefault(attempt.group_id, []).append(attempt)
    for attempt in fresh:
        if id(attempt) in verdicts:
            continue
        if attempt.decision.status != SCHEDULED:
            verdicts[id(attempt)] = (attempt.decision.status, "")
            continue
        members = gangs.get(attempt.group_id) if attempt.group_id is not None else None
        if not members:
            mine, why = recheck(attempt, cards, added)
            if mine is None:
                verdicts[id(attempt)] = (Decision.CONFLICT, why)
            else:
                _add(added, mine)
                verdicts[id(attempt)] = (SCHEDULED, "")
            continue
        trial = {pk: list(used) for pk, used in added.items()}
        kept, missed = [], []
        for member in members:
            mine, why = recheck(member, cards, trial)
            if mine is None:
                missed.append((member, why))
            else:
                _add(trial, mine)
                kept.append(member)
        needed = members[0].gang_needed
        if len(kept) >= needed:
            added.clear()
            added.update(trial)
            verdicts.update({id(m): (SCHEDULED, "") for m in kept})
            verdicts.update({id(m): (Decision.CONFLICT, why) for m, why in missed})
        else:
            if missed:
                first, why = missed[0]
                text = f"gang: {len(kept)}/{needed} placements still fit; {first.key}: {why}"
            else:  # members planned with the others changed since the snapshot (skipped)
                text = f"gang: {len(kept)}/{needed} placements left; the other members changed since the snapshot"
            verdicts.update({id(m): (Decision.CONFLICT, text) for m in members})
    return verdicts


def _add(into: dict[int, list[int]], more: dict[int, list[int]]) -> None:
    for pk, extra in more.items():
        total = into.setdefault(pk, [0, 0, 0])
        for i in range(3):
            total[i] += extra[i]


def write_gang_phases(plan: CyclePlan, outcomes, now) -> list[float]:
    """Pod groups after this commit: `running` once `min_member` members hold cards, else the
    planning's verdict (`plan.groups`) or the conflict. Returns the wait (seconds from the
    group's creation) of each group that started running, for the wait histogram."""
    verdicts = dict(plan.groups)
    for attempt, outcome, why in outcomes:
        if attempt.group_id is not None and outcome == Decision.CONFLICT:
            verdicts.setdefault(attempt.group_id, (PodGroup.INQUEUE, "Conflict", why))
    touched = {a.group_id for a, outcome, _ in outcomes if a.group_id is not None and outcome == SCHEDULED}
    ids = sorted(touched | set(verdicts))
    if not ids:
        return []
    bound = dict(
        Pod.objects.filter(group_id__in=ids, status__in=Pod.BOUND)
        .values("group_id")
        .annotate(n=Count("id"))
        .values_list("group_id", "n")
        .order_by()
    )
    waits = []
    for group in PodGroup.objects.filter(pk__in=ids).order_by("pk"):
        placed = bound.get(group.pk, 0)
        if placed >= group.min_member:
            if group.phase != PodGroup.RUNNING:
                waits.append((now - group.created_at).total_seconds())
            changed = group.set_phase(
                PodGroup.RUNNING, "GangScheduled", f"{placed}/{group.min_member} members placed", now
            )
        elif group.pk in verdicts:
            phase, reason, message = verdicts[group.pk]
            if group.phase == PodGroup.FAILED and phase != PodGroup.FAILED:
                phase = PodGroup.FAILED  # timed out: stays failed until it reaches min_member
            changed = group.set_phase(phase, reason, message, now)
        else:
            continue
        if changed:
            group.save(
                update_fields=["phase", "reason", "conditions", "running_at", "finished_at", "updated_at"]
            )
    return waits
