"""Reason codes (SPEC 4). These strings are what users see; never rename them.

The words for each code are in `engine.explain`."""

CARD_NOT_HEALTH = "CardNotHealth"
CARD_CORDONED = "CardCordoned"
CARD_TYPE_MISMATCH = "CardTypeMismatch"
CARD_MODE_MISMATCH = "CardModeMismatch"
CARD_UUID_MISMATCH = "CardUuidMismatch"
CARD_SLOTS_EXHAUSTED = "CardTimeSlicingExhausted"
EXCLUSIVE_CONFLICT = "ExclusiveDeviceAllocateConflict"
CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
CARD_COMPUTE_EXHAUSTED = "CardComputeUnitsExhausted"
NUMA_NOT_FIT = "NumaNotFit"
NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
ALLOCATED_INSUFFICIENT = "AllocatedCardsInsufficientRequest"
NODE_NOT_READY = "NodeNotReady"

#: Every code above: the only reasons the engine writes into a decision's counts.
CODES = frozenset(
    {
        CARD_NOT_HEALTH,
        CARD_CORDONED,
        CARD_TYPE_MISMATCH,
        CARD_MODE_MISMATCH,
        CARD_UUID_MISMATCH,
        CARD_SLOTS_EXHAUSTED,
        EXCLUSIVE_CONFLICT,
        CARD_INSUFFICIENT_MEMORY,
        CARD_INSUFFICIENT_CORE,
        CARD_COMPUTE_EXHAUSTED,
        NUMA_NOT_FIT,
        NODE_INSUFFICIENT_DEVICE,
        ALLOCATED_INSUFFICIENT,
        NODE_NOT_READY,
    }
)
