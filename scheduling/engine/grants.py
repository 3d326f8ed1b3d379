"""What a container is given: one `DeviceGrant` per vGPU. It lies below both the decision that
lists the grants and the device families that write them into annotations, so neither imports
the other for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class DeviceGrant:
    """One vGPU given to a container: which card, how many MiB and cores; on a card cut into
    instances (MIG), the instance (`families.mig.Instance`: profile and placement)."""

    uuid: str
    memory: int
    cores: int
    index: int = 0
    instance: Any = None
    #: The device family of the card (`families`): which annotations carry this grant.
    family: str = "nvidia"

    def as_dict(self) -> dict:
        found = {"uuid": self.uuid, "memory": self.memory, "cores": self.cores}
        if self.family != "nvidia":
            found["family"] = self.family
        if self.instance is not None:
            placement = self.instance.placement
            found["profile"] = self.instance.profile
            found["placement"] = {"start": placement.start, "size": placement.size}
        return found
