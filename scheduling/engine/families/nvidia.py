"""NVIDIA, as HAMi v2.10's `pkg/device/nvidia` reads and writes it: the first family.

Names: `nvidia.com/gpu`, `gpumem`, `gpumem-percentage`, `gpucores`; the cards in
`hami.io/node-nvidia-register` (pair scores in `hami.io/node-nvidia-score`), a placement in
`hami.io/vgpu-devices-to-allocate` and `-allocated`, the bind under `hami.io/mutex.lock`.
A card in MIG mode registers its `migProfiles` (`families.mig`): on it a vGPU is a MIG
instance, and a placement also writes `hami.io/vgpu-mig-allocations`, the reservations the
device plugin creates the instances from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..encoding import (
    ALLOCATED,
    REGISTER,
    TO_ALLOCATE,
    VENDOR,
    RegisteredCard,
    decode_node_register,
)
from . import mig
from .base import Family, ResourceNames

if TYPE_CHECKING:
    from ..grants import DeviceGrant


class Nvidia(Family):
    name = "nvidia"
    vendor = VENDOR
    resources = ResourceNames(
        count="nvidia.com/gpu",
        memory="nvidia.com/gpumem",
        memory_percentage="nvidia.com/gpumem-percentage",
        cores="nvidia.com/gpucores",
    )
    register = REGISTER
    scores = "hami.io/node-nvidia-score"
    to_allocate = TO_ALLOCATE
    allocated = ALLOCATED
    node_lock = "hami.io/mutex.lock"
    handshake = "hami.io/node-handshake"
    mode_annotation = "nvidia.com/vgpu-mode"
    writes = (mig.ALLOCATIONS,)

    def decode_register(self, value: str) -> list[RegisteredCard]:
        """HAMi's register, a MIG card's `migProfiles` read as `mig.read_profiles` reads them."""
        return decode_node_register(value, self.register, mig.read_profiles)

    def extra_annotations(self, containers: Sequence[Sequence[DeviceGrant]]) -> dict[str, str]:
        """`hami.io/vgpu-mig-allocations` when any vGPU is a MIG instance: one reservation per
        such vGPU, indexed by container (init containers first) and by card within it."""
        reservations = [
            mig.Reservation(ci, di, grant.uuid, grant.instance.profile, grant.instance.placement)
            for ci, grants in enumerate(containers)
            for di, grant in enumerate(grants)
            if grant.instance is not None
        ]
        return {mig.ALLOCATIONS: mig.encode_reservations(reservations)} if reservations else {}

    def partition(self, card: RegisteredCard) -> mig.Geometry | None:
        """A card registered in MIG mode with profiles is cut into MIG instances."""
        if card.mode == mig.MODE and card.mig_profiles:
            return mig.Geometry(tuple(card.mig_profiles))
        return None
