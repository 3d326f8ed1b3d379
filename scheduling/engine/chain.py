"""The GPU policy chain (SPEC 6) as small pieces: one class per filter or sort key.

Adding a policy is adding a class here and registering it under its annotation name.
Filters remove cards or pick among the fitting ones; sort keys only rank.
"""

from __future__ import annotations

from functools import cmp_to_key
from itertools import combinations
from typing import Protocol

TOLERANCE = 1e-9


class Ranked(Protocol):
    """What sort keys read of a card under evaluation."""

    score: float
    numa: int
    index: int


class SortKey:
    """A sort key maps a card to a number; lower comes first. The first key that differs decides."""

    name = ""

    def value(self, card: Ranked) -> float:  # pragma: no cover - interface
        raise NotImplementedError


class BinpackKey(SortKey):
    """Higher predicted utilization first: fill busy cards, keep empty ones whole."""

    name = "binpack"

    def value(self, card: Ranked) -> float:
        return -card.score


class SpreadKey(SortKey):
    """Lower predicted utilization first: spread tenants across cards."""

    name = "spread"

    def value(self, card: Ranked) -> float:
        return card.score


class NumaKey(SortKey):
    """Lower NUMA node number first."""

    name = "numa"

    def value(self, card: Ranked) -> float:
        return card.numa


class MutexFilter:
    """Only cards with no tenants pass (check 6 of SPEC 4). Guarantees no tenant at placement only."""

    name = "mutex"

    @staticmethod
    def rejects(used_slots: int) -> bool:
        return used_slots > 0


class TopologyFilter:
    """Pick the fitting cards by NVLink/PCIe pair scores (SPEC 6.8), NVIDIA only.

    One card: the one least linked to the other fitting cards, keeping well-linked cards
    for multi-card work. n cards: the n-combination with the highest summed pair score.
    Ties go to what the chain ranked first (combinations compared as lists of ranks).
    """

    name = "topology-aware"
    max_combinations = 200_000

    def select(self, ranked: list, count: int, pair_score) -> list:
        """`pair_score(a, b)` gives the score between two of the `ranked` cards."""
        if len(ranked) <= count:
            return ranked[:count]
        if count == 1:
            best, best_sum = None, None
            for card in ranked:
                total = sum(pair_score(card, other) for other in ranked if other is not card)
                if best_sum is None or total < best_sum:
                    best, best_sum = card, total
            return [best]
        best_combo, best_sum = None, None
        for n, combo in enumerate(combinations(ranked, count)):
            if n >= self.max_combinations:
                break
            total = sum(pair_score(a, b) for a, b in combinations(combo, 2))
            # combinations() yields in rank order, so the first maximum wins ties.
            if best_sum is None or total > best_sum:
                best_combo, best_sum = combo, total
        return list(best_combo)


FILTERS = {cls.name: cls() for cls in (MutexFilter, TopologyFilter)}
SORT_KEYS = {cls.name: cls() for cls in (BinpackKey, SpreadKey, NumaKey)}


def _compare_with(keys):
    def compare(a, b) -> int:
        for key in keys:
            va, vb = key.value(a), key.value(b)
            if abs(va - vb) >= TOLERANCE:
                return -1 if va < vb else 1
        return (a.index > b.index) - (a.index < b.index)

    return cmp_to_key(compare)


def rank(cards: list, keys: tuple[str, ...]) -> list:
    """Sort cards by the chain's keys in order, then by index; values within 1e-9 are equal.

    Sorting on exact values is fast and right unless two values differ by less than the
    tolerance without being equal; only then is the tolerant comparison used.
    """
    key_objects = [SORT_KEYS[name] for name in keys]
    if len(cards) < 2:
        return list(cards)
    ranked = sorted(cards, key=lambda c: (*[k.value(c) for k in key_objects], c.index))
    for key in key_objects:
        values = sorted(key.value(c) for c in ranked)
        for low, high in zip(values, values[1:], strict=False):
            if low != high and high - low < TOLERANCE:
                return sorted(cards, key=_compare_with(key_objects))
    return ranked


def ranking_order(cards: list, keys: tuple[str, ...]) -> tuple[list, list[str | None]]:
    """`rank`, plus for each card the name of the key that put it after its predecessor
    ("index" when every key tied; None for the first). Used to explain the chosen node."""
    key_objects = [SORT_KEYS[name] for name in keys]
    ranked = rank(cards, keys)
    decided: list[str | None] = [None] if ranked else []
    for prev, card in zip(ranked, ranked[1:], strict=False):
        name = "index"
        for key in key_objects:
            if abs(key.value(prev) - key.value(card)) >= TOLERANCE:
                name = key.name
                break
        decided.append(name)
    return ranked, decided
