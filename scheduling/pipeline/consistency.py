"""Checks that the counters tell the truth: what tests, operators and the housekeeping run
to trust a card.

Four kinds of drift, each of which should never be found:

- `counter_drift`: a card's `used_*` differ from the sum of its active allocations;
- `over_capacity`: a card holds more than it has (counted from the counters);
- `ghost_allocation`: an active allocation whose pod is not placed (finished, deleted,
  pending again): the card stays held by nobody (HAMi #2923 lost a node's 8 H100s so);
- `unbacked_placement`: a pod shown placed or running that holds no active allocation.

`check()` only reads; `report()` turns findings into metrics and events. The repair is a
write path, `scheduling.services.repair_consistency`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, Sum
from django.db.models.functions import Coalesce

from ..models import Allocation, Card, Event, Pod, record_event
from ..models.cluster import overcommitted_cards
from ..ops import metrics

COUNTER_DRIFT = "counter_drift"
OVER_CAPACITY = "over_capacity"
GHOST_ALLOCATION = "ghost_allocation"
UNBACKED_PLACEMENT = "unbacked_placement"
KINDS = (COUNTER_DRIFT, OVER_CAPACITY, GHOST_ALLOCATION, UNBACKED_PLACEMENT)
#: The kind of the events the check records (one per subject and drift kind, counted again).
EVENT_KIND = Event.CONSISTENCY
_REASONS = {
    COUNTER_DRIFT: "CounterDrift",
    OVER_CAPACITY: "OverCapacity",
    GHOST_ALLOCATION: "GhostAllocation",
    UNBACKED_PLACEMENT: "UnbackedPlacement",
}


def counter_drift(card_ids=None) -> list[dict[str, Any]]:
    """Cards whose `used_*` differ from the sum of their active allocations (should be none).
    `card_ids` narrows the look to those cards."""
    active = Q(allocations__active=True)
    cards = Card.objects.all() if card_ids is None else Card.objects.filter(pk__in=card_ids)
    rows = cards.annotate(
        held_slots=Count("allocations", filter=active),
        held_memory=Coalesce(Sum("allocations__memory", filter=active), 0),
        held_cores=Coalesce(Sum("allocations__cores", filter=active), 0),
    ).values(
        "id", "uuid", "used_slots", "used_memory", "used_cores", "held_slots", "held_memory", "held_cores"
    )
    return [
        dict(card)
        for card in rows
        if (card["used_slots"], card["used_memory"], card["used_cores"])
        != (card["held_slots"], card["held_memory"], card["held_cores"])
    ]


def overcommitted() -> list[str]:
    """UUIDs of cards holding more than their capacity (should be none)."""
    return list(overcommitted_cards().values_list("uuid", flat=True))


def ghost_allocations() -> list[dict[str, Any]]:
    """Active allocations whose pod is not placed: not `scheduled` nor `running`."""
    rows = (
        Allocation.objects.filter(active=True)
        .exclude(pod__status__in=Pod.BOUND)
        .order_by("pod_id", "pk")
        .values("id", "pod_id", "pod__namespace", "pod__name", "pod__status", "card_id", "card__uuid")
    )
    return [
        {
            "allocation": row["id"],
            "pod_id": row["pod_id"],
            "pod": f"{row['pod__namespace']}/{row['pod__name']}",
            "status": row["pod__status"],
            "card_id": row["card_id"],
            "card": row["card__uuid"],
        }
        for row in rows
    ]


def unbacked_placements() -> list[dict[str, Any]]:
    """Pods shown placed or running that hold no active allocation."""
    held = Allocation.objects.filter(pod=OuterRef("pk"), active=True)
    rows = (
        Pod.objects.filter(status__in=Pod.BOUND)
        .exclude(Exists(held))
        .order_by("pk")
        .values("id", "namespace", "name", "status")
    )
    return [
        {"pod_id": row["id"], "pod": f"{row['namespace']}/{row['name']}", "status": row["status"]}
        for row in rows
    ]


@dataclass
class ConsistencyReport:
    """What one check found, by kind; empty lists when the counters tell the truth."""

    counter_drift: list[dict[str, Any]] = field(default_factory=list)
    over_capacity: list[str] = field(default_factory=list)
    ghost_allocations: list[dict[str, Any]] = field(default_factory=list)
    unbacked_placements: list[dict[str, Any]] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.counter_drift or self.over_capacity or self.ghost_allocations or self.unbacked_placements
        )

    def counts(self) -> dict[str, int]:
        return {
            COUNTER_DRIFT: len(self.counter_drift),
            OVER_CAPACITY: len(self.over_capacity),
            GHOST_ALLOCATION: len(self.ghost_allocations),
            UNBACKED_PLACEMENT: len(self.unbacked_placements),
        }

    def lines(self) -> list[str]:
        """One operator line per finding."""
        out = []
        for card in self.counter_drift:
            out.append(
                f"card/{card['uuid']}: counters say {card['used_slots']} slots, {card['used_memory']} MiB,"
                f" {card['used_cores']} cores; active allocations hold {card['held_slots']} slots,"
                f" {card['held_memory']} MiB, {card['held_cores']} cores"
            )
        for uuid in self.over_capacity:
            out.append(f"card/{uuid}: holds more than its capacity")
        for ghost in self.ghost_allocations:
            out.append(
                f"pod/{ghost['pod']}: {ghost['status']} but still holds card {ghost['card']}"
                f" (allocation {ghost['allocation']})"
            )
        for pod in self.unbacked_placements:
            out.append(f"pod/{pod['pod']}: {pod['status']} but holds no card")
        return out


def check() -> ConsistencyReport:
    """Read the four kinds of drift (no locks, no writes)."""
    return ConsistencyReport(
        counter_drift=counter_drift(),
        over_capacity=overcommitted(),
        ghost_allocations=ghost_allocations(),
        unbacked_placements=unbacked_placements(),
    )


def report(found: ConsistencyReport, actor: str = "housekeeping") -> None:
    """Findings as metrics (`hamiadmin_consistency_findings{kind}`) and events (kind
    `consistency`, one per subject and kind, counted again on each check that finds it)."""
    for kind, count in found.counts().items():
        metrics.consistency_found(kind, count)
    subjects = (
        [(COUNTER_DRIFT, f"card/{card['uuid']}") for card in found.counter_drift]
        + [(OVER_CAPACITY, f"card/{uuid}") for uuid in found.over_capacity]
        + [(GHOST_ALLOCATION, f"pod/{ghost['pod']}") for ghost in found.ghost_allocations]
        + [(UNBACKED_PLACEMENT, f"pod/{pod['pod']}") for pod in found.unbacked_placements]
    )
    lines = found.lines()
    for (kind, subject), line in zip(subjects, lines, strict=True):
        record_event(EVENT_KIND, subject, _REASONS[kind], line, actor=actor, severity=Event.WARNING)
