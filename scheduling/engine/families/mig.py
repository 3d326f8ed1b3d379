"""NVIDIA dynamic MIG as HAMi v2.10 schedules it: profiles, placements, the smallest fit.

A card its device plugin runs in MIG mode (`mode: mig`) registers the profiles it may be cut
into (`migProfiles`: name, MiB, compute share, slices, and each profile's possible
placements `{start, size}` in memory slices, as NVML reports them). A pod on it gets one MIG
instance per vGPU, not a share: the smallest profile (by MiB, then slices) that holds the
ask, at the first placement that overlaps no instance held already. Profiles named `1g.*` and
`3g.*` take the highest free start, the others the lowest (HAMi's balanced packing, which
keeps a 7-slice A100 able to take 3g+2g+1g+1g). The geometry is what limits a card: a card
whose free slices hold no placement of a profile big enough refuses the pod
(`CardMigTopologyInfeasible`), whatever MiB the card has left.

Beyond HAMi, the chosen profile must also hold the ask's cores (`nvidia.com/gpucores`): HAMi
picks by MiB alone and may grant fewer cores than asked; with no cores asked (the default)
both pick the same profile.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from .. import reasons as R
from ..encoding import LARGEST
from ..errors import ScenarioError

#: The pod annotation the device plugin reads the reservations from (HAMi v2.10).
ALLOCATIONS = "hami.io/vgpu-mig-allocations"
#: The card mode of a MIG card, and the `nvidia.com/vgpu-mode` value that asks for one.
MODE = "mig"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an instance sits: `size` memory slices from slice `start`."""

    start: int
    size: int

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size


@dataclass(frozen=True, slots=True)
class Profile:
    """One MIG profile a card may be cut into (HAMi's `MigProfile`, wire names in brackets):
    `name` (`name`, `2g.10gb`), `memory` MiB (`memoryMB`), `cores` percent of the card's
    compute (`core`), `slices` (`sliceCount`), `placements` where an instance of it may sit."""

    name: str
    memory: int
    cores: int
    slices: int
    placements: tuple[Placement, ...]

    def ordered(self) -> tuple[Placement, ...]:
        """The placements in the order HAMi tries them: `1g.`/`3g.` from the highest start."""
        high = self.name.startswith(("1g.", "3g."))
        return tuple(sorted(self.placements, key=lambda p: -p.start if high else p.start))

    def as_wire(self) -> dict:
        return {
            "name": self.name,
            "memoryMB": self.memory,
            "core": self.cores,
            "sliceCount": self.slices,
            "placements": [{"start": p.start, "size": p.size} for p in self.placements],
        }


@dataclass(frozen=True, slots=True)
class Instance:
    """A MIG instance held on a card: its profile and placement (and the profile's MiB and
    cores, what the vGPU takes of the card)."""

    profile: str
    placement: Placement
    memory: int = field(default=0, compare=False)
    cores: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Geometry:
    """A MIG card's profiles and the instances its tenants hold. Immutable: a card that takes
    or frees an instance gets a new one (`take`, `free`), so copies of a card never share it."""

    reason: ClassVar[str] = R.CARD_MIG_INFEASIBLE
    stage: ClassVar[str] = "mig"

    profiles: tuple[Profile, ...]
    held: tuple[Instance, ...] = ()

    @property
    def by_size(self) -> tuple[Profile, ...]:
        """The profiles in the order HAMi tries them: by MiB, then by slices."""
        return tuple(sorted(self.profiles, key=lambda p: (p.memory, p.slices)))

    def occupied(self, taken: Iterable[Placement] = ()) -> list[Placement]:
        return [instance.placement for instance in self.held] + list(taken)

    def choose(self, memory: int, cores: int, taken: Iterable[Placement] = ()) -> Instance | None:
        """The instance a vGPU of `memory` MiB and `cores` gets: the smallest profile that holds
        both with a free placement (besides `taken`, what this pod took already), or None."""
        occupied = self.occupied(taken)
        for profile in self.by_size:
            if profile.memory < memory or profile.cores < cores:
                continue
            for placement in profile.ordered():
                if not any(placement.overlaps(other) for other in occupied):
                    return Instance(profile.name, placement, profile.memory, profile.cores)
        return None

    def needed(self, memory: int, cores: int) -> Profile | None:
        """The smallest profile that holds the ask on an empty card, or None (none does)."""
        return next((p for p in self.by_size if p.memory >= memory and p.cores >= cores), None)

    def free_profiles(self, taken: Iterable[Placement] = ()) -> list[str]:
        """The profiles that still have a free placement, smallest first."""
        occupied = self.occupied(taken)
        return [
            p.name
            for p in self.by_size
            if any(not any(q.overlaps(other) for other in occupied) for q in p.placements)
        ]

    def shortfall(self, memory: int, cores: int, taken: Iterable[Placement] = ()) -> dict:
        """Why a vGPU of `memory` MiB and `cores` finds no instance here, as data: the profile
        it `needs` (None: no profile holds it) and the profiles whose slices are still `left`."""
        needed = self.needed(memory, cores)
        return {
            "needs": needed.name if needed is not None else None,
            "left": self.free_profiles(taken),
            "memory": memory,
            "cores": cores,
        }

    def profile(self, name: str) -> Profile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def as_wire(self) -> list[dict]:
        """The profiles as the register writes them (`migProfiles`)."""
        return [profile.as_wire() for profile in self.profiles]

    def emptied(self) -> Geometry:
        """The same card with no instance held."""
        return Geometry(self.profiles)

    def take(self, instance: Instance) -> Geometry:
        return Geometry(self.profiles, (*self.held, instance))

    def free(self, instance: Instance) -> Geometry:
        """Without `instance` (the last one held equal to it); unchanged when it holds none."""
        held = list(self.held)
        for i in range(len(held) - 1, -1, -1):
            if held[i] == instance:
                del held[i]
                break
        return Geometry(self.profiles, tuple(held))

    def take_memory(self, memory: int, cores: int) -> Geometry:
        """With the instance a vGPU of `memory` MiB and `cores` gets (a holding known only by
        its MiB and cores, as the allocation string gives it); unchanged when none is free."""
        instance = self.choose(memory, cores)
        return self if instance is None else self.take(instance)

    def free_memory(self, memory: int, cores: int) -> Geometry:
        """Without the last held instance of the profile a vGPU of `memory` MiB and `cores` has
        (the profile whose MiB and cores match, else the smallest that holds them)."""
        for instance in reversed(self.held):
            profile = self.profile(instance.profile)
            if profile is not None and profile.memory == memory and profile.cores == cores:
                return self.free(instance)
        for instance in reversed(self.held):
            profile = self.profile(instance.profile)
            if profile is not None and profile.memory >= memory:
                return self.free(instance)
        return self


def shortfall_words(found: dict) -> str:
    """`needs 2g.10gb, only 1g.5gb slices left` (a `Geometry.shortfall`) in plain words."""
    needs, left = found.get("needs"), list(found.get("left") or ())
    if needs is None:
        cores = f" and {found.get('cores')}% cores" if found.get("cores") else ""
        return f"no MIG profile holds {found.get('memory', 0):,} MiB{cores}"
    if not left:
        return f"needs {needs}, no free slices left"
    return f"needs {needs}, only {', '.join(left)} slices left"


def _number(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(where, f"must be a non-negative integer, got {value!r}")
    if value < 0 or value > LARGEST:
        raise ScenarioError(where, f"must be a non-negative integer up to {LARGEST}, got {value}")
    return value


def read_placement(raw: object, where: str) -> Placement:
    if not isinstance(raw, dict):
        raise ScenarioError(where, 'expected {"start": N, "size": N}')
    size = _number(raw.get("size", 0), f"{where}.size")
    if size == 0:
        raise ScenarioError(f"{where}.size", "must be at least 1 slice")
    return Placement(_number(raw.get("start", 0), f"{where}.start"), size)


def read_profiles(raw: object, where: str) -> tuple[Profile, ...]:
    """`migProfiles` as HAMi's device plugin registers them, a left-out field being Go's zero
    value; raises ScenarioError naming the profile and field (`...migProfiles[1].memoryMB`)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ScenarioError(where, "expected a list of MIG profiles")
    profiles = []
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(entry, dict):
            raise ScenarioError(at, "expected an object (one MIG profile)")
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ScenarioError(f"{at}.name", "required: the profile's name, like 1g.5gb")
        placements = entry.get("placements") or []
        if not isinstance(placements, list):
            raise ScenarioError(f"{at}.placements", "expected a list of placements")
        profiles.append(
            Profile(
                name=name,
                memory=_number(entry.get("memoryMB", 0), f"{at}.memoryMB"),
                cores=_number(entry.get("core", 0), f"{at}.core"),
                slices=_number(entry.get("sliceCount", 0), f"{at}.sliceCount"),
                placements=tuple(
                    read_placement(p, f"{at}.placements[{k}]") for k, p in enumerate(placements)
                ),
            )
        )
    names = [p.name for p in profiles]
    for name in names:
        if names.count(name) > 1:
            raise ScenarioError(where, f"profile {name!r} is listed twice")
    return tuple(profiles)


@dataclass(frozen=True, slots=True)
class Reservation:
    """One entry of `hami.io/vgpu-mig-allocations`: the `device`-th card of the `container`-th
    container (init containers first, as in the allocation string) is an instance of
    `profile` at `placement` on card `uuid`."""

    container: int
    device: int
    uuid: str
    profile: str
    placement: Placement

    def as_wire(self) -> dict:
        return {
            "containerIndex": self.container,
            "deviceIndex": self.device,
            "gpuUUID": self.uuid,
            "profile": self.profile,
            "placement": {"start": self.placement.start, "size": self.placement.size},
        }


def encode_reservations(reservations: Sequence[Reservation]) -> str:
    """The annotation as HAMi's scheduler writes it (Go's `json.Marshal`: keys in this order,
    no blanks, `<`, `>` and `&` escaped); "" when there is none."""
    if not reservations:
        return ""
    text = json.dumps([r.as_wire() for r in reservations], separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def decode_reservations(value: str, where: str = ALLOCATIONS) -> list[Reservation]:
    """The annotation as HAMi's device plugin reads it: complete entries, no container and
    device twice; the runtime fields the plugin adds (`migUUID`, `gpuInstanceID`,
    `computeInstanceID`) all or none. Raises ScenarioError naming the entry."""
    if not value:
        return []
    try:
        raw = json.loads(value)
    except (ValueError, RecursionError):
        raise ScenarioError(where, "not a JSON list of MIG reservations") from None
    if not isinstance(raw, list):
        raise ScenarioError(where, "expected a JSON list of MIG reservations")
    found: list[Reservation] = []
    seen: set[tuple[int, int]] = set()
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(entry, dict):
            raise ScenarioError(at, "expected an object")
        uuid, profile = entry.get("gpuUUID"), entry.get("profile")
        if not isinstance(uuid, str) or not uuid or not isinstance(profile, str) or not profile:
            raise ScenarioError(at, "incomplete: gpuUUID and profile are required")
        runtime = [entry.get("migUUID") or None, entry.get("gpuInstanceID"), entry.get("computeInstanceID")]
        if sum(field is not None for field in runtime) not in (0, 3):
            raise ScenarioError(at, "partial runtime identity: migUUID, gpuInstanceID, computeInstanceID")
        reservation = Reservation(
            container=_number(entry.get("containerIndex", 0), f"{at}.containerIndex"),
            device=_number(entry.get("deviceIndex", 0), f"{at}.deviceIndex"),
            uuid=uuid,
            profile=profile,
            placement=read_placement(entry.get("placement"), f"{at}.placement"),
        )
        key = (reservation.container, reservation.device)
        if key in seen:
            raise ScenarioError(at, f"container {key[0]} device {key[1]} reserved twice")
        seen.add(key)
        found.append(reservation)
    return found
