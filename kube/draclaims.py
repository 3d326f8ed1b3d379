"""The claims of a pod the cycle placed on DRA devices, written where the driver reads them.

kube-scheduler's DynamicResources PreBind, for hamiadmin's placements (`kube.drastate`): before
the Binding, each claim of the pod gets `status.allocation` (`devices.results` naming the
request, driver, pool and device, with a `shareID` and `consumedCapacity` on shareable
devices; `config` from the classes and the claim; `nodeSelector` on the node) and
`reservedFor` the pod, merge-patched with the resourceVersion the informer last saw. The
results come from the pod's allocations: container `claim/request` on the card whose
`Card.dra` names the device.

A claim that changed under it (409, 422), or that someone else allocated in the meantime,
fails the bind (`ClaimConflict`): the binder gives the cards back and the pod is placed again
from what the claims say now. A claim this very pod holds from an earlier try (a Binding
refused after the write) is written again: its allocation follows the new placement (cleared
first when it differs, since the API server keeps an allocation immutable once set).

A pod whose extended resources a DeviceClass maps (KEP-5004, `kube.drastate`) gets its special
ResourceClaim as kube-scheduler's PreBind makes it: created (`generateName`
`<pod>-extended-resources-`, the annotation `resource.kubernetes.io/extended-resource-claim:
"true"`, the pod as its controlling owner, one `ExactCount` request per container and
resource), then its status written as above, then the pod's
`status.extendedResourceClaimStatus` (the claim's name and the `requestMappings` the kubelet
reads), then the Binding. A failure on the way deletes the claim created (as kube-scheduler's
Unreserve does) and fails the bind (`ClaimConflict`); so does a Binding refused after it
(`Binder`). kube-scheduler also sets the `resource.kubernetes.io/delete-protection` finalizer;
hamiadmin writes no finalizer, on these claims as on the others.

`release_ended` gives back the claims of our pods that ended: they leave `reservedFor`, and a
claim reserved for nobody is deallocated, as kube-controller-manager does (only claims
reserved for pods hamiadmin placed are touched: a pod kube-scheduler is binding may not be
in the agent's caches yet). A special claim is given back the same way, as
kube-controller-manager deallocates it for a pod that ended; the claim object goes with its pod
(the garbage collector follows the ownerReference).
"""

from __future__ import annotations

import logging

from scheduling.engine.dra.allocate import claim_config, released_status, result_of
from scheduling.models import Allocation, Pod

from . import pods as pod_objects
from .api import ApiError, ApiUnavailable, KubeApi
from .drastate import EXTENDED_CLAIM, DraState
from .volumes import VolumeConflict

log = logging.getLogger("hamiadmin.kube.draclaims")

#: Our pods' statuses in which their claims are given back.
ENDED = (Pod.SUCCEEDED, Pod.FAILED, Pod.DELETED)
#: The annotation that marks a special claim of extended resources (its only value: "true").
EXTENDED_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


class ClaimConflict(VolumeConflict):
    """A claim changed since the pod was placed or the pass listed it (409, 422): the bind
    cannot go on, the pass plans again."""


def release_claim(api: KubeApi, namespace: str, name: str, claim: dict, gone: set[str]) -> bool:
    """Write `claim`'s status without the consumers `gone` (`released_status`: deallocated when
    left to nobody), with the resourceVersion it was read at; whether it was written (a claim
    changed since, 409, or gone is left for later, said in the log)."""
    status = released_status(claim, gone)
    patch = {
        "metadata": {"resourceVersion": pod_objects.meta(claim).get("resourceVersion")},
        "status": {"reservedFor": status.get("reservedFor"), "allocation": status.get("allocation")},
    }
    try:
        api.patch_resource_claim_status(namespace, name, patch)
    except ApiError as exc:
        log.info("resourceclaim %s/%s: not given back now: %s", namespace, name, exc)
        return False
    return True


def undo_writes(api: KubeApi, namespace: str, written: list[tuple[str, dict]]) -> None:
    """Take back the claim status writes of one pod (or gang): each claim's `allocation` and
    `reservedFor` as they were before (None removes what the write set)."""
    for name, before in written:
        undo = {"allocation": before.get("allocation"), "reservedFor": before.get("reservedFor")}
        try:
            api.patch_resource_claim_status(namespace, name, {"status": undo})
        except ApiError as exc:
            log.warning("resourceclaim %s/%s: its allocation not taken back: %s", namespace, name, exc)


def claims_of(row: Pod) -> dict:
    """The pod's `resourceClaims` as stored by the watcher ({} for a pod without)."""
    return pod_objects.as_dict(pod_objects.as_dict(row.scheduling).get("resourceClaims"))


def results_for(row: Pod, claim: str, requests: list[dict], grants: dict[str, list]) -> list[dict]:
    """The allocation results of `claim`: each request's container, card by card."""
    results = []
    for entry in requests:
        if entry.get("claim") != claim:
            continue
        for n, (card, memory, cores) in enumerate(grants.get(str(entry.get("container")), [])):
            marks = pod_objects.as_dict(card.dra)
            seed = f"{row.namespace}/{row.name}/{row.uid}/{claim}/{entry.get('request')}/{n}"
            results.append(
                result_of(
                    str(entry.get("request")),
                    str(marks.get("driver")),
                    str(marks.get("pool")),
                    str(marks.get("device")),
                    bool(marks.get("shareable")),
                    marks.get("capacity") or [],
                    seed,
                    memory,
                    cores,
                )
            )
    return results


class ClaimWriter:
    """Writes and gives back the claims of the pods the cycle placed (module docstring)."""

    def __init__(self, api: KubeApi, state: DraState):
        self.api, self.state = api, state
        #: the special claim `prebind` created (name, uid), for the binder to delete when the
        #: Binding is refused; None when it created none
        self.special: tuple[str, str] | None = None

    def prebind(self, row: Pod, node: str) -> list[str]:
        """Allocate and reserve the pod's claims on `node`; the claims written. Raises
        ClaimConflict (what this call wrote is taken back first)."""
        found = claims_of(row)
        requests = [r for r in found.get("requests") or [] if isinstance(r, dict)]
        if not requests:
            return []
        grants: dict[str, list] = {}
        for allocation in (
            Allocation.objects.filter(pod=row, active=True)
            .select_related("card")
            .order_by("container_index", "id")
        ):
            grants.setdefault(allocation.container_name, []).append(
                (allocation.card, allocation.memory, allocation.cores)
            )
        written: list[tuple[str, dict]] = []
        for entry in found.get("claims") or []:
            name = str(pod_objects.as_dict(entry).get("claim") or "")
            if not name:
                continue
            claim = self.state.claims.get((row.namespace, name))
            if claim is None:
                self._undo(row.namespace, written)
                raise ClaimConflict(f'resourceclaim "{name}" not found')
            status = pod_objects.as_dict(claim.get("status"))
            reserved = [r for r in status.get("reservedFor") or [] if isinstance(r, dict)]
            others = [r for r in reserved if r.get("uid") != row.uid]
            if status.get("allocation") and others:
                self._undo(row.namespace, written)
                raise ClaimConflict(
                    f'resourceclaim "{name}" was allocated for {others[0].get("name")} meanwhile'
                )
            try:
                self._allocate(row, node, claim, name, requests, grants)
            except ApiError as exc:
                self._undo(row.namespace, written)
                if exc.status not in (404, 409, 422):
                    raise
                raise ClaimConflict(f'resourceclaim "{name}": {exc}') from exc
            written.append((name, status))
        extended = pod_objects.as_dict(found.get("extended"))
        if extended:
            try:
                written.append((self._extended(row, node, extended, requests, grants), {}))
            except ClaimConflict:
                self._undo(row.namespace, written)
                raise
        return [name for name, _ in written]

    def _allocate(
        self, row: Pod, node: str, claim: dict, name: str, requests: list[dict], grants: dict
    ) -> dict:
        """Write the claim's allocation on `node` and reserve it for the pod (ApiError)."""
        allocation = {
            "devices": {
                "results": results_for(row, name, requests, grants),
                "config": claim_config(claim, self.state.classes),
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
        version = pod_objects.as_dict(claim.get("metadata")).get("resourceVersion")
        held = pod_objects.as_dict(claim.get("status")).get("allocation")
        if held and held != allocation:
            # this pod's own from an earlier try, placed elsewhere now: an allocation cannot
            # change once set, so it is taken back first (as kube-controller-manager
            # deallocates a claim reserved for nobody), then written anew
            cleared = self.api.patch_resource_claim_status(
                row.namespace,
                name,
                {
                    "metadata": {"resourceVersion": version},
                    "status": {"allocation": None, "reservedFor": None},
                },
            )
            version = pod_objects.as_dict(pod_objects.as_dict(cleared).get("metadata")).get("resourceVersion")
        patch = {
            "metadata": {"resourceVersion": version},
            "status": {
                "allocation": allocation,
                "reservedFor": [{"resource": "pods", "name": row.name, "uid": row.uid}],
            },
        }
        return self.api.patch_resource_claim_status(row.namespace, name, patch)

    def _extended(self, row: Pod, node: str, extended: dict, requests: list[dict], grants: dict) -> str:
        """Create the special claim, allocate and reserve it, name it in the pod's status; its
        name. Raises ClaimConflict, the claim deleted again when it was created."""
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{row.name}-extended-resources-",
                "namespace": row.namespace,
                "annotations": {EXTENDED_ANNOTATION: "true"},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": row.name,
                        "uid": row.uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"devices": {"requests": extended.get("requests") or []}},
        }
        try:
            created = self.api.create_resource_claim(row.namespace, body)
        except ApiError as exc:
            raise ClaimConflict(f"the claim of its extended resources not created: {exc}") from exc
        meta = pod_objects.as_dict(created.get("metadata"))
        name, uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
        status = {
            "extendedResourceClaimStatus": {
                "resourceClaimName": name,
                "requestMappings": extended.get("requestMappings") or [],
            }
        }
        try:
            self._allocate_special(row, node, created, requests, grants)
            self.api.patch_pod_status(row.namespace, row.name, {"status": status})
        except ApiError as exc:
            self.drop(row.namespace, name, uid)
            raise ClaimConflict(f'resourceclaim "{name}" of its extended resources: {exc}') from exc
        except ApiUnavailable:
            self.drop(row.namespace, name, uid)
            raise
        self.special = (name, uid)
        return name

    def _allocate_special(self, row: Pod, node: str, claim: dict, requests: list[dict], grants: dict) -> None:
        """`_allocate` for the special claim: its results are the containers of `EXTENDED_CLAIM`."""
        name = str(claim["metadata"]["name"])
        renamed = [{**r, "claim": name} for r in requests if r.get("claim") == EXTENDED_CLAIM]
        self._allocate(row, node, claim, name, renamed, grants)

    def drop(self, namespace: str, name: str, uid: str) -> None:
        """Delete a special claim this writer created (that incarnation only); a claim already
        gone is fine, any other failure is logged (the garbage collector deletes it with the pod)."""
        try:
            self.api.delete_resource_claim(namespace, name, uid)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("resourceclaim %s/%s: not deleted: %s", namespace, name, exc)
        except ApiUnavailable as exc:
            log.warning("resourceclaim %s/%s: not deleted: %s", namespace, name, exc)

    def _undo(self, namespace: str, written: list[tuple[str, dict]]) -> None:
        undo_writes(self.api, namespace, written)

    def release_ended(self, claims: list[dict]) -> int:
        """Give back the claims reserved for our pods that ended (`ENDED`, by uid); how many
        claims were written."""
        reserved: dict[str, list[dict]] = {}
        for claim in claims:
            status = pod_objects.as_dict(claim.get("status"))
            if not status.get("allocation"):
                continue
            for entry in status.get("reservedFor") or []:
                uid = pod_objects.as_dict(entry).get("uid")
                if uid:
                    reserved.setdefault(str(uid), []).append(claim)
        if not reserved:
            return 0
        ended = set(
            Pod.objects.filter(uid__in=list(reserved), status__in=ENDED, origin=Pod.KUBERNETES).values_list(
                "uid", flat=True
            )
        )
        live = set(
            Pod.objects.filter(uid__in=list(ended), status__in=Pod.BOUND + (Pod.PENDING,)).values_list(
                "uid", flat=True
            )
        )
        gone = ended - live
        written = 0
        done: set[tuple[str, str]] = set()
        for uid in sorted(gone):
            for claim in reserved[uid]:
                meta = pod_objects.as_dict(claim.get("metadata"))
                key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
                if key in done:
                    continue
                done.add(key)
                written += release_claim(self.api, *key, claim, gone)
        return written
