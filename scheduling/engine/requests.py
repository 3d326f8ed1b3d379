"""SPEC 2: what each container asks for, read from limits then requests, resource by resource."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import PodInvalid
from .model import ResourceDefaults

GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
GPUCORES = "nvidia.com/gpucores"
RESOURCES = (GPU, GPUMEM, GPUMEM_PERCENTAGE, GPUCORES)
_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class ContainerAsk:
    """One container's GPU request. `memory` is MiB per vGPU, or None to use `memory_percentage`."""

    name: str
    count: int
    memory: int | None
    memory_percentage: int
    cores: int


def _as_int(value, where: str, what: str, label: str) -> int:
    if isinstance(value, bool):
        raise PodInvalid(where, f"{label}: must be {what}, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        return int(value.strip())
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
        for name in RESOURCES:
            if name in values:
                found[name] = (values[name], f"{where}.{section}.{name}")
    return found


def parse_container(container: dict, where: str, defaults: ResourceDefaults) -> ContainerAsk | None:
    """The container's ask, or None when it asks for no GPU. Raises PodInvalid naming the field."""
    if not isinstance(container, dict):
        raise PodInvalid(where, "must be an object")
    name = container.get("name") or ""
    if not isinstance(name, str):
        raise PodInvalid(f"{where}.name", "must be a string")
    label = f"container {name!r}" if name else f"container {where}"
    found = _lookup(container.get("resources"), f"{where}.resources")
    if not found:
        return None

    def read(resource: str, what: str, low: int, high: int | None) -> int | None:
        if resource not in found:
            return None
        raw, path = found[resource]
        value = _as_int(raw, path, what, label)
        if value < low or (high is not None and value > high):
            raise PodInvalid(path, f"{label}: must be {what}, got {raw!r}")
        return value

    count = read(GPU, "a positive integer", 1, None)
    memory = read(GPUMEM, "a non-negative integer (MiB)", 0, None)
    percentage = read(GPUMEM_PERCENTAGE, "a percentage from 1 to 100", 1, 100)
    cores = read(GPUCORES, "a percentage from 0 to 100", 0, 100)

    if count is None:
        count = 1
    if cores is None:
        whole_card = (memory is None and percentage is None) or (memory is None and percentage == 100)
        cores = defaults.exclusive_cores if whole_card else defaults.cores
    if memory is None and percentage is None:
        percentage = defaults.memory_percentage
    return ContainerAsk(name=name, count=count, memory=memory, memory_percentage=percentage or 0, cores=cores)


def parse_containers(containers, where: str, defaults: ResourceDefaults) -> list[ContainerAsk | None]:
    if containers is None:
        return []
    if not isinstance(containers, list):
        raise PodInvalid(where, "must be a list of containers")
    return [parse_container(c, f"{where}[{i}]", defaults) for i, c in enumerate(containers)]
