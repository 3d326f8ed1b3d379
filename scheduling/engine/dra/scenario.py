"""A DRA scenario: the objects in their API form, decided offline as `kube.dra` decides them live.

    {"config": {...},                       # as SPEC 9's (policies, resource defaults)
     "resourceSlices": [...], "deviceClasses": [...], "deviceTaintRules": [...],
     "resourceClaims": [...], "pods": [...],   # Pod objects with spec.resourceClaims
     "nodes": [...]}                           # optional Node objects: labels, taints

The pods without `spec.nodeName` are decided in file order as the live pass decides them
(`kube.dra.DraCycle`): each seeing the claims allocated before it (their status is written
into the scenario's claims as the API server would keep it), a gang's members all or nothing,
a pod that does not fit preempting pods bound in the scenario (`spec.nodeName`) of lower
priority, never one placed in this run (their claims released); with
the drivers of `draDrivers` (`DEFAULT_DRIVERS` unless named). The output: per pod its node or
reason, the pods it preempted and the engine's decision, and every claim's status after.
"""

from __future__ import annotations

import copy

from ..errors import ScenarioError
from ..model import ClusterConfig
from .allocate import NOT_CAPACITY, DraAllocator, DraPlacement, DraTenant, tenants_of, units
from .inventory import DEFAULT_DRIVERS, read_inventory

LISTS = ("resourceSlices", "deviceClasses", "deviceTaintRules", "resourceClaims", "pods", "nodes")


def wants_dra(raw) -> bool:
    """A scenario in DRA form: it carries `resourceSlices`."""
    return isinstance(raw, dict) and "resourceSlices" in raw


def _objects(raw: dict, key: str) -> list[dict]:
    found = raw.get(key, [])
    if not isinstance(found, list):
        raise ScenarioError(key, "must be a list")
    for i, obj in enumerate(found):
        if (
            not isinstance(obj, dict)
            or not isinstance(obj.get("metadata"), dict)
            or not obj["metadata"].get("name")
        ):
            raise ScenarioError(f"{key}[{i}].metadata.name", "required")
    return found


def _entry(placement: DraPlacement, victims: list[DraTenant], top: int | None) -> dict:
    entry: dict = {
        "name": placement.name,
        "namespace": placement.namespace,
        "status": "scheduled" if placement.placed else "pending",
        "node": placement.node,
    }
    if placement.placed:
        entry["claims"] = placement.results
    else:
        entry["reason"], entry["message"] = placement.reason, placement.message
    if victims:
        entry["preempted"] = [v.key for v in victims]
    if placement.decision is not None:
        entry["decision"] = placement.decision.as_dict(top=top)
    return entry


def run_dra_scenario(raw: dict, top: int | None = None, *, config: ClusterConfig) -> dict:
    """Decide the scenario's pods in order (see the module docstring) under `config`, the
    scenario's `config` as any scenario's is parsed (`engine.scenario.parse_config`)."""
    lists = {key: _objects(raw, key) for key in LISTS}
    drivers = raw.get("draDrivers", DEFAULT_DRIVERS)
    if not isinstance(drivers, list | tuple) or not all(isinstance(d, str) for d in drivers):
        raise ScenarioError("draDrivers", "must be a list of driver names")
    claims = {
        (c["metadata"].get("namespace") or "default", c["metadata"]["name"]): copy.deepcopy(c)
        for c in lists["resourceClaims"]
    }
    classes = {c["metadata"]["name"]: c for c in lists["deviceClasses"]}
    inventory = read_inventory(lists["resourceSlices"], tuple(drivers), lists["deviceTaintRules"])
    allocator = DraAllocator(inventory, classes, claims, config, lists["nodes"])
    pods = []
    for i, pod in enumerate(lists["pods"]):
        pod = copy.deepcopy(pod)
        pod["metadata"].setdefault("uid", f"scenario-pod-{i}")
        pods.append(pod)
    allocator.beside(pods)  # the bound pods' cpu, memory, ports and labels, as the live pass
    pending = [p for p in pods if not (p.get("spec") or {}).get("nodeName")]
    evicted: set[str] = set()
    out = []
    placements: list[tuple[DraPlacement, list[DraTenant]]]
    for gang, members, minimum in units(pending, pods):
        if gang:
            placements = [(p, []) for p in allocator.place_gang(members, minimum, gang)]
        else:
            placement = allocator.place(members[0])
            victims: list[DraTenant] = []
            if not placement.placed and placement.reason not in NOT_CAPACITY:
                alive = [p for p in pods if p["metadata"]["uid"] not in evicted]
                placement, victims = allocator.preempt(
                    members[0], tenants_of(alive, allocator.claims, inventory)
                )
                evicted |= {v.uid for v in victims}
            placements = [(placement, victims)]
        for placement, victims in placements:
            allocator.record(placement)
            out.append(_entry(placement, victims, top))
    return {
        "pods": out,
        "resourceClaims": [
            {"namespace": ns, "name": name, "status": claim.get("status")}
            for (ns, name), claim in allocator.claims.items()
        ],
        "incompletePools": inventory.incomplete,
    }
