"""A pod's ResourceClaims as asks: what each request wants and which devices may serve it.

- `spec.resourceClaims[]` names a claim (`resourceClaimName`) or a template
  (`resourceClaimTemplateName`); a template's claim is the one the resourceclaim controller
  generated, named in `status.resourceClaimStatuses[]` (until then the pod waits).
- A claim already allocated is not asked again: its node (the allocation's
  `nodeSelector`) pins the pod.
- Each `devices.requests[]` becomes one ask (one engine container): `exactly` or, with
  `firstAvailable`, its subrequests as alternatives tried in order. `count` (1 when absent)
  devices, each with `capacity.requests.memory` (MiB, rounded up) and `cores` (percent);
  the candidates are the devices of the class's driver that every selector of the
  DeviceClass and of the request accepts (`cel.Selectors`) and whose taints the request
  tolerates.
- `constraints[]`: `matchAttribute` groups the candidates by the attribute's value (the
  placement tries each group), `distinctAttribute` is checked on the devices chosen.

A pod that cannot be asked for raises `DraUnsupported` with one of the reason codes below
(docs/kubernetes.md lists them with their words).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from ..quantity import parse
from .cel import CelError, Selectors
from .inventory import CORDONING_EFFECTS, DraDevice, Inventory

DEVICE_TAINTED = "DeviceTainted"
SELECTOR_MISMATCH = "SelectorMismatch"
CONSTRAINT_UNSATISFIED = "ConstraintUnsatisfied"
COUNTERS_EXHAUSTED = "CountersExhausted"
POOL_INCOMPLETE = "PoolIncomplete"
CAPACITY_POLICY_INVALID = "CapacityPolicyInvalid"
CLAIM_PENDING = "ClaimPending"
SELECTOR_ERROR = "SelectorError"
DRA_UNSUPPORTED = "DraUnsupported"
QUOTA_UNSUPPORTED = "QuotaUnsupported"
MIB = 2**20
#: What each code means and what to do about it, as a pod's condition says them.
REASON_WORDS = {
    DEVICE_TAINTED: (
        "every device the request may take has a taint it does not tolerate",
        "Remove the DeviceTaintRule or device taint, or add a toleration to the claim's request",
    ),
    SELECTOR_MISMATCH: (
        "no device satisfies the CEL selectors of the DeviceClass and the request",
        "Check the selector against the attributes the ResourceSlices publish "
        "(kubectl get resourceslices -o yaml)",
    ),
    SELECTOR_ERROR: (
        "a CEL selector cannot be evaluated, so no device is guessed",
        "Fix the expression named; Kubernetes' lists, regex, url, ip and format libraries are not supported",
    ),
    CONSTRAINT_UNSATISFIED: (
        "no set of devices meets the claim's matchAttribute or distinctAttribute constraints",
        "Free a device sharing the attribute, or relax the constraint",
    ),
    COUNTERS_EXHAUSTED: (
        "every device the request may take draws on shared counters (a GPU's partitions and the "
        "whole GPU) that the devices in use leave no room for",
        "Free the whole GPU or partitions on the same counter set, or ask for a smaller partition",
    ),
    POOL_INCOMPLETE: (
        "a driver's pool has not published all its ResourceSlices",
        "Wait for the driver to publish the pool's newest generation, or check the driver's logs",
    ),
    CAPACITY_POLICY_INVALID: (
        "the request asks more than the devices' requestPolicy allows, or is malformed",
        "Ask within the capacity's validRange or validValues (kubectl get resourceslices -o yaml)",
    ),
    CLAIM_PENDING: (
        "a ResourceClaim or DeviceClass the pod needs does not exist yet",
        "Create the claim or class; a template's claim is made by kube-controller-manager",
    ),
    DRA_UNSUPPORTED: (
        "the claim uses a DRA feature hamiadmin does not place",
        "Use allocationMode ExactCount without adminAccess, or let kube-scheduler place this pod",
    ),
    QUOTA_UNSUPPORTED: (
        "the claims need the DRA pass (alternatives, constraints, partitions or a shared claim), "
        "which cannot count them against the quota or queue limit that binds this pod",
        "Ask without firstAvailable, matchAttribute or distinctAttribute so the cycle places it "
        "within the quota, or place it in a namespace and queue without GPU limits",
    ),
}


class DraUnsupported(Exception):
    """The pod cannot be asked for (yet): `code` and a message naming the field."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Alternative:
    """One way to serve a request: `exactly`, or one subrequest of `firstAvailable`."""

    request: str  # as the allocation result names it: `req` or `req/sub`
    device_class: str
    count: int
    memory: int | None  # MiB; None: the engine's default (the whole card)
    cores: int | None
    candidates: list[DraDevice] = field(default_factory=list)
    #: why devices were left out, by reason code -> how many
    refused: dict[str, int] = field(default_factory=dict)


@dataclass
class DraAsk:
    """One request of one claim."""

    claim: str  # the claim's name (namespace: the pod's)
    request: str
    alternatives: list[Alternative]


@dataclass
class PodClaims:
    """What a pod asks through its claims."""

    asks: list[DraAsk] = field(default_factory=list)
    #: claim name -> its `constraints[]`
    constraints: dict[str, list[dict]] = field(default_factory=dict)
    #: claim name -> the claim object (to write its status)
    claims: dict[str, dict] = field(default_factory=dict)
    #: the node an allocated claim ties the pod to, "" when none
    node: str = ""
    #: claims already allocated (and their node), reserved for this pod too at bind
    allocated: list[str] = field(default_factory=list)


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def claim_names(pod: dict) -> list[tuple[str, str | None]]:
    """(pod's name for the claim, the claim's object name or None while not generated)."""
    spec, status = _dict(pod.get("spec")), _dict(pod.get("status"))
    generated = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    names = []
    for i, entry in enumerate(spec.get("resourceClaims") or []):
        entry = _dict(entry)
        if entry.get("resourceClaimName"):
            names.append((entry.get("name") or "", entry["resourceClaimName"]))
        elif entry.get("resourceClaimTemplateName"):
            names.append((entry.get("name") or "", generated.get(entry.get("name"))))
        else:
            raise DraUnsupported(
                DRA_UNSUPPORTED,
                f"spec.resourceClaims[{i}]: names neither resourceClaimName nor resourceClaimTemplateName",
            )
    return names


def allocated_node(claim: dict) -> str:
    """The node an allocation's `nodeSelector` names (`metadata.name` field or hostname label)."""
    selector = _dict(_dict(_dict(claim.get("status")).get("allocation")).get("nodeSelector"))
    for term in selector.get("nodeSelectorTerms") or []:
        for key in ("matchFields", "matchExpressions"):
            for expression in _dict(term).get(key) or []:
                expression = _dict(expression)
                if expression.get("key") in ("metadata.name", "kubernetes.io/hostname") and expression.get(
                    "values"
                ):
                    return str(expression["values"][0])
    return ""


def mib(value, where: str) -> int:
    amount = parse(value)
    if amount is None or amount < 0:
        raise DraUnsupported(CAPACITY_POLICY_INVALID, f"{where}: not a quantity of bytes: {value!r}")
    return math.ceil(amount / MIB)


def cores_of(value, where: str) -> int:
    amount = parse(value)
    if amount is None or amount < 0 or amount > 100 or amount != amount.to_integral_value():
        raise DraUnsupported(
            CAPACITY_POLICY_INVALID, f"{where}: cores must be a whole percent 0-100: {value!r}"
        )
    return int(amount)


def _tolerates(tolerations: list, taint: dict) -> bool:
    for toleration in tolerations:
        toleration = _dict(toleration)
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
            "value", ""
        ):
            return True
    return False


def _policy_refuses(device: DraDevice, memory: int | None, cores: int | None) -> bool:
    """Whether a capacity's `requestPolicy` cannot take the request: above `validRange.max`,
    or above every `validValues` entry (a request is rounded up to the policy, never down)."""
    for name, amount in (("memory", None if memory is None else memory * MIB), ("cores", cores)):
        policy = device.policies.get(name)
        if policy is None or amount is None:
            continue
        most = parse(_dict(policy.get("validRange")).get("max"))
        if most is not None and amount > most:
            return True
        values = [v for v in (parse(v) for v in policy.get("validValues") or []) if v is not None]
        if values and amount > max(values):
            return True
    return False


def _alternative(
    body: dict,
    request: str,
    where: str,
    classes: Lookup,
    inventory: Inventory,
    selectors: Selectors,
) -> Alternative:
    class_name = body.get("deviceClassName") or ""
    device_class = classes.get(class_name)
    if device_class is None:
        raise DraUnsupported(CLAIM_PENDING, f'{where}.deviceClassName: DeviceClass "{class_name}" not found')
    if (body.get("allocationMode") or "ExactCount") != "ExactCount":
        raise DraUnsupported(
            DRA_UNSUPPORTED, f"{where}.allocationMode: {body['allocationMode']} is not supported yet"
        )
    if body.get("adminAccess"):
        raise DraUnsupported(DRA_UNSUPPORTED, f"{where}.adminAccess is not supported")
    requests = _dict(_dict(body.get("capacity")).get("requests"))
    memory = mib(requests["memory"], f"{where}.capacity.requests.memory") if "memory" in requests else None
    cores = cores_of(requests["cores"], f"{where}.capacity.requests.cores") if "cores" in requests else None
    selectors_of = [*(_dict(device_class.get("spec")).get("selectors") or []), *(body.get("selectors") or [])]
    expressions = [str(e) for s in selectors_of if (e := _dict(_dict(s).get("cel")).get("expression"))]
    found = Alternative(request, class_name, int(body.get("count") or 1), memory, cores)
    tolerations = body.get("tolerations") or []
    for device in inventory.devices:
        try:
            accepted = all(selectors.matches(e, device) for e in expressions)
        except CelError as exc:
            raise DraUnsupported(SELECTOR_ERROR, f"{where}: {exc}") from exc
        if not accepted:
            found.refused[SELECTOR_MISMATCH] = found.refused.get(SELECTOR_MISMATCH, 0) + 1
            continue
        if _policy_refuses(device, memory, cores):
            found.refused[CAPACITY_POLICY_INVALID] = found.refused.get(CAPACITY_POLICY_INVALID, 0) + 1
            continue
        untolerated = [
            t
            for t in device.taints
            if t.get("effect") in CORDONING_EFFECTS and not _tolerates(tolerations, t)
        ]
        if untolerated:
            found.refused[DEVICE_TAINTED] = found.refused.get(DEVICE_TAINTED, 0) + 1
            continue
        found.candidates.append(device)
    return found


class Lookup(Protocol):
    """What `read_claims` reads claims and classes through: a dict, or an informer's cache."""

    def get(self, key, default=None): ...


def read_claims(
    pod: dict,
    claims: Lookup,
    classes: Lookup,
    inventory: Inventory,
    selectors: Selectors,
) -> PodClaims:
    """The asks of `pod` (a Pod object) from `claims` ((namespace, name) -> ResourceClaim)
    and `classes` (name -> DeviceClass). Raises DraUnsupported with the reason the pod waits."""
    namespace = _dict(pod.get("metadata")).get("namespace") or "default"
    found = PodClaims()
    for pod_name, claim_name in claim_names(pod):
        if claim_name is None:
            raise DraUnsupported(CLAIM_PENDING, f"claim {pod_name!r}: its ResourceClaim is not generated yet")
        claim = claims.get((namespace, claim_name))
        if claim is None:
            raise DraUnsupported(CLAIM_PENDING, f'ResourceClaim "{claim_name}" not found')
        found.claims[claim_name] = claim
        if _dict(_dict(claim.get("status")).get("allocation")):
            node = allocated_node(claim)
            if found.node and node and node != found.node:
                raise DraUnsupported(
                    CONSTRAINT_UNSATISFIED, f"claims allocated on two nodes: {found.node} and {node}"
                )
            found.node = node or found.node
            found.allocated.append(claim_name)
            continue
        devices = _dict(_dict(claim.get("spec")).get("devices"))
        found.constraints[claim_name] = [_dict(c) for c in devices.get("constraints") or []]
        for i, request in enumerate(devices.get("requests") or []):
            request = _dict(request)
            name = str(request.get("name") or "")
            where = f"resourceclaim {claim_name}: spec.devices.requests[{i}]"
            if request.get("exactly"):
                body = _dict(request["exactly"])
                alternatives = [_alternative(body, name, f"{where}.exactly", classes, inventory, selectors)]
            elif request.get("firstAvailable"):
                alternatives = [
                    _alternative(
                        _dict(sub),
                        f"{name}/{_dict(sub).get('name')}",
                        f"{where}.firstAvailable[{j}]",
                        classes,
                        inventory,
                        selectors,
                    )
                    for j, sub in enumerate(request["firstAvailable"])
                ]
            else:
                raise DraUnsupported(DRA_UNSUPPORTED, f"{where}: neither exactly nor firstAvailable")
            found.asks.append(DraAsk(claim_name, name, alternatives))
    return found
