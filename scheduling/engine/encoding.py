"""SPEC 8: the one place that encodes and decodes HAMi's annotation strings.

What a placement writes on the pod (`placement_annotations`), the allocation string, the
node inventory (`hami.io/node-nvidia-register`) and pair scores (`hami.io/node-nvidia-score`),
and the two shapes pair scores take: a map from unordered UUID pair to score (what the
engine reads) and per card `{other uuid: score}` (what a card row or a scenario lists).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .errors import ScenarioError

#: The vendor in the allocation strings, and the type of a card that names none (SPEC 1).
VENDOR = "NVIDIA"

#: Pod annotations a placement writes (SPEC 8).
NODE = "hami.io/vgpu-node"
TIME = "hami.io/vgpu-time"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
ALLOCATED = "hami.io/vgpu-devices-allocated"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"

#: The largest number an inventory may carry (capacities, NUMA, index, pair scores): they are
#: stored as 32-bit integers, and anything larger is a typo or an attack, refused naming it.
LARGEST = 2**31 - 1


def placement_annotations(
    node: str, allocated: str, placed_at: float | None, phase: str, now: float
) -> dict[str, str]:
    """The six pod annotations of a placement (SPEC 8), as HAMi's device plugin reads them.

    `vgpu-time` is when the pod was scheduled (`placed_at`, or `now` when unknown), in whole
    seconds. `bind-time` is `now`, the time of this write: the device plugin reads it as when
    the bind happened and gives up on a pod left `allocating` for too long after it, so a
    placement bound (or re-bound) later than it was scheduled must not look stale at once.
    Both devices annotations carry the allocation string (`encode_allocation`).
    """
    return {
        NODE: node,
        TIME: str(int(now if placed_at is None else placed_at)),
        TO_ALLOCATE: allocated,
        ALLOCATED: allocated,
        BIND_PHASE: phase,
        BIND_TIME: str(int(now)),
    }


def links_to_pairs(cards: Iterable[tuple[str, Mapping]]) -> dict[frozenset, int]:
    """Per-card `{other uuid: score}` lists as one map from unordered UUID pair to score.

    A pair given on one side only counts for both; given on both sides with different values,
    the higher wins, so a half-updated report cannot make a pair look worse than it is. A card's
    score to itself, booleans and anything not a number are left out; scores are whole numbers,
    and a pair never scores below 0.
    """
    pairs: dict[frozenset, int] = {}
    for uuid, row in cards:
        for other, score in (row or {}).items():
            if other == uuid or isinstance(score, bool) or not isinstance(score, int | float):
                continue
            pair = frozenset((uuid, other))
            pairs[pair] = max(pairs.get(pair, 0), int(score))
    return pairs


def pairs_to_links(uuids: Iterable[str], pairs: Mapping[frozenset, int]) -> dict[str, dict[str, int]]:
    """The inverse of `links_to_pairs`: for each of `uuids`, `{other uuid: score}`, both ways.

    Pairs that name a card outside `uuids` (or only one card) are left out, so passing a
    node's cards, or the cards whose report is accepted, keeps only pairs between them.
    """
    links: dict[str, dict[str, int]] = {uuid: {} for uuid in uuids}
    for pair, score in pairs.items():
        if len(pair) != 2:
            continue
        first, second = sorted(pair)
        if first in links and second in links:
            links[first][second] = score
            links[second][first] = score
    return links


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
    a list of `{"uuid": ..., "score": {uuid: score}}` entries, as `links_to_pairs` keys them."""
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
    return links_to_pairs(raw.items())
