"""SPEC 8: the one place that encodes and decodes HAMi's annotation strings.

What a placement writes on the pod (`placement_annotations`), the allocation string, the
node inventory (`hami.io/node-nvidia-register`, HAMi's JSON list or the older colon form)
and pair scores (`hami.io/node-nvidia-score`),
and the two shapes pair scores take: a map from unordered UUID pair to score (what the
engine reads) and per card `{other uuid: score}` (what a card row or a scenario lists).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ScenarioError

#: The vendor in the allocation strings, and the type of a card that names none (SPEC 1):
#: the NVIDIA family's (`families.nvidia`); other families pass their own to the codecs here.
VENDOR = "NVIDIA"

#: Pod annotations a placement writes (SPEC 8).
NODE = "hami.io/vgpu-node"
TIME = "hami.io/vgpu-time"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
ALLOCATED = "hami.io/vgpu-devices-allocated"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
PLACEMENT_ANNOTATIONS = (NODE, TIME, TO_ALLOCATE, ALLOCATED, BIND_PHASE, BIND_TIME)

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
    own = vendor_part(allocated, VENDOR)
    found = {
        NODE: node,
        TIME: str(int(now if placed_at is None else placed_at)),
        TO_ALLOCATE: own,
        ALLOCATED: own,
        BIND_PHASE: phase,
        BIND_TIME: str(int(now)),
    }
    if own is None:  # no NVIDIA card: another family's annotations carry the placement
        del found[TO_ALLOCATE], found[ALLOCATED]
    return found  # type: ignore[return-value]


def vendor_part(allocated: str, vendor: str) -> str | None:
    """The entries of one vendor in an allocation string of several (every container's `;`
    kept), as that family's own annotation carries them: the string itself when every entry
    is `vendor`'s, None when it holds cards but none of `vendor`'s."""
    containers = [part.split(":") for part in allocated[:-1].split(";")] if allocated else []
    entries = [entry for cards in containers for entry in cards if entry]
    if all(entry.split(",")[1:2] == [vendor] for entry in entries):
        return allocated
    if not any(entry.split(",")[1:2] == [vendor] for entry in entries):
        return None
    return "".join(
        "".join(f"{entry}:" for entry in cards if entry and entry.split(",")[1:2] == [vendor]) + ";"
        for cards in containers
    )


def links_to_pairs(cards: Iterable[tuple[str, Mapping]]) -> dict[tuple[str, str], int]:
    """Per-card `{other uuid: score}` lists as one map from unordered UUID pair to score.

    A pair given on one side only counts for both; given on both sides with different values,
    the higher wins, so a half-updated report cannot make a pair look worse than it is. A card's
    score to itself, booleans and anything not a number are left out; scores are whole numbers,
    and a pair never scores below 0.
    """
    pairs: dict[tuple[str, str], int] = {}
    for uuid, row in cards:
        for other, score in (row or {}).items():
            if other == uuid or isinstance(score, bool) or not isinstance(score, int | float):
                continue
            pair = pair_key(uuid, other)
            pairs[pair] = max(pairs.get(pair, 0), int(score))
    return pairs


def pair_key(a: str, b: str) -> tuple[str, str]:
    """The key of an unordered card pair in `links_to_pairs`' map: the two UUIDs in order. A
    tuple, not a frozenset: a node's 28 pairs at 50,000 nodes are 1.4 million keys, and a
    frozenset is four times a pair tuple's size (issue 29: engine memory at 50,000 nodes)."""
    return (a, b) if a <= b else (b, a)


def pairs_to_links(uuids: Iterable[str], pairs: Mapping[tuple[str, str], int]) -> dict[str, dict[str, int]]:
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


def encode_allocation(containers: Sequence[Sequence[tuple[str, int, int]]], vendor: str = VENDOR) -> str:
    """`hami.io/vgpu-devices-allocated`: each card `UUID,VENDOR,MEM,CORES:` (`vendor`, NVIDIA
    unless a family says otherwise), each container closed by `;`."""
    return "".join(
        "".join(f"{uuid},{vendor},{mem},{cores}:" for uuid, mem, cores in cards) + ";" for cards in containers
    )


def decode_allocation(value: str, where: str = ALLOCATED) -> list[list[tuple[str, int, int]]]:
    """Inverse of `encode_allocation` (any vendor); raises ScenarioError naming the bad entry
    under `where`, the annotation it was read from."""
    if value == "":
        return []
    if not value.endswith(";"):
        raise ScenarioError(where, "must end with ';'")
    containers = []
    for ci, part in enumerate(value[:-1].split(";")):
        cards = []
        for entry in filter(None, part.split(":")):
            fields = entry.split(",")
            if len(fields) != 4:
                raise ScenarioError(f"{where}[{ci}]", f"{entry!r} is not UUID,VENDOR,MEM,CORES")
            try:
                cards.append((fields[0], int(fields[2]), int(fields[3])))
            except ValueError:
                raise ScenarioError(f"{where}[{ci}]", f"{entry!r} has a non-integer MEM or CORES") from None
        containers.append(cards)
    return containers


@dataclass(frozen=True, slots=True)
class RegisteredCard:
    """One card of `hami.io/node-nvidia-register`; `mig_profiles` what a family's profile
    reader made of its `migProfiles` (HAMi v2.10's MIG cards), () when it has none."""

    uuid: str
    slots: int
    memory: int
    cores: int
    type: str
    numa: int
    health: bool
    index: int
    mode: str
    mig_profiles: tuple[Any, ...] = ()


REGISTER = "hami.io/node-nvidia-register"

#: The fields of a card in the register, in the order of the colon form, named as HAMi's JSON
#: form names them; errors of either form name them so (`hami.io/node-nvidia-register[2].devmem`).
REGISTER_FIELDS = ("id", "count", "devmem", "devcore", "type", "numa", "health", "index", "mode")

#: What separates cards and containers in the allocation annotation: a UUID holding one would
#: shift every card after it onto the wrong container.
_SEPARATORS = (",", ":", ";")
#: An integer as the colon form writes one (Python's int() also takes `1_000` and other scripts' digits).
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def encode_node_register(cards: list[RegisteredCard]) -> str:
    """The colon form, 9 fields per card (what older device plugins and our NVML agent write)."""
    return "".join(
        f"{c.uuid},{c.slots},{c.memory},{c.cores},{c.type},{c.numa},{'true' if c.health else 'false'},"
        f"{c.index},{c.mode}:"
        for c in cards
    )


#: Reads a card's `migProfiles` (the raw JSON value, None when left out, and where it is).
ProfileReader = Callable[[object, str], tuple[Any, ...]]


def decode_node_register(
    value: str, key: str = REGISTER, read_profiles: ProfileReader | None = None
) -> list[RegisteredCard]:
    """HAMi's node inventory in either form of SPEC 8, raising ScenarioError naming the card and
    the field (`hami.io/node-nvidia-register[2].devmem`; `key` is the annotation's name).

    A value whose first character after whitespace is `[` is the JSON list HAMi 2.8 and later
    write: one object per card, a field Go leaves out being its zero value (0, "", false: a
    card without `health` is unhealthy), keys this scheduler does not use ignored. Anything
    else is the colon form, `UUID,COUNT,MEM,CORES,TYPE,NUMA,HEALTH,INDEX,MODE:` per card, or
    the older 7 fields without INDEX and MODE (the position in the list is the index).
    With `read_profiles`, a JSON card's `migProfiles` is read by it (else ignored).
    """
    if value.lstrip().startswith("["):
        return _register_json(value, key, read_profiles)
    return _register_colons(value, key)


def _register_uuid(uuid: str, where: str) -> str:
    if not uuid.strip():
        raise ScenarioError(where, "required: the card's UUID, a non-empty string")
    if any(mark in uuid for mark in _SEPARATORS):
        raise ScenarioError(where, f"must not contain ',', ':' or ';', got {uuid!r}")
    return uuid


def _register_number(value: object, where: str, low: int, from_text: bool = True) -> int:
    """A 32-bit integer from `low` up: the colon form's text (`from_text`), or a JSON integer."""
    what = "a non-negative integer" if low == 0 else "an integer"
    bounds = f"up to {LARGEST}" if low == 0 else f"from {low} to {LARGEST}"
    if from_text and isinstance(value, str):
        if not _DECIMAL.fullmatch(value):
            raise ScenarioError(where, f"must be {what}, got {value!r}")
        if len(value) > 20:  # int() refuses over 4300 digits; no such number is meant anyway
            raise ScenarioError(where, f"must be {what} {bounds}, got a larger integer")
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(where, f"must be {what}, got {value!r}")
    if value < low or value > LARGEST:
        shown = value if value.bit_length() <= 64 else "a larger integer"
        raise ScenarioError(where, f"must be {what} {bounds}, got {shown}")
    return value


def _register_colons(value: str, key: str) -> list[RegisteredCard]:
    cards = []
    for position, entry in enumerate(item for item in value.split(":") if item.strip()):
        where = f"{key}[{position}]"
        fields = [f.strip() for f in entry.split(",")]
        if len(fields) not in (7, 9):
            raise ScenarioError(
                where,
                f"expected 7 or 9 fields (UUID,COUNT,MEM,CORES,TYPE,NUMA,HEALTH[,INDEX,MODE]), "
                f"got {len(fields)}: {entry!r}",
            )
        named = dict(zip(REGISTER_FIELDS, fields, strict=False))
        health = named["health"]
        if health.lower() not in ("true", "false"):
            raise ScenarioError(f"{where}.health", f"must be true or false, got {health!r}")
        cards.append(
            RegisteredCard(
                uuid=_register_uuid(named["id"], f"{where}.id"),
                slots=_register_number(named["count"], f"{where}.count", 0),
                memory=_register_number(named["devmem"], f"{where}.devmem", 0),
                cores=_register_number(named["devcore"], f"{where}.devcore", 0),
                type=named["type"],
                numa=_register_number(named["numa"], f"{where}.numa", -LARGEST),
                health=health.lower() == "true",
                index=_register_number(named["index"], f"{where}.index", -LARGEST)
                if "index" in named
                else position,
                mode=named.get("mode", ""),
            )
        )
    return cards


def _register_json(value: str, key: str, read_profiles: ProfileReader | None) -> list[RegisteredCard]:
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ScenarioError(key, f"not JSON: {exc.msg} at {exc.pos}") from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits; [[[[...]]]]
        raise ScenarioError(key, f"not readable JSON: {type(exc).__name__}") from None
    if not isinstance(raw, list):
        raise ScenarioError(key, "expected a JSON list of cards")
    return [_json_card(entry, f"{key}[{position}]", read_profiles) for position, entry in enumerate(raw)]


def _json_card(entry: object, where: str, read_profiles: ProfileReader | None = None) -> RegisteredCard:
    if not isinstance(entry, dict):
        raise ScenarioError(where, f"expected an object (one card), got {type(entry).__name__}")
    uuid = entry.get("id")
    if not isinstance(uuid, str):
        raise ScenarioError(f"{where}.id", "required: the card's UUID, a non-empty string")
    health = entry.get("health")
    if health is not None and not isinstance(health, bool):
        raise ScenarioError(f"{where}.health", f"must be true or false, got {health!r}")
    return RegisteredCard(
        uuid=_register_uuid(uuid, f"{where}.id"),
        slots=_json_number(entry, "count", where, 0),
        memory=_json_number(entry, "devmem", where, 0),
        cores=_json_number(entry, "devcore", where, 0),
        type=_json_text(entry, "type", where),
        numa=_json_number(entry, "numa", where, -LARGEST),
        health=bool(health),
        index=_json_number(entry, "index", where, 0),
        mode=_json_text(entry, "mode", where),
        mig_profiles=read_profiles(entry.get("migProfiles"), f"{where}.migProfiles") if read_profiles else (),
    )


def _json_text(entry: dict, key: str, where: str) -> str:
    """A string field; left out (or null) it is Go's zero value, ""."""
    found = entry.get(key)
    if found is None:
        return ""
    if not isinstance(found, str):
        raise ScenarioError(f"{where}.{key}", f"must be a string, got {found!r}")
    return found


def _json_number(entry: dict, key: str, where: str, low: int) -> int:
    """An integer field; left out (or null) it is Go's zero value, 0. A string or a float is
    refused, as Go refuses to read one into an integer."""
    found = entry.get(key)
    if found is None:
        return 0
    return _register_number(found, f"{where}.{key}", low, from_text=False)


def decode_node_scores(value: str) -> dict[tuple[str, str], int]:
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
