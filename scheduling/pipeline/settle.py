"""Owed decrements: a release never waits for a card another writer holds (issue 29).

A scheduling commit holds its cards' row locks through every write of its cycle; starved of
CPU it held them past the web tier's bound (HAMI_DB_WEB_LOCK_TIMEOUT_MS), and a `complete/`
waiting to lower those cards' counters was answered 503. So a release takes its cards
`SKIP LOCKED` (`rowlocks.lock_cards`): it lowers the counters of the cards it gets, and marks its
allocations on the others released but **owed** (`Allocation.owed`), leaving their counters
as they are. A card then looks fuller than it is for a moment, never emptier: an owed
decrement cannot let anything be over-committed.

Whoever next holds such a card settles what is owed on it (`take_owed`, then `lower`): the
scheduling worker before each cycle it runs on request (`settle_owed`, one query on a partial
index when nothing is owed), the housekeeping, and the next release that gets the card (in
the one UPDATE that releases its own allocations: `services.pods._deactivate_allocations`). A settle clears the
flags it lowers the counters for, in one transaction under the card's lock, so two settlers
(or a settler and a repair) never lower the same decrement twice; capacity becomes visible
when the settle commits, so the capacity version moves then (`CapacityVersion.bump`) and the
next cycle wakes the pods it lets in. The consistency check counts owed allocations with the
active ones: the counters are exactly active plus owed (`consistency.counter_drift`).

On SQLite nothing is locked row by row (the transaction holds the database), so every card
is had at once and nothing is ever owed.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError, connection, transaction

from scheduling.dbretry import lock_wait_ran_out, retry_on_conflict
from scheduling.models import Allocation, CapacityVersion, Card
from scheduling.models.cluster import over_capacity_text

from .commit import update_rows
from .options import option
from .rowlocks import lock_cards
from .triggers import request_cycle

log = logging.getLogger(__name__)

#: The columns a settle (or a release) writes on a card.
COUNTER_FIELDS = ("used_slots", "used_memory", "used_cores", "over_capacity")


def take_owed(card_ids: list[int]) -> dict[int, list[int]]:
    """Clear the owed flags of these cards' allocations, which the caller holds locked: the
    (slots, MiB, cores) per card that their counters are now to be lowered by."""
    if not card_ids:
        return {}
    quote = connection.ops.quote_name
    table = quote(Allocation._meta.db_table)
    columns = {field.name: str(field.column) for field in Allocation._meta.concrete_fields}
    owed, card, memory, cores = (quote(columns[name]) for name in ("owed", "card", "memory", "cores"))
    marks = ", ".join(["%s"] * len(card_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {owed} = %s WHERE {owed} AND {card} IN ({marks})"
            f" RETURNING {card}, {memory}, {cores}",
            [False, *card_ids],
        )
        return add_up(cursor.fetchall())


def add_up(rows) -> dict[int, list[int]]:
    """(card, MiB, cores) rows as (slots, MiB, cores) per card."""
    freed: dict[int, list[int]] = {}
    for card_id, memory, cores in rows:
        total = freed.setdefault(card_id, [0, 0, 0])
        total[0], total[1], total[2] = total[0] + 1, total[1] + memory, total[2] + cores
    return freed


def lower(cards: list[Card], freed: dict[int, list[int]]) -> bool:
    """Lower the counters of these locked cards by `freed` and write them (`over_capacity`
    cleared once a card fits again). Whether any was lowered."""
    changed = [card for card in cards if card.pk in freed]
    for card in changed:
        slots, memory, cores = freed[card.pk]
        card.used_slots -= slots
        card.used_memory -= memory
        card.used_cores -= cores
        if card.over_capacity:
            card.over_capacity = over_capacity_text(
                card.used_slots, card.used_memory, card.used_cores, card.slots, card.memory, card.cores
            )
    # one prepared UPDATE for all (no model save, no bulk_update CASE per column and row)
    update_rows(Card, list(COUNTER_FIELDS), [{"id": card.pk, **_counters(card)} for card in changed])
    return bool(changed)


def _counters(card: Card) -> dict:
    return {name: getattr(card, name) for name in COUNTER_FIELDS}


def owed_cards() -> list[int]:
    """The cards some released allocation still owes a decrement to (the partial index
    `allocation_owed_card`: empty, and cheap to read, when nothing is owed)."""
    return sorted(set(Allocation.objects.filter(owed=True).values_list("card_id", flat=True)))


def owed_and_version() -> tuple[list[int], int]:
    """(`owed_cards`, `CapacityVersion.read`) in one statement (PostgreSQL)."""
    allocations, versions = Allocation._meta.db_table, CapacityVersion._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT ARRAY(SELECT DISTINCT card_id FROM {allocations} WHERE owed ORDER BY 1),"  # noqa: S608
            f" COALESCE((SELECT version FROM {versions} WHERE id = %s), 0)",
            [CapacityVersion.ROW],
        )
        owed, version = cursor.fetchone()
    return list(owed), version


def settle_before_cycle() -> int | None:
    """`settle_owed` before a cycle, and the capacity version after it when that took no
    second read: read with the owed cards (one round trip, not two; ~8 ms a cycle under
    load, issue 29) when nothing was owed; None when something was settled (the settle moved
    it) or elsewhere than PostgreSQL (the cycle's wake reads it then)."""
    if connection.vendor != "postgresql":
        return None
    card_ids, version = owed_and_version()
    if not card_ids:
        return version
    _settle_cards(card_ids, ask_for_cycle=False)
    return None


def settle_owed(*, ask_for_cycle: bool = False) -> int:
    """Settle every owed decrement: the cards locked by primary key (waiting for them at most
    COMMIT_LOCK_TIMEOUT_MS, as a commit does; a card still held then is left for the next
    settler), their flags cleared and their counters lowered, then the capacity version
    moved. `ask_for_cycle`: also ask for a cycle (the housekeeping; the worker plans next
    anyway). The number of cards settled; one query when nothing is owed on PostgreSQL, none
    elsewhere."""
    if connection.vendor != "postgresql":
        return 0  # nothing is owed where every card is had at once (no row locks: every card is had)
    card_ids = owed_cards()
    if not card_ids:
        return 0
    return _settle_cards(card_ids, ask_for_cycle)


def _settle_cards(card_ids: list[int], ask_for_cycle: bool) -> int:
    """`settle_owed` of the cards found owing."""
    try:
        settled = _settle(card_ids)
    except DatabaseError as exc:
        if not lock_wait_ran_out(exc):
            raise
        log.warning(
            "owed decrements of %d card(s) left for later: a card stayed locked: %s", len(card_ids), exc
        )
        return 0
    if settled:
        CapacityVersion.bump()  # after the commit: the next cycle's wake sees the capacity
        if ask_for_cycle:
            request_cycle(f"settled owed decrements of {settled} card(s)")
    return settled


@retry_on_conflict
def _settle(card_ids: list[int]) -> int:
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = {int(option('COMMIT_LOCK_TIMEOUT_MS'))}")
        cards = list(lock_cards(Card.objects.filter(pk__in=card_ids)))
        freed = take_owed([card.pk for card in cards])
        lower(cards, freed)
        return len(freed)
