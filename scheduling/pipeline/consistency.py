"""Checks that the counters tell the truth: what tests and operators run to trust a card."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce

from ..models import Card
from ..models.cluster import overcommitted_cards


def counter_drift() -> list[dict[str, Any]]:
    """Cards whose `used_*` differ from the sum of their active allocations (should be none)."""
    active = Q(allocations__active=True)
    cards = Card.objects.annotate(
        held_slots=Count("allocations", filter=active),
        held_memory=Coalesce(Sum("allocations__memory", filter=active), 0),
        held_cores=Coalesce(Sum("allocations__cores", filter=active), 0),
    ).values("uuid", "used_slots", "used_memory", "used_cores", "held_slots", "held_memory", "held_cores")
    return [
        dict(card)
        for card in cards
        if (card["used_slots"], card["used_memory"], card["used_cores"])
        != (card["held_slots"], card["held_memory"], card["held_cores"])
    ]


def overcommitted() -> list[str]:
    """UUIDs of cards holding more than their capacity (should be none)."""
    return list(overcommitted_cards().values_list("uuid", flat=True))
