"""Node configuration: how a node's cards are offered to the scheduler.

An operator decides per node how many vGPUs share a card (split count), whether
memory and compute are over- or under-committed (scaling), and which cards the
scheduler must not see (exclusion). These come from a YAML/JSON file and/or
flags; flags win. Bad values fail with a message naming the field, before the
agent reports anything.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path

import yaml


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the field."""


@dataclass(frozen=True)
class CardSelector:
    """Names one card to exclude, by UUID or by NVML index."""

    uuid: str | None = None
    index: int | None = None

    def matches(self, uuid: str, index: int) -> bool:
        return uuid == self.uuid if self.uuid is not None else index == self.index

    def __str__(self) -> str:
        return self.uuid if self.uuid is not None else str(self.index)


@dataclass(frozen=True)
class NodeConfig:
    """How this node's cards are offered.

    Scalings are kept as ``Decimal`` so that ``floor(100 * 0.29)`` is 29, as an
    operator reading the file expects, not the 28 that binary floats give.
    """

    split_count: int = 10
    memory_scaling: Decimal = Decimal(1)
    core_scaling: Decimal = Decimal(1)
    exclude: tuple[CardSelector, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    mode: str | None = None

    def excludes(self, uuid: str, index: int) -> bool:
        return any(selector.matches(uuid, index) for selector in self.exclude)


KNOWN_KEYS = ("split_count", "memory_scaling", "core_scaling", "exclude", "labels", "annotations", "mode")
_INDEX = re.compile(r"^\d+$")


def load_config(path: str | Path | None) -> NodeConfig:
    """Read a YAML or JSON config file (JSON is valid YAML); no path gives the defaults."""
    if path is None:
        return NodeConfig()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read config file: {error.strerror or error}") from error
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML/JSON: {error}") from error
    if document is None:
        return NodeConfig()
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(document).__name__}")
    try:
        return config_from_mapping(document)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from error


def config_from_mapping(document: dict) -> NodeConfig:
    """Validate a settings mapping; unknown keys are errors so typos do not pass silently."""
    unknown = sorted(str(key) for key in document if key not in KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} (known: {', '.join(KNOWN_KEYS)})")
    config = NodeConfig()
    if "split_count" in document:
        config = replace(config, split_count=parse_split_count(document["split_count"]))
    if "memory_scaling" in document:
        config = replace(config, memory_scaling=parse_scaling("memory_scaling", document["memory_scaling"]))
    if "core_scaling" in document:
        config = replace(config, core_scaling=parse_scaling("core_scaling", document["core_scaling"]))
    if "exclude" in document:
        config = replace(config, exclude=parse_exclusions("exclude", document["exclude"]))
    for key in ("labels", "annotations"):
        if key in document:
            config = replace(config, **{key: parse_string_map(key, document[key])})
    if "mode" in document and document["mode"] is not None:
        if not isinstance(document["mode"], str) or not document["mode"].strip():
            raise ConfigError("mode: expected a non-empty string such as 'hami-core'")
        config = replace(config, mode=document["mode"].strip())
    return config


def parse_split_count(value: object) -> int:
    if isinstance(value, bool):
        raise ConfigError("split_count: expected a whole number >= 1")
    if isinstance(value, str) and _INDEX.match(value.strip()):
        value = int(value.strip())
    if not isinstance(value, int) or value < 1:
        raise ConfigError(f"split_count: expected a whole number >= 1, got {value!r}")
    return value


def parse_scaling(name: str, value: object) -> Decimal:
    """A positive finite factor; text is taken digit for digit, floats by their shortest repr."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{name}: expected a positive number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name}: expected a positive finite number, got {value!r}")
    try:
        factor = Decimal(repr(value) if isinstance(value, float) else str(value).strip())
    except ArithmeticError as error:
        raise ConfigError(f"{name}: expected a positive number, got {value!r}") from error
    if not factor.is_finite() or factor <= 0:
        raise ConfigError(f"{name}: expected a positive finite number, got {value!r}")
    return factor


def parse_exclusions(name: str, value: object) -> tuple[CardSelector, ...]:
    """Cards to hide: integers or digit strings are NVML indexes, other strings UUIDs.

    A single string may hold several entries separated by commas, as flags do.
    """
    items = value if isinstance(value, list) else [value]
    selectors: list[CardSelector] = []
    for position, item in enumerate(items):
        where = f"{name}[{position}]" if isinstance(value, list) else name
        if isinstance(item, bool) or not isinstance(item, int | str):
            raise ConfigError(f"{where}: expected a card UUID or index, got {item!r}")
        if isinstance(item, int):
            if item < 0:
                raise ConfigError(f"{where}: a card index cannot be negative, got {item}")
            selectors.append(CardSelector(index=item))
            continue
        parts = [part.strip() for part in item.split(",") if part.strip()]
        if not parts:
            raise ConfigError(f"{where}: expected a card UUID or index, got an empty string")
        for part in parts:
            selectors.append(CardSelector(index=int(part)) if _INDEX.match(part) else CardSelector(uuid=part))
    return tuple(selectors)


def parse_string_map(name: str, value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{name}: expected a mapping of strings, got {type(value).__name__}")
    result: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{name}: keys must be non-empty strings, got {key!r}")
        if not isinstance(item, str | int | float) or isinstance(item, bool):
            raise ConfigError(f"{name}.{key}: expected a string, got {item!r}")
        result[key] = str(item)
    return result


def with_flags(
    config: NodeConfig,
    *,
    split_count: str | None = None,
    memory_scaling: str | None = None,
    core_scaling: str | None = None,
    exclude: list[str] | None = None,
) -> NodeConfig:
    """Apply command-line values over the file: flags replace values, exclusions add up."""
    if split_count is not None:
        config = replace(config, split_count=_as_flag("--split-count", parse_split_count, split_count))
    if memory_scaling is not None:
        config = replace(
            config,
            memory_scaling=_as_flag("--memory-scaling", parse_scaling, "memory_scaling", memory_scaling),
        )
    if core_scaling is not None:
        config = replace(
            config, core_scaling=_as_flag("--core-scaling", parse_scaling, "core_scaling", core_scaling)
        )
    for item in exclude or ():
        config = replace(
            config, exclude=config.exclude + _as_flag("--exclude", parse_exclusions, "exclude", item)
        )
    return config


def _as_flag(flag, parse, *args):
    """Re-label a field error with the flag the operator actually typed."""
    try:
        return parse(*args)
    except ConfigError as error:
        message = str(error).split(": ", 1)[-1]
        raise ConfigError(f"{flag}: {message}") from error
