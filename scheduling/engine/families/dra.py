"""Devices of Dynamic Resource Allocation drivers, placed by the cycle like any card.

A DRA device (a ResourceSlice's device of a driver hamiadmin serves, `engine.dra.inventory`)
is stored as a card of mode `dra`, and a pod's ResourceClaims as containers asking this
family's resources (`kube.drastate`): one container per request, the devices its selectors
accept as the pod's `nvidia.com/use-gpuuuid`. So a device-plugin pod never lands on a DRA
device nor a claim on a device-plugin card, while the chain, weights, gangs, queues, quotas,
preemption and the commit's re-check treat both the same.

The resource names are hamiadmin's own and are never read from a pod: they exist only in
the asks the watcher derives from claims (a pod naming them itself is refused). Nothing is
written on the pod: the allocation goes to the claims' status (`kube.binder`).
"""

from __future__ import annotations

from ..errors import PodInvalid
from .base import Family, ResourceNames

#: `Card.mode` of a DRA device: what makes a stored card this family's.
MODE = "dra"
#: The prefix of the family's resource names (refused in a pod's own containers).
PREFIX = "hamiadmin.io/dra-"


def refuse_own_names(containers, key: str) -> None:
    """A pod naming the family's resources itself is refused, naming the field: they are
    hamiadmin's own names for what ResourceClaims ask (the Kubernetes watcher's submissions,
    the REST API's)."""
    for position, container in enumerate(containers if isinstance(containers, list) else []):
        resources = container.get("resources") if isinstance(container, dict) else None
        for section in ("limits", "requests"):
            values = resources.get(section) if isinstance(resources, dict) else None
            for resource in values if isinstance(values, dict) else ():
                if isinstance(resource, str) and resource.startswith(PREFIX):
                    raise PodInvalid(
                        f"{key}[{position}].resources.{section}.{resource}",
                        "hamiadmin's own name for the devices a ResourceClaim asks; "
                        "ask for DRA devices with spec.resourceClaims",
                    )


class Dra(Family):
    name = "dra"
    vendor = "DRA"
    resources = ResourceNames(
        count=f"{PREFIX}devices",
        memory=f"{PREFIX}memory",
        memory_percentage=f"{PREFIX}memory-percentage",
        cores=f"{PREFIX}cores",
    )
    register = ""
    to_allocate = ""
    allocated = ""
    node_lock = ""
