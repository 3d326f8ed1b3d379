"""Kubernetes quantities and a pod's effective request (SPEC 10).

A quantity is written as Kubernetes writes it (`"4"`, `"500m"`, `"16Gi"`, `"1e3"`, `"3k"`) or
given as a number. Amounts are kept as whole integers in each resource's canonical unit, rounded
up as Kubernetes rounds them (`Quantity.MilliValue()` for cpu, `Value()` for the rest): cpu in
millicores, memory and ephemeral-storage in bytes, pods and extended resources as counts.

Public API:
- `parse(value)`: the exact amount as a `Decimal`, or None when it is not a quantity.
- `quantity(value)`: the kube reader's form: an int for a whole quantity that fits 64 bits,
  anything else returned unchanged (for the engine to refuse naming the field).
- `amount(resource, value, field)`: the canonical integer amount; PodInvalid naming `field`.
- `amounts(values, field)`: a resource map (`allocatable`, `requests`) read with `amount`.
- `effective_request(containers, init_containers, where)`: the pod's request per resource,
  as Kubernetes computes it; the GPU resources of SPEC 2 are left out (decided on the cards).
- `CPU`, `MEMORY`, `EPHEMERAL_STORAGE`, `PODS`, `STANDARD`: the resource names that are not
  extended resources.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal, DecimalException

from .errors import PodInvalid
from .requests import FAMILY_OF_RESOURCE as GPU_RESOURCES

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
#: Resources that are not extended: absent from a node's `allocatable`, they are not limited.
STANDARD = frozenset((CPU, MEMORY, EPHEMERAL_STORAGE, PODS))

#: Whole quantities beyond a 64-bit integer are refused (Kubernetes' own limit).
LARGEST_QUANTITY = 2**63 - 1

_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
#: Exponents past this are not quantities (and would make Decimal work for nothing).
_LARGEST_EXPONENT = 400


def parse(value) -> Decimal | None:
    """The exact amount of a quantity string or a finite number; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    found = _QUANTITY.match(value.strip())
    if not found:
        return None
    number, suffix = found.group(1), found.group(2) or ""
    try:
        scale = _SUFFIX.get(suffix)
        if scale is None:  # an exponent: 1e3
            exponent = int(suffix[1:])
            if abs(exponent) > _LARGEST_EXPONENT:
                return None
            scale = Decimal(10) ** exponent
        return Decimal(number) * scale
    except (DecimalException, ValueError):
        return None


def quantity(value):
    """A Kubernetes quantity as an int when it is a whole number ("2", "3k", "1Ki", "1000m")
    that fits 64 bits; anything else is returned unchanged, for the engine to refuse with the
    field named."""
    if not isinstance(value, str):
        return value
    exact = parse(value)
    if exact is None or abs(exact) > LARGEST_QUANTITY or exact != exact.to_integral_value():
        return value
    return int(exact)


def amount(resource: str, value, field: str) -> int:
    """`value` of `resource` as a whole number in its canonical unit (cpu: millicores), rounded
    up. Raises PodInvalid naming `field` for what is not a non-negative quantity."""
    exact = parse(value)
    if exact is None:
        raise PodInvalid(field, f'must be a Kubernetes quantity such as "4", "500m" or "16Gi", got {value!r}')
    if exact < 0:
        raise PodInvalid(field, f"must not be negative, got {value!r}")
    if resource == CPU:
        exact *= 1000
    whole = int(exact.to_integral_value(rounding=ROUND_CEILING))
    if whole > LARGEST_QUANTITY:
        raise PodInvalid(field, f"out of range: {value!r}")
    return whole


def amounts(values, field: str) -> dict[str, int]:
    """A resource-name -> quantity map (a node's `allocatable`, a container's `requests`) read
    with `amount`; `field` names the map. Raises PodInvalid naming the entry at fault."""
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise PodInvalid(field, f"must be a map of resource name to quantity, got {type(values).__name__}")
    read = {}
    for name, value in values.items():
        if not isinstance(name, str) or not name:
            raise PodInvalid(field, f"resource names must be non-empty strings, got {name!r}")
        read[name] = amount(name, value, f"{field}.{name}")
    return read


def container_request(container, where: str) -> dict[str, int]:
    """One container's requests, each defaulting to its limit (as the API server defaults
    them), SPEC 2 GPU resources (and every device family's, `families`) left out."""
    if not isinstance(container, dict):
        raise PodInvalid(where, "must be an object")
    resources = container.get("resources") or {}
    if not isinstance(resources, dict):
        raise PodInvalid(f"{where}.resources", "must be an object with limits and/or requests")
    limits = amounts(resources.get("limits"), f"{where}.resources.limits")
    requests = amounts(resources.get("requests"), f"{where}.resources.requests")
    merged = {**limits, **requests}
    return {name: value for name, value in merged.items() if name not in GPU_RESOURCES}


def is_sidecar(container) -> bool:
    """An init container that keeps running beside the app containers (`restartPolicy: Always`)."""
    return isinstance(container, dict) and container.get("restartPolicy") == "Always"


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def _most(total: dict[str, int], more: dict[str, int]) -> None:
    for name, value in more.items():
        if value > total.get(name, 0):
            total[name] = value


def effective_request(containers, init_containers=(), where: str = "") -> dict[str, int]:
    """The pod's request per resource, as Kubernetes computes it: the larger of (the app
    containers and every sidecar, summed) and, for each regular init container, its own request
    plus the sidecars declared before it (they run beside it). Resources none asks are absent.
    Raises PodInvalid naming the container field at fault."""
    prefix = f"{where}." if where else ""
    apps = containers or []
    inits = init_containers or []
    if not isinstance(apps, list):
        raise PodInvalid(f"{prefix}containers", "must be a list of containers")
    if not isinstance(inits, list):
        raise PodInvalid(f"{prefix}initContainers", "must be a list of containers")
    running: dict[str, int] = {}
    for i, container in enumerate(apps):
        _add(running, container_request(container, f"{prefix}containers[{i}]"))
    sidecars: dict[str, int] = {}
    largest_init: dict[str, int] = {}
    for i, container in enumerate(inits):
        request = container_request(container, f"{prefix}initContainers[{i}]")
        if is_sidecar(container):
            _add(sidecars, request)
            continue
        during = dict(sidecars)
        _add(during, request)
        _most(largest_init, during)
    _add(running, sidecars)
    _most(running, largest_init)
    return running
