"""A pod whose ResourceClaims keep it from being tried: the hold the watcher stored for it.

The Kubernetes watcher reads a pod's claims into asks (`kube.drastate`); when they cannot be
asked for yet (a claim or DeviceClass not there, no device its selectors accept, a CEL
expression that cannot be evaluated, a pool not fully published) it stores the reason in the
pod's `resourceClaims.hold` instead, and the decision is that hold, pending, not tried: as
kube-scheduler's DynamicResources PreFilter keeps such a pod unschedulable. The watcher
submits the pod again when a claim, class, slice or taint rule changes, which clears it.
"""

from __future__ import annotations

from .errors import PodInvalid

#: `PodSpec.claims` keys (`Pod.scheduling["resourceClaims"]`); `extended`: the special claim
#: of extended resources backed by DRA (KEP-5004) the binder creates, read by no rule here.
CLAIM_KEYS = ("claims", "requests", "hold", "extended")


def claims_hold(claims) -> tuple[str, str] | None:
    """(reason code, message) of a pod its claims hold, or None; PodInvalid naming the field
    for a malformed document."""
    if claims is None:
        return None
    where = "resourceClaims"
    if not isinstance(claims, dict):
        raise PodInvalid(where, "must be an object")
    unknown = sorted(str(key) for key in claims if key not in CLAIM_KEYS)
    if unknown:
        raise PodInvalid(f"{where}.{unknown[0]}", f"unknown field; one of {', '.join(CLAIM_KEYS)}")
    hold = claims.get("hold")
    if hold is None:
        return None
    if not isinstance(hold, dict) or not isinstance(hold.get("reason"), str) or not hold["reason"]:
        raise PodInvalid(f"{where}.hold", "must be an object with a non-empty reason and a message")
    return hold["reason"], str(hold.get("message") or "")
