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
#: A MIG card none of whose free slices holds an instance of a profile big enough (HAMi v2.10).
CARD_MIG_INFEASIBLE = "CardMigTopologyInfeasible"
NUMA_NOT_FIT = "NumaNotFit"
NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
ALLOCATED_INSUFFICIENT = "AllocatedCardsInsufficientRequest"
NODE_NOT_READY = "NodeNotReady"
#: A healthy node a planning cycle holds for a job that has waited longest (`Scheduler.reserve`).
NODE_RESERVED = "NodeReserved"

#: SPEC 10: kube-scheduler's filters, each named after the plugin it mirrors, in the order a
#: node is checked; a node refused by one counts once under it (nodes, not cards).
NODE_UNSCHEDULABLE = "NodeUnschedulable"
NODE_NAME = "NodeName"
TAINT_TOLERATION = "TaintToleration"
NODE_AFFINITY = "NodeAffinity"
NODE_PORTS = "NodePorts"
NODE_RESOURCES_FIT = "NodeResourcesFit"
#: The pod's claims: kube-scheduler runs VolumeBinding after the node's own filters; a pod-wide
#: refusal (a missing claim, an unbound immediate one) counts every node under it (PreFilter).
VOLUME_BINDING = "VolumeBinding"
POD_TOPOLOGY_SPREAD = "PodTopologySpread"
INTER_POD_AFFINITY = "InterPodAffinity"
NODE_RULES = (
    NODE_UNSCHEDULABLE,
    NODE_NAME,
    TAINT_TOLERATION,
    NODE_AFFINITY,
    NODE_PORTS,
    NODE_RESOURCES_FIT,
    VOLUME_BINDING,
    POD_TOPOLOGY_SPREAD,
    INTER_POD_AFFINITY,
)
#: A pod held by scheduling gates (KEP-3521) is not tried: pending with this reason alone.
SCHEDULING_GATED = "SchedulingGated"

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
        CARD_MIG_INFEASIBLE,
        NUMA_NOT_FIT,
        NODE_INSUFFICIENT_DEVICE,
        ALLOCATED_INSUFFICIENT,
        NODE_NOT_READY,
        NODE_RESERVED,
        *NODE_RULES,
        SCHEDULING_GATED,
    }
)
