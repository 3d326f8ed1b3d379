"""Every Kubernetes API call hamiadmin makes, in one thin class, and the RBAC that allows them.

Calls go through the official client with `_preload_content=False`, so objects come back
as the API server's JSON (plain dicts, camelCase keys, the same shape kube-scheduler sends
the extender) and no generated model is ever deserialized. That also sidesteps the
client's old failure on the Binding response (a `Status`, which raised ValueError).

Failures become two exceptions: `ApiError` (the server answered with an error status)
and `ApiUnavailable` (no answer: refused, reset, timed out). Callers never see urllib3
or the client's exception types.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

#: (api group, resource, verb): what Kubernetes authorizes a request by.
Grant = tuple[str, str, str]

MERGE_PATCH = "application/merge-patch+json"
#: The PodGroup CRDs read when served: (api group, version). Volcano's declares no status
#: subresource (its status is patched on the object); scheduler-plugins' does.
VOLCANO = ("scheduling.volcano.sh", "v1beta1")
COSCHEDULING = ("scheduling.x-k8s.io", "v1alpha1")
#: KAI-scheduler's own PodGroup CRD (what its pod-grouper creates; status through `/status`).
KAI = ("scheduling.run.ai", "v2alpha2")
PODGROUPS = "podgroups"
#: Kubernetes' own gang scheduling (1.37 beta): PodGroup and Workload objects, read when served.
WORKLOAD_API = ("scheduling.k8s.io", "v1beta1")
WORKLOADS = "workloads"
#: Dynamic Resource Allocation's group (`kube.dra`).
DRA_GROUP = "resource.k8s.io"


class ApiUnavailable(Exception):
    """The API server gave no answer (down, unreachable, timed out, connection cut)."""


class ApiError(Exception):
    """The API server answered with an error status; `status` is the HTTP code (409, 410...)."""

    def __init__(self, status: int, reason: str, message: str = ""):
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message


class Gone(ApiError):
    """410: the resourceVersion a watch resumes from is too old; list again."""


def error_from(exc: ApiException) -> ApiError:
    message = ""
    try:
        body = json.loads(exc.body) if exc.body else {}
        message = body.get("message", "") if isinstance(body, dict) else ""
    except (TypeError, ValueError):
        message = str(exc.body)[:500]
    kind = Gone if exc.status == 410 else ApiError
    return kind(exc.status or 0, exc.reason or "", message)


@contextmanager
def translated():
    """Map the client's and urllib3's exceptions onto ApiError / ApiUnavailable."""
    try:
        yield
    except ApiException as exc:
        if not exc.status:
            raise ApiUnavailable(str(exc)) from exc
        raise error_from(exc) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise ApiUnavailable(f"{type(exc).__name__}: {exc}") from exc


def read_json(response) -> dict:
    try:
        return json.loads(response.data or b"{}")
    finally:
        response.release_conn()


def needs(grant: Grant | None):
    """The RBAC grant a KubeApi method's request needs, declared on the method itself
    (None: discovery, which every authenticated identity may read through `system:discovery`).
    tests/kube checks each method against the requests it really sends."""

    def declare(method):
        method.grant = grant
        return method

    return declare


class KubeApi:
    """The calls, each a few lines. `request_timeout` bounds every non-watch request."""

    def __init__(self, api_client: client.ApiClient, request_timeout: float = 30.0):
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.storage = client.StorageV1Api(api_client)
        self.scheduling = client.SchedulingV1beta1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.request_timeout = request_timeout

    def _call(self, method, *args, **kwargs) -> dict:
        """One non-watch request: raw JSON back, errors translated, bounded by `request_timeout`."""
        with translated():
            return read_json(
                method(*args, _preload_content=False, _request_timeout=self.request_timeout, **kwargs)
            )

    # -- pods ---------------------------------------------------------------------------

    @needs(("", "pods", "list"))
    def list_pods(self, field_selector: str = "", label_selector: str = "") -> tuple[list[dict], str]:
        """Every pod (all namespaces) matching the selectors, and the list's resourceVersion."""
        body = self._call(
            self.core.list_pod_for_all_namespaces,
            field_selector=field_selector or None,
            label_selector=label_selector or None,
        )
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    @needs(("", "pods", "watch"))
    def watch_pods(self, resource_version: str, field_selector: str = "", timeout_seconds: int = 60):
        """Pod events after `resource_version`: yields (type, object) until the server ends the watch."""
        return self._watch(
            self.core.list_pod_for_all_namespaces, resource_version, timeout_seconds, field_selector
        )

    @needs(("", "pods", "get"))
    def get_pod(self, namespace: str, name: str) -> dict:
        return self._call(self.core.read_namespaced_pod, name, namespace)

    @needs(("", "pods", "patch"))
    def patch_pod(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch; a `metadata.resourceVersion` in it makes the server refuse (409)
        if the pod changed since that version."""
        return self._call(self.core.patch_namespaced_pod, name, namespace, patch, _content_type=MERGE_PATCH)

    @needs(("", "pods/proxy", "get"))
    def get_pod_proxy(self, namespace: str, name: str, port: int, path: str) -> bytes:
        """GET `path` on the pod's `port` through the API server's proxy (HAMi's vGPU monitor,
        `kube.vgpumonitor`): the body as sent, whatever its type."""
        with translated():
            response: Any = self.core.connect_get_namespaced_pod_proxy_with_path(
                f"{name}:{port}",
                namespace,
                path.lstrip("/"),
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
            try:
                return response.data or b""
            finally:
                response.release_conn()

    @needs(("", "pods/status", "patch"))
    def patch_pod_status(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch of the status subresource (the `PodScheduled` condition,
        `nominatedNodeName`, KEP-5004's `extendedResourceClaimStatus`): only `status` changes. A merge patch replaces a list whole, so a
        patch of `conditions` carries all of them and the `metadata.resourceVersion` they were
        read at: the server refuses it (409) if the pod changed since."""
        return self._call(
            self.core.patch_namespaced_pod_status, name, namespace, patch, _content_type=MERGE_PATCH
        )

    @needs(("", "pods/binding", "create"))
    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """POST pods/{name}/binding. The answer is a Status, not a Binding: it is not used."""
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid or None),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        self._call(self.core.create_namespaced_pod_binding, name, namespace, body)

    @needs(("", "pods/eviction", "create"))
    def evict_pod(
        self, namespace: str, name: str, uid: str = "", grace_period_seconds: int | None = None
    ) -> None:
        """POST pods/{name}/eviction (policy/v1): Kubernetes deletes the pod unless a
        PodDisruptionBudget forbids it (429). `uid`: only that incarnation (409 otherwise).
        The answer, a Status, is not used."""
        options = client.V1DeleteOptions(
            grace_period_seconds=grace_period_seconds,
            preconditions=client.V1Preconditions(uid=uid) if uid else None,
        )
        body = client.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=options,
        )
        self._call(self.core.create_namespaced_pod_eviction, name, namespace, body)

    # -- nodes --------------------------------------------------------------------------

    @needs(("", "nodes", "list"))
    def list_nodes(self) -> tuple[list[dict], str]:
        body = self._call(self.core.list_node)
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    @needs(("", "nodes", "watch"))
    def watch_nodes(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch(self.core.list_node, resource_version, timeout_seconds)

    @needs(("", "nodes", "get"))
    def get_node(self, name: str) -> dict:
        return self._call(self.core.read_node, name)

    @needs(("", "nodes", "patch"))
    def patch_node(self, name: str, patch: dict) -> dict:
        """JSON merge patch (the node lock, `hami.io/mutex.lock`); with `metadata.resourceVersion`
        the server refuses it (409) if the node changed since."""
        return self._call(self.core.patch_node, name, patch, _content_type=MERGE_PATCH)

    # -- resource quotas (namespace quotas on HAMi's resources) --------------------------

    @needs(("", "resourcequotas", "list"))
    def list_resource_quotas(self) -> tuple[list[dict], str]:
        body = self._call(self.core.list_resource_quota_for_all_namespaces)
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    @needs(("", "resourcequotas", "watch"))
    def watch_resource_quotas(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch(
            self.core.list_resource_quota_for_all_namespaces, resource_version, timeout_seconds
        )

    # -- volumes: what VolumeBinding judges, and its PreBind -----------------------------

    @needs(("", "persistentvolumeclaims", "list"))
    def list_persistent_volume_claims(self) -> tuple[list[dict], str]:
        body = self._call(self.core.list_persistent_volume_claim_for_all_namespaces)
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    @needs(("", "persistentvolumeclaims", "watch"))
    def watch_persistent_volume_claims(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch(
            self.core.list_persistent_volume_claim_for_all_namespaces, resource_version, timeout_seconds
        )

    @needs(("", "persistentvolumeclaims", "get"))
    def get_persistent_volume_claim(self, namespace: str, name: str) -> dict:
        return self._call(self.core.read_namespaced_persistent_volume_claim, name, namespace)

    @needs(("", "persistentvolumeclaims", "patch"))
    def patch_persistent_volume_claim(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch (`volume.kubernetes.io/selected-node`); with
        `metadata.resourceVersion` the server refuses it (409) if the claim changed since."""
        return self._call(
            self.core.patch_namespaced_persistent_volume_claim,
            name,
            namespace,
            patch,
            _content_type=MERGE_PATCH,
        )

    @needs(("", "persistentvolumes", "list"))
    def list_persistent_volumes(self) -> tuple[list[dict], str]:
        body = self._call(self.core.list_persistent_volume)
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    @needs(("", "persistentvolumes", "watch"))
    def watch_persistent_volumes(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch(self.core.list_persistent_volume, resource_version, timeout_seconds)

    @needs(("", "persistentvolumes", "get"))
    def get_persistent_volume(self, name: str) -> dict:
        return self._call(self.core.read_persistent_volume, name)

    @needs(("", "persistentvolumes", "patch"))
    def patch_persistent_volume(self, name: str, patch: dict) -> dict:
        """JSON merge patch (`spec.claimRef`); with `metadata.resourceVersion` the server
        refuses it (409) if the volume changed since."""
        return self._call(self.core.patch_persistent_volume, name, patch, _content_type=MERGE_PATCH)

    @needs(("storage.k8s.io", "storageclasses", "list"))
    def list_storage_classes(self) -> tuple[list[dict], str]:
        body = self._call(self.storage.list_storage_class)
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    @needs(("storage.k8s.io", "storageclasses", "watch"))
    def watch_storage_classes(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch(self.storage.list_storage_class, resource_version, timeout_seconds)

    # -- PodGroup CRDs (Volcano, scheduler-plugins), when served ------------------------

    @needs(None)
    def served_resources(self, group: str, version: str) -> set[str] | None:
        """Discovery: the resource names `group/version` serves (`podgroups`,
        `podgroups/status`), or None when the API server does not serve it (404)."""
        try:
            body = self._call(self.custom.get_api_resources, group, version)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        resources = body.get("resources")
        return (
            {name for r in resources if isinstance(r, dict) and isinstance(name := r.get("name"), str)}
            if isinstance(resources, list)
            else set()
        )

    def _list_custom(self, group: str, version: str) -> tuple[list[dict], str]:
        body = self._call(self.custom.list_cluster_custom_object, group, version, PODGROUPS)
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    def _watch_custom(self, group: str, version: str, resource_version: str, timeout_seconds: int):
        lister = partial(self.custom.list_cluster_custom_object, group, version, PODGROUPS)
        return self._watch(lister, resource_version, timeout_seconds)

    def _patch_custom_status(self, kind: tuple[str, str], namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch of a PodGroup CRD's status subresource (`kind`: group, version)."""
        return self._call(
            self.custom.patch_namespaced_custom_object_status,
            *kind,
            namespace,
            PODGROUPS,
            name,
            patch,
            _content_type=MERGE_PATCH,
        )

    @needs((VOLCANO[0], PODGROUPS, "list"))
    def list_volcano_podgroups(self) -> tuple[list[dict], str]:
        return self._list_custom(*VOLCANO)

    @needs((VOLCANO[0], PODGROUPS, "watch"))
    def watch_volcano_podgroups(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch_custom(*VOLCANO, resource_version, timeout_seconds)

    @needs((VOLCANO[0], PODGROUPS, "patch"))
    def patch_volcano_podgroup(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch of the object: Volcano's CRD has no status subresource."""
        return self._call(
            self.custom.patch_namespaced_custom_object,
            *VOLCANO,
            namespace,
            PODGROUPS,
            name,
            patch,
            _content_type=MERGE_PATCH,
        )

    @needs((COSCHEDULING[0], PODGROUPS, "list"))
    def list_coscheduling_podgroups(self) -> tuple[list[dict], str]:
        return self._list_custom(*COSCHEDULING)

    @needs((COSCHEDULING[0], PODGROUPS, "watch"))
    def watch_coscheduling_podgroups(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch_custom(*COSCHEDULING, resource_version, timeout_seconds)

    @needs((COSCHEDULING[0], f"{PODGROUPS}/status", "patch"))
    def patch_coscheduling_podgroup_status(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch of the status subresource."""
        return self._patch_custom_status(COSCHEDULING, namespace, name, patch)

    @needs((KAI[0], PODGROUPS, "list"))
    def list_kai_podgroups(self) -> tuple[list[dict], str]:
        return self._list_custom(*KAI)

    @needs((KAI[0], PODGROUPS, "watch"))
    def watch_kai_podgroups(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch_custom(*KAI, resource_version, timeout_seconds)

    @needs((KAI[0], f"{PODGROUPS}/status", "patch"))
    def patch_kai_podgroup_status(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch of the status subresource (`status.schedulingConditions`)."""
        return self._patch_custom_status(KAI, namespace, name, patch)

    # -- Dynamic Resource Allocation (resource.k8s.io/v1, GA in 1.34): kube/dra.py ----

    def _dra_list(self, method) -> tuple[list[dict], str]:
        body = self._call(method)
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    @needs((DRA_GROUP, "resourceslices", "list"))
    def list_resource_slices(self) -> tuple[list[dict], str]:
        return self._dra_list(self.resource.list_resource_slice)

    @needs((DRA_GROUP, "resourceclaims", "list"))
    def list_resource_claims(self) -> tuple[list[dict], str]:
        return self._dra_list(self.resource.list_resource_claim_for_all_namespaces)

    @needs((DRA_GROUP, "deviceclasses", "list"))
    def list_device_classes(self) -> tuple[list[dict], str]:
        return self._dra_list(self.resource.list_device_class)

    @needs((DRA_GROUP, "devicetaintrules", "list"))
    def list_device_taint_rules(self) -> tuple[list[dict], str]:
        return self._dra_list(self.resource.list_device_taint_rule)

    @needs((DRA_GROUP, "resourceslices", "watch"))
    def watch_resource_slices(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch(self.resource.list_resource_slice, resource_version, timeout_seconds)

    @needs((DRA_GROUP, "resourceclaims", "watch"))
    def watch_resource_claims(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch(
            self.resource.list_resource_claim_for_all_namespaces, resource_version, timeout_seconds
        )

    @needs((DRA_GROUP, "deviceclasses", "watch"))
    def watch_device_classes(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch(self.resource.list_device_class, resource_version, timeout_seconds)

    @needs((DRA_GROUP, "devicetaintrules", "watch"))
    def watch_device_taint_rules(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch(self.resource.list_device_taint_rule, resource_version, timeout_seconds)

    @needs((DRA_GROUP, "resourceclaims/status", "patch"))
    def patch_resource_claim_status(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch of the status subresource; with `metadata.resourceVersion` the
        server refuses it (409) if the claim changed since. Setting `allocation` or
        `reservedFor` is also authorized against `resourceclaims/binding` (`claim_binding`)."""
        return self._call(
            self.resource.patch_namespaced_resource_claim_status,
            name,
            namespace,
            patch,
            _content_type=MERGE_PATCH,
        )

    @needs((DRA_GROUP, "resourceclaims", "create"))
    def create_resource_claim(self, namespace: str, claim: dict) -> dict:
        """POST a ResourceClaim (KEP-5004's special claim, `kube.draclaims`); with
        `metadata.generateName` and no name the server names it. The claim as created."""
        return self._call(self.resource.create_namespaced_resource_claim, namespace, claim)

    @needs((DRA_GROUP, "resourceclaims", "delete"))
    def delete_resource_claim(self, namespace: str, name: str, uid: str = "") -> None:
        """DELETE a ResourceClaim; `uid`: only that incarnation (409 otherwise)."""
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None)
        self._call(self.resource.delete_namespaced_resource_claim, name, namespace, body=options)

    # -- the Workload API (scheduling.k8s.io/v1beta1), when served ---------------------

    @needs((WORKLOAD_API[0], PODGROUPS, "list"))
    def list_workload_podgroups(self) -> tuple[list[dict], str]:
        body = self._call(self.scheduling.list_pod_group_for_all_namespaces)
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    @needs((WORKLOAD_API[0], PODGROUPS, "watch"))
    def watch_workload_podgroups(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch(
            self.scheduling.list_pod_group_for_all_namespaces, resource_version, timeout_seconds
        )

    @needs((WORKLOAD_API[0], f"{PODGROUPS}/status", "patch"))
    def patch_workload_podgroup_status(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch of the status subresource (`status.conditions`)."""
        return self._call(
            self.scheduling.patch_namespaced_pod_group_status,
            name,
            namespace,
            patch,
            _content_type=MERGE_PATCH,
        )

    @needs((WORKLOAD_API[0], WORKLOADS, "list"))
    def list_workloads(self) -> tuple[list[dict], str]:
        body = self._call(self.scheduling.list_workload_for_all_namespaces)
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    @needs((WORKLOAD_API[0], WORKLOADS, "watch"))
    def watch_workloads(self, resource_version: str, timeout_seconds: int = 60):
        return self._watch(
            self.scheduling.list_workload_for_all_namespaces, resource_version, timeout_seconds
        )

    # -- owners of pods (kube/owners.py), and namespaces' opt-in ---------------------

    @needs(("", "namespaces", "get"))
    def get_namespace(self, name: str) -> dict:
        return self._call(self.core.read_namespace, name)

    def _get_custom(self, group: str, version: str, plural: str, namespace: str, name: str) -> dict:
        return self._call(self.custom.get_namespaced_custom_object, group, version, namespace, plural, name)

    # -- events (core/v1) ---------------------------------------------------------------

    @needs(("", "events", "create"))
    def create_event(self, namespace: str, event: dict) -> dict:
        return self._call(self.core.create_namespaced_event, namespace, event)

    @needs(("", "events", "patch"))
    def patch_event(self, namespace: str, name: str, patch: dict) -> dict:
        return self._call(self.core.patch_namespaced_event, name, namespace, patch, _content_type=MERGE_PATCH)

    # -- leases (coordination.k8s.io/v1) ------------------------------------------------

    @needs(("coordination.k8s.io", "leases", "get"))
    def get_lease(self, namespace: str, name: str) -> dict | None:
        """The Lease, or None when it does not exist yet."""
        try:
            return self._call(self.coordination.read_namespaced_lease, name, namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    @needs(("coordination.k8s.io", "leases", "create"))
    def create_lease(self, namespace: str, lease: dict) -> dict:
        return self._call(self.coordination.create_namespaced_lease, namespace, lease)

    @needs(("coordination.k8s.io", "leases", "update"))
    def replace_lease(self, namespace: str, name: str, lease: dict) -> dict:
        """PUT with the resourceVersion read before: 409 when someone else wrote in between."""
        return self._call(self.coordination.replace_namespaced_lease, name, namespace, lease)

    # -- watch streaming ----------------------------------------------------------------

    def _watch(self, list_call, resource_version: str, timeout_seconds: int, field_selector: str = ""):
        """Open a watch and return an iterator of (type, object).

        An ERROR event raises: `Gone` for 410 (the caller lists again), `ApiError` otherwise.
        BOOKMARK events are passed through so the caller can advance its resourceVersion.
        """
        kwargs = {
            "watch": True,
            "resource_version": resource_version or None,
            "allow_watch_bookmarks": True,
            "timeout_seconds": int(timeout_seconds),
            "_preload_content": False,
            # The server ends the watch after timeout_seconds; the read timeout only catches a
            # connection that went silent without closing.
            "_request_timeout": (self.request_timeout, timeout_seconds + 30),
        }
        if field_selector:
            kwargs["field_selector"] = field_selector
        with translated():
            response = list_call(**kwargs)
        return WatchStream(response)


#: The owner kinds read (kube/owners.py registers how each is counted), (api group, plural):
#: one `KubeApi.get_<plural>(group, version, namespace, name)` each, so each carries its own
#: grant; ApiError 404 when the object is gone or its group is not served.
OWNER_RESOURCES = (
    ("apps", "replicasets"),
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("batch", "jobs"),
    ("jobset.x-k8s.io", "jobsets"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    ("ray.io", "rayclusters"),
    ("ray.io", "rayjobs"),
    ("kubeflow.org", "pytorchjobs"),
    ("kubeflow.org", "tfjobs"),
    ("kubeflow.org", "mpijobs"),
)


def _owner_getter(group: str, plural: str):
    @needs((group, plural, "get"))
    def get(self: KubeApi, api_group: str, version: str, namespace: str, name: str) -> dict:
        return self._get_custom(api_group, version, plural, namespace, name)

    get.__name__ = get.__qualname__ = f"get_{plural}"
    return get


for _group, _plural in OWNER_RESOURCES:
    setattr(KubeApi, f"get_{_plural}", _owner_getter(_group, _plural))
OWNER_CALLS = tuple(getattr(KubeApi, f"get_{plural}") for _, plural in OWNER_RESOURCES)


@needs((DRA_GROUP, "resourceclaims/binding", "patch"))
def claim_binding() -> None:
    """No request of its own: from Kubernetes 1.36 (`DRAResourceClaimGranularStatusAuthorization`,
    beta and on) a status write that sets a claim's `allocation` or `reservedFor`
    (`KubeApi.patch_resource_claim_status`) is also authorized against this synthetic
    subresource; older servers ignore the grant."""


#: What DRA (`HAMI_DRA`: the informers of `kube.drastate`, the binder's claim writes, the
#: special claims of extended resources it creates and deletes, and the pass of
#: `kube.dra.DraCycle`) adds to the watcher's calls.
DRA_CALLS = (
    KubeApi.list_resource_slices,
    KubeApi.watch_resource_slices,
    KubeApi.list_resource_claims,
    KubeApi.watch_resource_claims,
    KubeApi.list_device_classes,
    KubeApi.watch_device_classes,
    KubeApi.list_device_taint_rules,
    KubeApi.watch_device_taint_rules,
    KubeApi.patch_resource_claim_status,
    claim_binding,
    KubeApi.create_resource_claim,
    KubeApi.delete_resource_claim,
)

#: The calls each identity makes. Their grants are the RBAC rules deploy/k8s must give it,
#: no more: tests/kube runs each identity's code against a stand-in API server and compares
#: what it requested with these; tests/deploy compares the rendered Roles with them.
WATCHER_AGENT_CALLS = (
    KubeApi.list_pods,
    KubeApi.watch_pods,
    KubeApi.get_pod,
    KubeApi.patch_pod,
    KubeApi.patch_pod_status,
    KubeApi.bind_pod,
    KubeApi.evict_pod,
    KubeApi.list_nodes,
    KubeApi.watch_nodes,
    KubeApi.get_node,
    KubeApi.patch_node,
    KubeApi.create_event,
    KubeApi.patch_event,
    KubeApi.get_lease,
    KubeApi.create_lease,
    KubeApi.replace_lease,
    KubeApi.list_resource_quotas,
    KubeApi.watch_resource_quotas,
    KubeApi.served_resources,
    KubeApi.list_volcano_podgroups,
    KubeApi.watch_volcano_podgroups,
    KubeApi.patch_volcano_podgroup,
    KubeApi.list_coscheduling_podgroups,
    KubeApi.watch_coscheduling_podgroups,
    KubeApi.patch_coscheduling_podgroup_status,
    KubeApi.list_kai_podgroups,
    KubeApi.watch_kai_podgroups,
    KubeApi.patch_kai_podgroup_status,
    KubeApi.list_workload_podgroups,
    KubeApi.watch_workload_podgroups,
    KubeApi.patch_workload_podgroup_status,
    KubeApi.list_workloads,
    KubeApi.watch_workloads,
    KubeApi.list_persistent_volume_claims,
    KubeApi.watch_persistent_volume_claims,
    KubeApi.get_persistent_volume_claim,
    KubeApi.patch_persistent_volume_claim,
    KubeApi.list_persistent_volumes,
    KubeApi.watch_persistent_volumes,
    KubeApi.get_persistent_volume,
    KubeApi.patch_persistent_volume,
    KubeApi.list_storage_classes,
    KubeApi.watch_storage_classes,
    KubeApi.get_namespace,
    KubeApi.get_pod_proxy,
    *OWNER_CALLS,
    *DRA_CALLS,
)
#: `--extender`: kube-scheduler binds; the agent reports nodes, releases pods that end, and
#: GETs the rows a relist misses.
EXTENDER_AGENT_CALLS = (
    KubeApi.list_pods,
    KubeApi.watch_pods,
    KubeApi.get_pod,
    KubeApi.list_nodes,
    KubeApi.watch_nodes,
    KubeApi.get_lease,
    KubeApi.create_lease,
    KubeApi.replace_lease,
)
#: The web app's `POST /extender/bind`: the Binder's node lock, annotations and Binding.
EXTENDER_WEB_CALLS = (
    KubeApi.get_pod,
    KubeApi.patch_pod,
    KubeApi.bind_pod,
    KubeApi.get_node,
    KubeApi.patch_node,
)


def rules_for(calls) -> tuple[Grant, ...]:
    return tuple(dict.fromkeys(call.grant for call in calls if call.grant is not None))


#: The kube agent in watcher mode (deploy/k8s/base/rbac.yaml).
RBAC_RULES = rules_for(WATCHER_AGENT_CALLS)
#: The kube agent with `--extender` (deploy/k8s/overlays/extender).
EXTENDER_AGENT_RBAC_RULES = rules_for(EXTENDER_AGENT_CALLS)
#: The web Deployment in extender mode (deploy/k8s/overlays/extender).
EXTENDER_WEB_RBAC_RULES = rules_for(EXTENDER_WEB_CALLS)
#: Resources granted in hamiadmin's own namespace only (a Role): the leader-election Lease.
#: Everything else is cluster-wide (a ClusterRole): pods and events live in every namespace.
OWN_NAMESPACE_RESOURCES = frozenset({("coordination.k8s.io", "leases")})


class WatchStream:
    """The events of one watch request. `close()` may be called from another thread: it cuts
    the connection, so a reader blocked on a quiet watch returns at once."""

    def __init__(self, response):
        self.response = response

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        try:
            with translated():
                buffered = b""
                for chunk in self.response.stream(amt=None, decode_content=False):
                    buffered += chunk
                    *lines, buffered = buffered.split(b"\n")
                    for line in lines:
                        event = _parse_event(line)
                        if event is not None:
                            yield event
                event = _parse_event(buffered)
                if event is not None:
                    yield event
        finally:
            self.response.release_conn()

    def close(self) -> None:
        sock = getattr(getattr(self.response, "connection", None), "sock", None)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _parse_event(line: bytes) -> tuple[str, dict] | None:
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise ApiUnavailable(f"watch stream sent a line that is not JSON: {line[:200]!r}") from exc
    kind, obj = event.get("type", ""), event.get("object") or {}
    if kind == "ERROR":
        code = int(obj.get("code") or 0)
        error = Gone if code == 410 else ApiError
        raise error(code, obj.get("reason", ""), obj.get("message", ""))
    return kind, obj


def api_from_config(kubeconfig: str | None = None, context: str | None = None) -> KubeApi:
    """In-cluster configuration (service account) unless a kubeconfig file is named."""
    from kubernetes import config

    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    return KubeApi(client.ApiClient(configuration))


def api_for_host(host: str, token: str = "") -> KubeApi:
    """A client for a plain URL (tests' stand-in server, `kubectl proxy`)."""
    configuration = client.Configuration(host=host)
    if token:
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return KubeApi(client.ApiClient(configuration))
