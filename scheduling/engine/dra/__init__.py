"""Dynamic Resource Allocation (`resource.k8s.io/v1`) read as cards and asks: pure Python.

The objects come in the API's own JSON form (camelCase, as `kubectl get -o json` prints
them), from the API server or from a scenario, so the engine is tested without either:

- `inventory`: ResourceSlices of the configured drivers, and DeviceTaintRules, become cards
  (`DraDevice`, and engine `Node`s with `Card`s); a pool counts only when complete.
- `cel`: the CEL selectors of DeviceClasses and requests, with Kubernetes' quantity and
  semver functions; an expression the library cannot evaluate is an error naming it.
- `claims`: a pod's ResourceClaims (by name or from a template) become asks: one engine
  container per request, with the devices its selectors and constraints allow.
- `allocate`: the asks placed by the engine's chain (binpack/spread, weights, numa) on the
  DRA cards, usage from every allocated claim's `consumedCapacity`, and the claim status
  (`allocation`, `reservedFor`) that the driver reads.
"""

from .allocate import DraAllocator, DraPlacement
from .claims import DraAsk, DraUnsupported
from .inventory import DEFAULT_DRIVERS, DraDevice, Inventory, read_inventory

__all__ = [
    "DEFAULT_DRIVERS",
    "DraAllocator",
    "DraAsk",
    "DraDevice",
    "DraPlacement",
    "DraUnsupported",
    "Inventory",
    "read_inventory",
]
