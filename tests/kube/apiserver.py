"""A stand-in Kubernetes API server on 127.0.0.1, for the real `kubernetes` client to talk to.

No real API server can run in the test environment, so this one implements only what
kube calls, with the semantics those calls rely on:

- list and watch of pods and nodes with resourceVersion; watches stream JSON lines in a
  chunked response, end after timeoutSeconds, and answer an ERROR event with code 410 when
  asked to resume from a version older than the retained history (`expire_history`);
- field selectors on pods (`spec.schedulerName`, `spec.nodeName`, `status.phase`);
- JSON merge patch of pods, nodes and events, refused with 409 when the patch carries a
  `metadata.resourceVersion` that is no longer current; get of one node;
- pods/binding as the real registry runs it: 409 Conflict when the pod is already bound or
  still has `spec.schedulingGates` (with the real messages); a Binding sets the
  `PodScheduled=True` condition and clears `status.nominatedNodeName`;
- pods/status: a merge patch of which only `status` is kept (conditions, nominatedNodeName),
  refused with 409 on a stale `metadata.resourceVersion`, like the pod itself;
- events create/patch, and leases get/create/replace (replace refused with 409 on a stale
  resourceVersion);
- pods/eviction: the pod is deleted (a DELETED watch event) unless a PodDisruptionBudget a
  test `put` ("poddisruptionbudgets": `spec.selector.matchLabels`, `minAvailable` or
  `maxUnavailable` as counts) has no disruption left: 429 as Kubernetes answers; 500 when
  more than one budget selects the pod; 409 when the precondition's uid is not the pod's.
  A pod is healthy when its phase is Running; there is no disruption controller, so the
  budget is reckoned at each request from the pods it selects;
- list and watch of ResourceQuotas; PodGroup CRDs (Volcano's, scheduler-plugins', KAI's) only
  once `serve()`d: discovery of their group/version (404 before, like a cluster without the
  CRD), list/watch, and merge patches of Volcano's object and of scheduler-plugins' and KAI's
  status subresource;
- the Workload API (`scheduling.k8s.io/v1beta1`), once `serve()`d as a 1.37 server with it
  enabled (404 before): discovery (`podgroups`, `podgroups/status`, `workloads`), list/watch
  and get of PodGroups and Workloads, and the PodGroup `status` merge patch (only `status`
  kept), its conditions validated as metav1.Condition is (422) and 404 naming the object;
- get of the owners of pods (`OWNERS`: ReplicaSets, Deployments, StatefulSets, Jobs always;
  JobSets, LeaderWorkerSets, RayClusters/RayJobs, Kubeflow jobs once `serve()`d, 404 and
  absent from discovery before, like a cluster without the operator) and of a namespace
  (a bare one when no test `put` it);
- list and watch of PersistentVolumeClaims, PersistentVolumes and StorageClasses; get of one
  claim or volume, and their JSON merge patches, refused with 409 on a stale
  `metadata.resourceVersion` (the real words); 404 naming the object. No volume controller
  runs: a `claimRef` written on a volume binds nothing until a test does it;
- Dynamic Resource Allocation (`resource.k8s.io/v1`, served as by a 1.36 server): list and
  watch of ResourceSlices, ResourceClaims, ResourceClaimTemplates, DeviceClasses and
  DeviceTaintRules in the API's own field names, get of a claim, and the `resourceclaims/status`
  merge patch (only `status` kept; 409 on a stale resourceVersion; 422 when a set allocation
  changes or `reservedFor` is set without one); create of a claim (`generateName` honoured as
  the real server does: the base cut to 58 characters and 5 random characters of its alphabet
  added; 409 AlreadyExists; 422 without a name), and delete (404; 409 when the precondition's
  uid is not the claim's). No resourceclaim controller nor garbage collector runs: a test puts
  the claim of a template and the pod's `status.resourceClaimStatuses` itself. The pods/status
  patch validates `extendedResourceClaimStatus` as the real server does (422);
- label selectors (`key=value`, `key!=value`) on lists;
- the pod proxy (`pods/{name}:{port}/proxy/{path}`, GET): answers what a test set in
  `proxied[(namespace, name, port)]` (bytes), 503 with the API server's words when nothing
  listens there;
- `stop()` closes the listening socket and every open connection; `start()` again listens
  on the same port, with the same objects (like an API server restart over the same etcd).

Every request is recorded as (api group, resource, verb) the way Kubernetes authorizes
it, so tests can compare what the code did with `kube.api.RBAC_RULES`.
"""

from __future__ import annotations

import copy
import json
import random
import re
import socket
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

VOLCANO_PODGROUPS = "podgroups.scheduling.volcano.sh"
COSCHEDULING_PODGROUPS = "podgroups.scheduling.x-k8s.io"
KAI_PODGROUPS = "podgroups.scheduling.run.ai"
#: Kubernetes' own Workload API (1.37, scheduling.k8s.io/v1beta1): built in, served once `serve()`d.
WORKLOAD_PODGROUPS, WORKLOADS = "podgroups.scheduling.k8s.io", "workloads.scheduling.k8s.io"
PVCS, PVS, STORAGE_CLASSES = "persistentvolumeclaims", "persistentvolumes", "storageclasses"
#: Dynamic Resource Allocation (`resource.k8s.io/v1`, GA in 1.34): always served, like a 1.36 server.
RESOURCE_SLICES, RESOURCE_CLAIMS = "resourceslices", "resourceclaims"
CLAIM_TEMPLATES, DEVICE_CLASSES, DEVICE_TAINT_RULES = (
    "resourceclaimtemplates",
    "deviceclasses",
    "devicetaintrules",
)
DRA_KINDS = (RESOURCE_SLICES, RESOURCE_CLAIMS, CLAIM_TEMPLATES, DEVICE_CLASSES, DEVICE_TAINT_RULES)
DRA_API = ("resource.k8s.io", "v1")
DRA_KIND_OF = {
    RESOURCE_SLICES: "ResourceSlice",
    RESOURCE_CLAIMS: "ResourceClaim",
    f"{RESOURCE_CLAIMS}/status": "ResourceClaim",
    CLAIM_TEMPLATES: "ResourceClaimTemplate",
    DEVICE_CLASSES: "DeviceClass",
    DEVICE_TAINT_RULES: "DeviceTaintRule",
}
WATCHED = (
    "pods",
    "nodes",
    "resourcequotas",
    VOLCANO_PODGROUPS,
    COSCHEDULING_PODGROUPS,
    KAI_PODGROUPS,
    WORKLOAD_PODGROUPS,
    WORKLOADS,
    PVCS,
    PVS,
    STORAGE_CLASSES,
    *DRA_KINDS,
)
#: Kinds that live in no namespace.
CLUSTER_SCOPED = (
    "nodes",
    PVS,
    STORAGE_CLASSES,
    "namespaces",
    RESOURCE_SLICES,
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
)
#: The custom resources a stand-in can serve: kind -> (api group, version), when `serve()`d.
CUSTOM = {
    VOLCANO_PODGROUPS: ("scheduling.volcano.sh", "v1beta1"),
    COSCHEDULING_PODGROUPS: ("scheduling.x-k8s.io", "v1alpha1"),
    KAI_PODGROUPS: ("scheduling.run.ai", "v2alpha2"),
    WORKLOAD_PODGROUPS: ("scheduling.k8s.io", "v1beta1"),
    WORKLOADS: ("scheduling.k8s.io", "v1beta1"),
}
#: The owners of pods (kube/owners.py) a test may `put`, by plural: (api group, version, kind).
#: apps and batch are built in, always served; the operators' CRDs only once `serve()`d.
OWNERS = {
    "replicasets": ("apps", "v1", "ReplicaSet"),
    "deployments": ("apps", "v1", "Deployment"),
    "statefulsets": ("apps", "v1", "StatefulSet"),
    "jobs": ("batch", "v1", "Job"),
    "jobsets": ("jobset.x-k8s.io", "v1alpha2", "JobSet"),
    "leaderworkersets": ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
    "rayclusters": ("ray.io", "v1", "RayCluster"),
    "rayjobs": ("ray.io", "v1", "RayJob"),
    "pytorchjobs": ("kubeflow.org", "v1", "PyTorchJob"),
    "tfjobs": ("kubeflow.org", "v1", "TFJob"),
    "mpijobs": ("kubeflow.org", "v2beta1", "MPIJob"),
}
BUILT_IN_GROUPS = ("apps", "batch")
#: A discovered resource's kind.
KIND_OF = {
    "podgroups": "PodGroup",
    "podgroups/status": "PodGroup",
    "workloads": "Workload",
    **{plural: kind for plural, (_, _, kind) in OWNERS.items()},
}
#: metav1.Condition's reason, as the API server validates it.
CONDITION_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")

ROUTES = [
    # (method, pattern, handler name, (group, resource, verb) or None for list/watch)
    ("GET", r"^/api/v1/pods$", "list_or_watch_pods", ("", "pods", None)),
    ("GET", r"^/api/v1/nodes$", "list_or_watch_nodes", ("", "nodes", None)),
    ("GET", r"^/api/v1/nodes/([^/]+)$", "get_node", ("", "nodes", "get")),
    ("PATCH", r"^/api/v1/nodes/([^/]+)$", "patch_node", ("", "nodes", "patch")),
    ("GET", r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$", "get_pod", ("", "pods", "get")),
    ("PATCH", r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$", "patch_pod", ("", "pods", "patch")),
    (
        "PATCH",
        r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/status$",
        "patch_pod_status",
        ("", "pods/status", "patch"),
    ),
    (
        "POST",
        r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding$",
        "bind_pod",
        ("", "pods/binding", "create"),
    ),
    (
        "POST",
        r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction$",
        "evict_pod",
        ("", "pods/eviction", "create"),
    ),
    ("POST", r"^/api/v1/namespaces/([^/]+)/bindings$", "bind_via_bindings", ("", "bindings", "create")),
    ("POST", r"^/api/v1/namespaces/([^/]+)/events$", "create_event", ("", "events", "create")),
    ("PATCH", r"^/api/v1/namespaces/([^/]+)/events/([^/]+)$", "patch_event", ("", "events", "patch")),
    (
        "GET",
        r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases/([^/]+)$",
        "get_lease",
        ("coordination.k8s.io", "leases", "get"),
    ),
    (
        "POST",
        r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases$",
        "create_lease",
        ("coordination.k8s.io", "leases", "create"),
    ),
    (
        "PUT",
        r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases/([^/]+)$",
        "replace_lease",
        ("coordination.k8s.io", "leases", "update"),
    ),
    ("GET", r"^/api/v1/resourcequotas$", "list_or_watch_resourcequotas", ("", "resourcequotas", None)),
    ("GET", r"^/api/v1/persistentvolumeclaims$", "list_or_watch_claims", ("", PVCS, None)),
    ("GET", r"^/api/v1/namespaces/([^/]+)/persistentvolumeclaims/([^/]+)$", "get_claim", ("", PVCS, "get")),
    (
        "PATCH",
        r"^/api/v1/namespaces/([^/]+)/persistentvolumeclaims/([^/]+)$",
        "patch_claim",
        ("", PVCS, "patch"),
    ),
    ("GET", r"^/api/v1/persistentvolumes$", "list_or_watch_volumes", ("", PVS, None)),
    ("GET", r"^/api/v1/persistentvolumes/([^/]+)$", "get_volume", ("", PVS, "get")),
    ("PATCH", r"^/api/v1/persistentvolumes/([^/]+)$", "patch_volume", ("", PVS, "patch")),
    (
        "GET",
        r"^/apis/storage\.k8s\.io/v1/storageclasses$",
        "list_or_watch_storage_classes",
        ("storage.k8s.io", STORAGE_CLASSES, None),
    ),
    (
        "GET",
        r"^/apis/scheduling\.volcano\.sh/v1beta1/podgroups$",
        "list_or_watch_volcano_podgroups",
        ("scheduling.volcano.sh", "podgroups", None),
    ),
    (
        "PATCH",
        r"^/apis/scheduling\.volcano\.sh/v1beta1/namespaces/([^/]+)/podgroups/([^/]+)$",
        "patch_volcano_podgroup",
        ("scheduling.volcano.sh", "podgroups", "patch"),
    ),
    (
        "GET",
        r"^/apis/scheduling\.x-k8s\.io/v1alpha1/podgroups$",
        "list_or_watch_coscheduling_podgroups",
        ("scheduling.x-k8s.io", "podgroups", None),
    ),
    (
        "PATCH",
        r"^/apis/scheduling\.x-k8s\.io/v1alpha1/namespaces/([^/]+)/podgroups/([^/]+)/status$",
        "patch_coscheduling_podgroup_status",
        ("scheduling.x-k8s.io", "podgroups/status", "patch"),
    ),
    (
        "GET",
        r"^/apis/scheduling\.run\.ai/v2alpha2/podgroups$",
        "list_or_watch_kai_podgroups",
        ("scheduling.run.ai", "podgroups", None),
    ),
    (
        "PATCH",
        r"^/apis/scheduling\.run\.ai/v2alpha2/namespaces/([^/]+)/podgroups/([^/]+)/status$",
        "patch_kai_podgroup_status",
        ("scheduling.run.ai", "podgroups/status", "patch"),
    ),
    (
        "GET",
        r"^/apis/scheduling\.k8s\.io/v1beta1/podgroups$",
        "list_or_watch_workload_podgroups",
        ("scheduling.k8s.io", "podgroups", None),
    ),
    (
        "GET",
        r"^/apis/scheduling\.k8s\.io/v1beta1/namespaces/([^/]+)/podgroups/([^/]+)$",
        "get_workload_podgroup",
        ("scheduling.k8s.io", "podgroups", "get"),
    ),
    (
        "PATCH",
        r"^/apis/scheduling\.k8s\.io/v1beta1/namespaces/([^/]+)/podgroups/([^/]+)/status$",
        "patch_workload_podgroup_status",
        ("scheduling.k8s.io", "podgroups/status", "patch"),
    ),
    (
        "GET",
        r"^/apis/scheduling\.k8s\.io/v1beta1/workloads$",
        "list_or_watch_workloads",
        ("scheduling.k8s.io", "workloads", None),
    ),
    (
        "GET",
        r"^/apis/scheduling\.k8s\.io/v1beta1/namespaces/([^/]+)/workloads/([^/]+)$",
        "get_workload",
        ("scheduling.k8s.io", "workloads", "get"),
    ),
    ("GET", r"^/api/v1/namespaces/([^/]+)$", "get_namespace", ("", "namespaces", "get")),
    (
        "GET",
        r"^/api/v1/namespaces/([^/]+)/pods/([^/:%]+)(?::|%3A)(\d+)/proxy/(.*)$",
        "proxy_pod",
        ("", "pods/proxy", "get"),
    ),
    (
        "GET",
        r"^/apis/(apps|batch|jobset\.x-k8s\.io|leaderworkerset\.x-k8s\.io|ray\.io|kubeflow\.org)"
        r"/([^/]+)/namespaces/([^/]+)/([^/]+)/([^/]+)$",
        "get_owner",
        "owner",  # (group, plural, get): from the path
    ),
    *[
        (
            "GET",
            rf"^/apis/resource\.k8s\.io/v1/{kind}$",
            "list_or_watch_dra",
            ("resource.k8s.io", kind, None),
        )
        for kind in DRA_KINDS
    ],
    (
        "GET",
        r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+)$",
        "get_resource_claim",
        ("resource.k8s.io", RESOURCE_CLAIMS, "get"),
    ),
    (
        "POST",
        r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims$",
        "create_resource_claim",
        ("resource.k8s.io", RESOURCE_CLAIMS, "create"),
    ),
    (
        "DELETE",
        r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+)$",
        "delete_resource_claim",
        ("resource.k8s.io", RESOURCE_CLAIMS, "delete"),
    ),
    (
        "PATCH",
        r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+)/status$",
        "patch_resource_claim_status",
        ("resource.k8s.io", f"{RESOURCE_CLAIMS}/status", "patch"),
    ),
    # Discovery of one group/version: a non-resource URL (no grant: `system:discovery`), so
    # it is kept in `nonresource`, not in `requests`.
    ("GET", r"^/apis/([^/]+)/([^/]+)/?$", "discover", None),
]


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def field_value(obj: dict, path: str) -> str:
    value = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def parse_selector(selector: str) -> list[tuple[str, bool, str]]:
    terms = []
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            path, value = term.split("!=", 1)
            terms.append((path, False, value))
        else:
            path, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            terms.append((path, True, value))
    return terms


def matches(obj: dict | None, terms) -> bool:
    if obj is None:
        return False
    return all((field_value(obj, path) == value) == equal for path, equal, value in terms)


def labelled(obj: dict, terms) -> bool:
    """Label selector terms (a label key may hold dots, so not `field_value`'s paths)."""
    found = (obj.get("metadata") or {}).get("labels") or {}
    return all((found.get(key) == value) == equal for key, equal, value in terms)


class Failure(Exception):
    def __init__(self, code: int, reason: str, message: str):
        self.code, self.reason, self.message = code, reason, message


class StandInApiServer:
    """Objects, history and the HTTP front. Thread-safe: every change holds `lock`."""

    def __init__(self, history_limit: int = 10_000):
        self.lock = threading.Condition()
        self.objects: dict[str, dict[tuple[str, str], dict]] = {
            "pods": {},
            "nodes": {},
            "events": {},
            "leases": {},
            "resourcequotas": {},
            "poddisruptionbudgets": {},
            VOLCANO_PODGROUPS: {},
            COSCHEDULING_PODGROUPS: {},
            KAI_PODGROUPS: {},
            WORKLOAD_PODGROUPS: {},
            WORKLOADS: {},
            PVCS: {},
            PVS: {},
            STORAGE_CLASSES: {},
            "namespaces": {},
            **{plural: {} for plural in OWNERS},
            **{kind: {} for kind in DRA_KINDS},
        }
        self.served: dict[str, set[str]] = {}  # custom kind -> resources served (`serve`)
        self.nonresource: list[tuple[str, str]] = []  # method, path: discovery
        self.version = 100
        self.history: list[tuple[int, str, str, dict | None, dict | None]] = []  # rv, kind, type, old, new
        self.oldest = 0  # watches from before this version get 410
        self.expired_generation = 0
        self.history_limit = history_limit
        #: when set, a watch ends after at most this many seconds whatever its timeoutSeconds
        #: (the real server ends watches on its own schedule too; clients list and watch again):
        #: tests that only need each call's request sent do not wait out a whole second a watch
        self.watch_seconds_cap: float | None = None
        self.requests: list[tuple[str, str, str, str, str]] = []  # method, path, group, resource, verb
        #: grants checked beyond a request's own (1.36's `resourceclaims/binding`)
        self.authorized: set[tuple[str, str, str]] = set()
        self.hooks: list[tuple[str, str, Callable[[], None]]] = []
        self.evictions: list[tuple[str, str, dict]] = []  # namespace, name, the Eviction carried out
        self.injected: list[list] = []  # [method, path regex, code, reason, remaining]
        self.proxied: dict[tuple[str, str, int], bytes] = {}  # the pod proxy's answers
        self.port = 0
        self.httpd: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None
        self.connections: set[socket.socket] = set()
        self.running = False

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StandInApiServer:
        server = self
        handler = type("Handler", (Handler,), {"standin": server})
        httpd = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        httpd.daemon_threads = True
        original = httpd.process_request

        def track(request, client_address):
            with server.lock:
                server.connections.add(request)
            original(request, client_address)

        def forget(request):
            with server.lock:
                server.connections.discard(request)
            ThreadingHTTPServer.shutdown_request(httpd, request)

        httpd.process_request = track
        httpd.shutdown_request = forget
        self.port = httpd.server_address[1]
        self.httpd = httpd
        self.running = True
        self.thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every connection (watches included), like a crashed server."""
        with self.lock:
            self.running = False
            self.lock.notify_all()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
        with self.lock:
            for conn in list(self.connections):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()
            self.connections.clear()
        self.httpd = None

    # -- what tests do to the cluster ---------------------------------------------------

    def _key(self, kind: str, obj: dict) -> tuple[str, str]:
        meta = obj["metadata"]
        return ("" if kind in CLUSTER_SCOPED else meta.get("namespace", "default"), meta["name"])

    def _record(self, kind: str, kind_of_change: str, old: dict | None, new: dict | None, silent=False):
        if not silent and kind in WATCHED:
            self.history.append((self.version, kind, kind_of_change, copy.deepcopy(old), copy.deepcopy(new)))
            if len(self.history) > self.history_limit:
                dropped = self.history.pop(0)
                self.oldest = dropped[0] + 1
        self.lock.notify_all()

    def _store(self, kind: str, obj: dict, silent=False) -> dict:
        """Create or replace, with a fresh resourceVersion. Holds the lock."""
        key = self._key(kind, obj)
        old = self.objects[kind].get(key)
        self.version += 1
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.version)
        meta.setdefault("uid", old["metadata"]["uid"] if old else str(uuidlib.uuid4()))
        meta.setdefault("creationTimestamp", now_stamp())
        if kind not in CLUSTER_SCOPED:
            meta.setdefault("namespace", "default")
        self.objects[kind][key] = obj
        self._record(kind, "MODIFIED" if old else "ADDED", old, obj, silent)
        return copy.deepcopy(obj)

    def put(self, kind: str, obj: dict, silent: bool = False) -> dict:
        """Add or replace an object. `silent`: the change is missed by watches (lost history)."""
        with self.lock:
            return self._store(kind, obj, silent)

    def update(
        self, kind: str, namespace: str, name: str, change: Callable[[dict], None], silent=False
    ) -> dict:
        with self.lock:
            obj = copy.deepcopy(self.objects[kind][(namespace, name)])
            change(obj)
            return self._store(kind, obj, silent)

    def delete(self, kind: str, namespace: str, name: str, silent: bool = False) -> None:
        with self.lock:
            old = self.objects[kind].pop((namespace, name))
            self.version += 1
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(self.version)
            self._record(kind, "DELETED", old, gone, silent)

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        with self.lock:
            obj = self.objects[kind].get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def all(self, kind: str) -> list[dict]:
        with self.lock:
            return [copy.deepcopy(o) for o in self.objects[kind].values()]

    def expire_history(self) -> None:
        """Forget all history: open watches get ERROR 410, and so does any resume from before now."""
        with self.lock:
            self.history.clear()
            self.oldest = self.version + 1
            self.expired_generation += 1
            self.lock.notify_all()

    def before(self, method: str, path_contains: str, action: Callable[[], None]) -> None:
        """Run `action` once, just before handling the next matching request."""
        with self.lock:
            self.hooks.append((method, path_contains, action))

    def fail(self, method: str, path_pattern: str, code: int, times: int = 1, reason: str = "InternalError"):
        """Answer the next `times` matching requests with an error Status."""
        with self.lock:
            self.injected.append([method, path_pattern, code, reason, times])

    def serve(self, kind: str, status_subresource: bool | None = None) -> None:
        """Serve a custom resource (`VOLCANO_PODGROUPS`, `COSCHEDULING_PODGROUPS`), as if its
        CRD were installed; with a status subresource as the CRD ships unless told. The Workload
        API's kinds (`WORKLOAD_PODGROUPS`, `WORKLOADS`) as a 1.37 server with the API enabled."""
        if kind == WORKLOADS:
            with self.lock:
                self.served[kind] = {"workloads"}
            return
        if kind in OWNERS:  # an operator's CRD installed
            with self.lock:
                self.served[kind] = {kind}
            return
        if status_subresource is None:
            status_subresource = kind in (COSCHEDULING_PODGROUPS, KAI_PODGROUPS, WORKLOAD_PODGROUPS)
        with self.lock:
            self.served[kind] = {"podgroups", "podgroups/status"} if status_subresource else {"podgroups"}

    def calls(self, method: str | None = None, contains: str = "") -> list[tuple]:
        with self.lock:
            return [r for r in self.requests if (method is None or r[0] == method) and contains in r[1]]

    def grants_used(self) -> set[tuple[str, str, str]]:
        with self.lock:
            return {
                (group, resource, verb) for _, _, group, resource, verb in self.requests
            } | self.authorized

    # -- request handling (called by Handler, under no lock) ------------------------------

    def dispatch(self, handler: Handler, method: str):
        parts = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        body = None
        if method in ("POST", "PUT", "PATCH", "DELETE"):  # read it first: the connection is kept alive
            length = int(handler.headers.get("Content-Length") or 0)
            raw = handler.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else {}
        for route_method, pattern, name, rule in ROUTES:
            found = re.match(pattern, parts.path)
            if route_method != method or not found:
                continue
            if rule is None:
                with self.lock:
                    self.nonresource.append((method, handler.path))
                return getattr(self, name)(handler, query, body, *found.groups())
            group, resource, verb = (
                (str(found.group(1)), str(found.group(4)), "get") if rule == "owner" else rule
            )
            if verb is None:
                verb = "watch" if query.get("watch") in ("true", "1") else "list"
            with self.lock:
                self.requests.append((method, handler.path, group, resource, verb))
                hooks = [h for h in self.hooks if h[0] == method and h[1] in parts.path]
                for hook in hooks:
                    self.hooks.remove(hook)
            for _, _, action in hooks:
                action()
            with self.lock:
                for entry in self.injected:
                    if entry[0] == method and re.search(entry[1], parts.path) and entry[4] > 0:
                        entry[4] -= 1
                        raise Failure(entry[2], entry[3], "injected by the test")
            return getattr(self, name)(handler, query, body, *found.groups())
        raise Failure(404, "NotFound", f"the stand-in has no route for {method} {parts.path}")

    # pods and nodes: list / watch

    def list_or_watch_pods(self, handler, query, body):
        return self._list_or_watch(handler, "pods", query)

    def list_or_watch_nodes(self, handler, query, body):
        return self._list_or_watch(handler, "nodes", query)

    def list_or_watch_resourcequotas(self, handler, query, body):
        return self._list_or_watch(handler, "resourcequotas", query)

    def list_or_watch_volcano_podgroups(self, handler, query, body):
        self._served(VOLCANO_PODGROUPS)
        return self._list_or_watch(handler, VOLCANO_PODGROUPS, query)

    def list_or_watch_coscheduling_podgroups(self, handler, query, body):
        self._served(COSCHEDULING_PODGROUPS)
        return self._list_or_watch(handler, COSCHEDULING_PODGROUPS, query)

    def list_or_watch_kai_podgroups(self, handler, query, body):
        self._served(KAI_PODGROUPS)
        return self._list_or_watch(handler, KAI_PODGROUPS, query)

    def list_or_watch_workload_podgroups(self, handler, query, body):
        self._served(WORKLOAD_PODGROUPS)
        return self._list_or_watch(handler, WORKLOAD_PODGROUPS, query)

    def list_or_watch_workloads(self, handler, query, body):
        self._served(WORKLOADS, "workloads")
        return self._list_or_watch(handler, WORKLOADS, query)

    def list_or_watch_claims(self, handler, query, body):
        return self._list_or_watch(handler, PVCS, query)

    def list_or_watch_volumes(self, handler, query, body):
        return self._list_or_watch(handler, PVS, query)

    def list_or_watch_storage_classes(self, handler, query, body):
        return self._list_or_watch(handler, STORAGE_CLASSES, query)

    def list_or_watch_dra(self, handler, query, body):
        kind = urlsplit(handler.path).path.rsplit("/", 1)[-1]
        return self._list_or_watch(handler, kind, query)

    def _list_or_watch(self, handler, kind, query):
        terms = parse_selector(query.get("fieldSelector", ""))
        if query.get("watch") in ("true", "1"):
            return self._watch(handler, kind, terms, query)
        labels = parse_selector(query.get("labelSelector", ""))
        with self.lock:
            items = [
                copy.deepcopy(o)
                for o in self.objects[kind].values()
                if matches(o, terms) and labelled(o, labels)
            ]
            version = str(self.version)
        handler.send_json(
            200,
            {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": version}, "items": items},
        )

    def _watch(self, handler, kind, terms, query):
        start = int(query.get("resourceVersion") or 0)
        seconds = float(query.get("timeoutSeconds") or 60)
        if self.watch_seconds_cap is not None:
            seconds = min(seconds, self.watch_seconds_cap)
        deadline = time.monotonic() + seconds
        handler.start_stream()
        with self.lock:
            if start == 0:
                start = self.version
            generation = self.expired_generation
            too_old = start + 1 < self.oldest
        if too_old:
            handler.send_chunk(gone_event(start))
            return handler.end_stream()
        sent = start
        while True:
            with self.lock:
                if not self.running:
                    return handler.abort()
                if self.expired_generation != generation:
                    lines = [gone_event(sent)]
                    done = True
                else:
                    lines, done = [], False
                    for version, event_kind, change, old, new in self.history:
                        if version <= sent or event_kind != kind:
                            continue
                        sent = version
                        event = watch_event(change, old, new, terms)
                        if event:
                            lines.append(event)
                    if not lines:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            done = True
                        else:
                            self.lock.wait(min(remaining, 0.5))
                            continue
            for line in lines:
                if not handler.send_chunk(line):
                    return None
            if done:
                return handler.end_stream()

    # pods

    def _pod(self, namespace, name) -> dict:
        obj = self.objects["pods"].get((namespace, name))
        if obj is None:
            raise Failure(404, "NotFound", f'pods "{name}" not found')
        return obj

    def proxy_pod(self, handler, query, body, namespace, name, port, path):
        with self.lock:
            self._pod(namespace, name)
            answer = self.proxied.get((namespace, name, int(port)))
        if answer is None:
            raise Failure(
                503, "ServiceUnavailable", f"error trying to reach service: dial tcp :{port}: refused"
            )
        handler.send_text(200, answer)

    def get_pod(self, handler, query, body, namespace, name):
        with self.lock:
            obj = copy.deepcopy(self._pod(namespace, name))
        handler.send_json(200, obj)

    def patch_pod(self, handler, query, body, namespace, name):
        handler.send_json(200, self._merge_patched(handler, body, namespace, name, body))

    def patch_pod_status(self, handler, query, body, namespace, name):
        """The status subresource: only `status` is taken from the patch, as a real server does;
        an `extendedResourceClaimStatus` it sets is validated (`_extended_status_errors`)."""
        wanted = {"status": body.get("status") or {}}
        if (wanted["status"] or {}).get("extendedResourceClaimStatus") is not None:
            with self.lock:
                pod = merge_patch(self._pod(namespace, name), wanted)
            errors = extended_status_errors(pod)
            if errors:
                raise Failure(422, "Invalid", f'Pod "{name}" is invalid: {", ".join(errors)}')
        handler.send_json(200, self._merge_patched(handler, body, namespace, name, wanted))

    def _merge_patched(self, handler, body, namespace, name, patch):
        """The pod after the merge `patch`, stored; a `metadata.resourceVersion` in `body` that
        is not the stored one is a 409, in the real server's words."""
        if "merge-patch" not in handler.headers.get("Content-Type", ""):
            raise Failure(415, "UnsupportedMediaType", "the stand-in accepts merge patches only")
        with self.lock:
            current = self._pod(namespace, name)
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
                raise Failure(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                )
            patched = merge_patch(current, patch)
            patched["metadata"].pop("resourceVersion", None)
            return self._store("pods", patched)

    def bind_pod(self, handler, query, body, namespace, name):
        target = (body.get("target") or {}).get("name")
        if not target:
            raise Failure(400, "BadRequest", "binding target is required")
        with self.lock:
            current = self._pod(namespace, name)
            uid = (body.get("metadata") or {}).get("uid")
            if uid and uid != current["metadata"]["uid"]:
                raise Failure(409, "Conflict", "the pod's uid does not match the binding")
            refused = f'Operation cannot be fulfilled on pods/binding "{name}": pod {name}'
            if current.get("spec", {}).get("nodeName"):
                raise Failure(
                    409, "Conflict", f'{refused} is already assigned to node "{current["spec"]["nodeName"]}"'
                )
            if current.get("spec", {}).get("schedulingGates"):
                raise Failure(409, "Conflict", f"{refused} has non-empty .spec.schedulingGates")
            bound = copy.deepcopy(current)
            bound.setdefault("spec", {})["nodeName"] = target
            status = bound.setdefault("status", {})
            status.pop("nominatedNodeName", None)
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            status["conditions"] = [
                *conditions,
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_stamp()},
            ]
            bound["metadata"].pop("resourceVersion")
            self._store("pods", bound)
        # What a real API server answers: a Status, which the generated Binding model rejects.
        handler.send_json(
            201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        )

    def evict_pod(self, handler, query, body, namespace, name):
        """The eviction subresource as Kubernetes runs it: a PodDisruptionBudget with no
        disruption left refuses (429), otherwise the pod is deleted."""
        if (body.get("metadata") or {}).get("name") != name:
            raise Failure(400, "BadRequest", "name in URL does not match name in Eviction object")
        with self.lock:
            current = self._pod(namespace, name)
            uid = (((body.get("deleteOptions") or {}).get("preconditions")) or {}).get("uid")
            if uid and uid != current["metadata"]["uid"]:
                raise Failure(
                    409,
                    "Conflict",
                    f"Precondition failed: UID in precondition: {uid}, "
                    f"UID in object meta: {current['metadata']['uid']}",
                )
            budgets = [b for b in self.objects["poddisruptionbudgets"].values() if selects(b, current)]
            if len(budgets) > 1:
                raise Failure(
                    500,
                    "InternalError",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                )
            if budgets and current.get("status", {}).get("phase") == "Running":
                selected = [pod for pod in self.objects["pods"].values() if selects(budgets[0], pod)]
                if disruptions_allowed(budgets[0], selected) < 1:
                    raise Failure(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                    )
            self.evictions.append((namespace, name, copy.deepcopy(body)))
            self.delete("pods", namespace, name)  # the Condition's lock is re-entrant
        handler.send_json(
            201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        )

    def bind_via_bindings(self, handler, query, body, namespace):
        return self.bind_pod(handler, query, body, namespace, (body.get("metadata") or {}).get("name", ""))

    # nodes (the node lock)

    def _node(self, name) -> dict:
        obj = self.objects["nodes"].get(("", name))
        if obj is None:
            raise Failure(404, "NotFound", f'nodes "{name}" not found')
        return obj

    def get_node(self, handler, query, body, name):
        with self.lock:
            obj = copy.deepcopy(self._node(name))
        handler.send_json(200, obj)

    def patch_node(self, handler, query, body, name):
        if "merge-patch" not in handler.headers.get("Content-Type", ""):
            raise Failure(415, "UnsupportedMediaType", "the stand-in accepts merge patches only")
        with self.lock:
            current = self._node(name)
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
                raise Failure(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on nodes "{name}": the object has been modified',
                )
            patched = merge_patch(current, body)
            patched["metadata"].pop("resourceVersion", None)
            obj = self._store("nodes", patched)
        handler.send_json(200, obj)

    # claims and volumes (VolumeBinding's PreBind)

    def _existing(self, kind: str, namespace: str, name: str) -> dict:
        obj = self.objects[kind].get((namespace, name))
        if obj is None:
            raise Failure(404, "NotFound", f'{kind} "{name}" not found')
        return obj

    def _patched(self, handler, body, kind: str, namespace: str, name: str) -> dict:
        """Merge patch of a claim or volume, 409 on a stale `metadata.resourceVersion`."""
        if "merge-patch" not in handler.headers.get("Content-Type", ""):
            raise Failure(415, "UnsupportedMediaType", "the stand-in accepts merge patches only")
        with self.lock:
            current = self._existing(kind, namespace, name)
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
                raise Failure(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {kind} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                )
            patched = merge_patch(current, body)
            patched["metadata"].pop("resourceVersion", None)
            return self._store(kind, patched)

    def get_claim(self, handler, query, body, namespace, name):
        with self.lock:
            obj = copy.deepcopy(self._existing(PVCS, namespace, name))
        handler.send_json(200, obj)

    def patch_claim(self, handler, query, body, namespace, name):
        handler.send_json(200, self._patched(handler, body, PVCS, namespace, name))

    def get_volume(self, handler, query, body, name):
        with self.lock:
            obj = copy.deepcopy(self._existing(PVS, "", name))
        handler.send_json(200, obj)

    def patch_volume(self, handler, query, body, name):
        handler.send_json(200, self._patched(handler, body, PVS, "", name))

    # Dynamic Resource Allocation: a claim's status as the registry's status strategy keeps it

    def get_resource_claim(self, handler, query, body, namespace, name):
        with self.lock:
            obj = self.objects[RESOURCE_CLAIMS].get((namespace, name))
            if obj is None:
                raise Failure(404, "NotFound", f'resourceclaims.resource.k8s.io "{name}" not found')
            obj = copy.deepcopy(obj)
        handler.send_json(200, obj)

    def patch_resource_claim_status(self, handler, query, body, namespace, name):
        """Only `status` changes; 409 on a stale `metadata.resourceVersion`; a write of
        `allocation` or `reservedFor` also uses the `resourceclaims/binding` patch grant, the
        synthetic subresource a 1.36 server authorizes it against; 422 as validation
        answers when an allocation is changed once set (immutable), `reservedFor` names pods
        of a claim with no allocation, or an entry of it lacks `resource`, `name` or `uid` or
        repeats a uid (any consumer: pods, or a Workload API PodGroup)."""
        if "merge-patch" not in handler.headers.get("Content-Type", ""):
            raise Failure(415, "UnsupportedMediaType", "the stand-in accepts merge patches only")
        invalid = f'ResourceClaim.resource.k8s.io "{name}" is invalid'
        with self.lock:
            current = self.objects[RESOURCE_CLAIMS].get((namespace, name))
            if current is None:
                raise Failure(404, "NotFound", f'resourceclaims.resource.k8s.io "{name}" not found')
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
                raise Failure(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "{name}": the object '
                    "has been modified; please apply your changes to the latest version and try again",
                )
            patched = merge_patch(current, {"status": body.get("status")})
            old = (current.get("status") or {}).get("allocation")
            new = (patched.get("status") or {}).get("allocation")
            if old is not None and new is not None and new != old:
                raise Failure(
                    422, "Invalid", f"{invalid}: status.allocation: Invalid value: field is immutable"
                )
            if (patched.get("status") or {}).get("reservedFor") and new is None:
                raise Failure(
                    422,
                    "Invalid",
                    f"{invalid}: status.reservedFor: Forbidden: may not be set when not allocated",
                )
            uids = set()
            for i, consumer in enumerate((patched.get("status") or {}).get("reservedFor") or []):
                # any consumer (pods, a Workload API PodGroup: KEP-5729) names these three
                for field in ("resource", "name", "uid"):
                    if not (consumer or {}).get(field):
                        raise Failure(
                            422, "Invalid", f"{invalid}: status.reservedFor[{i}].{field}: Required value"
                        )
                if consumer["uid"] in uids:
                    raise Failure(
                        422,
                        "Invalid",
                        f'{invalid}: status.reservedFor[{i}].uid: Duplicate value: "{consumer["uid"]}"',
                    )
                uids.add(consumer["uid"])
            if {"allocation", "reservedFor"} & set(body.get("status") or {}):
                # 1.36's granular status authorization checks the synthetic subresource too
                self.authorized.add(("resource.k8s.io", f"{RESOURCE_CLAIMS}/binding", "patch"))
            patched["metadata"].pop("resourceVersion", None)
            obj = self._store(RESOURCE_CLAIMS, patched)
        handler.send_json(200, obj)

    def create_resource_claim(self, handler, query, body, namespace):
        """POST: a name, or one made of `metadata.generateName` as the API server's name
        generator makes it; 409 AlreadyExists, 422 without either."""
        meta = body.setdefault("metadata", {})
        if meta.get("namespace", namespace) != namespace:
            raise Failure(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        meta["namespace"] = namespace
        with self.lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = generated_name(meta["generateName"])
            if not meta.get("name"):
                raise Failure(
                    422,
                    "Invalid",
                    'ResourceClaim.resource.k8s.io "" is invalid: metadata.name: Required value: '
                    "name or generateName is required",
                )
            if (namespace, meta["name"]) in self.objects[RESOURCE_CLAIMS]:
                raise Failure(
                    409, "AlreadyExists", f'resourceclaims.resource.k8s.io "{meta["name"]}" already exists'
                )
            for key in ("resourceVersion", "uid", "creationTimestamp"):
                meta.pop(key, None)
            body.pop("status", None)  # set through the status subresource only
            obj = self._store(RESOURCE_CLAIMS, body)
        handler.send_json(201, obj)

    def delete_resource_claim(self, handler, query, body, namespace, name):
        """DELETE: 404 naming the claim; 409 when `preconditions.uid` is not the claim's; the
        claim as it was, as the API server answers for an object with no finalizer."""
        with self.lock:
            current = self.objects[RESOURCE_CLAIMS].get((namespace, name))
            if current is None:
                raise Failure(404, "NotFound", f'resourceclaims.resource.k8s.io "{name}" not found')
            uid = (((body or {}).get("preconditions")) or {}).get("uid")
            if uid and uid != current["metadata"]["uid"]:
                raise Failure(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "{name}": '
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                    f"{current['metadata']['uid']}",
                )
            gone = copy.deepcopy(current)
            self.delete(RESOURCE_CLAIMS, namespace, name)
        handler.send_json(200, gone)

    # custom resources (PodGroup CRDs), only while served

    def _served(self, kind: str, resource: str = "podgroups") -> None:
        with self.lock:
            if resource not in self.served.get(kind, ()):
                raise Failure(404, "NotFound", "the server could not find the requested resource")

    def discover(self, handler, query, body, group, version):
        with self.lock:
            found = [
                self.served[kind]
                for kind, served_as in CUSTOM.items()
                if served_as == (group, version) and kind in self.served
            ]
            found += [
                {plural}
                for plural, (owner_group, owner_version, _) in OWNERS.items()
                if (owner_group, owner_version) == (group, version)
                and (owner_group in BUILT_IN_GROUPS or plural in self.served)
            ]
            if (group, version) == DRA_API:
                found.append(set(DRA_KIND_OF))
            resources = sorted(set().union(*found)) if found else None
        if resources is None:
            raise Failure(404, "NotFound", "the server could not find the requested resource")
        handler.send_json(
            200,
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}",
                "resources": [
                    {
                        "name": name,
                        "namespaced": name.split("/")[0] not in CLUSTER_SCOPED,
                        "kind": KIND_OF.get(name) or DRA_KIND_OF[name],
                        "verbs": ["get", "list", "watch"],
                    }
                    for name in resources
                ],
            },
        )

    def _patch_custom(self, handler, body, kind, namespace, name, status_only: bool):
        """Merge patch; through a status subresource only `status` changes, as on a real server."""
        if "merge-patch" not in handler.headers.get("Content-Type", ""):
            raise Failure(415, "UnsupportedMediaType", "the stand-in accepts merge patches only")
        with self.lock:
            current = self.objects[kind].get((namespace, name))
            if current is None:
                raise Failure(404, "NotFound", f'{kind} "{name}" not found')
            if status_only:
                body = {"status": body.get("status")}
            elif "podgroups/status" in self.served.get(kind, ()):
                body = {key: value for key, value in body.items() if key != "status"}
            patched = merge_patch(current, body)
            patched["metadata"].pop("resourceVersion", None)
            obj = self._store(kind, patched)
        handler.send_json(200, obj)

    def patch_volcano_podgroup(self, handler, query, body, namespace, name):
        self._served(VOLCANO_PODGROUPS)
        return self._patch_custom(handler, body, VOLCANO_PODGROUPS, namespace, name, status_only=False)

    def patch_coscheduling_podgroup_status(self, handler, query, body, namespace, name):
        self._served(COSCHEDULING_PODGROUPS, "podgroups/status")
        return self._patch_custom(handler, body, COSCHEDULING_PODGROUPS, namespace, name, status_only=True)

    def patch_kai_podgroup_status(self, handler, query, body, namespace, name):
        self._served(KAI_PODGROUPS, "podgroups/status")
        return self._patch_custom(handler, body, KAI_PODGROUPS, namespace, name, status_only=True)

    def get_workload_podgroup(self, handler, query, body, namespace, name):
        self._served(WORKLOAD_PODGROUPS)
        with self.lock:
            obj = copy.deepcopy(self._existing(WORKLOAD_PODGROUPS, namespace, name))
        handler.send_json(200, obj)

    def get_workload(self, handler, query, body, namespace, name):
        self._served(WORKLOADS, "workloads")
        with self.lock:
            obj = copy.deepcopy(self._existing(WORKLOADS, namespace, name))
        handler.send_json(200, obj)

    def patch_workload_podgroup_status(self, handler, query, body, namespace, name):
        """The status subresource: only `status` changes; its conditions validated as
        metav1.Condition is (422 Invalid naming the field, as the real server answers)."""
        self._served(WORKLOAD_PODGROUPS, "podgroups/status")
        status = body.get("status") if isinstance(body.get("status"), dict) else {}
        for i, condition in enumerate(status.get("conditions") or []):
            where = f"status.conditions[{i}]"
            if condition.get("status") not in ("True", "False", "Unknown"):
                raise Failure(
                    422, "Invalid", f"{where}.status: Unsupported value: {condition.get('status')!r}"
                )
            if not CONDITION_REASON.match(str(condition.get("reason") or "")):
                raise Failure(422, "Invalid", f"{where}.reason: Invalid value: {condition.get('reason')!r}")
            if not condition.get("type") or not condition.get("lastTransitionTime"):
                raise Failure(422, "Invalid", f"{where}: type and lastTransitionTime are required")
            if len(condition.get("message") or "") > 32768:
                raise Failure(422, "Invalid", f"{where}.message: Too long")
        return self._patch_custom(handler, body, WORKLOAD_PODGROUPS, namespace, name, status_only=True)

    # owners of pods (kube/owners.py) and namespaces

    def get_owner(self, handler, query, body, group, version, namespace, plural, name):
        """404 as a real server answers: the group/version or resource not served (a CRD not
        installed), or no such object."""
        served_as = OWNERS.get(plural)
        if served_as is None or served_as[:2] != (group, version):
            raise Failure(404, "NotFound", "the server could not find the requested resource")
        if group not in BUILT_IN_GROUPS:
            self._served(plural, plural)
        with self.lock:
            obj = self.objects[plural].get((namespace, name))
            if obj is None:
                raise Failure(404, "NotFound", f'{plural}.{group} "{name}" not found')
            obj = copy.deepcopy(obj)
        obj.setdefault("apiVersion", f"{group}/{version}")
        obj.setdefault("kind", served_as[2])
        handler.send_json(200, obj)

    def get_namespace(self, handler, query, body, name):
        """A namespace a test `put`, else a bare one: a pod's namespace always exists."""
        with self.lock:
            obj = copy.deepcopy(self.objects["namespaces"].get(("", name)))
        handler.send_json(200, obj or {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # events

    def create_event(self, handler, query, body, namespace):
        meta = body.setdefault("metadata", {})
        meta.setdefault("namespace", namespace)
        if not meta.get("name"):
            raise Failure(422, "Invalid", "metadata.name is required")
        with self.lock:
            if (namespace, meta["name"]) in self.objects["events"]:
                raise Failure(409, "AlreadyExists", f'events "{meta["name"]}" already exists')
            obj = self._store("events", body)
        handler.send_json(201, obj)

    def patch_event(self, handler, query, body, namespace, name):
        with self.lock:
            current = self.objects["events"].get((namespace, name))
            if current is None:
                raise Failure(404, "NotFound", f'events "{name}" not found')
            patched = merge_patch(current, body)
            patched["metadata"].pop("resourceVersion", None)
            obj = self._store("events", patched)
        handler.send_json(200, obj)

    # leases

    def get_lease(self, handler, query, body, namespace, name):
        with self.lock:
            obj = self.objects["leases"].get((namespace, name))
            if obj is None:
                raise Failure(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            obj = copy.deepcopy(obj)
        handler.send_json(200, obj)

    def create_lease(self, handler, query, body, namespace):
        meta = body.setdefault("metadata", {})
        with self.lock:
            if (namespace, meta.get("name")) in self.objects["leases"]:
                raise Failure(
                    409, "AlreadyExists", f'leases.coordination.k8s.io "{meta.get("name")}" already exists'
                )
            meta["namespace"] = namespace
            obj = self._store("leases", body)
        handler.send_json(201, obj)

    def replace_lease(self, handler, query, body, namespace, name):
        with self.lock:
            current = self.objects["leases"].get((namespace, name))
            if current is None:
                raise Failure(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted != current["metadata"]["resourceVersion"]:
                raise Failure(409, "Conflict", f'Operation cannot be fulfilled on leases "{name}"')
            body["metadata"].pop("resourceVersion")
            body["metadata"]["namespace"] = namespace
            obj = self._store("leases", body)
        handler.send_json(200, obj)


#: The API server's name generator: what it adds to a `generateName` (no vowels, no 0, 1, 3).
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def generated_name(base: str) -> str:
    """`generateName` as the API server completes it: the base cut to 58 characters and 5
    random characters of `NAME_ALPHABET`."""
    return base[:58] + "".join(random.choice(NAME_ALPHABET) for _ in range(5))


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def extended_status_errors(pod: dict) -> list[str]:
    """What the API server's validation says of `status.extendedResourceClaimStatus`: at least
    one request mapping, each naming a container of the pod and a resource that container
    requests (requests default to limits), a DNS label as `requestName`, no duplicate, and a
    `resourceClaimName` that is a DNS subdomain."""
    path = "status.extendedResourceClaimStatus"
    found = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    spec = pod.get("spec") or {}
    containers = {
        c.get("name"): c for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    }
    errors = []
    mappings = found.get("requestMappings") or []
    if not mappings:
        errors.append(f"{path}.requestMappings: Required value: at least one request mapping is required")
    seen = set()
    for i, mapping in enumerate(mappings):
        where = f"{path}.requestMappings[{i}]"
        container = containers.get(mapping.get("containerName"))
        if container is None:
            errors.append(
                f'{where}.containerName: Invalid value: "{mapping.get("containerName")}": must match the name '
                "of an entry in spec.initContainers.name or spec.containers.name"
            )
        else:
            resources = container.get("resources") or {}
            asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            if mapping.get("resourceName") not in asked:
                errors.append(
                    f'{where}.resourceName: Invalid value: "{mapping.get("resourceName")}": must match the '
                    "extended resource name of an entry in spec.initContainers.resources.requests or "
                    "spec.containers.resources.requests"
                )
        request = str(mapping.get("requestName") or "")
        if len(request) > 63 or not DNS_LABEL.match(request):
            errors.append(f'{path}.requestName: Invalid value: "{request}": must be a DNS label')
        key = (mapping.get("containerName"), mapping.get("resourceName"), request)
        if key in seen:
            errors.append(f'{where}.containerName: Duplicate value: "{mapping.get("containerName")}"')
        seen.add(key)
    name = str(found.get("resourceClaimName") or "")
    if not name:
        errors.append(f"{path}.resourceClaimName: Required value")
    elif len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        errors.append(f'{path}.resourceClaimName: Invalid value: "{name}": must be a DNS subdomain')
    return errors


def selects(budget: dict, pod: dict) -> bool:
    """A budget's `spec.selector.matchLabels` over pods of its namespace (an empty selector
    selects none, as in policy/v1)."""
    labels = (budget.get("spec", {}).get("selector") or {}).get("matchLabels") or {}
    pod_labels = pod["metadata"].get("labels") or {}
    return (
        bool(labels)
        and budget["metadata"].get("namespace", "default") == pod["metadata"].get("namespace", "default")
        and all(pod_labels.get(key) == value for key, value in labels.items())
    )


def disruptions_allowed(budget: dict, selected: list[dict]) -> int:
    """How many of the selected pods may go now: healthy (Running) beyond `minAvailable`, or
    `maxUnavailable` less those already unhealthy. Counts only, no percentages."""
    spec = budget.get("spec", {})
    healthy = sum(pod.get("status", {}).get("phase") == "Running" for pod in selected)
    if "minAvailable" in spec:
        return healthy - int(spec["minAvailable"])
    return int(spec.get("maxUnavailable", 0)) - (len(selected) - healthy)


def gone_event(version: int) -> dict:
    return {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": f"too old resource version: {version}",
            "reason": "Expired",
            "code": 410,
        },
    }


def watch_event(change: str, old: dict | None, new: dict | None, terms) -> dict | None:
    """What a watch with a field selector sees: leaving the selection reads as DELETED."""
    was, now = matches(old, terms), matches(new, terms)
    if change == "DELETED":
        return {"type": "DELETED", "object": new} if was else None
    if now:
        return {"type": "MODIFIED" if was else "ADDED", "object": new}
    if was:
        return {"type": "DELETED", "object": new}
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    #: TCP_NODELAY, as Go's net/http sets on every connection the real API server accepts:
    #: with Nagle on, a body written after its headers on a kept-alive connection waited for
    #: the client's delayed ACK, ~40 ms a request
    disable_nagle_algorithm = True
    standin: StandInApiServer

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass

    def _handle(self, method: str):
        try:
            self.standin.dispatch(self, method)
        except Failure as failure:
            self.send_json(
                failure.code,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "message": failure.message,
                    "reason": failure.reason,
                    "code": failure.code,
                },
            )
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def do_GET(self):  # noqa: N802
        self._handle("GET")

    def do_POST(self):  # noqa: N802
        self._handle("POST")

    def do_PUT(self):  # noqa: N802
        self._handle("PUT")

    def do_PATCH(self):  # noqa: N802
        self._handle("PATCH")

    def do_DELETE(self):  # noqa: N802
        self._handle("DELETE")

    def send_text(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, code: int, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def send_chunk(self, event: dict) -> bool:
        raw = json.dumps(event).encode() + b"\n"
        try:
            self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            self.wfile.flush()
            return True
        except OSError:
            self.close_connection = True
            return False

    def end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def abort(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
