"""What a device family is: the vendor-specific half of scheduling one kind of card.

HAMi schedules many device families (NVIDIA, Ascend, Hygon DCU, ...), each with its own
resource names, node register annotation, allocation annotations, node lock and fit rules,
while the decision around them is the same. `Family` is that vendor-specific half, so the
engine (chain, weights, scoring, explanations) stays shared: the engine, the wire code and
the webhook ask the family for a name or a codec instead of spelling NVIDIA's.

A family is one module that defines a `Family` subclass and registers one instance of it
(`families.register`). The base class carries what HAMi's device families share: the
allocation string `UUID,VENDOR,MEM,CORES:` per card, `;` per container (HAMi's
`EncodeContainerDevices`), read back by `decode_allocation`; a family that writes more
(NVIDIA's MIG reservations) adds it in `extra_annotations`, and one whose cards are cut into
fixed instances (NVIDIA's MIG profiles) gives such a card a `Partition` (`partition`): the
fit check asks it for an instance, whatever the family.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..encoding import RegisteredCard, decode_allocation, decode_node_register, encode_allocation

if TYPE_CHECKING:
    from ..grants import DeviceGrant


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """The extended resources a container asks this family's cards with (HAMi's
    `ResourceNames`): how many cards, MiB per card, the percentage of each card's memory,
    and the compute share of each card (100 = a whole card)."""

    count: str
    memory: str
    memory_percentage: str
    cores: str

    def all(self) -> tuple[str, str, str, str]:
        return (self.count, self.memory, self.memory_percentage, self.cores)


class Partition(Protocol):
    """A card cut into fixed instances (NVIDIA MIG): a vGPU on it is one instance, chosen by
    `choose` (None: none free holds the ask, refused with `reason` at check `stage`).
    Immutable: taking or freeing an instance gives a new partition."""

    reason: ClassVar[str]
    stage: ClassVar[str]

    def choose(self, memory: int, cores: int, taken: Sequence = ()) -> Any: ...

    def take(self, instance) -> Partition: ...

    def free(self, instance) -> Partition: ...

    def take_memory(self, memory: int, cores: int) -> Partition: ...

    def free_memory(self, memory: int, cores: int) -> Partition: ...

    def shortfall(self, memory: int, cores: int, taken: Sequence = ()) -> dict: ...

    def emptied(self) -> Partition: ...

    def as_wire(self) -> list[dict]: ...


class Family:
    """One device family. Subclasses set the class attributes and override what differs.

    `name`: the family's key in the registry (lower case, `nvidia`). `vendor`: HAMi's
    common word for it, the vendor field of its allocation strings and the type of a card
    that names none. `register`/`scores`: the node annotations its device plugin writes the
    cards and their pair scores in ("" when it writes none). `to_allocate`/`allocated`: the
    pod annotations a placement writes its cards in. `node_lock`: the node annotation held
    around a bind. `handshake`: the node annotation its device plugin heartbeats in.
    `mode_annotation`: the pod annotation that picks a card mode ("" when none).
    """

    # Class attributes of a family with fixed names (NVIDIA); a family made from a config
    # (one Ascend chip) sets them per instance.
    name: str
    vendor: str
    resources: ResourceNames
    register: str
    scores: str = ""
    to_allocate: str
    allocated: str
    node_lock: str
    handshake: str = ""
    mode_annotation: str = ""
    #: The pod annotations `extra_annotations` may write (outputs: a pod's own are not its spec).
    writes: tuple[str, ...] = ()

    def decode_register(self, value: str) -> list[RegisteredCard]:
        """The cards of this family's register annotation; raises ScenarioError naming the
        card and field. HAMi's JSON list (or the older colon form) by default."""
        return decode_node_register(value, self.register)

    def encode_allocation(self, containers: Sequence[Sequence[tuple[str, int, int]]]) -> str:
        """The `allocated` annotation: each card `UUID,VENDOR,MEM,CORES:`, each container `;`."""
        return encode_allocation(containers, self.vendor)

    def decode_allocation(self, value: str) -> list[list[tuple[str, int, int]]]:
        """Inverse of `encode_allocation`; raises ScenarioError naming the bad entry."""
        return decode_allocation(value, self.allocated)

    def extra_annotations(self, containers: Sequence[Sequence[DeviceGrant]]) -> dict[str, str]:
        """Pod annotations a placement writes beside the allocation (none by default)."""
        return {}

    def partition(self, card: RegisteredCard) -> Partition | None:
        """The partition a registered card is cut into, None for a card shared by vGPU shares."""
        return None

    def __repr__(self) -> str:
        return f"<family {self.name}>"
