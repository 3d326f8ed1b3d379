"""SPEC 5 and SPEC 7: the card score and the node score, pure functions of asks and usage.

Both are 10 x predicted utilization after the placement, summed over slots, cores and memory.
A card score ranks the cards (binpack: higher first, spread: lower first); a node score
orders the nodes where every container fits (binpack: highest first, spread: lowest first).
"""

from __future__ import annotations

from collections.abc import Iterable

from .annotations import Weights
from .model import Card, Node


def card_score(
    card: Card, ask_memory: int, ask_cores: int, used: tuple[int, int, int], weights: Weights
) -> float:
    """SPEC 5, the card's predicted utilization after one more vGPU of this ask on it:

        score = 10 * ( slotW * (1 + used.slots) / slots
                     + coreW * (ask.cores + used.cores) / cores
                     + memW  * (ask.mem + used.mem) / memory )

    `used` = (slots, MiB, cores) already held, this pod's earlier containers included; a
    dimension whose capacity is 0 adds nothing. Weights (`hami.io/device-scoring-weights`,
    1:1:1 by default) change only this ranking, never fit.
    """
    used_slots, used_memory, used_cores = used
    score = 0.0
    if card.slots:
        score += weights.slot * (1 + used_slots) / card.slots
    if card.cores:
        score += weights.core * (ask_cores + used_cores) / card.cores
    if card.memory:
        score += weights.memory * (ask_memory + used_memory) / card.memory
    return 10 * score


def node_score(node: Node, overlay: Iterable[list[int]]) -> float:
    """SPEC 7, the node's predicted utilization after the placement, over all its cards:

        node score = 10 * ( sum(slots used after)  / sum(slots)
                          + sum(cores used after)  / sum(cores)
                          + sum(memory used after) / sum(memory) )

    "Used after" is each card's usage plus `overlay`, per card (slots, MiB, cores) this pod's
    app containers take; every card counts, also those that could not be taken (unhealthy,
    cordoned). A dimension whose total is 0 adds nothing.
    """
    slots = cores = memory = 0
    used_slots = used_cores = used_memory = 0
    for card, extra in zip(node.cards, overlay, strict=True):
        slots += card.slots
        cores += card.cores
        memory += card.memory
        used_slots += card.used_slots + extra[0]
        used_memory += card.used_memory + extra[1]
        used_cores += card.used_cores + extra[2]
    return utilization_score(slots, used_slots, cores, used_cores, memory, used_memory)


def utilization_score(
    slots: int, used_slots: int, cores: int, used_cores: int, memory: int, used_memory: int
) -> float:
    """`node_score` from a node's totals and its usage after the placement (the one formula
    the per-node and the columnar paths share)."""
    score = 0.0
    if slots:
        score += used_slots / slots
    if cores:
        score += used_cores / cores
    if memory:
        score += used_memory / memory
    return 10 * score
