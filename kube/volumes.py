"""The claims, volumes and storage classes `VolumeBinding` judges a pod's volumes against
(SPEC 10), read from Kubernetes, and its PreBind. Pure but for the informers' caches it reads.

The agent keeps three informers with slim views (`project_claim`, `project_volume`,
`project_class`: the scenario's forms). When a pod of ours is submitted, `Volumes.storage_for`
writes into its `scheduling` map what its claims need: the claims, the volumes they are bound
to, and for a `WaitForFirstConsumer` claim its class and the volumes of that class no other
claim holds. The engine judges from that alone, as in a scenario. A change to a claim,
volume or class re-submits the waiting pods it may concern (`StorageSync`), and the resync
compares every pod's stored `scheduling` anyway, so a missed change is caught within a resync.

`prebind` is kube-scheduler's PreBind, run by the binder before the Binding: a claim left to a
provisioner gets `volume.kubernetes.io/selected-node`, a volume chosen for a claim gets its
`spec.claimRef`, each written with the resourceVersion just read, so a claim or volume that
changed since the pod was placed (bound meanwhile, taken by another claim) fails the bind and
the pod is placed again. Unlike kube-scheduler, the pod is bound at once: it does not wait for
the volume controller to finish binding (docs/kubernetes.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from scheduling.engine.errors import PodInvalid
from scheduling.engine.noderules.volumes import (
    CLAIMS,
    CLASSES,
    SELECTED_NODE,
    VOLUMES,
    WAIT_FOR_FIRST_CONSUMER,
    Binding,
    claim_names,
    read_storage,
    resolve,
)

from .api import ApiError, KubeApi
from .informer import Handler

log = logging.getLogger("hamiadmin.kube.volumes")


def _part(obj, key: str) -> dict:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def project_claim(obj: dict) -> dict:
    """A PersistentVolumeClaim as `VolumeBinding` reads it (the scenario's form)."""
    meta, spec = _part(obj, "metadata"), _part(obj, "spec")
    view = {
        "name": meta.get("name") or "",
        "namespace": meta.get("namespace") or "default",
        "storageClassName": spec.get("storageClassName") or "",
        "volumeName": spec.get("volumeName") or "",
        "accessModes": list(spec.get("accessModes") or []),
    }
    storage = _part(_part(spec, "resources"), "requests").get("storage")
    if storage is not None:
        view["resources"] = {"requests": {"storage": storage}}
    return view


def project_volume(obj: dict) -> dict:
    """A PersistentVolume as `VolumeBinding` reads it."""
    meta, spec = _part(obj, "metadata"), _part(obj, "spec")
    view: dict = {
        "name": meta.get("name") or "",
        "storageClassName": spec.get("storageClassName") or "",
        "accessModes": list(spec.get("accessModes") or []),
    }
    capacity = _part(spec, "capacity").get("storage")
    if capacity is not None:
        view["capacity"] = {"storage": capacity}
    ref = _part(spec, "claimRef")
    if ref.get("name"):
        view["claimRef"] = {"namespace": ref.get("namespace") or "default", "name": ref["name"]}
    required = _part(spec, "nodeAffinity").get("required")
    if required is not None:
        view["nodeAffinity"] = {"required": required}
    return view


def project_class(obj: dict) -> dict:
    """A StorageClass as `VolumeBinding` reads it."""
    view = {
        "name": _part(obj, "metadata").get("name") or "",
        "provisioner": obj.get("provisioner") or "",
        "volumeBindingMode": obj.get("volumeBindingMode") or "Immediate",
    }
    if obj.get("allowedTopologies"):
        view["allowedTopologies"] = obj["allowedTopologies"]
    return view


def pod_volumes(pod: dict) -> list[dict]:
    """The pod's volumes that name a claim, slim: `{name, persistentVolumeClaim: {claimName}}`
    or `{name, ephemeral: {}}` (its claim is `<pod>-<volume>`)."""
    volumes = _part(pod, "spec").get("volumes")
    kept = []
    for volume in volumes if isinstance(volumes, list) else []:
        if not isinstance(volume, dict):
            continue
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, dict):
            kept.append(
                {"name": volume.get("name"), "persistentVolumeClaim": {"claimName": claim.get("claimName")}}
            )
        elif isinstance(volume.get("ephemeral"), dict):
            kept.append({"name": volume.get("name"), "ephemeral": {}})
    return kept


class Volumes:
    """The three caches (each `(namespace, name) -> view`, as `Informer.get` answers), read
    together. `get_claim(namespace, name)`, `get_volume(name)`, `volumes()`, `get_class(name)`."""

    def __init__(
        self,
        get_claim: Callable[[str, str], dict | None],
        get_volume: Callable[[str], dict | None],
        volumes: Callable[[], list[dict]],
        get_class: Callable[[str], dict | None],
    ):
        self.get_claim = get_claim
        self.get_volume = get_volume
        self.volumes = volumes
        self.get_class = get_class

    def storage_for(self, namespace: str, pod_name: str, volumes: list[dict]) -> dict:
        """What the pod's claims are judged against, in `Pod.scheduling`'s keys: the claims,
        their bound volumes, and for an unbound claim its class and, when the class waits for
        the first consumer, the volumes of that class not held by another claim."""
        try:
            names = claim_names(pod_name, volumes)
        except PodInvalid:
            names = ()  # the engine refuses the pod naming the field
        claims, found_volumes, classes = [], {}, {}
        for name, _ in names:
            claim = self.get_claim(namespace, name)
            if claim is None:
                continue
            claims.append(claim)
            if claim.get("volumeName"):
                volume = self.get_volume(claim["volumeName"])
                if volume is not None:
                    found_volumes[volume["name"]] = volume
                continue
            class_name = claim.get("storageClassName") or ""
            cls = self.get_class(class_name) if class_name else None
            if cls is None:
                continue
            classes[cls["name"]] = cls
            if cls.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER:
                for volume in self.volumes():
                    ref = volume.get("claimRef")
                    free = ref is None or (ref.get("namespace"), ref.get("name")) == (namespace, name)
                    if free and volume.get("storageClassName") == cls["name"]:
                        found_volumes[volume["name"]] = volume
        return {
            CLAIMS: claims,
            VOLUMES: sorted(found_volumes.values(), key=lambda v: v["name"]),
            CLASSES: sorted(classes.values(), key=lambda c: c["name"]),
        }


class VolumeConflict(Exception):
    """A claim or volume changed since the pod was placed: the bind cannot go on."""


def bindings(
    scheduling, namespace: str, pod_name: str, node: str, labels: dict[str, str]
) -> tuple[Binding, ...]:
    """What a bind of this stored pod to `node` must do first: the engine's choice on that node
    from the storage stored with it (none when it stores no volumes). Raises VolumeConflict
    when, as stored now (a change since the pod was placed submits it again), the node cannot
    mount its claims."""
    if not isinstance(scheduling, dict) or not scheduling.get("volumes"):
        return ()
    storage = {key: scheduling[key] for key in (CLAIMS, VOLUMES, CLASSES) if key in scheduling}
    if not storage:
        return ()
    try:
        resolved = resolve(namespace, pod_name, scheduling["volumes"], read_storage(storage))
    except PodInvalid:
        return ()  # such a pod is parked, never placed
    refused = resolved.refuse(node, labels)
    if refused:
        raise VolumeConflict(f"node {node}: {', '.join(refused)}")
    return resolved.bindings(node, labels)


def prebind(api: KubeApi, namespace: str, node: str, planned: tuple[Binding, ...]) -> None:
    """kube-scheduler's PreBind for `planned` (`bindings`): claim each chosen volume, ask a
    provisioner for the others on `node`. Raises VolumeConflict when a claim is bound or gone
    or a volume is held by another claim; ApiError / ApiUnavailable as the API answers (a 409
    on the write: it changed between the read and the write)."""
    for binding in planned:
        try:
            claim = api.get_persistent_volume_claim(namespace, binding.claim)
        except ApiError as exc:
            if exc.status == 404:
                raise VolumeConflict(f'persistentvolumeclaim "{binding.claim}" is gone') from exc
            raise
        spec = claim.get("spec") or {}
        if spec.get("volumeName"):
            if spec["volumeName"] == binding.volume:
                continue  # bound as planned meanwhile
            raise VolumeConflict(
                f'persistentvolumeclaim "{binding.claim}" was bound to "{spec["volumeName"]}" meanwhile'
            )
        if not binding.volume:
            annotations = (claim.get("metadata") or {}).get("annotations") or {}
            if annotations.get(SELECTED_NODE) == node:
                continue
            api.patch_persistent_volume_claim(
                namespace,
                binding.claim,
                {
                    "metadata": {
                        "resourceVersion": claim["metadata"]["resourceVersion"],
                        "annotations": {SELECTED_NODE: node},
                    }
                },
            )
            continue
        try:
            volume = api.get_persistent_volume(binding.volume)
        except ApiError as exc:
            if exc.status == 404:
                raise VolumeConflict(f'persistentvolume "{binding.volume}" is gone') from exc
            raise
        ref = (volume.get("spec") or {}).get("claimRef") or {}
        if ref.get("name"):
            if (ref.get("namespace"), ref.get("name")) == (namespace, binding.claim):
                continue
            raise VolumeConflict(
                f'persistentvolume "{binding.volume}" is held by claim {ref.get("namespace")}/{ref["name"]}'
            )
        meta = claim.get("metadata") or {}
        api.patch_persistent_volume(
            binding.volume,
            {
                "metadata": {"resourceVersion": volume["metadata"]["resourceVersion"]},
                "spec": {
                    "claimRef": {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "namespace": namespace,
                        "name": binding.claim,
                        "uid": meta.get("uid"),
                        "resourceVersion": meta.get("resourceVersion"),
                    }
                },
            },
        )


class StorageSync(Handler):
    """A claim, volume or class changed: re-submit the waiting pods it may concern (`resubmit`
    gets the namespace a claim lives in, or None for a volume or class: every namespace)."""

    def __init__(self, resubmit: Callable[[str | None, str | None], None], kind: str):
        self.resubmit = resubmit
        self.kind = kind

    def changed(self, kind: str, obj: dict) -> None:
        meta = _part(obj, "metadata")
        if self.kind == "claims":
            self.resubmit(meta.get("namespace") or "default", meta.get("name") or "")
        else:
            self.resubmit(None, None)

    def synced(self, objects: list[dict], listed: bool) -> None:
        """Nothing: the pods' own resync compares what each stores with the caches."""
