"""Pods others bound (kube-scheduler, HAMi before the switch), counted on their nodes (SPEC 10
`running`): every pod of the cluster is watched, cut down to what the node rules read.

A pod holds its node's cpu, memory, ephemeral-storage, pod count, extended resources and host
ports from its binding until it ends (Succeeded, Failed) or is deleted; its labels and its
required pod anti-affinity count for the newcomers' affinity and spread; a pod HAMi placed
holds the cards its `hami.io/vgpu-devices-allocated` names. Pods hamiadmin placed itself are
counted from their own rows and left out here.

A watch of every pod in a large cluster is the one unbounded cache of the agent, so its
entries are slim (`BoundView`: about 340 bytes a pod with its cache entry, 360 MiB for
10,000 nodes x 110 pods, `python -m bench.bound`): only bound, unfinished pods are kept,
their effective request is reduced to one set of integers, a uid to its 16 bytes, and what
many pods share (node and namespace names, label sets, request sets, anti-affinity terms) is
kept once.

Writes go through `services.upsert_bound_pods` / `services.forget_bound_pods` in batches: a
watch event only marks the pod as changed, and `flush` (every pass of the agent's loop) writes
what changed since the last one. After a full list, the stored pods it lacks are forgotten.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass

from scheduling import services
from scheduling.engine.dra.allocate import held
from scheduling.engine.dra.claims import DraUnsupported, claim_names
from scheduling.engine.encoding import ALLOCATED, TO_ALLOCATE, encode_allocation
from scheduling.engine.errors import PodInvalid
from scheduling.engine.families import DRA, held_allocation, mig
from scheduling.engine.quantity import CPU, effective_request
from scheduling.models import BoundPod, Pod

from . import pods as pod_objects
from .drastate import DraState
from .informer import Handler, cache_key

log = logging.getLogger("hamiadmin.kube.bound")

#: Pods written (or forgotten) per transaction.
BATCH = 1000
#: Distinct label and request sets kept once each before the tables start afresh.
_SHARED_LIMIT = 200_000


class _Shared:
    """One copy of each equal value (label sets, request sets, anti-affinity terms) among many
    pods; `key` makes an unhashable value comparable."""

    def __init__(self, key=None):
        self.values: dict = {}
        self.key = key

    def __call__(self, value):
        if len(self.values) > _SHARED_LIMIT:
            self.values.clear()
        return self.values.setdefault(value if self.key is None else self.key(value), value)


def _pack(uid: str) -> bytes | str:
    """A uid as Kubernetes writes them (a UUID) in its 16 bytes; any other text as it is."""
    try:
        packed = uuidlib.UUID(uid)
    except ValueError:
        return uid
    return packed.bytes if str(packed) == uid else uid


def _unpack(packed: bytes | str) -> str:
    return str(uuidlib.UUID(bytes=packed)) if isinstance(packed, bytes) else packed


@dataclass(slots=True)
class BoundView:
    """One bound, unfinished pod as the node rules read it. `requests`: the effective request
    (SPEC 10) as (resource, amount) pairs, cpu in millicores, the rest in bytes or counts;
    `ports`: (hostPort, protocol, hostIP) triples; `anti_affinity`: its required
    `podAntiAffinity` terms as written; `allocated`: HAMi's placement of it, or "";
    `mig_allocations`: HAMi's MIG reservations of it (`hami.io/vgpu-mig-allocations`), or ""."""

    namespace: str
    name: str
    packed_uid: bytes | str
    node: str
    phase: str
    labels: tuple[tuple[str, str], ...]
    requests: tuple[tuple[str, int], ...]
    ports: tuple[tuple[int, str, str], ...] = ()
    anti_affinity: list | None = None
    allocated: str = ""
    mig_allocations: str = ""
    #: the ResourceClaims it names (object names): what they hold counts with it (`kube.drastate`)
    claims: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def uid(self) -> str:
        return _unpack(self.packed_uid)

    def row(self) -> dict:
        """The pod in `services.upsert_bound_pods`' form (SPEC 10 `running`, API forms)."""
        requests = {name: f"{amount}m" if name == CPU else str(amount) for name, amount in self.requests}
        container: dict = {"name": "", "resources": {"requests": requests} if requests else {}}
        if self.ports:
            container["ports"] = [
                {"hostPort": port, "protocol": protocol, **({"hostIP": ip} if ip else {})}
                for port, protocol, ip in self.ports
            ]
        affinity = (
            {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": self.anti_affinity}}
            if self.anti_affinity
            else None
        )
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "node": self.node,
            "labels": dict(self.labels),
            "affinity": affinity,
            "containers": [container],
            "init_containers": [],
            "allocated": self.allocated,
            "mig_allocations": self.mig_allocations,
            "phase": self.phase,
        }


class BoundPodSync(Handler):
    """The all-pods informer's handler: pods others bound, kept in step through the services.
    `project` is also the informer's projection, so its cache holds only `BoundView`s (in
    extender mode it shares the informer of full pods: `synced` projects them itself)."""

    def __init__(self, may_write: Callable[[], bool], gpu_resources: Callable[[], set[str]] | None = None):
        self.may_write = may_write
        self.gpu_resources = gpu_resources or (
            lambda: set(pod_objects.current().resources.canonical()) | pod_objects.OTHER_FAMILIES
        )
        self.lock = threading.Lock()
        #: (namespace, name) -> the pod to store, or the uid of the one to forget ("": whichever
        #: is stored); written by `flush`.
        self.pending: dict[tuple[str, str], BoundView | str] = {}
        #: After a full list: the pods that exist, so `flush` forgets every other one.
        self.listed: set[tuple[str, str]] | None = None
        self._labels, self._requests = _Shared(), _Shared()
        self._terms = _Shared(key=lambda terms: json.dumps(terms, sort_keys=True, default=str))
        self._logged: dict[tuple[str, str], str] = {}
        #: the DRA informers' state (`HAMI_DRA`): a pod's allocated claims hold its devices
        self.dra: DraState | None = None
        #: the informer's cached view of a pod (namespace, name), to count it again when a
        #: claim it names changes
        self.lookup: Callable[[str, str], object] | None = None

    # -- the projection -----------------------------------------------------------------

    def project(self, obj: dict) -> BoundView | None:
        """The pod as a `BoundView` while it is bound and has not ended, else None."""
        node = pod_objects.node_of(obj)
        if not isinstance(node, str) or not node or pod_objects.final_status(obj):
            return None
        namespace, name = pod_objects.key_of(obj)
        if not (isinstance(namespace, str) and isinstance(name, str) and name):
            return None
        status = obj.get("status")
        phase = status.get("phase") if isinstance(status, dict) else None
        phase = phase if isinstance(phase, str) else ""
        labels = pod_objects.meta(obj).get("labels")
        annotations = pod_objects.annotations_of(obj)
        allocated = held_allocation(annotations, ALLOCATED, TO_ALLOCATE)
        reserved = annotations.get(mig.ALLOCATIONS) or ""
        uid = pod_objects.uid_of(obj)
        return BoundView(
            namespace=sys.intern(namespace),
            name=name,
            packed_uid=_pack(uid) if isinstance(uid, str) else "",
            node=sys.intern(node),
            phase=sys.intern(phase),
            labels=self._labels(
                tuple(sorted((k, v) for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)))
                if isinstance(labels, dict)
                else ()
            ),
            requests=self._requests(self._requests_of(obj)),
            ports=_ports(obj),
            anti_affinity=self._terms(_anti_affinity(obj)),
            allocated=allocated if isinstance(allocated, str) else "",
            mig_allocations=reserved if isinstance(reserved, str) else "",
            claims=_claim_names(obj),
        )

    def _requests_of(self, obj: dict) -> tuple[tuple[str, int], ...]:
        """The effective request (SPEC 10), GPU resources of this cluster's names left out (the
        cards count those). The API server has validated every quantity; should one still not
        read, the pod is counted for its pod slot only, and said so."""
        skipped = self.gpu_resources()
        try:
            request = effective_request(
                pod_objects.spec(obj).get("containers") or [],
                pod_objects.spec(obj).get("initContainers") or [],
            )
        except (PodInvalid, TypeError, AttributeError) as exc:
            log.warning(
                "pod %s: request not read, counted as a pod only: %s", pod_objects.subject_of(obj), exc
            )
            return ()
        return tuple(sorted((sys.intern(k), v) for k, v in request.items() if k not in skipped and v))

    # -- informer callbacks ---------------------------------------------------------------

    def changed(self, kind: str, obj: dict) -> None:
        """Mark the pod for the next `flush`: stored while bound, forgotten when it ends or is
        deleted. A pod that never was bound changes nothing."""
        key = cache_key(obj)
        view = None if kind == "DELETED" else self.project(obj)
        if view is None and kind != "DELETED" and not pod_objects.final_status(obj):
            return  # not bound yet: it holds nothing, and was never stored
        uid = pod_objects.uid_of(obj)
        with self.lock:
            self.pending[key] = view if view is not None else (uid if isinstance(uid, str) else "")

    def synced(self, objects: list, listed: bool) -> None:
        """After a list: every bound pod is written again, and every stored one missing from the
        list is forgotten (deleted while the watch was down). A resync changes nothing: the
        watch events have been marked already."""
        if not listed:
            return
        views = (obj if isinstance(obj, BoundView) else self.project(obj) for obj in objects)
        pending: dict[tuple[str, str], BoundView | str] = {
            view.key: view for view in views if view is not None
        }
        with self.lock:
            self.pending = pending
            self.listed = set(pending)

    # -- writing ------------------------------------------------------------------------------

    def flush(self) -> int:
        """Write what changed since the last flush, in batches; pods hamiadmin placed itself are
        left out (their rows count them). What a write failed on is kept for the next flush. The
        number of pods written or forgotten."""
        if not self.may_write():
            return 0
        with self.lock:
            pending, self.pending = self.pending, {}
            listed, self.listed = self.listed, None
        done = 0
        items = list(pending.items())
        try:
            for start in range(0, len(items), BATCH):
                batch = items[start : start + BATCH]
                stored = [view for _, view in batch if isinstance(view, BoundView)]
                ours = _placed_by_us([view.uid for view in stored if view.uid])
                rows = [self._with_claims(view) for view in stored if view.uid not in ours]
                gone = [
                    {"namespace": namespace, "name": name, "uid": view if isinstance(view, str) else view.uid}
                    for (namespace, name), view in batch
                    if isinstance(view, str) or view.uid in ours
                ]
                if rows:
                    self._refused(rows, services.upsert_bound_pods(rows))
                if gone:
                    services.forget_bound_pods(gone)
                done += len(batch)
            if listed is not None:
                self._forget_unlisted(listed)
        except Exception:  # noqa: BLE001 - the database may be down: the next flush retries
            log.exception("pods others bound: %d changes not written yet", len(items) - done)
            with self.lock:
                for key, view in items[done:]:
                    self.pending.setdefault(key, view)
                if listed is not None and self.listed is None:
                    self.listed = listed
        return done

    def assume(
        self, pod: dict, node: str, claims: dict[str, dict], seen: frozenset[int] | None = None
    ) -> bool:
        """A pod the DRA pass placed (`kube.dra`), its claims written (`claims`, by name, as
        the API server answered) and its Binding not sent yet: stored at once as bound to
        `node`, holding what those claims allocate. Why: the scheduling cycle counts a pod
        others placed from its row, and the row used to come from the bound pod's watch
        event, after the Binding; in between, the cycle saw the devices free and could give
        one device's capacity twice (a whole card on top of a pair's 8000 MiB). The watch's
        event writes the same row again. A refused row is logged (`_refused`).

        `seen`: the ids of the active allocations on DRA cards the pass counted when it read
        them; the row is stored only if no other landed on its cards since
        (`services.assume_bound_pod`, under those cards' locks, where a scheduling commit
        takes them too). False, nothing stored, when one did: the pass takes its claims back
        and plans again."""
        state = self.dra
        if not self.may_write() or state is None:
            return True
        bound = {**pod, "spec": {**pod_objects.spec(pod), "nodeName": node}}
        view = self.project(bound)
        if view is None:
            return True
        written = {(view.namespace, name): claim for name, claim in claims.items()}
        row = self._with_claims(view, lambda key: written.get(key) or state.claims.get(key))
        done = services.assume_bound_pod(row, seen)
        if done is None:
            return False
        self._refused([row], [done])
        return True

    def _with_claims(
        self, view: BoundView, claim_of: Callable[[tuple[str, str]], dict | None] | None = None
    ) -> dict:
        """The view's row, its allocated claims' devices added to `allocated` (one container a
        claim, `UUID,DRA,MiB,cores:` per result; a claim shared by several pods counts with
        the first pod it is reserved for only). `claim_of`: a claim by (namespace, name),
        the DRA informer's by default."""
        row = view.row()
        if not view.claims or self.dra is None:
            return row
        claim_of = claim_of or self.dra.claims.get
        extra = []
        for name in view.claims:
            claim = claim_of((view.namespace, name))
            status = pod_objects.as_dict(pod_objects.as_dict(claim).get("status"))
            reserved = status.get("reservedFor")
            if (
                not isinstance(status.get("allocation"), dict)
                or not isinstance(reserved, list)
                or not reserved
            ):
                continue
            if pod_objects.as_dict(reserved[0]).get("uid") != view.uid:
                continue
            try:
                holdings = held(self.dra.inventory(), [claim])
            except DraUnsupported as exc:
                log.warning("resourceclaim %s/%s: not counted: %s", view.namespace, name, exc.message)
                continue
            if holdings:
                extra.append([(d.uuid, memory, cores) for d, memory, cores in holdings])
        if extra:
            row["allocated"] = (row["allocated"] or "") + encode_allocation(extra, DRA.vendor)
        return row

    def claim_changed(self, claim: dict) -> None:
        """A ResourceClaim changed: the bound pods it is reserved for are written again at the
        next flush (what it holds counts with them)."""
        if self.lookup is None:
            return
        meta = pod_objects.as_dict(claim.get("metadata"))
        status = pod_objects.as_dict(claim.get("status"))
        namespace = meta.get("namespace") or "default"
        for entry in status.get("reservedFor") or []:
            name = entry.get("name") if isinstance(entry, dict) else None
            view = self.lookup(namespace, name) if isinstance(name, str) else None
            if isinstance(view, BoundView):
                with self.lock:
                    self.pending[view.key] = view

    def _forget_unlisted(self, listed: set[tuple[str, str]]) -> None:
        """After a full list: forget the stored pods it lacks (deleted while no watch was open)."""
        stale = [
            {"namespace": namespace, "name": name}
            for namespace, name in BoundPod.objects.values_list("namespace", "name").iterator()
            if (namespace, name) not in listed
        ]
        for start in range(0, len(stale), BATCH):
            services.forget_bound_pods(stale[start : start + BATCH])

    def _refused(self, rows: list[dict], results: list) -> None:
        """Say which pods the services refused (what the API server let through and our checks
        do not: they are not counted), once per pod and message."""
        for row, done in zip(rows, results, strict=False):
            if done.error is None:
                continue
            key = (row["namespace"], row["name"])
            message = f"pod {key[0]}/{key[1]} bound by others not counted: {done.error}"
            if self._logged.get(key) != message:
                if len(self._logged) > 10_000:
                    self._logged.clear()
                self._logged[key] = message
                log.warning("%s", message)


def _placed_by_us(uids: list[str]) -> set[str]:
    """Of these uids, those of pods hamiadmin placed and holds (scheduled or running)."""
    if not uids:
        return set()
    return set(Pod.objects.filter(uid__in=uids, status__in=Pod.BOUND).values_list("uid", flat=True))


def _claim_names(obj: dict) -> tuple[str, ...]:
    """The ResourceClaims a pod names (a template's as generated), object names, once each,
    and the special claim of its extended resources (KEP-5004: kube-scheduler's, named in
    `status.extendedResourceClaimStatus`)."""
    found: list[str] = []
    if pod_objects.spec(obj).get("resourceClaims"):
        try:
            found = [claim for _, claim in claim_names(obj) if isinstance(claim, str) and claim]
        except (DraUnsupported, AttributeError, TypeError):
            found = []
    special = pod_objects.as_dict(
        pod_objects.as_dict(obj.get("status")).get("extendedResourceClaimStatus")
    ).get("resourceClaimName")
    if isinstance(special, str) and special and special not in found:
        found.append(special)
    return tuple(sys.intern(claim) for claim in found)


def _ports(obj: dict) -> tuple[tuple[int, str, str], ...]:
    found = []
    for key in ("containers", "initContainers"):
        containers = pod_objects.spec(obj).get(key)
        for container in containers if isinstance(containers, list) else []:
            ports = container.get("ports") if isinstance(container, dict) else None
            for port in ports if isinstance(ports, list) else []:
                host = port.get("hostPort") if isinstance(port, dict) else None
                if isinstance(host, int) and not isinstance(host, bool) and host > 0:
                    protocol = port.get("protocol") if isinstance(port.get("protocol"), str) else "TCP"
                    ip = port.get("hostIP") if isinstance(port.get("hostIP"), str) else ""
                    found.append((host, sys.intern(protocol or "TCP"), ip))
    return tuple(found)


def _anti_affinity(obj: dict) -> list | None:
    affinity = pod_objects.spec(obj).get("affinity")
    anti = affinity.get("podAntiAffinity") if isinstance(affinity, dict) else None
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(anti, dict) else None
    return terms if isinstance(terms, list) and terms else None
