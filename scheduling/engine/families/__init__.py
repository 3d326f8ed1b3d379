"""The device families hamiadmin schedules, by name (`base.Family` says what one is).

HAMi's Ascend chips are one family each (`families.ascend`), built from its chart's configs.

Adding a family: write `families/<name>.py` with a `Family` subclass (its names, codecs and,
if its cards are cut into fixed instances, `partition`), then register one instance at the
bottom of this file (`from .<name> import <Name>`, `<NAME> = register(<Name>())`).
"""

from __future__ import annotations

from .base import Family, Partition, ResourceNames

#: Every registered family by `Family.name`, in registration order (NVIDIA first).
FAMILIES: dict[str, Family] = {}
#: The vendor word of each family but NVIDIA -> its name (`family_of_type`).
_BY_VENDOR: dict[str, str] = {}


def register(family: Family) -> Family:
    """Make `family` known under its name; a second family of the same name is refused."""
    if family.name in FAMILIES:
        raise ValueError(f"device family {family.name!r} is registered already")
    FAMILIES[family.name] = family
    if family.name != "nvidia":
        _BY_VENDOR[family.vendor] = family.name
    return family


def family(name: str) -> Family:
    """The family registered as `name`; KeyError naming the known ones otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"no device family {name!r} (known: {', '.join(FAMILIES)})") from None


def written_annotations() -> tuple[str, ...]:
    """Every pod annotation a registered family's placement writes beside SPEC 8's six."""
    return tuple(dict.fromkeys(key for found in FAMILIES.values() for key in found.writes))


def by_resource(resource: str) -> Family | None:
    """The family one of whose resource names is `resource`, or None."""
    if not resource:
        return None
    for found in FAMILIES.values():
        if resource in found.resources.all():
            return found
    return None


def family_of_type(card_type: str) -> str:
    """The family name of a card of `card_type`: a family other than NVIDIA whose vendor word
    the type is exactly (an Ascend NPU is stored with its chip's commonWord, `Ascend910B3`),
    else `nvidia`. How a stored card knows its family without a column of its own."""
    return _BY_VENDOR.get(card_type, "nvidia")


def family_of_card(card_type: str, mode: str) -> str:
    """`family_of_type`, but a card of mode `dra` (a DRA driver's device) is the DRA family's
    whatever its product name."""
    return "dra" if mode == "dra" else family_of_type(card_type)


def held_allocation(annotations: dict, first: str, second: str) -> str:
    """The cards a pod placed by HAMi holds, as one allocation string: NVIDIA's `first` (else
    `second`, its to-allocate) and each other family's `allocated` (else `to_allocate`),
    container by container. The NVIDIA string itself when no other family wrote any."""
    nvidia = annotations.get(first) or annotations.get(second) or ""
    others = [
        value
        for found in FAMILIES.values()
        if found.name != "nvidia"
        and (value := annotations.get(found.allocated) or annotations.get(found.to_allocate))
        and isinstance(value, str)
    ]
    if not others:
        return nvidia
    parts = [
        part[:-1].split(";") if part.endswith(";") else []
        for part in (nvidia if isinstance(nvidia, str) else "", *others)
    ]
    width = max(len(part) for part in parts)
    return "".join("".join(part[i] for part in parts if i < len(part)) + ";" for i in range(width))


from .ascend import CHART_CONFIGS, Ascend  # noqa: E402  (the families, registered on import)
from .dra import Dra  # noqa: E402
from .nvidia import Nvidia  # noqa: E402

NVIDIA = register(Nvidia())
#: HAMi's Ascend chips (910A, 910B2/B3/B4/B4-1, 310P), one family each, by their names.
ASCEND: dict[str, Ascend] = {config.common_word: Ascend(config) for config in CHART_CONFIGS}
for _chip in ASCEND.values():
    register(_chip)
#: DRA devices (`families.dra`): cards of mode `dra`, asked for through ResourceClaims only.
DRA = register(Dra())

__all__ = [
    "ASCEND",
    "DRA",
    "FAMILIES",
    "NVIDIA",
    "Family",
    "Partition",
    "ResourceNames",
    "by_resource",
    "family",
    "family_of_card",
    "family_of_type",
    "held_allocation",
    "register",
    "written_annotations",
]
