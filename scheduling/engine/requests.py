"""SPEC 2: what each container asks for, read from limits then requests, resource by resource.

Two forms HAMi accepts are read as HAMi reads them, so its manifests keep working:
`gpumem-percentage: 0` is the memory left out (the memory default applies, but the container
does not want whole cards: 0 cores by default, as HAMi books it), and `gpucores` above
100 is 100, with a warning naming the container and the value given (`ContainerAsk.warnings`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from .errors import PodInvalid
from .families import FAMILIES, NVIDIA
from .families.ascend import Ascend
from .model import ResourceDefaults

if TYPE_CHECKING:
    import numpy as np

#: The resource names of the NVIDIA family (`families.nvidia`), the one a container asks here.
GPU = NVIDIA.resources.count
GPUMEM = NVIDIA.resources.memory
GPUMEM_PERCENTAGE = NVIDIA.resources.memory_percentage
GPUCORES = NVIDIA.resources.cores
RESOURCES = NVIDIA.resources.all()
#: Every registered family's resource names, and the family each names (NVIDIA's first).
FAMILY_OF_RESOURCE = {
    name: family.name for family in FAMILIES.values() for name in family.resources.all() if name
}
_INTEGER = re.compile(r"[+-]?[0-9]+")
#: A number followed by a unit (`16Gi`, `500M`, `1.5k`): refused, with a word on units.
_WITH_UNIT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)\s*[A-Za-z]+")
#: The most cores a container can be given: a whole card.
WHOLE_CARD_CORES = 100
#: A card's MiB, one card's (int) or a numpy column of many.
CardMemory = TypeVar("CardMemory", int, "np.ndarray")


@dataclass(frozen=True, slots=True)
class ContainerAsk:
    """One container's GPU request. `memory` is MiB per vGPU, or None to use `memory_percentage`.

    `warnings` are (field, message) pairs for what was accepted but changed (`gpucores` above
    100); they never decide a node verdict, so they stay out of a pod's shape.
    `family`: the device family whose cards it asks (`families`), NVIDIA's unless its
    resources name another; a container asks one family.
    """

    name: str
    count: int
    memory: int | None
    memory_percentage: int
    cores: int
    warnings: tuple[tuple[str, str], ...] = ()
    family: str = "nvidia"

    def memory_on(self, card_memory: CardMemory) -> CardMemory | int:
        """MiB one vGPU of this container takes on a card of `card_memory` MiB (SPEC 2): the
        fixed ask, else its percentage of the card rounded down (integer arithmetic, so a
        numpy column of card MiB gives each card's figure, the same as card by card)."""
        return self.memory if self.memory is not None else card_memory * self.memory_percentage // 100


def _as_int(value, where: str, what: str, label: str) -> int:
    if isinstance(value, bool):
        raise PodInvalid(where, f"{label}: must be {what}, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        return int(value.strip())
    if isinstance(value, str) and _WITH_UNIT.fullmatch(value.strip()):
        raise PodInvalid(where, f"{label}: must be {what}, got {value!r}: a plain number, without a unit")
    raise PodInvalid(where, f"{label}: must be {what}, got {value!r}")


def _lookup(resources: object, where: str) -> dict[str, tuple[object, str]]:
    """Each known resource from limits, else requests, with the path it came from."""
    if resources is None:
        resources = {}
    if not isinstance(resources, dict):
        raise PodInvalid(where, "must be an object with limits and/or requests")
    found: dict[str, tuple[object, str]] = {}
    for section in ("requests", "limits"):  # limits last, so they win
        values = resources.get(section) or {}
        if not isinstance(values, dict):
            raise PodInvalid(f"{where}.{section}", "must be an object")
        for name in values:
            if name in FAMILY_OF_RESOURCE:
                found[name] = (values[name], f"{where}.{section}.{name}")
    return found


def parse_container(
    container: dict, where: str, defaults: ResourceDefaults, vnpu_mode: str = ""
) -> ContainerAsk | None:
    """The container's ask, or None when it asks for no GPU. Raises PodInvalid naming the field.
    `vnpu_mode`: the pod's `huawei.com/vnpu-mode`, read by an Ascend ask."""
    if not isinstance(container, dict):
        raise PodInvalid(where, "must be an object")
    name = container.get("name") or ""
    if not isinstance(name, str):
        raise PodInvalid(f"{where}.name", "must be a string")
    label = f"container {name!r}" if name else f"container {where}"
    found = _lookup(container.get("resources"), f"{where}.resources")
    if not found:
        return None
    families = list(dict.fromkeys(FAMILY_OF_RESOURCE[name] for name in found))
    if len(families) > 1:
        named = ", ".join(sorted(found))
        raise PodInvalid(
            f"{where}.resources",
            f"{label}: asks two device families ({named}); give each family its own container",
        )
    chip = FAMILIES[families[0]]
    if isinstance(chip, Ascend):
        return _ascend_ask(chip, name, found, label, vnpu_mode)

    def read(resource: str, what: str, low: int, high: int | None) -> int | None:
        if resource not in found:
            return None
        raw, path = found[resource]
        value = _as_int(raw, path, what, label)
        if value < low or (high is not None and value > high):
            raise PodInvalid(path, f"{label}: must be {what}, got {raw!r}")
        return value

    names = chip.resources  # NVIDIA's, or the DRA family's (`families.dra`): the same shape
    count = read(names.count, "a positive integer", 1, None)
    memory = read(names.memory, "a non-negative integer (MiB)", 0, None)
    percentage = read(names.memory_percentage, "a percentage from 0 to 100", 0, 100)
    cores = read(names.cores, "a non-negative integer (percent of the card)", 0, None)

    warnings: tuple[tuple[str, str], ...] = ()
    # Whole cards: no memory named, and no percentage or 100 (HAMi: a percentage of 0 shares).
    whole_card = memory is None and percentage in (None, 100)
    if percentage == 0:
        percentage = None  # HAMi's form of "not given": the memory default applies
    if cores is not None and cores > WHOLE_CARD_CORES:
        warnings = (
            (
                found[names.cores][1],
                f"{label}: {cores} is above {WHOLE_CARD_CORES}, taken as {WHOLE_CARD_CORES}",
            ),
        )
        cores = WHOLE_CARD_CORES
    if count is None:
        count = 1
    if cores is None:
        cores = defaults.exclusive_cores if whole_card else defaults.cores
    if memory is None and percentage is None:
        percentage = defaults.memory_percentage
    return ContainerAsk(
        name=name,
        count=count,
        memory=memory,
        memory_percentage=percentage or 0,
        cores=cores,
        warnings=warnings,
        family=chip.name,
    )


def _ascend_ask(
    chip: Ascend, name: str, found: dict[str, tuple[object, str]], label: str, vnpu_mode: str
) -> ContainerAsk | None:
    """An Ascend container's ask as HAMi's webhook and scheduler read it (`families.ascend`):
    NPUs of the template MiB its memory rounds up to, 0 cores (a template split books none)."""
    names = chip.resources

    def read(resource: str, what: str, low: int) -> int | None:
        if resource not in found:
            return None
        raw, path = found[resource]
        value = _as_int(raw, path, what, label)
        if value < low or value > 2**31 - 1:
            raise PodInvalid(path, f"{label}: must be {what}, got {raw!r}")
        return value

    count = read(names.count, "a positive integer", 1)
    if count is None:
        return None  # memory or cores alone: HAMi reads no Ascend ask without the count
    memory = read(names.memory, "a non-negative integer (MiB)", 0)
    cores = read(names.cores, "a non-negative integer", 0)
    if cores:
        raise PodInvalid(
            found[names.cores][1],
            f"{label}: {names.cores} is only supported in hami-core (soft split) mode",
        )
    where = found[names.memory][1] if names.memory in found else found[names.count][1]
    per_npu = chip.ask_memory(memory, count, vnpu_mode, where, label)
    return ContainerAsk(
        name=name, count=count, memory=per_npu, memory_percentage=0, cores=0, family=chip.name
    )


def parse_containers(
    containers, where: str, defaults: ResourceDefaults, vnpu_mode: str = ""
) -> list[ContainerAsk | None]:
    if containers is None:
        return []
    if not isinstance(containers, list):
        raise PodInvalid(where, "must be a list of containers")
    return [parse_container(c, f"{where}[{i}]", defaults, vnpu_mode) for i, c in enumerate(containers)]
