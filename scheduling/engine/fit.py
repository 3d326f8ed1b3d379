"""SPEC 4: does one card fit one container's ask? Checks in order; the first failure is the reason.

     check                                         reason                            stage
  1  not healthy                                   CardNotHealth                     health
  2  cordoned                                      CardCordoned                      cordon
  3  another device family's card (an Ascend NPU   CardTypeMismatch                  type
     for an NVIDIA ask), or type excluded by
     use/nouse-gputype
 3a  mode not in nvidia.com/vgpu-mode               CardModeMismatch                  mode
     (a card that registers no mode is not checked)
  4  UUID excluded by use/nouse-gpuuuid            CardUuidMismatch                  uuid
  5  every slot taken                              CardTimeSlicingExhausted          slots
  6  an active filter's card hook (`mutex`:        ExclusiveDeviceAllocateConflict   mutex
     the card has tenants)
  7  free memory < asked memory                    CardInsufficientMemory            memory
  8  free cores < asked cores                      CardInsufficientCore              cores
  9  asks 100 cores and the card has tenants       ExclusiveDeviceAllocateConflict   exclusive
 10  asks 0 cores, card has cores, all taken       CardComputeUnitsExhausted         compute
 10a a card cut into instances (MIG) has no free    CardMigTopologyInfeasible         mig
     instance of a profile holding the ask

Check 11 (`numa-bind`: NumaNotFit) looks at the cards that passed 1-10 together, so it is a
filter's `rejects_fitting` hook that `evaluate` runs. A node's failure is the count of each
reason over its cards (`NodeFailure`), written `N/M Reason, ...` sorted by reason code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from . import reasons as R
from .annotations import PodPolicy
from .chain import Rejection
from .model import Card
from .requests import ContainerAsk


def check_card(
    card: Card,
    ask: ContainerAsk,
    memory: int,
    policy: PodPolicy,
    used: tuple[int, int, int],
    taken: Sequence = (),
) -> Rejection | None:
    """Checks 1-10 (and 3a, 10a) for `ask` taking `memory` MiB on `card` that already holds
    `used` (slots, MiB, cores), and, on a card cut into instances, the placements this pod
    `taken` there already: the first failure as (reason, stage), or None if the card fits."""
    used_slots, used_memory, used_cores = used
    if not card.health:
        return R.CARD_NOT_HEALTH, "health"
    if card.cordoned:
        return R.CARD_CORDONED, "cordon"
    if card.family != ask.family:
        return R.CARD_TYPE_MISMATCH, "type"
    if policy.use_types or policy.nouse_types:
        card_type = card.type.lower()
        if policy.use_types and not any(t in card_type for t in policy.use_types):
            return R.CARD_TYPE_MISMATCH, "type"
        if any(t in card_type for t in policy.nouse_types):
            return R.CARD_TYPE_MISMATCH, "type"
    if policy.use_modes and card.mode and card.mode.lower() not in policy.use_modes:
        return R.CARD_MODE_MISMATCH, "mode"
    if (policy.use_uuids and card.uuid not in policy.use_uuids) or card.uuid in policy.nouse_uuids:
        return R.CARD_UUID_MISMATCH, "uuid"
    if used_slots >= card.slots:
        return R.CARD_SLOTS_EXHAUSTED, "slots"
    for card_filter in policy.active_filters:
        rejected = card_filter.rejects(card, used)
        if rejected is not None:
            return rejected
    if card.memory - used_memory < memory:
        return R.CARD_INSUFFICIENT_MEMORY, "memory"
    if card.cores - used_cores < ask.cores:
        return R.CARD_INSUFFICIENT_CORE, "cores"
    if ask.cores == 100 and used_slots > 0:
        return R.EXCLUSIVE_CONFLICT, "exclusive"
    if ask.cores == 0 and card.cores > 0 and used_cores >= card.cores:
        return R.CARD_COMPUTE_EXHAUSTED, "compute"
    partition = card.partition
    if partition is not None and partition.choose(memory, ask.cores, taken) is None:
        return partition.reason, partition.stage
    return None


def count_cards(
    cards: Sequence[Card], ask: ContainerAsk, memory: int, policy: PodPolicy, fits: list[Card] | None = None
) -> tuple[int, dict[str, int]]:
    """`check_card` on every card of `cards` as it stands (no usage of this pod's own), each
    taking `memory` MiB: how many fit, and per reason how many do not; the cards that fit are
    appended to `fits` when it is given (check 11 reads them). The same checks in the
    same order, written out for a pod that names no card types, modes or UUIDs (the filters'
    card hooks and MIG instances are still asked): a node re-checked after it changed costs
    its cards, not a call per card (tests/engine/test_count_cards.py holds it to `check_card`)."""
    counts: dict[str, int] = {}
    fitting = 0
    if policy.use_types or policy.nouse_types or policy.use_modes or policy.use_uuids or policy.nouse_uuids:
        for card in cards:
            failed = check_card(
                card, ask, memory, policy, (card.used_slots, card.used_memory, card.used_cores)
            )
            if failed is None:
                fitting += 1
                if fits is not None:
                    fits.append(card)
            else:
                counts[failed[0]] = counts.get(failed[0], 0) + 1
        return fitting, counts
    family, cores, filters = ask.family, ask.cores, policy.active_filters
    for card in cards:
        used_slots = card.used_slots
        if not card.health:
            reason = R.CARD_NOT_HEALTH
        elif card.cordoned:
            reason = R.CARD_CORDONED
        elif card.family != family:
            reason = R.CARD_TYPE_MISMATCH
        elif used_slots >= card.slots:
            reason = R.CARD_SLOTS_EXHAUSTED
        else:
            used_cores = card.used_cores
            rejected = None
            for card_filter in filters:
                rejected = card_filter.rejects(card, (used_slots, card.used_memory, used_cores))
                if rejected is not None:
                    break
            if rejected is not None:
                reason = rejected[0]
            elif card.memory - card.used_memory < memory:
                reason = R.CARD_INSUFFICIENT_MEMORY
            elif card.cores - used_cores < cores:
                reason = R.CARD_INSUFFICIENT_CORE
            elif cores == 100 and used_slots > 0:
                reason = R.EXCLUSIVE_CONFLICT
            elif cores == 0 and card.cores > 0 and used_cores >= card.cores:
                reason = R.CARD_COMPUTE_EXHAUSTED
            elif card.partition is not None and card.partition.choose(memory, cores, ()) is None:
                reason = card.partition.reason
            else:
                fitting += 1
                if fits is not None:
                    fits.append(card)
                continue
        counts[reason] = counts.get(reason, 0) + 1
    return fitting, counts


def failure_text(counts: dict[str, int], examined: int) -> str:
    """`N/M Reason, ...` sorted by reason code, M the number of the node's cards examined."""
    return ", ".join(f"{counts[reason]}/{examined} {reason}" for reason in sorted(counts))


@dataclass(frozen=True, slots=True)
class NodeFailure:
    """Why a pod does not fit a node, as data: of the node's `cards`, how many failed with each
    reason (node-level reasons count every card). `text` is the SPEC 4 failure text, written
    when first read: a sweep makes a failure per failed node, and most are only counted."""

    cards: int
    reasons: dict[str, int]
    _text: str | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reasons", dict(sorted(self.reasons.items())))

    @property
    def text(self) -> str:
        text = self._text
        if text is None:
            text = failure_text(self.reasons, self.cards)
            object.__setattr__(self, "_text", text)
        return text
