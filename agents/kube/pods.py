"""Reading a Kubernetes pod (the API server's JSON) into what the scheduler stores. Pure.

Only what decides a placement is kept: the GPU resources of SPEC 2 and the annotations,
minus the ones that are outputs (SPEC 8 placement annotations, written by the binder) or
noise (kubectl's last-applied copy), so writing them back does not look like a new spec.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from scheduling.engine.requests import RESOURCES

NODE = "hami.io/vgpu-node"
TIME = "hami.io/vgpu-time"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
ALLOCATED = "hami.io/vgpu-devices-allocated"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
PLACEMENT_ANNOTATIONS = (NODE, TIME, TO_ALLOCATE, ALLOCATED, BIND_PHASE, BIND_TIME)
IGNORED_ANNOTATIONS = (*PLACEMENT_ANNOTATIONS, "kubectl.kubernetes.io/last-applied-configuration")

FINAL_PHASES = {"Succeeded": "succeeded", "Failed": "failed"}

_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}  # fmt: skip


def quantity(value):
    """A Kubernetes quantity as an int when it is a whole number ("2", "3k", "1Ki", "1000m");
    anything else is returned unchanged, for the engine to refuse with the field named."""
    if not isinstance(value, str):
        return value
    found = _QUANTITY.match(value.strip())
    if not found:
        return value
    number, suffix = found.group(1), found.group(2) or ""
    scale = _SUFFIX.get(suffix)
    if scale is None:  # an exponent: 1e3
        scale = Decimal(10) ** int(suffix[1:])
    try:
        amount = Decimal(number) * scale
    except InvalidOperation:
        return value
    return int(amount) if amount == amount.to_integral_value() else value


def gpu_resources(resources) -> dict:
    """limits/requests restricted to the SPEC 2 resources, quantities read."""
    if not isinstance(resources, dict):
        return {}
    kept = {}
    for section in ("limits", "requests"):
        values = resources.get(section)
        if isinstance(values, dict):
            picked = {name: quantity(values[name]) for name in RESOURCES if name in values}
            if picked:
                kept[section] = picked
    return kept


def container_view(container) -> dict:
    if not isinstance(container, dict):
        return {"name": "", "resources": {}}
    return {"name": container.get("name") or "", "resources": gpu_resources(container.get("resources"))}


def meta(pod: dict) -> dict:
    return pod.get("metadata") or {}


def spec(pod: dict) -> dict:
    return pod.get("spec") or {}


def key_of(pod: dict) -> tuple[str, str]:
    return meta(pod).get("namespace") or "default", meta(pod).get("name") or ""


def uid_of(pod: dict) -> str:
    return meta(pod).get("uid") or ""


def node_of(pod: dict) -> str:
    return spec(pod).get("nodeName") or ""


def scheduler_of(pod: dict) -> str:
    return spec(pod).get("schedulerName") or "default-scheduler"


def final_status(pod: dict) -> str | None:
    """`succeeded` / `failed` once the pod has run to an end, else None."""
    return FINAL_PHASES.get((pod.get("status") or {}).get("phase", ""))


def asks_gpu(pod: dict) -> bool:
    """Whether any container or init container names a SPEC 2 resource."""
    containers = (spec(pod).get("containers") or []) + (spec(pod).get("initContainers") or [])
    return any(container_view(c)["resources"] for c in containers)


def submission(pod: dict) -> dict:
    """Keyword arguments of `services.submit_pod` for this pod."""
    namespace, name = key_of(pod)
    annotations = {
        key: value
        for key, value in (meta(pod).get("annotations") or {}).items()
        if key not in IGNORED_ANNOTATIONS and isinstance(value, str)
    }
    priority = spec(pod).get("priority")
    return {
        "namespace": namespace,
        "name": name,
        "annotations": annotations,
        "containers": [container_view(c) for c in spec(pod).get("containers") or []],
        "init_containers": [container_view(c) for c in spec(pod).get("initContainers") or []],
        "priority": priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        "uid": uid_of(pod),
    }
