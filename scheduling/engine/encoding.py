"""SPEC 8: the one place that encodes and decodes HAMi's annotation strings."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from .errors import ScenarioError

VENDOR = "NVIDIA"
#: The largest number an inventory may carry (capacities, NUMA, index, pair scores): they are
#: stored as 32-bit integers, and anything larger is a typo or an attack, refused naming it.
LARGEST = 2**31 - 1


def encode_allocation(containers: list[list[tuple[str, int, int]]]) -> str:
    """`hami.io/vgpu-devices-allocated`: each card `UUID,NVIDIA,MEM,CORES:`, each container closed by `;`."""
    return "".join(
        "".join(f"{uuid},{VENDOR},{mem},{cores}:" for uuid, mem, cores in cards) + ";" for cards in containers
    )


def decode_allocation(value: str) -> list[list[tuple[str, int, int]]]:
    """Inverse of `encode_allocation`; raises ScenarioError naming the bad entry."""
    if value == "":
        return []
    if not value.endswith(";"):
        raise ScenarioError("hami.io/vgpu-devices-allocated", "must end with ';'")
    containers = []
    for ci, part in enumerate(value[:-1].split(";")):
        cards = []
        for entry in filter(None, part.split(":")):
            fields = entry.split(",")
            if len(fields) != 4:
                raise ScenarioError(
                    f"hami.io/vgpu-devices-allocated[{ci}]", f"{entry!r} is not UUID,VENDOR,MEM,CORES"
                )
            try:
                cards.append((fields[0], int(fields[2]), int(fields[3])))
            except ValueError:
                raise ScenarioError(
                    f"hami.io/vgpu-devices-allocated[{ci}]", f"{entry!r} has a non-integer MEM or CORES"
                ) from None
        containers.append(cards)
    return containers


@dataclass(frozen=True, slots=True)
class RegisteredCard:
    """One card of `hami.io/node-nvidia-register`."""

    uuid: str
    slots: int
    memory: int
    cores: int
    type: str
    numa: int
    health: bool
    index: int
    mode: str


def encode_node_register(cards: list[RegisteredCard]) -> str:
    return "".join(
        f"{c.uuid},{c.slots},{c.memory},{c.cores},{c.type},{c.numa},{'true' if c.health else 'false'},"
        f"{c.index},{c.mode}:"
        for c in cards
    )


def decode_node_register(value: str) -> list[RegisteredCard]:
    """Both the 9-field form and the older 7-field form (no INDEX, MODE: index by position)."""
    where = "hami.io/node-nvidia-register"
    cards = []
    for position, entry in enumerate(item for item in value.split(":") if item.strip()):
        fields = [f.strip() for f in entry.split(",")]
        if len(fields) not in (7, 9):
            raise ScenarioError(
                f"{where}[{position}]", f"expected 7 or 9 fields, got {len(fields)}: {entry!r}"
            )
        uuid, slots, memory, cores, card_type, numa, health = fields[:7]
        try:
            numbers = [int(slots), int(memory), int(cores), int(numa)]
            index = int(fields[7]) if len(fields) == 9 else position
        except ValueError:
            raise ScenarioError(f"{where}[{position}]", f"non-integer field in {entry!r}") from None
        if not uuid:
            raise ScenarioError(f"{where}[{position}]", "empty UUID")
        if any(n < 0 for n in numbers[:3]):
            raise ScenarioError(f"{where}[{position}]", f"negative capacity in {entry!r}")
        if any(abs(n) > LARGEST for n in (*numbers, index)):
            raise ScenarioError(f"{where}[{position}]", f"a field is larger than {LARGEST} in {entry!r}")
        if health.lower() not in ("true", "false"):
            raise ScenarioError(f"{where}[{position}]", f"health must be true or false, got {health!r}")
        cards.append(
            RegisteredCard(
                uuid=uuid,
                slots=numbers[0],
                memory=numbers[1],
                cores=numbers[2],
                type=card_type,
                numa=numbers[3],
                health=health.lower() == "true",
                index=index,
                mode=fields[8] if len(fields) == 9 else "",
            )
        )
    return cards


def decode_node_scores(value: str) -> dict[frozenset, int]:
    """`hami.io/node-nvidia-score`: JSON pair scores, either `{uuid: {uuid: score}}` or
    a list of `{"uuid": ..., "score": {uuid: score}}` entries."""
    where = "hami.io/node-nvidia-score"
    try:
        raw = json.loads(value) if value else {}
    except json.JSONDecodeError as exc:
        raise ScenarioError(where, f"not JSON: {exc.msg} at {exc.pos}") from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits; [[[[...]]]]
        raise ScenarioError(where, f"not readable JSON: {type(exc).__name__}") from None
    if isinstance(raw, list):
        pairs = {}
        for i, entry in enumerate(raw):
            if not isinstance(entry, dict) or not isinstance(entry.get("uuid"), str):
                raise ScenarioError(f"{where}[{i}]", 'expected {"uuid": ..., "score": {...}}')
            pairs[entry["uuid"]] = entry.get("score") or {}
        raw = pairs
    if not isinstance(raw, dict):
        raise ScenarioError(where, "expected an object of pair scores")
    links: dict[frozenset, int] = {}
    for a, row in raw.items():
        if not isinstance(row, dict):
            raise ScenarioError(f"{where}.{a}", "expected an object of scores")
        for b, score in row.items():
            if isinstance(score, bool) or not isinstance(score, int | float):
                raise ScenarioError(f"{where}.{a}.{b}", f"score must be a number, got {score!r}")
            if (isinstance(score, float) and not math.isfinite(score)) or abs(score) > LARGEST:
                shown = f"{score!r}" if isinstance(score, float) else "a larger integer"
                raise ScenarioError(
                    f"{where}.{a}.{b}", f"score must be a finite number up to {LARGEST}, got {shown}"
                )
            if a != b:
                links[frozenset((a, b))] = int(score)
    return links
