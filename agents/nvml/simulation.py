"""A node described in a file instead of read from NVML, for demos and tests without GPUs.

The file is ``{"name", "labels", "annotations", "devices": [card, ...]}`` with
cards in the SPEC 9 form (no ``used``) and SPEC 9 defaults. It is checked the
way the simulator checks scenarios, so the demo fails early and names the
field instead of sending the API something it would reject.

A card may carry ``observed`` (the measurements a real agent reads from NVML:
``memory``, ``utilization``, ``temperature``, ``power``, ``ecc_errors``, ``xid``).
They are the centre of what the simulated agent reports: each report sways busy,
temperature and power slowly with time (`measured`), so the dashboard's telemetry
columns and history move as on a real node. A card without it reports no
measurements ("not measured"), as a card whose NVML answers nothing.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import yaml

from agents.nvml.config import ConfigError, parse_string_map

CARD_KEYS = (
    "uuid",
    "index",
    "type",
    "slots",
    "memory",
    "cores",
    "numa",
    "health",
    "links",
    "mode",
    "observed",
)
#: A card's measurements: key -> (whole number?, least, most), as the report endpoint takes them.
OBSERVED_KEYS = {
    "memory": (True, 0, 2**31 - 1),
    "utilization": (True, 0, 100),
    "temperature": (True, 0, 200),
    "power": (False, 0, 100000),
    "ecc_errors": (True, 0, 2**31 - 1),
    "xid": (True, 0, 2**31 - 1),
}
#: How far busy (percentage points), temperature (degrees) and power (share of the centre)
#: sway around the file's values, and over how many seconds one sway lasts.
SWAY_BUSY, SWAY_TEMPERATURE, SWAY_POWER, SWAY_PERIOD = 20, 6, 0.25, 300.0
NODE_KEYS = ("name", "labels", "annotations", "devices")


class NodeFileError(ConfigError):
    """The node description file is malformed; the message says where."""


def load_node_file(path: str | Path, node: str | None = None) -> dict:
    """Read and check a node file; return the report body it describes.

    ``node`` (the ``--node`` flag) replaces the file's ``name`` when given.
    """
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise NodeFileError(f"{path}: cannot read node file: {error.strerror or error}") from error
    except yaml.YAMLError as error:
        raise NodeFileError(f"{path}: not valid YAML/JSON: {error}") from error
    try:
        return node_report(document, node)
    except NodeFileError as error:
        raise NodeFileError(f"{path}: {error}") from error


def node_report(document: object, node: str | None = None) -> dict:
    if not isinstance(document, dict):
        raise NodeFileError("expected a mapping with 'name' and 'devices'")
    unknown = sorted(str(key) for key in document if key not in NODE_KEYS)
    if unknown:
        raise NodeFileError(f"unknown key {unknown[0]!r} (known: {', '.join(NODE_KEYS)})")
    name = node or document.get("name")
    if not isinstance(name, str) or not name.strip():
        raise NodeFileError("name: required, a non-empty string")
    try:
        labels = parse_string_map("labels", document.get("labels"))
        annotations = parse_string_map("annotations", document.get("annotations"))
    except ConfigError as error:
        raise NodeFileError(str(error)) from error
    raw_cards = document.get("devices")
    if not isinstance(raw_cards, list):
        raise NodeFileError("devices: required, a list of cards")
    cards = [_card(position, raw) for position, raw in enumerate(raw_cards)]
    _check_unique(cards)
    _settle_links(cards)
    return {"node": name.strip(), "labels": labels, "annotations": annotations, "devices": cards}


def _card(position: int, raw: object) -> dict:
    where = f"devices[{position}]"
    if not isinstance(raw, dict):
        raise NodeFileError(f"{where}: expected a mapping")
    unknown = sorted(str(key) for key in raw if key not in CARD_KEYS)
    if unknown:
        raise NodeFileError(f"{where}.{unknown[0]}: unknown field (known: {', '.join(CARD_KEYS)})")
    uuid = raw.get("uuid")
    if not isinstance(uuid, str) or not uuid.strip():
        raise NodeFileError(f"{where}.uuid: required, a non-empty string")
    if "memory" not in raw:
        raise NodeFileError(f"{where}.memory: required (MiB)")
    card = {
        "uuid": uuid.strip(),
        "index": _whole(where, "index", raw.get("index", position)),
        "type": _text(where, "type", raw.get("type", "NVIDIA")),
        "slots": _whole(where, "slots", raw.get("slots", 10)),
        "memory": _whole(where, "memory", raw["memory"]),
        "cores": _whole(where, "cores", raw.get("cores", 100)),
        "numa": _whole(where, "numa", raw.get("numa", 0)),
        "health": raw.get("health", True),
        "links": raw.get("links") or {},  # copied below, once known to be a mapping
    }
    if not isinstance(card["health"], bool):
        raise NodeFileError(f"{where}.health: expected true or false, got {card['health']!r}")
    if not isinstance(card["links"], dict):
        raise NodeFileError(f"{where}.links: expected a mapping of card UUID to pair score")
    card["links"] = dict(card["links"])
    for other, score in card["links"].items():
        if isinstance(score, bool) or not isinstance(score, int) or score < 0:
            raise NodeFileError(f"{where}.links.{other}: expected a whole number >= 0, got {score!r}")
    if "mode" in raw:
        card["mode"] = _text(where, "mode", raw["mode"])
    if raw.get("observed") is not None:
        card["observed"] = _observed(where, raw["observed"])
    return card


def _observed(where: str, raw: object) -> dict:
    if not isinstance(raw, dict):
        raise NodeFileError(f"{where}.observed: expected a mapping of measurements")
    unknown = sorted(str(key) for key in raw if key not in OBSERVED_KEYS)
    if unknown:
        raise NodeFileError(f"{where}.observed.{unknown[0]}: unknown (known: {', '.join(OBSERVED_KEYS)})")
    values = {}
    for key, value in raw.items():
        whole, least, most = OBSERVED_KEYS[key]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or (whole and value != int(value)) or not least <= value <= most:
            kind = "a whole number" if whole else "a number"
            raise NodeFileError(
                f"{where}.observed.{key}: expected {kind} from {least} to {most}, got {value!r}"
            )
        values[key] = int(value) if whole else float(value)
    return values


def measured(body: dict, now: float) -> dict:
    """The report of `body` at time `now` (seconds): each card's `observed` swayed around the
    file's values, every card on its own phase, within the ranges the endpoint accepts.
    Memory in use stays as written (a process holds its memory; the file says how much)."""
    report = copy.deepcopy(body)
    for card in report["devices"]:
        centre = card.get("observed")
        if not centre:
            continue
        wave = math.sin(2 * math.pi * now / SWAY_PERIOD + card["index"] * 1.3)
        if "utilization" in centre:
            card["observed"]["utilization"] = _clamp(round(centre["utilization"] + SWAY_BUSY * wave), 0, 100)
        if "temperature" in centre:
            card["observed"]["temperature"] = _clamp(
                round(centre["temperature"] + SWAY_TEMPERATURE * wave), 0, 200
            )
        if "power" in centre:
            card["observed"]["power"] = round(max(centre["power"] * (1 + SWAY_POWER * wave), 0.0), 1)
    return report


def _clamp(value: int, least: int, most: int) -> int:
    return min(max(value, least), most)


def _whole(where: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NodeFileError(f"{where}.{name}: expected a whole number >= 0, got {value!r}")
    return value


def _text(where: str, name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise NodeFileError(f"{where}.{name}: expected a non-empty string, got {value!r}")
    return value.strip()


def _check_unique(cards: list[dict]) -> None:
    for key in ("uuid", "index"):
        seen: set = set()
        for position, card in enumerate(cards):
            if card[key] in seen:
                raise NodeFileError(f"devices[{position}].{key}: {card[key]!r} appears twice")
            seen.add(card[key])


def _settle_links(cards: list[dict]) -> None:
    """Make pair scores symmetric, refuse links to unknown cards or that disagree, drop zeros."""
    by_uuid = {card["uuid"]: card for card in cards}
    for position, card in enumerate(cards):
        for other, score in card["links"].items():
            if other not in by_uuid or other == card["uuid"]:
                raise NodeFileError(f"devices[{position}].links.{other}: not another card of this node")
            back = by_uuid[other]["links"].get(card["uuid"])
            if back is not None and back != score:
                raise NodeFileError(
                    f"devices[{position}].links.{other}: {score} here but {back} on {other}; the two sides must agree"
                )
    for card in cards:
        for other, score in list(card["links"].items()):
            by_uuid[other]["links"].setdefault(card["uuid"], score)
    for card in cards:
        card["links"] = {other: score for other, score in card["links"].items() if score > 0}
