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

Preemption (docs/preemption.md): a pod that evicts tenants is re-checked the same way on the
cards it is nominated to, with its victims' holdings taken off (their pods are locked with
the others, so their allocations cannot change meanwhile) and every other pod's unexpired
nominations counted as held. Then its `Eviction` rows (one per victim, `requested`) and
`Nomination` rows are written; the cards' counters are not touched until it is placed. An
ordinary placement counts other pods' nominations as held too, so nothing is placed on the
cards a victim frees for its preemptor; a card an exclusive preemptor holds whole (`mutex`, or
all its cores: `Nomination.whole`) takes nothing else at all until it lands (`Held.whole`).

Limits (docs/queues.md, "Limits under overlap"): after the pods and before the cards, the
commit locks the queues and namespace quotas that bound its placements (`limits.lock_limits`)
and admits each placement that still fits its cards against their usage as read under those
locks, so overlapping cycles never take a queue past its limit. A placement refused there is
not written: its pod stays pending with the queue's verdict (`QueueLimitExceeded`,
`NamespaceQuotaExceeded`), backing off as a planned hold does.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
import psycopg
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Count, Exists, JSONField, OuterRef
from django.utils import timezone

from scheduling.engine import Card as EngineCard
from scheduling.engine.batch.jobs import GANG_TIMED_OUT
from scheduling.engine.batch.statement import hold_back
from scheduling.engine.decision import PENDING, REJECTED, SCHEDULED
from scheduling.engine.fit import check_card
from scheduling.engine.model import cordoned_uuids

from ..dbretry import retry_on_conflict
from ..models import Allocation, CapacityVersion, Card, Cycle, Decision, Eviction, Nomination, Pod, PodGroup
from . import preemption, rowlocks
from .decisionlog import DecisionLog, deferrable
from .limits import Limits, lock_limits
from .nodecheck import NodeLedger, cards_to_lock, limited_nodes
from .observe import record_commit
from .options import option
from .plan import Attempt, CyclePlan, CycleReport
from .snapshot import ENGINE_CARD_COLUMNS, USED_COLUMNS, engine_card
from .standing import STANDING

POD_FIELDS = [
    "status",
    "node_id",
    "scheduled_at",
    "attempts",
    "reason",
    "verdict",
    "error",
    "error_field",
    "parked",
    "next_attempt_at",
    "allocated",
    "extra_annotations",
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
    rows = rowlocks.lock_cards(Card.objects.filter(pk__in=pks), of_self=True).values_list(
        "pk", "present", "node__name", "node__ready", "node__annotations", *CARD_VALUES
    )
    cards = {}
    for pk, present, node, ready, node_annotations, *values in rows:
        capacity, used = values[: len(ENGINE_CARD_COLUMNS)], values[len(ENGINE_CARD_COLUMNS) :]
        engine = engine_card(capacity)
        if engine.uuid in cordoned_uuids(node_annotations):
            engine.cordoned = True
        cards[engine.uuid] = LockedCard(pk, engine, present, node, ready, list(used))
    return cards


@dataclass
class Held:
    """What the counters do not show: each card's unexpired nominations by pod (held for
    their preemptors), the victims' holdings a preemption takes off, and the nominations
    this commit adds; `whole`, the cards an exclusive preemptor holds whole (stored, or
    nominated by this commit), on which nothing else is placed."""

    nominated: dict[int, list[tuple[int, int, int]]]  # card pk -> (pod id, MiB, cores)
    victims: dict[int, list[tuple[str, int, int, int]]]  # victim pod -> (card uuid, pk, MiB, cores)
    added: dict[int, list[int]]
    #: The limited nodes' cpu, memory, pods and host ports, read under lock (`nodecheck`).
    nodes: NodeLedger | None = None
    whole: dict[int, tuple[int, str]] = field(default_factory=dict)  # card pk -> (pod id, ns/name)
    #: card pk -> (slots, MiB, cores) the victims of preemptions kept by this commit hold: gone
    #: for a later preemption's nomination (it lands once they leave, as the planner's Statement
    #: saw), never for a placement (they keep their counters until they go).
    gone: dict[int, list[int]] = field(default_factory=dict)
    #: Pods placed by this commit so far: their own nominations (from an earlier preemption)
    #: hold nothing any more, since their placements count in `added` (counted both ways, a
    #: gang whose members landed on the cards they were nominated to never fitted: it churned).
    landed: set[int] = field(default_factory=set)

    @classmethod
    def empty(cls) -> Held:
        return cls({}, {}, {})

    def held_whole(self, pk: int, pod_id: int) -> str:
        """The preemptor (`ns/name`) holding card `pk` whole for itself, unless that is `pod_id`."""
        holder = self.whole.get(pk)
        return holder[1] if holder is not None and holder[0] != pod_id else ""

    def keep(self, attempt: Attempt, cards: dict[str, LockedCard]) -> None:
        """After `attempt` is kept: a preemption holds its whole cards from now on; a placement
        (a preemptor landing) lets go of the ones it held."""
        if attempt.victims:
            preemption = attempt.decision.preemption
            for uuid in preemption.whole if preemption is not None else ():
                if uuid in cards:
                    self.whole[cards[uuid].pk] = (attempt.pod_id, attempt.key)
            _add(self.gone, victims_freed(attempt, self) or {})
        else:
            self.landed.add(attempt.pod_id)
            for pk in [pk for pk, (holder, _) in self.whole.items() if holder == attempt.pod_id]:
                del self.whole[pk]

    def on(self, pk: int, pod_id: int, freed: dict[int, list[int]] | None = None) -> tuple[int, int, int]:
        """(slots, MiB, cores) held on card `pk` for others than `pod_id`, less `freed`."""
        slots = memory = cores = 0
        for holder, mem, core in self.nominated.get(pk, ()):
            if holder != pod_id and holder not in self.landed:
                slots, memory, cores = slots + 1, memory + mem, cores + core
        extra = self.added.get(pk, (0, 0, 0))
        gone = (freed or {}).get(pk, (0, 0, 0))
        return slots + extra[0] - gone[0], memory + extra[1] - gone[1], cores + extra[2] - gone[2]


def recheck(
    attempt: Attempt, cards: dict[str, LockedCard], added: dict[int, list[int]], held: Held | None = None
):
    """This attempt's usage per card pk if it still fits, else (None, why)."""
    decision, parsed = attempt.decision, attempt.parsed
    if parsed is None:  # only a scheduled decision is re-checked, and the engine parsed its pod
        return None, "the pod was not parsed"
    grants = [
        (device.uuid, device.memory, device.cores)
        for ask, container in zip(parsed.apps, decision.containers, strict=True)
        if ask is not None
        for device in container.devices
    ]
    mine, why = _fits(attempt, decision.node, grants, cards, added, held or Held.empty(), None)
    if mine is not None and held is not None and held.nodes is not None:
        refused = held.nodes.admit(attempt)  # node resources (SPEC 10), after the cards fit
        if refused:
            return None, refused
    return mine, why


def recheck_nomination(
    attempt: Attempt, cards: dict[str, LockedCard], added: dict[int, list[int]], held: Held
):
    """A preemption's grants per card pk if they fit once its victims are gone, else (None, why).
    The victims must still hold, unevicted, what the plan saw on the cards it saw."""
    preemption = attempt.decision.preemption
    for victim_id, _kind, _why, _node, planned in attempt.victims:
        holdings = held.victims.get(victim_id)
        if not holdings:
            return None, f"victim {victim_id} no longer holds cards, or is being evicted already"
        if {uuid for uuid, _, _, _ in holdings} != set(planned):
            return None, f"victim {victim_id} moved since the snapshot"
    freed = victims_freed(attempt, held) or {}
    _add(freed, held.gone)  # earlier preemptions' victims: gone by the time this one lands
    node = preemption.node if preemption is not None else None
    mine, why = _fits(attempt, node, grants_held(attempt), cards, added, held, freed)
    if mine is None or not attempt.moves:
        return mine, why
    for victim_id, home in attempt.moves:  # each moved tenant's new home, held before it moves
        for uuid, memory, cores in home:
            card = cards.get(uuid)
            if card is None or not card.present or not card.node_ready or card.engine.cordoned:
                return None, f"the new home of victim {victim_id} ({uuid}) is gone"
            if holder := held.held_whole(card.pk, attempt.pod_id):
                return (
                    None,
                    f"the new home of victim {victim_id} ({uuid}) is held whole for preemptor {holder}",
                )
            before = added.get(card.pk, (0, 0, 0))
            other = held.on(card.pk, victim_id, freed)
            own = mine.setdefault(card.pk, [0, 0, 0])
            used = [card.used[i] + before[i] + other[i] + own[i] for i in range(3)]
            if (
                used[0] + 1 > card.engine.slots
                or used[1] + memory > card.engine.memory
                or used[2] + cores > card.engine.cores
            ):
                return None, f"the new home of victim {victim_id} ({uuid}) is taken"
            own[0], own[1], own[2] = own[0] + 1, own[1] + memory, own[2] + cores
    return mine, ""


def victims_freed(attempt: Attempt, held: Held) -> dict[int, list[int]] | None:
    """(slots, MiB, cores) per card pk that a preemption's victims hold now (None when one of
    them holds nothing any more)."""
    freed: dict[int, list[int]] = {}
    for victim_id, *_ in attempt.victims:
        holdings = held.victims.get(victim_id)
        if not holdings:
            return None
        for _, pk, memory, cores in holdings:
            total = freed.setdefault(pk, [0, 0, 0])
            total[0], total[1], total[2] = total[0] + 1, total[1] + memory, total[2] + cores
    return freed


def grants_held(attempt: Attempt) -> list[tuple[str, int, int]]:
    """The (card uuid, MiB, cores) a preempting pod is nominated to; none for other pods."""
    preemption = attempt.decision.preemption
    return list(preemption.grants) if preemption is not None else []


def _fits(attempt: Attempt, node, grants, cards, added, held: Held, freed):
    """The grants' usage per card pk if each card still takes them (`check_card` on the
    locked counters plus what is held), else (None, why)."""
    parsed = attempt.parsed
    assert parsed is not None
    asks = [ask for ask in parsed.apps if ask is not None for _ in range(ask.count)]
    if len(asks) != len(grants):
        return None, "the grants do not match the pod's asks"
    mine: dict[int, list[int]] = {}
    for ask, (uuid, memory, cores) in zip(asks, grants, strict=True):
        card = cards.get(uuid)
        if card is None or not card.present:
            return None, f"{uuid} is no longer reported"
        if card.node != node:
            return None, f"{uuid} is now on {card.node}"
        if not card.node_ready:
            return None, f"{card.node} NodeNotReady"
        if holder := held.held_whole(card.pk, attempt.pod_id):
            return None, f"{uuid} held whole for preemptor {holder}"
        before = added.get(card.pk, (0, 0, 0))
        other = held.on(card.pk, attempt.pod_id, freed)
        own = mine.setdefault(card.pk, [0, 0, 0])
        used = tuple(card.used[i] + before[i] + other[i] + own[i] for i in range(3))
        failed = check_card(card.engine, ask, memory, parsed.policy, used)
        if failed is not None:
            return None, f"{uuid} {failed[0]}"
        own[0] += 1
        own[1] += memory
        own[2] += cores
    return mine, ""


#: Python values the database driver takes as they are: a field of these needs none of
#: Django's per-value preparation (`get_db_prep_save` cost half a commit's row building).
#: Datetimes only on PostgreSQL: SQLite stores Django's own text form of them.
_PLAIN = frozenset((int, str, bool, float, type(None)))


def _converter(field, db):
    """A value -> database value function for one field: JSON as its text (COPY and the
    casts below read text), plain values as they are, anything else as Django prepares it."""
    if isinstance(field, JSONField):
        encoder = field.encoder
        if encoder is None:
            return json_text

        def as_json(value):
            return json.dumps(value, cls=encoder)

        return as_json

    plain = _PLAIN | {datetime} if db.vendor == "postgresql" else _PLAIN

    def prepared(value):
        return value if type(value) in plain else field.get_db_prep_save(value, db)

    return prepared


def json_text(value) -> str:
    """`value` as JSON text, as `json.dumps` writes it up to spacing: by orjson, ~5x faster on
    a decision payload (~90 -> ~17 ms a 1,000-pod cycle, issue 29); what orjson refuses (keys
    that are not strings, integers past 64 bits) by `json.dumps`."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value)


def _prepared(model, names: list[str]):
    """(fields, quoted column names, row -> list of database values) for these attribute names."""
    db = connections[DEFAULT_DB_ALIAS]
    fields = [model._meta.get_field(name) for name in names]
    quoted = [db.ops.quote_name(field.column) for field in fields]
    steps = [(field.attname, _converter(field, db), field.get_default) for field in fields]

    def values(row: dict) -> list:
        return [convert(row[name]) if name in row else convert(default()) for name, convert, default in steps]

    return db, fields, quoted, values


def update_rows(model, names: list[str], rows: list[dict]) -> None:
    """UPDATE `names` of each row (a dict with `id`). On PostgreSQL one statement for all rows,
    the new values passed as one array per column and joined by id (`unnest`): a thousand
    pipelined single-row UPDATEs cost the server a statement each. Elsewhere one prepared
    statement run for all rows (executemany). Django's bulk_update builds a CASE per field and
    row, which takes seconds for a thousand pods."""
    if not rows:
        return
    db, fields, quoted, values = _prepared(model, names)
    table = db.ops.quote_name(model._meta.db_table)
    if db.vendor == "postgresql":
        columns = list(zip(*(values(row) for row in rows), strict=True))
        types = [_array_type(field, db) for field in fields]
        arrays = ", ".join(f"%b::{kind}[]" for kind, _ in types)
        names_of = ", ".join(f"c{i}" for i in range(len(fields)))
        assignments = ", ".join(
            f"{column} = v.c{i}{cast}"
            for i, (column, (_, cast)) in enumerate(zip(quoted, types, strict=True))
        )
        with bound_cursor(db) as cursor:
            cursor.execute(
                f"UPDATE {table} SET {assignments} FROM unnest(%b::bigint[], {arrays})"  # noqa: S608 - our own names
                f" AS v(id, {names_of}) WHERE {table}.id = v.id",
                [[row["id"] for row in rows], *(list(column) for column in columns)],
            )
        return
    assignments = ", ".join(f"{column} = %s" for column in quoted)
    with db.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET {assignments} WHERE id = %s",  # noqa: S608 - our own names
            [[*values(row), row["id"]] for row in rows],
        )


def bound_cursor(db):
    """A cursor on `db`'s PostgreSQL connection (and transaction) that binds its parameters on
    the server (`%b`: sent in binary): Django's own cursors quote every value into the SQL text
    on the client, which for a 1,000-pod cycle's arrays of reasons and verdicts costs ~30 ms
    a statement against ~8 (issue 29). Wrapped as Django wraps its own, so query logging and
    `execute_wrapper`s still see the statement."""
    db.ensure_connection()
    raw = psycopg.Cursor(db.connection)
    return db.make_debug_cursor(raw) if db.queries_logged else db.make_cursor(raw)


def _array_type(field, db) -> tuple[str, str]:
    """(the element type an array of this field's values is sent as, the cast back to the
    column's type): JSON goes as text and is cast to jsonb, the rest as the column's type."""
    if isinstance(field, JSONField):
        return "text", "::jsonb"
    return field.db_type(db), ""


def insert_rows(model, rows: list[dict]) -> None:
    """INSERT rows (dicts by attribute name): one COPY on PostgreSQL (a thousand single-row
    INSERTs, even pipelined, cost the server a statement each), else one prepared statement
    run for all rows. New rows only: no lock is taken or needed."""
    if not rows:
        return
    names = [field.attname for field in model._meta.concrete_fields if not field.primary_key]
    db, _fields, quoted, values = _prepared(model, names)
    table = db.ops.quote_name(model._meta.db_table)
    if db.vendor == "postgresql":  # COPY: one statement for all rows, not one INSERT each
        with db.cursor() as cursor, cursor.copy(f"COPY {table} ({', '.join(quoted)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(values(row))
        return
    marks = ", ".join(["%s"] * len(quoted))
    with db.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} ({', '.join(quoted)}) VALUES ({marks})",  # noqa: S608 - our own names
            [values(row) for row in rows],
        )


#: A cycle's decision rows are written after its commit from this many on (`decisionlog`):
#: below it, handing them over costs a waking pod more than writing them in the commit.
DECISIONS_LATER_FROM = 50


class Payload:
    """A decision row's payload (`Decision.as_dict` kept to `top`, with `extra` keys), built
    where the row is written (`insert_decisions`): for rows written after their commit, on
    the decision writer's thread, so the commit holds its row locks ~40 ms less a 1,000-pod
    cycle (under the GIL that work then runs beside the next cycle's start instead)."""

    __slots__ = ("decision", "top", "triaged", "extra")

    def __init__(self, decision, top: int, triaged) -> None:
        self.decision, self.top, self.triaged = decision, top, triaged
        self.extra: dict[str, Any] = {}

    def build(self) -> dict:
        out = self.decision.as_dict(top=self.top, triaged=self.triaged)
        out.update(self.extra)
        return out


def insert_decisions(rows: list[dict]) -> None:
    """INSERT decision rows (`insert_rows`), their `Payload`s built first (once: a retry
    finds them built)."""
    for row in rows:
        payload = row["payload"]
        if isinstance(payload, Payload):
            row["payload"] = payload.build()
    insert_rows(Decision, rows)


#: This process's writer of decision rows after their commit (`decisionlog`).
DECISIONS = DecisionLog(insert_decisions)


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


def _bound_lock_waits() -> None:
    """This commit waits at most COMMIT_LOCK_TIMEOUT_MS for a row another transaction holds
    (PostgreSQL's `lock_timeout`, for this transaction only): a stuck writer then costs one
    cycle, which rolls back and is planned again, never the scheduler."""
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor == "postgresql":
        with db.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = {int(option('COMMIT_LOCK_TIMEOUT_MS'))}")


@retry_on_conflict
def commit_plan(plan: CyclePlan, defer: bool = False) -> CycleReport:
    """Write the plan in one transaction: allocations, counters, pods, decisions, the cycle.
    With `defer`, the decision rows are written after it, beside the next cycle's planning,
    where `decisionlog` allows it (PostgreSQL, no caller's transaction, no victims chosen)."""
    commit_started = time.perf_counter()
    DECISIONS.flush()  # the last cycle's decisions first: a pod's decisions keep their order
    defer = defer and deferrable()
    now = timezone.now()
    top = option("DECISION_TOP")
    report = CycleReport(
        considered=len(plan.attempts), snapshot_ms=plan.snapshot_ms, decide_ms=plan.decide_ms
    )
    snapshot = plan.snapshot
    if snapshot is None:  # a plan with attempts was planned on a snapshot (plan_cycle, plan_one)
        raise ValueError("a plan with attempts needs its snapshot")
    node_ids = snapshot.node_ids
    victim_ids = {victim[0] for a in plan.attempts for victim in a.victims}
    with transaction.atomic():
        _bound_lock_waits()
        # moved since planning: nothing is backed off; moved after this read: the next
        # cycle's wake, after this commit, finds what it backs off (`CapacityVersion`)
        capacity_moved = plan.capacity_version is not None and CapacityVersion.read() != plan.capacity_version
        # with the victims, their gangs' placed members: commits evicting from one gang take turns
        siblings = set(preemption.victims_gangs(victim_ids))
        locked = {
            pk: (status, parked, revision, attempts, reason)
            for pk, status, parked, revision, attempts, reason in rowlocks.lock_pods(
                Pod.objects.filter(pk__in=sorted({a.pod_id for a in plan.attempts} | victim_ids | siblings))
            ).values_list("pk", "status", "parked", "revision", "attempts", "reason")
        }
        victims = {pk: locked.pop(pk) for pk in victim_ids if pk in locked}
        fresh: list[Attempt] = []
        for attempt in plan.attempts:
            row = locked.get(attempt.pod_id)
            if row is None or row[0] != Pod.PENDING or row[1] or row[2] != attempt.revision:
                report.skipped.append(attempt.key)
                continue
            attempt.attempts = row[3]
            fresh.append(attempt)
        limits = lock_limits(fresh)  # step 2: queues, then namespace quotas

        card_ids = snapshot.card_ids
        wanted = sorted(
            {
                card_ids[device.uuid]
                for attempt in fresh
                if attempt.decision.status == SCHEDULED
                for container in attempt.decision.containers
                for device in container.devices
            }
            | {
                card_ids[grant[0]]
                for attempt in fresh
                if attempt.victims
                for grant in grants_held(attempt)
                if grant[0] in card_ids
            }
            | {
                card_ids[grant[0]]
                for attempt in fresh
                for _, home in attempt.moves
                for grant in home
                if grant[0] in card_ids
            }
        )
        limited = limited_nodes(fresh, snapshot)  # their cards all locked: commits there take turns
        wanted = sorted(set(wanted) | cards_to_lock(limited, snapshot))
        cards = lock_cards(wanted)
        held = Held(
            preemption.nominated_usage(wanted, now),
            victim_holdings(victims),
            {},
            whole=preemption.held_whole(wanted, now),
        )
        held.nodes = NodeLedger.read(limited, fresh)
        added: dict[int, list[int]] = {}
        thinned = preemption.thinned_gangs([a for a in fresh if a.victims]) if victim_ids else {}
        # cards held by pods others bound since planning (a DRA pass, HAMi) are not in the
        # counters: a placement on their node waits for the next cycle, which counts them
        late = STANDING.bound_since(snapshot)
        for attempt in fresh if late else ():
            node = attempt.decision.node
            if attempt.decision.status == SCHEDULED and node in late and id(attempt) not in thinned:
                thinned[id(attempt)] = f"a pod others bound on {node} since planning holds cards there"
        verdicts = recheck_all(fresh, cards, added, held, limits, thinned)
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
                "extra_annotations": {},
                "revision": locked[attempt.pod_id][2] + 1,
                "queue_id": None if attempt.queue_id in limits.gone else attempt.queue_id,
                "updated_at": now,
            }
            triaged = decision.triage  # engine.triage, once (None once placed)
            pod["verdict"] = triaged.verdict if triaged is not None else ""
            payload = Payload(decision, top, triaged)  # built where its row is written
            if outcome == SCHEDULED and decision.node is not None:
                pod.update(
                    status=Pod.SCHEDULED,
                    node_id=node_ids[decision.node],
                    scheduled_at=now,
                    allocated=decision.allocated,
                    extra_annotations=decision.extra_annotations,
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
                what = (
                    f"preemption on {decision.preemption.node if decision.preemption else None}"
                    if attempt.victims
                    else f"placement on {decision.node}"
                )
                pod["reason"] = f"{what} lost a race ({why}){RETRYING}"
                pod["verdict"] = "capacity"  # the capacity it counted on was taken
                if locked[attempt.pod_id][4].endswith(RETRYING):
                    # lost twice running: planning and the commit may disagree for as long as
                    # something lasts (a nomination, a limit); backed off, never a spin
                    pod["next_attempt_at"] = backoff_until(pod["attempts"], now)
                payload.extra["conflict"] = why
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
                if not (conflicted or capacity_moved):  # capacity freed while planning: due at once
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
        # victims' evictions point at their preemptors' decisions: then they are written here;
        # a few rows cost less here than a hand-over to the writer's connection
        later = (
            defer
            and len(decisions) >= DECISIONS_LATER_FROM
            and not any(why == PREEMPTS for _, _, why in outcomes)
        )
        if not later:
            insert_decisions(decisions)
        report.evictions = write_preemptions(cycle.pk, outcomes, cards, now)
        forget_nominations(plan, outcomes, now)
        gang_waits = write_gang_phases(plan, outcomes, now)
        report.commit_ms = (time.perf_counter() - commit_started) * 1000
        report.duration_ms = (time.perf_counter() - plan.started) * 1000
        Cycle.objects.filter(pk=cycle.pk).update(
            finished_at=timezone.now(), commit_ms=report.commit_ms, duration_ms=report.duration_ms
        )
    if later:
        DECISIONS.submit(decisions)
    if not capacity_moved:
        confirm_on_standing(plan, outcomes)
    report.cycle_id = cycle.pk
    report.more = plan.full or conflicted or capacity_moved
    record_commit(report, outcomes, gang_waits)
    return report


def confirm_on_standing(plan: CyclePlan, outcomes) -> None:
    """Tell the standing snapshot, when the plan was made on it, the nodes where every
    placement its planning assumed is now committed, and those where one is not
    (`StandingSnapshot.confirm`): its next refresh keeps the first as planning left them
    when their rows agree, instead of putting them back and recounting their pods (issue 29).
    Not after the capacity version moved while planning: a release there could have given a
    card back as much as another writer took, leaving its counters alike."""
    if plan.snapshot is None or plan.snapshot is not STANDING.snapshot:
        return
    committed = {attempt.pod_id for attempt, outcome, _ in outcomes if outcome == SCHEDULED}
    placed: set[str] = set()
    missed: set[str] = set()
    for attempt in plan.attempts:
        decision = attempt.decision
        if decision.status == SCHEDULED and decision.node:
            (placed if attempt.pod_id in committed else missed).add(decision.node)
    STANDING.confirm(placed, missed)


#: How a conflict's reason ends: a pod whose last reason ends so lost its last race too.
RETRYING = "; retrying"

#: The verdict text of a preemption kept by the commit: its evictions and nominations are written.
PREEMPTS = "preempts"
#: The verdict text of a placement a limit refused under lock: its decision was held back
#: (`hold_back`), and its `batch` says which limit.
HELD_BACK = "held back"


def recheck_all(
    fresh: list[Attempt],
    cards: dict[str, LockedCard],
    added: dict[int, list[int]],
    held: Held | None = None,
    limits: Limits | None = None,
    refused: dict[int, str] | None = None,
) -> dict:
    """Each attempt's (outcome, conflict text), re-checked in queue order; `added` grows by what
    is placed, `held.added` by what is nominated, `limits` by what is admitted. A gang's
    placements and preemptions are checked together and kept only if at least `gang_needed` of
    them still fit; otherwise none of them is, and each says which member and card (or limit)
    failed. A kept preemption is (PENDING, PREEMPTS); a placement that fits its cards but a
    limit no longer is (PENDING, HELD_BACK), its decision held back with the limit's verdict.
    `refused`: id(attempt) -> why, preemptions refused before any card is looked at
    (`preemption.thinned_gangs`): conflicts, as a card taken would be."""
    held = held or Held.empty()
    limits = limits or Limits()
    verdicts: dict[int, tuple[str, str]] = {
        id(a): (Decision.CONFLICT, refused[id(a)]) for a in fresh if refused and id(a) in refused
    }
    refused_by_limit: dict[int, tuple[str, str]] = {}  # id(attempt) -> (code, message)
    gangs: dict[int, list[Attempt]] = {}
    for attempt in fresh:
        if id(attempt) in verdicts:
            continue
        if _claims(attempt) and attempt.group_id is not None and attempt.gang_needed:
            gangs.setdefault(attempt.group_id, []).append(attempt)
    for attempt in fresh:
        if id(attempt) in verdicts:
            continue
        if not _claims(attempt):
            verdicts[id(attempt)] = (attempt.decision.status, "")
            continue
        members = gangs.get(attempt.group_id) if attempt.group_id is not None else None
        if not members:
            mine, why = _recheck_one(attempt, cards, added, held)
            if mine is None:
                verdicts[id(attempt)] = (Decision.CONFLICT, why)
            elif (refusal := limits.refusal(attempt)) is not None:
                verdicts[id(attempt)] = _held_back(attempt, *refusal, limits)
            else:
                _add(held.added if attempt.victims else added, mine)
                held.keep(attempt, cards)
                limits.take(attempt)
                verdicts[id(attempt)] = _kept(attempt)
            continue
        trial = {pk: list(used) for pk, used in added.items()}
        trial_held = Held(
            held.nominated,
            held.victims,
            {pk: list(used) for pk, used in held.added.items()},
            held.nodes,
            dict(held.whole),
            {pk: list(used) for pk, used in held.gone.items()},
            set(held.landed),
        )
        kept, missed = [], []
        for member in members:
            mine, why = _recheck_one(member, cards, trial, trial_held)
            if mine is not None and (refusal := limits.refusal(member)) is not None:
                mine, why = None, refusal[1]
                refused_by_limit[id(member)] = refusal
            if mine is None:
                missed.append((member, why))
            else:
                _add(trial_held.added if member.victims else trial, mine)
                trial_held.keep(member, cards)
                limits.take(member)
                kept.append(member)
        needed = members[0].gang_needed
        short_part = _short_part(members[0].parts_needed, kept)
        if len(kept) >= needed and short_part is None:
            added.clear()
            added.update(trial)
            held.added.clear()
            held.added.update(trial_held.added)
            held.whole.clear()
            held.whole.update(trial_held.whole)
            held.gone.clear()
            held.gone.update(trial_held.gone)
            held.landed.update(trial_held.landed)
            verdicts.update({id(m): _kept(m) for m in kept})
            for m, why in missed:
                hold = refused_by_limit.get(id(m))
                verdicts[id(m)] = (
                    _held_back(m, *hold, limits) if hold is not None else (Decision.CONFLICT, why)
                )
        else:
            for member in kept:
                limits.take(member, -1)
            first_hold = refused_by_limit.get(id(missed[0][0])) if missed else None
            if missed and first_hold is not None:
                text = f"gang: {len(kept)}/{needed} placements within limits; {missed[0][0].key}: {first_hold[1]}"
                verdicts.update({id(m): _held_back(m, first_hold[0], text, limits) for m in members})
                continue
            if missed and short_part is not None and len(kept) >= needed:
                name, have, least = short_part
                first, why = next(((m, w) for m, w in missed if m.part == name), missed[0])
                text = f"gang: subgroup {name}: {have}/{least} placements still fit; {first.key}: {why}"
            elif missed:
                first, why = missed[0]
                text = f"gang: {len(kept)}/{needed} placements still fit; {first.key}: {why}"
            else:  # members planned with the others changed since the snapshot (skipped)
                text = f"gang: {len(kept)}/{needed} placements left; the other members changed since the snapshot"
            verdicts.update({id(m): (Decision.CONFLICT, text) for m in members})
    return verdicts


def _short_part(parts_needed: dict, kept: list[Attempt]) -> tuple[str, int, int] | None:
    """The first gang part whose kept placements fall short of what it needs this cycle:
    (name, kept, needed); None when every part has them."""
    for name, least in parts_needed.items():
        have = sum(1 for attempt in kept if attempt.part == name)
        if have < least:
            return name, have, least
    return None


def _held_back(attempt: Attempt, code: str, message: str, limits: Limits) -> tuple[str, str]:
    """A placement a limit refused under lock: pending with the limit's verdict, as planning
    holds one back."""
    hold_back(attempt.decision, code, message, queue=limits.names.get(attempt.queue_id or 0))
    return PENDING, HELD_BACK


def _claims(attempt: Attempt) -> bool:
    """Whether the attempt takes cards: a placement, or a preemption that evicts."""
    return attempt.decision.status == SCHEDULED or bool(attempt.victims)


def _recheck_one(attempt: Attempt, cards, added, held: Held):
    if attempt.victims:
        return recheck_nomination(attempt, cards, added, held)
    return recheck(attempt, cards, added, held)


def _kept(attempt: Attempt) -> tuple[str, str]:
    return (PENDING, PREEMPTS) if attempt.victims else (SCHEDULED, "")


def victim_holdings(victims: dict[int, tuple]) -> dict[int, list[tuple[str, int, int, int]]]:
    """Each locked victim that is still placed and not being evicted already: its active
    allocations as (card uuid, card pk, MiB, cores)."""
    placed = [pk for pk, (status, *_rest) in victims.items() if status in Pod.BOUND]
    if not placed:
        return {}
    going = set(
        Eviction.objects.filter(victim_id__in=placed, state__in=Eviction.ACTIVE).values_list(
            "victim_id", flat=True
        )
    )
    out: dict[int, list[tuple[str, int, int, int]]] = {}
    for pod_id, uuid, pk, memory, cores in Allocation.objects.filter(
        pod_id__in=[pk for pk in placed if pk not in going], active=True
    ).values_list("pod_id", "card__uuid", "card_id", "memory", "cores"):
        out.setdefault(pod_id, []).append((uuid, pk, memory, cores))
    return out


def write_preemptions(cycle_id: int, outcomes, cards: dict[str, LockedCard], now) -> list[int]:
    """The kept preemptions' `Eviction` rows (one per victim, `requested`) and `Nomination`
    rows (one per granted vGPU, replacing any older ones of the pod; `whole` on the cards an
    exclusive preemptor holds whole). The eviction ids."""
    kept = [attempt for attempt, outcome, why in outcomes if why == PREEMPTS]
    if not kept:
        return []
    decision_ids = dict(
        Decision.objects.filter(cycle_id=cycle_id, pod_id__in=[a.pod_id for a in kept]).values_list(
            "pod_id", "pk"
        )
    )
    expires = now + timedelta(seconds=option("PREEMPT_GRACE_SECONDS"))
    evictions, nominations = [], []
    for attempt in kept:
        for victim_id, kind, why, node, planned in attempt.victims:
            evictions.append(
                Eviction(
                    victim_id=victim_id,
                    preemptor_id=attempt.pod_id,
                    decision_id=decision_ids.get(attempt.pod_id),
                    kind=kind,
                    node=node,
                    cards=list(planned),
                    reason=why,
                    state=Eviction.REQUESTED,
                    created_at=now,
                )
            )
        preemption = attempt.decision.preemption
        whole = set(preemption.whole) if preemption is not None else set()
        holders = [(attempt.pod_id, grants_held(attempt)), *attempt.moves]
        for pod_id, grants in holders:
            for uuid, memory, cores in grants:
                nominations.append(
                    Nomination(
                        pod_id=pod_id,
                        card_id=cards[uuid].pk,
                        memory=memory,
                        cores=cores,
                        whole=pod_id == attempt.pod_id and uuid in whole,
                        created_at=now,
                        expires_at=expires,
                    )
                )
    Nomination.objects.filter(
        pod_id__in=[a.pod_id for a in kept] + [pod_id for a in kept for pod_id, _ in a.moves]
    ).delete()
    Eviction.objects.bulk_create(evictions)
    Nomination.objects.bulk_create(nominations)
    return [eviction.pk for eviction in evictions]


def forget_nominations(plan: CyclePlan, outcomes, now) -> None:
    """A nominated pod placed now holds its cards as allocations: its nominations go, and the
    evictions it asked for whose victims still run are cancelled (the others are settled done)."""
    placed = [a.pod_id for a, outcome, _ in outcomes if outcome == SCHEDULED and a.key in plan.nominated]
    if not placed:
        return
    # evictions before nominations, as `services.evictions` takes them (no lock cycle)
    holding = Allocation.objects.filter(pod_id=OuterRef("victim_id"), active=True)
    Eviction.objects.filter(preemptor_id__in=placed, state=Eviction.REQUESTED).filter(Exists(holding)).update(
        state=Eviction.CANCELLED, message="the preemptor was placed first", finished_at=now, updated_at=now
    )
    Nomination.objects.filter(pod_id__in=placed).delete()


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
        elif attempt.group_id is not None and why == HELD_BACK and attempt.decision.batch is not None:
            hold = attempt.decision.batch
            verdicts[attempt.group_id] = (PodGroup.INQUEUE, hold.reason, hold.message)
    touched = {a.group_id for a, outcome, _ in outcomes if a.group_id is not None and outcome == SCHEDULED}
    ids = sorted(touched | set(verdicts))
    if not ids:
        return []
    # locked before the members are counted: a release judging one of them meanwhile waits
    # and then counts these placements, or this counts its release (`rowlocks`, step 6)
    groups = list(rowlocks.lock_pod_groups(PodGroup.objects.filter(pk__in=ids)))
    bound = dict(
        Pod.objects.filter(group_id__in=ids, status__in=Pod.BOUND)
        .values("group_id")
        .annotate(n=Count("id"))
        .values_list("group_id", "n")
        .order_by()
    )
    waits = []
    for group in groups:
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
