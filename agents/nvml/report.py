"""The report body: what NVML read, shaped by the node configuration. Pure, no I/O.

The body is ``{"node", "labels", "annotations", "devices"}`` with cards in the
SPEC 9 card form (without ``used``), which is what
``POST /api/v1/agents/report/`` accepts and what the scheduler reasons about.
"""

from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal

from agents.nvml.config import NodeConfig
from agents.nvml.inventory import CardReading, NodeReading, PairReading

NVLINK_SCORE = 100

# SPEC 6.8: the PCIe path between two cards without NVLink, by common ancestor.
PCIE_SCORES = {
    "same-board": 60,
    "single-switch": 50,
    "multiple-switches": 40,
    "host-bridge": 30,
    "same-cpu": 20,
    "across-cpus": 10,
}


def card_type(model: str) -> str:
    """``NVIDIA-<model>`` without doubling the vendor: ``Tesla T4`` -> ``NVIDIA-Tesla T4``,
    ``NVIDIA H100 80GB HBM3`` -> ``NVIDIA-H100 80GB HBM3``; an unknown model is ``NVIDIA``.
    """
    name = model.strip()
    for prefix in ("NVIDIA ", "NVIDIA-"):
        if name.startswith(prefix):
            name = name[len(prefix) :].strip()
            break
    return f"NVIDIA-{name}" if name else "NVIDIA"


def pair_score(pair: PairReading) -> int:
    """Each NVLink link counts 100; without NVLink the PCIe path decides; unknown is 0."""
    if pair.nvlinks > 0:
        return pair.nvlinks * NVLINK_SCORE
    return PCIE_SCORES.get(pair.pcie_path, 0)


def scaled(amount: int, factor: Decimal) -> int:
    """``floor(amount * factor)`` in decimal arithmetic, so 100 * 0.29 is 29."""
    return int((Decimal(amount) * factor).to_integral_value(rounding=ROUND_FLOOR))


def reported_cards(reading: NodeReading, config: NodeConfig) -> list[CardReading]:
    return sorted(
        (card for card in reading.cards if not config.excludes(card.uuid, card.index)),
        key=lambda card: card.index,
    )


def card_entry(card: CardReading, links: dict[str, int], config: NodeConfig) -> dict:
    entry = {
        "uuid": card.uuid,
        "index": card.index,
        "type": card_type(card.model),
        "slots": config.split_count,
        "memory": scaled(card.memory_mib, config.memory_scaling),
        "cores": scaled(100, config.core_scaling),
        "numa": card.numa,
        "health": card.healthy,
        "links": links,
    }
    if config.mode is not None:
        entry["mode"] = config.mode
    observed = observed_entry(card)
    if observed:
        entry["observed"] = observed
    return entry


def observed_entry(card: CardReading) -> dict:
    """The card's measurements as the report's `observed` object: only what NVML answered,
    clamped to the ranges the scheduler accepts (a sensor glitch must not refuse the report)."""
    usage = card.usage
    if usage is None:
        return {}
    values = {
        "memory": usage.memory_used_mib,
        "utilization": None if usage.utilization is None else min(max(usage.utilization, 0), 100),
        "temperature": None if usage.temperature is None else min(max(usage.temperature, 0), 200),
        "power": None if usage.power_watts is None else min(max(usage.power_watts, 0.0), 100000.0),
        "ecc_errors": usage.ecc_errors,
        "xid": usage.last_xid,
    }
    return {key: value for key, value in values.items() if value is not None}


def build_report(node: str, reading: NodeReading, config: NodeConfig) -> dict:
    """The report body for ``node``: excluded cards vanish, also from other cards' links.

    ``links`` lists only reported cards with a positive score, the same score
    on both sides of a pair.
    """
    cards = reported_cards(reading, config)
    reported = {card.uuid for card in cards}
    links: dict[str, dict[str, int]] = {card.uuid: {} for card in cards}
    for pair in reading.pairs:
        score = pair_score(pair)
        if score > 0 and pair.first in reported and pair.second in reported and pair.first != pair.second:
            links[pair.first][pair.second] = score
            links[pair.second][pair.first] = score
    return {
        "node": node,
        "labels": dict(config.labels),
        "annotations": dict(config.annotations),
        "devices": [card_entry(card, links[card.uuid], config) for card in cards],
    }


def unmatched_exclusions(reading: NodeReading, config: NodeConfig) -> list[str]:
    """Exclusions that name no card on this node: usually a typo worth a warning."""
    return [
        str(selector)
        for selector in config.exclude
        if not any(selector.matches(card.uuid, card.index) for card in reading.cards)
    ]
