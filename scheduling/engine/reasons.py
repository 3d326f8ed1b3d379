"""Reason codes (SPEC 4). These strings are what users see; never rename them."""

CARD_NOT_HEALTH = "CardNotHealth"
CARD_CORDONED = "CardCordoned"
CARD_TYPE_MISMATCH = "CardTypeMismatch"
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

#: Words an operator understands, for pages and events. `{n}`/`{m}` are counts, `{node}` the node.
EXPLANATIONS = {
    CARD_NOT_HEALTH: "{n} of {m} cards on {node} are unhealthy",
    CARD_CORDONED: "{n} of {m} cards on {node} are cordoned",
    CARD_TYPE_MISMATCH: "{n} of {m} cards on {node} are not of the type the pod asks for (use/nouse-gputype)",
    CARD_UUID_MISMATCH: "{n} of {m} cards on {node} are excluded by UUID (use/nouse-gpuuuid)",
    CARD_SLOTS_EXHAUSTED: "{n} of {m} cards on {node} have every vGPU slot taken",
    EXCLUSIVE_CONFLICT: "{n} of {m} cards on {node} already have tenants and the pod asks for whole cards (100 cores)",
    CARD_INSUFFICIENT_MEMORY: "{n} of {m} cards on {node} lack the free memory asked",
    CARD_INSUFFICIENT_CORE: "{n} of {m} cards on {node} lack the free cores asked",
    CARD_COMPUTE_EXHAUSTED: "{n} of {m} cards on {node} have all compute taken",
    NUMA_NOT_FIT: "{n} of {m} cards on {node} fit, but no NUMA node holds all the cards asked (numa-bind)",
    NODE_INSUFFICIENT_DEVICE: "{node} has fewer cards ({m}) than a container asks for",
    ALLOCATED_INSUFFICIENT: "only {n} of {m} cards on {node} fit, fewer than asked",
    NODE_NOT_READY: "{node} is not ready (its agent stopped reporting)",
}

#: Check 6 (mutex) runs before check 9 (whole-card ask), so with `mutex` in the chain every
#: ExclusiveDeviceAllocateConflict comes from mutex, and without it none does.
MUTEX_EXPLANATION = "{n} of {m} cards on {node} already have tenants (mutex)"


def explain(code: str, n: int, m: int, node: str, chain_has_mutex: bool = False) -> str:
    """Operator words for `n/m code` on `node`."""
    if code == EXCLUSIVE_CONFLICT and chain_has_mutex:
        return MUTEX_EXPLANATION.format(n=n, m=m, node=node)
    template = EXPLANATIONS.get(code)
    if template is None:
        return f"{n} of {m} cards on {node}: {code}"
    return template.format(n=n, m=m, node=node)
