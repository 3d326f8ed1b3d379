"""The watcher: keeps the scheduler's tables in step with Kubernetes and binds what it places.

While this instance holds the Lease it runs three informers (pods of our scheduler names,
or all pods in extender mode, where kube-scheduler places and binds; nodes; and every pod of
the cluster, slim, for the pods others bound: `kube.bound`), in watcher mode also
ResourceQuotas and the PodGroup CRDs discovery shows served, and the Workload API's PodGroups
and Workloads when served (`kube.workloads`; read before the pods, so a gang's figures are
known when its members are queued), and, in its own loop (watcher mode):

- on taking the lead, and on every resync after, finishes or fails binds a predecessor left
  half-done (bound, `bind-phase: allocating`: killed between the Binding and its last
  patch; `Binder.repair`);
- binds pods a cycle has placed (status `scheduled`) that Kubernetes still shows unbound,
  with back-off per pod after a failed Binding, a gang's members back to back;
- evicts the Kubernetes pods a cycle chose as victims of a preemption (`Evictor`);
- writes the `PodScheduled` condition and `nominatedNodeName` of pods that wait where they
  changed (`kube.status`), `FailedScheduling` events for them, `Scheduled` after a binding,
  and the PodGroup objects' status;
- writes what changed among the pods others bound (both modes: `BoundPodSync.flush`);
- hands the informers' caches to their handlers every `resync_seconds` (node heartbeats,
  and a retry of anything a handler failed to write).

With `HAMI_VGPU_MONITOR` set, a thread of its own also reads HAMi's vGPU monitor on each
HAMi node for the cards' measured usage (`kube.vgpumonitor`).

The scheduling cycles themselves run elsewhere (Celery worker or `manage.py schedule`);
this loop only reads their results from the database.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from django.db import close_old_connections, connections
from django.utils import timezone

from scheduling import services
from scheduling.engine import PodInvalid, ScenarioError, explain
from scheduling.engine.dra.claims import DraUnsupported
from scheduling.engine.dra.claims import claim_names as dra_claim_names
from scheduling.engine.encoding import decode_allocation
from scheduling.models import Decision, Nomination, Pod
from scheduling.pipeline.snapshot import card_tenants

from . import nodes as node_objects
from . import pods as pod_objects
from .api import ApiError, ApiUnavailable, KubeApi
from .binder import BIND_COMPLETED, Binder, BindOutcome, half_done, node_name
from .bound import BoundPodSync
from .dra import DraCycle, placed_unbound, quota_holds, withdraw_queued
from .draclaims import ClaimWriter
from .drastate import PASS as DRA_PASS
from .drastate import ClaimSharers, DraState, DraSync, PodGroupsSeen
from .events import MAX_MESSAGE, EventRecorder, PodRef
from .evictor import Evictor
from .groups import KAI_KIND, KINDS, GroupKind, GroupSync, KaiGroupSync
from .informer import Backoff, Handler, Handlers, Informer
from .leader import LeaderElector
from .owners import OwnerGangs
from .quotas import QuotaSync
from .reconcile import DriftWatch
from .rescale import rescale_owner_gangs
from .status import GATED_MESSAGE, SCHEDULER_ERROR, SCHEDULING_GATED, UNSCHEDULABLE, PodStatusWriter, Verdict
from .sync import NodeSync, PodSync, Refusals
from .vgpumonitor import SELECTOR, VgpuMonitorReader
from .volumes import (
    StorageSync,
    Volumes,
    claim_names,
    pod_volumes,
    project_claim,
    project_class,
    project_volume,
)
from .workloads import WORKLOAD_KIND, WorkloadGroupSync, WorkloadSync

log = logging.getLogger("hamiadmin.kube.agent")

#: The PodGroup objects read when served: Volcano's, scheduler-plugins', the Workload API's.
GROUP_KINDS = (*KINDS, KAI_KIND, WORKLOAD_KIND)
WORKLOADS = "workloads"


@dataclass
class AgentOptions:
    scheduler_name: str = "hami-scheduler"
    #: Other `spec.schedulerName`s whose pods this agent places too (`HAMI_SCHEDULER_NAMES`:
    #: `volcano` for operators that stamp it).
    other_scheduler_names: tuple[str, ...] = ()
    #: Gangs from owners (kube/owners.py): `all` or `none` (namespaces opt in by their label).
    gangs_from_owners: str = "none"
    #: Extender mode: kube-scheduler places and binds through /extender/; this agent only
    #: reports nodes and watches every pod to release the ones that end.
    extender: bool = False
    watch_timeout: int = 60
    resync_seconds: float = 20.0
    loop_seconds: float = 1.0
    event_seconds: float = 5.0
    event_refresh_seconds: float = 300.0
    complete_bind_phase: bool = True
    bind_backoff_base: float = 2.0
    bind_backoff_cap: float = 120.0
    api_backoff_base: float = 0.5
    api_backoff_cap: float = 30.0
    #: How long the pods wait for the PodGroup objects' first list on taking the lead, so a
    #: gang's members never meet a default `min_member` of 1.
    groups_wait_seconds: float = 5.0
    #: How often the pods are listed afresh to compare with the tables (kube/reconcile.py);
    #: in between, each resync compares the informer's cache.
    drift_list_seconds: float = 300.0
    #: Run the DRA pass (`kube.dra`, `HAMI_DRA`; watcher mode), at most every `dra_seconds`
    #: and only while a pod of ours with claims waits.
    dra: bool = False
    dra_seconds: float = 2.0
    #: HAMi's vGPU monitor read for measured usage (`kube.vgpumonitor`, `HAMI_VGPU_MONITOR`):
    #: `off`, `proxy` or a URL template; every `vgpu_monitor_seconds`, in its own thread.
    vgpu_monitor: str = "off"
    vgpu_monitor_seconds: float = 15.0
    vgpu_monitor_selector: str = SELECTOR


class KubeAgent:
    def __init__(
        self,
        api: KubeApi,
        options: AgentOptions | None = None,
        elector: LeaderElector | None = None,
        identity: str = "",
        clock=time.monotonic,
    ):
        self.api = api
        self.options = options or AgentOptions()
        self.elector = elector
        self.clock = clock
        name = self.options.scheduler_name
        self.events = EventRecorder(api, name, identity, self.options.event_refresh_seconds)
        self.binder = Binder(api, complete_phase=self.options.complete_bind_phase)
        self.evictor = Evictor(
            api,
            self.events,
            self.is_leader,
            lookup=lambda namespace, name: self.pods.get(namespace, name) if self.pods else None,
            backoff_base=self.options.api_backoff_base,
            backoff_cap=self.options.api_backoff_cap,
            clock=clock,
        )
        # Extender mode writes no Kubernetes Events (kube-scheduler does; no grant for them).
        writes_events = None if self.options.extender else self.events
        self.pod_sync = PodSync(
            api,
            self.scheduler_names,
            self.is_leader,
            on_release=self.forget,
            queue_pods=not self.options.extender,
            events=writes_events,
        )
        if not self.options.extender:
            self.pod_sync.owners = OwnerGangs(
                api, self.options.gangs_from_owners, on_unknown=self.pod_sync.unknown_owner
            )
        self.node_sync = NodeSync(self.is_leader, events=writes_events)
        self.bound_sync = BoundPodSync(self.is_leader)
        self.status = PodStatusWriter(api, self.is_leader)
        self.quota_sync = QuotaSync(self.is_leader, Refusals())
        self.group_syncs = {kind.source: GroupSync(api, kind, self.is_leader, Refusals()) for kind in KINDS}
        self.group_syncs[KAI_KIND.source] = KaiGroupSync(api, self.is_leader, Refusals())
        self.group_syncs[WORKLOAD_KIND.source] = self.workload_groups = WorkloadGroupSync(
            api, self.is_leader, Refusals(), workload_of=self._workload
        )
        self.drift = DriftWatch(api, self.scheduler_names, every_pod=self.options.extender)
        self.dra = (
            DraCycle(api, self.scheduler_names, events=self.events)
            if self.options.dra and not self.options.extender
            else None
        )
        self._dra_at = 0.0
        self.monitor = VgpuMonitorReader(
            api,
            self.options.vgpu_monitor,
            lambda: self.nodes.snapshot() if self.nodes is not None else [],
            selector=self.options.vgpu_monitor_selector,
        )
        self._drift_listed_at = clock()
        self.pods: Informer | None = None
        self.nodes: Informer | None = None
        #: Every pod of the cluster, slim (`kube.bound`): what others bound holds its node.
        self.all_pods: Informer | None = None
        #: Watcher mode: ResourceQuotas, and the PodGroup CRDs the API server serves.
        self.batch: dict[str, Informer] = {}
        #: Watcher mode: claims, volumes and storage classes, slim (`kube.volumes`).
        self.storage: dict[str, Informer] = {}
        #: Watcher mode with `HAMI_DRA`: the DRA objects (`kube.drastate`), and what they say.
        self.dra_informers: dict[str, Informer] = {}
        self.dra_state: DraState | None = None
        self._threads: list[threading.Thread] = []
        self._term: threading.Event | None = None
        self.bind_retry_at: dict[str, tuple[int, float]] = {}  # uid -> (failures, not before)
        self._events_at = 0.0
        self._resynced_at = 0.0
        self._repair_due = True  # set again each time this instance takes the lead

    def forget(self, uid: str) -> None:
        """The pod ended: drop its event, status and back-off memory."""
        self.events.forget(uid)
        self.status.forget(uid)
        self.bind_retry_at.pop(uid, None)

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    # -- informers ----------------------------------------------------------------------

    @property
    def scheduler_names(self) -> tuple[str, ...]:
        """Every `spec.schedulerName` served: ours first."""
        return tuple(dict.fromkeys((self.options.scheduler_name, *self.options.other_scheduler_names)))

    def pod_selector(self) -> str:
        """One name: its pods. Several: a field selector cannot say "one of", so every pod not
        left to kube-scheduler is watched and `PodSync` keeps those of our names."""
        names = self.scheduler_names
        if self.options.extender or "default-scheduler" in names:
            return ""
        if len(names) == 1:
            return f"spec.schedulerName={names[0]}"
        return "spec.schedulerName!=default-scheduler"

    def informers(self) -> list[Informer]:
        return [
            informer
            for informer in (
                self.nodes,
                self.pods,
                self.all_pods,
                *self.batch.values(),
                *self.storage.values(),
                *self.dra_informers.values(),
            )
            if informer
        ]

    def _start(self, informer: Informer, stop: threading.Event) -> None:
        thread = threading.Thread(
            target=self._run_informer, args=(informer, stop), name=f"kube-{informer.name}", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    def start_batch_informers(self, stop: threading.Event) -> list[Informer]:
        """Watcher mode: ResourceQuotas (once per term), and each PodGroup CRD that discovery
        shows served and that is not read yet (tried again at every resync, so a CRD installed
        later is picked up). The informers started."""
        if self.options.extender:
            return []
        started = []
        timeout = self.options.watch_timeout
        if "resourcequotas" not in self.batch:
            started.append(
                Informer(
                    "resourcequotas",
                    self.api.list_resource_quotas,
                    self.api.watch_resource_quotas,
                    self.quota_sync,
                    watch_timeout=timeout,
                    backoff=self._api_backoff(),
                )
            )
            self.batch["resourcequotas"] = started[-1]
        for kind in GROUP_KINDS:
            if kind.source in self.batch or not self._served(kind):
                continue
            if kind is WORKLOAD_KIND:
                started += self._start_workloads(timeout)
            handler: Handler = self.group_syncs[kind.source]
            if kind is WORKLOAD_KIND and self.dra is not None:  # its claims choose the path
                handler = Handlers(PodGroupsSeen(lambda: self.dra_state, self.dra_changed), handler)
            started.append(
                Informer(
                    f"podgroups.{kind.group}",
                    getattr(self.api, kind.lister),
                    getattr(self.api, kind.watcher),
                    handler,
                    watch_timeout=timeout,
                    backoff=self._api_backoff(),
                )
            )
            self.batch[kind.source] = started[-1]
            if kind is WORKLOAD_KIND:
                self.workload_groups.podgroups = started[-1].snapshot
                self.pod_sync.workload_groups_read = True
            if kind is KAI_KIND:
                self.pod_sync.kai_group = started[-1].get
        for informer in started:
            self._start(informer, stop)
        return started

    def _start_workloads(self, timeout: int) -> list[Informer]:
        """The Workloads' informer, when the Workload API serves them (their templates hold
        what a PodGroup leaves out: `kube.workloads`); started before its PodGroups."""
        if WORKLOADS in self.batch:
            return []
        try:
            resources = self.api.served_resources(WORKLOAD_KIND.group, WORKLOAD_KIND.version)
        except (ApiError, ApiUnavailable) as exc:
            log.warning("discovery of %s/%s failed: %s", WORKLOAD_KIND.group, WORKLOAD_KIND.version, exc)
            return []
        if not resources or WORKLOADS not in resources:
            return []
        self.batch[WORKLOADS] = Informer(
            WORKLOADS,
            self.api.list_workloads,
            self.api.watch_workloads,
            WorkloadSync(self.workload_groups),
            watch_timeout=timeout,
            backoff=self._api_backoff(),
        )
        return [self.batch[WORKLOADS]]

    def _workload_podgroup(self, namespace: str, name: str) -> dict | None:
        informer = self.batch.get(WORKLOAD_KIND.source)
        return informer.get(namespace, name) if informer is not None else None

    def _workload(self, namespace: str, name: str) -> dict | None:
        informer = self.batch.get(WORKLOADS)
        return informer.get(namespace, name) if informer is not None else None

    def _served(self, kind: GroupKind) -> bool:
        """Whether the API server serves this PodGroup CRD (discovery); whether its status can
        be written the way its CRD ships (on the object, or through `podgroups/status`)."""
        try:
            resources = self.api.served_resources(kind.group, kind.version)
        except (ApiError, ApiUnavailable) as exc:
            log.warning("discovery of %s/%s failed, tried again later: %s", kind.group, kind.version, exc)
            return False
        if resources is None or "podgroups" not in resources:
            return False
        sync = self.group_syncs[kind.source]
        has_subresource = "podgroups/status" in resources
        sync.writes_status = has_subresource == (kind.status_resource == "podgroups/status")
        if not sync.writes_status:
            log.warning(
                "%s/%s podgroups: status subresource %s, unlike the CRD hamiadmin knows; status is not written",
                kind.group,
                kind.version,
                "present" if has_subresource else "absent",
            )
        log.info("reading PodGroup objects of %s/%s", kind.group, kind.version)
        return True

    def start_storage_informers(self, stop: threading.Event) -> None:
        """Watcher mode: claims, volumes and storage classes, slim, read before the pods so a
        pod's volumes are judged from its first submission (`kube.volumes`)."""
        self.storage = {}
        self.pod_sync.volumes = None
        if self.options.extender:
            return  # kube-scheduler judges the volumes
        timeout = self.options.watch_timeout
        for name, lister, watcher, project in (
            (
                "claims",
                self.api.list_persistent_volume_claims,
                self.api.watch_persistent_volume_claims,
                project_claim,
            ),
            ("volumes", self.api.list_persistent_volumes, self.api.watch_persistent_volumes, project_volume),
            ("classes", self.api.list_storage_classes, self.api.watch_storage_classes, project_class),
        ):
            self.storage[name] = Informer(
                name,
                lister,
                watcher,
                StorageSync(self.resubmit_claimants, name),
                watch_timeout=timeout,
                backoff=self._api_backoff(),
                project=project,
            )
            self._start(self.storage[name], stop)
        claims, volumes, classes = (self.storage[name] for name in ("claims", "volumes", "classes"))
        self.pod_sync.volumes = Volumes(
            claims.get,
            lambda name: volumes.get("", name),
            volumes.snapshot,
            lambda name: classes.get("", name),
        )

    def start_dra_informers(self, stop: threading.Event) -> None:
        """Watcher mode with `HAMI_DRA`: ResourceSlices, DeviceTaintRules, DeviceClasses and
        ResourceClaims (`kube.drastate`), read before the nodes and pods so DRA devices are
        cards and claims asks from the first pass; the pods the cycle cannot place are left to
        the DRA pass (`DraCycle.takes`)."""
        self.dra_informers = {}
        self.dra_state = None
        if self.dra is None:
            return
        timeout = self.options.watch_timeout
        readers = (
            ("resourceslices", self.api.list_resource_slices, self.api.watch_resource_slices),
            ("devicetaintrules", self.api.list_device_taint_rules, self.api.watch_device_taint_rules),
            ("deviceclasses", self.api.list_device_classes, self.api.watch_device_classes),
            ("resourceclaims", self.api.list_resource_claims, self.api.watch_resource_claims),
        )
        informers = self.dra_informers
        state = DraState(
            lambda: informers["resourceslices"].snapshot(),
            lambda: informers["devicetaintrules"].snapshot(),
            lambda namespace, name: informers["deviceclasses"].get(namespace, name),
            lambda namespace, name: informers["resourceclaims"].get(namespace, name),
            self.dra.drivers,
            list_classes=lambda: informers["deviceclasses"].snapshot(),
        )
        for name, lister, watcher in readers:
            informers[name] = Informer(
                f"dra-{name}",
                lister,
                watcher,
                DraSync(state, name, self.dra_changed),
                watch_timeout=timeout,
                backoff=self._api_backoff(),
            )
        for informer in informers.values():
            self._start(informer, stop)
        self.dra_state = state
        self.pod_sync.dra = self.node_sync.dra = self.binder.dra = state
        self.bound_sync.dra = state
        self.bound_sync.lookup = lambda namespace, name: (
            self.all_pods.get(namespace, name) if self.all_pods else None
        )
        self.dra.takes = lambda pod: state.asks(pod).get("path") == DRA_PASS
        self.dra.held = placed_unbound
        self.dra.assume = self.bound_sync.assume
        self.dra.unassume = services.forget_bound_pods
        self.dra.withdraw = withdraw_queued
        self.dra.quotas = quota_holds
        state.sharers = ClaimSharers(state, self.dra_changed)
        state.podgroups = self._workload_podgroup

    def _pod_handlers(self, every_pod: bool) -> Handler:
        """What the pod informer calls: the claims' sharers first (`HAMI_DRA`), so the watcher
        reads a pod's asks with them counted; the bound pods' sync when it sees every pod."""
        handlers: list[Handler] = []
        if self.dra_state is not None and self.dra_state.sharers is not None:
            handlers.append(self.dra_state.sharers)
        handlers.append(self.pod_sync)
        if every_pod:
            handlers.append(self.bound_sync)
        return handlers[0] if len(handlers) == 1 else Handlers(*handlers)

    def release_dra_claims(self) -> None:
        """Give back the claims of the pods the cycle placed that ended (`kube.draclaims`)."""
        claims = self.dra_informers.get("resourceclaims")
        if self.dra_state is None or claims is None or not claims.has_synced.is_set() or not self.is_leader():
            return
        try:
            ClaimWriter(self.api, self.dra_state).release_ended(claims.snapshot())
        except ApiUnavailable as exc:
            log.warning("claims of ended pods not given back yet: %s", exc)

    def dra_changed(self, resource: str, obj: dict | None) -> None:
        """A DRA object changed: devices and taint rules report the nodes' cards again; any
        change submits again our waiting pods with claims (a submission that stores the same
        spec writes nothing); a claim's change also re-counts the bound pods it is reserved for.
        A change of devices or classes also submits again the waiting pods asking extended
        resources, which a DeviceClass may now map, or no longer (`DraState.extended`); a
        claim's own change, only the waiting pods naming it."""
        if not self.is_leader() or any(not i.has_synced.is_set() for i in self.dra_informers.values()):
            return
        if resource in ("resourceslices", "devicetaintrules") and self.nodes is not None:
            state = self.dra_state
            names = (state.node_names() if state is not None else set()) | self.node_sync.dra_nodes
            for node in self.nodes.snapshot():
                if node_objects.name_of(node) in names:
                    try:
                        self.node_sync.apply(node)
                    except Exception:  # noqa: BLE001 - one node must not stop the others
                        log.exception("node %s: DRA devices not reported", node_objects.name_of(node))
        if resource == "resourceclaims" and obj is not None:
            self.bound_sync.claim_changed(obj)
        if self.pods is None or not self.pods.has_synced.is_set():
            return
        # one claim's change can only change the asks of the pods naming it (claims change
        # most often: a pass over every waiting pod each time would be work for nothing)
        claim = pod_objects.key_of(obj) if resource == "resourceclaims" and obj is not None else None
        remapped = resource in ("resourceslices", "deviceclasses")  # what `DraState.mapping` reads
        waiting = [
            pod
            for pod in self.pods.snapshot()
            if (
                _names_claim(pod, claim)
                if claim is not None
                else (
                    pod_objects.spec(pod).get("resourceClaims")
                    or self.pod_sync.dra_extended(pod)
                    or (remapped and pod_objects.asks_gpu(pod))
                )
            )
            and self.pod_sync.to_queue(pod)
        ]
        if waiting:
            self.pod_sync.queue_batch(waiting)

    def resubmit_claimants(self, namespace: str | None, claim: str | None) -> None:
        """A claim (`namespace`/`claim`), or a volume or class (None), changed: submit again the
        waiting pods of ours whose volumes may be judged differently now (a submission that
        stores the same spec writes nothing)."""
        if self.pods is None or not self.pods.has_synced.is_set() or not self.is_leader():
            return
        waiting = []
        for obj in self.pods.snapshot():
            if not self.pod_sync.to_queue(obj):
                continue
            pod_namespace, name = pod_objects.key_of(obj)
            claimed = pod_volumes(obj)
            if not claimed or (namespace is not None and pod_namespace != namespace):
                continue
            if claim is not None:
                try:
                    if claim not in {found for found, _ in claim_names(name, claimed)}:
                        continue
                except PodInvalid:
                    pass  # malformed: submitted again, the engine names the field
            waiting.append(obj)
        if waiting:
            self.pod_sync.queue_batch(waiting)

    def start_informers(self, stop: threading.Event) -> list[threading.Thread]:
        self._threads, self._term, self.batch = [], stop, {}
        self.start_batch_informers(stop)
        self.start_storage_informers(stop)
        self.start_dra_informers(stop)
        deadline = time.monotonic() + self.options.groups_wait_seconds
        for source in (*(kind.source for kind in GROUP_KINDS), WORKLOADS):
            groups = self.batch.get(source)
            while groups is not None and not (
                groups.has_synced.is_set() or stop.is_set() or time.monotonic() >= deadline
            ):
                groups.has_synced.wait(0.05)
        for storage in (*self.storage.values(), *self.dra_informers.values()):
            while not (storage.has_synced.is_set() or stop.is_set() or time.monotonic() >= deadline):
                storage.has_synced.wait(0.05)
        selector, timeout = self.pod_selector(), self.options.watch_timeout
        # Extender mode watches every pod already: the pods others bound are read from it.
        every_pod = not selector
        self.pods = Informer(
            "pods",
            lambda: self.api.list_pods(selector),
            lambda version, seconds: self.api.watch_pods(version, selector, seconds),
            self._pod_handlers(every_pod),
            watch_timeout=timeout,
            backoff=self._api_backoff(),
        )
        self.nodes = Informer(
            "nodes",
            self.api.list_nodes,
            self.api.watch_nodes,
            self.node_sync,
            watch_timeout=timeout,
            backoff=self._api_backoff(),
        )
        self.all_pods = None
        if not every_pod:
            self.all_pods = Informer(
                "all-pods",
                lambda: self.api.list_pods(""),
                lambda version, seconds: self.api.watch_pods(version, "", seconds),
                self.bound_sync,
                watch_timeout=timeout,
                backoff=self._api_backoff(),
                project=self.bound_sync.project,
            )
        for informer in (self.nodes, self.pods, self.all_pods):
            if informer is not None:
                self._start(informer, stop)
        if self.monitor.enabled:
            thread = threading.Thread(
                target=self._read_monitors, args=(stop,), name="kube-vgpu-monitor", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        self._resynced_at = self.clock()
        return self._threads

    def _read_monitors(self, stop: threading.Event) -> None:
        """HAMi's vGPU monitors, read every `vgpu_monitor_seconds` once the nodes are listed;
        apart from the binding loop, so a slow monitor delays no bind."""
        try:
            while not stop.is_set():
                if self.nodes is not None and self.nodes.has_synced.is_set():
                    try:
                        self.monitor.run_once()
                    except Exception:  # noqa: BLE001 - database down: the next round tries again
                        log.exception("reading HAMi's vGPU monitors failed")
                        close_old_connections()
                stop.wait(self.options.vgpu_monitor_seconds)
        finally:
            connections.close_all()

    def _api_backoff(self) -> Backoff:
        return Backoff(self.options.api_backoff_base, self.options.api_backoff_cap)

    @staticmethod
    def _run_informer(informer: Informer, stop: threading.Event) -> None:
        try:
            informer.run(stop)
        finally:
            connections.close_all()

    # -- the loop -----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Until `stop`: lead (or wait to), then sync, bind and report while leading."""
        elector_thread = None
        if self.elector is not None:
            elector_thread = threading.Thread(
                target=self.elector.run, args=(stop,), name="kube-leader", daemon=True
            )
            elector_thread.start()
        while not stop.is_set():
            if not self.is_leader():
                stop.wait(0.2)
                continue
            term = threading.Event()  # set when this term of leadership ends
            self._repair_due = True
            threads = self.start_informers(term)
            log.info("leading: syncing pods (%s) and nodes", self.pod_selector() or "all pods")
            try:
                while not stop.is_set() and self.is_leader():
                    try:
                        self.reconcile()
                    except Exception:  # noqa: BLE001 - database down, an odd row: next pass retries
                        log.exception("reconcile pass failed")
                        close_old_connections()
                    stop.wait(self.options.loop_seconds)
            finally:
                term.set()
                for informer in self.informers():
                    informer.interrupt()
                connections.close_all()
            for thread in threads:
                thread.join(timeout=5)
            if not stop.is_set():
                log.warning("no longer leading: stopped writing")
        if elector_thread is not None:
            elector_thread.join(timeout=30)  # it releases the Lease on its way out

    def reconcile(self) -> None:
        """One pass: resync when due, repair half-done binds (first pass of a term, then with
        each resync), bind placed pods, evict chosen victims, report waiting ones."""
        close_old_connections()
        now = self.clock()
        if now - self._resynced_at >= self.options.resync_seconds:
            self._resynced_at = now
            self._repair_due = True
            if self._term is not None and not self._term.is_set():
                self.start_batch_informers(self._term)
            for informer in self.informers():
                if informer.has_synced.is_set():
                    informer.resync()
            if self.pods is not None and self.pods.has_synced.is_set():
                self.compare_with_tables(now)
                self.rescale_owner_gangs()
            self.release_dra_claims()
        self.bound_sync.flush()
        if self.pods is None or not self.pods.has_synced.is_set():
            return
        if self.options.extender:
            return  # kube-scheduler binds, and writes its own events from our FailedNodes
        if self._repair_due:
            self._repair_due = not self.repair_binds()
        self.bind_placed()
        self.evictor.run_once()
        self.run_dra(now)
        if now - self._events_at >= self.options.event_seconds:
            self._events_at = now
            self.report_waiting()
            self.write_group_statuses()

    def run_dra(self, now: float) -> None:
        """The DRA pass (`kube.dra.DraCycle`): it lists what it reads, so it runs only while a
        pod of ours with claims waits in the informer's cache, at most every `dra_seconds`."""
        if self.dra is None or now - self._dra_at < self.options.dra_seconds:
            return
        if not self.dra.pending(self.watched_pods.snapshot()):
            return
        self._dra_at = now
        try:
            self.dra.run_once()
        except ApiError as exc:
            log.warning("DRA pass: %s; trying again", exc)

    @property
    def watched_pods(self) -> Informer:
        """The pods' informer, for the passes that run once it has started."""
        if self.pods is None:
            raise RuntimeError("the pods' informer has not started")
        return self.pods

    def compare_with_tables(self, now: float) -> None:
        """Kubernetes' pods against the tables (kube/reconcile.py): the cache on each resync,
        a fresh list every `drift_list_seconds` (what the watch missed is not in the cache)."""
        try:
            if now - self._drift_listed_at >= self.options.drift_list_seconds:
                self._drift_listed_at = now
                self.drift.run(self.api.list_pods(self.pod_selector())[0])
            else:
                self.drift.run(self.watched_pods.snapshot())
        except Exception:  # noqa: BLE001 - binds and evictions go on; the next resync checks again
            log.exception("comparing Kubernetes' pods with the tables failed")

    def rescale_owner_gangs(self) -> None:
        """Gangs from owners follow their owner's scale (kube/rescale.py)."""
        owners = self.pod_sync.owners
        if owners is None:
            return
        try:
            rescale_owner_gangs(owners, self.watched_pods.get)
        except Exception:  # noqa: BLE001 - the next resync tries again
            log.exception("re-reading the owners of gangs failed")

    def write_group_statuses(self) -> None:
        """PodGroup objects' status from their rows (phase, verdict), where it differs."""
        for kind in GROUP_KINDS:
            informer = self.batch.get(kind.source)
            if informer is not None and informer.has_synced.is_set():
                self.group_syncs[kind.source].write_status(informer.snapshot())

    def _ours_unbound(self, row) -> dict | None:
        """The cached Kubernetes pod of this row if it is ours to bind: same uid, our
        scheduler name, no node yet."""
        obj = self.watched_pods.get(row.namespace, row.name)
        if obj is None or (row.uid and pod_objects.uid_of(obj) != row.uid):
            return None
        if pod_objects.scheduler_of(obj) not in self.scheduler_names or pod_objects.node_of(obj):
            return None
        return obj

    def bind_placed(self) -> None:
        """Bind the pods cycles placed for us, a gang's members back to back. A refused Binding
        puts the pod back in the queue for as long as its next back-off (2 s doubling to 2 min);
        `bind_retry_at` also holds the Binding back that long should a wake (freed capacity)
        place the pod earlier, and holds back its whole gang with it. A gang member that is
        refused or gone gives back the placements of its gang's members not yet bound
        (`requeue_gang`); members already bound stay bound."""
        now = self.clock()
        rows = (
            Pod.objects.select_related("node", "group")
            .filter(status=Pod.SCHEDULED, origin=Pod.KUBERNETES)
            .exclude(uid="")
            .order_by("pk")
        )
        units: dict[tuple[str, int], list[Pod]] = {}
        for row in rows:
            if self._ours_unbound(row) is not None:
                unit = ("group", row.group_id) if row.group_id is not None else ("pod", row.pk)
                units.setdefault(unit, []).append(row)
        for members in units.values():
            if any(now < self.bind_retry_at.get(row.uid, (0, 0.0))[1] for row in members):
                continue
            for row in members:
                if not self.is_leader():
                    return
                outcome, detail, retry_after = self.bind_one(row, now)
                if (
                    outcome in (BindOutcome.FAILED, BindOutcome.GONE, BindOutcome.GATED)
                    and row.group_id is not None
                ):
                    self.requeue_gang(row, detail, retry_after)
                    break
                if outcome == BindOutcome.UNAVAILABLE:
                    break

    def bind_one(self, row: Pod, now: float) -> tuple[str, str, float]:
        """Bind one placed pod and report it: (outcome, detail, the back-off it was given)."""
        failures, _ = self.bind_retry_at.get(row.uid, (0, 0.0))
        current = (
            Pod.objects.select_related("node").filter(pk=row.pk, uid=row.uid, status=Pod.SCHEDULED).first()
        )
        if current is None:
            return "", "", 0.0  # released or requeued since it was read
        row = current
        delay = Backoff(self.options.bind_backoff_base, self.options.bind_backoff_cap)
        delay.failures = failures
        retry_after = delay.next_delay()
        result = self.binder.bind(row, retry_after=retry_after)
        ref = PodRef(row.namespace, row.name, row.uid)
        if result.outcome == BindOutcome.BOUND:
            self.bind_retry_at.pop(row.uid, None)
            self.events.forget(row.uid)
            before = self.pods.get(row.namespace, row.name) if self.pods else None
            if before is not None and pod_objects.uid_of(before) == row.uid:
                self.status.clear_nomination(before)
            cards = list(dict.fromkeys(uuid for container in _decode(row.allocated) for uuid in container))
            self.events.scheduled(ref, node_name(row), cards)
        elif result.outcome == BindOutcome.FAILED:
            self.bind_retry_at[row.uid] = (failures + 1, now + retry_after)
            self.events.failed_scheduling(ref, f"binding to {node_name(row)} failed: {result.detail}")
        elif result.outcome == BindOutcome.GATED:
            self.bind_retry_at[row.uid] = (failures + 1, now + retry_after)
        elif result.outcome == BindOutcome.GONE:
            self.bind_retry_at.pop(row.uid, None)
            self.events.forget(row.uid)
        return result.outcome, result.detail, retry_after

    def requeue_gang(self, failed: Pod, detail: str, retry_after: float) -> None:
        """One member of a gang was not bound: its gang's other members still `scheduled` give
        their cards back and wait as long as it does, so the gang is placed again together and
        never bound below `min_member`. Bound members are never undone."""
        group = failed.group.key if failed.group else str(failed.group_id)
        why = f"gang {group}: member {failed.key} was not bound ({detail[:300]}); the gang is placed again"
        others = Pod.objects.filter(group_id=failed.group_id, status=Pod.SCHEDULED).exclude(pk=failed.pk)
        for other in others:
            requeued = services.requeue_placed_pod(other, retry_after, why, expected_uid=other.uid)
            if requeued is None or requeued.status != Pod.PENDING:
                continue  # another incarnation, or bound meanwhile: left as it is
            log.warning("pod %s: %s", other.key, why)
            if other.uid and other.origin == Pod.KUBERNETES:
                self.events.failed_scheduling(PodRef(other.namespace, other.name, other.uid), why)

    def repair_binds(self) -> bool:
        """Finish or fail every bind of our pods left half-done (`Binder.repair`). False when
        the API server did not answer: the next pass tries again."""
        for obj in self.watched_pods.snapshot():
            if not self.is_leader():
                return True
            if not half_done(obj):
                continue
            try:
                result = self.binder.repair(obj)
            except ApiUnavailable as exc:
                log.warning("half-done binds not repaired yet, API server unavailable: %s", exc)
                return False
            except ApiError as exc:
                log.warning("pod %s: half-done bind not repaired: %s", "/".join(pod_objects.key_of(obj)), exc)
                continue
            if result is None:
                continue
            ref = PodRef(*pod_objects.key_of(obj), pod_objects.uid_of(obj))
            if result.outcome == BIND_COMPLETED:
                self.events.forget(ref.uid)
                allocated = Pod.objects.filter(uid=ref.uid).values_list("allocated", flat=True).first()
                cards = list(
                    dict.fromkeys(uuid for container in _decode(allocated or "") for uuid in container)
                )
                self.events.scheduled(ref, pod_objects.node_of(obj), cards)
            else:
                self.events.record(ref, "Warning", result.outcome, result.detail)
        return True

    def report_waiting(self) -> None:
        """Per waiting pod of ours: its `PodScheduled` condition and `nominatedNodeName` where
        they changed (`kube.status`), and a `FailedScheduling` event: the one-line reason, and
        for a pending pod its closest node's card reasons and what would make it fit
        (`explain.failed_scheduling_message`, within the event's MAX_MESSAGE characters). A
        gated pod gets the condition only, as from kube-scheduler."""
        rows = (
            Pod.objects.filter(status__in=(Pod.PENDING, Pod.REJECTED), origin=Pod.KUBERNETES)
            .exclude(uid="")
            .with_latest_decision()
        )
        nominated = dict(
            Nomination.objects.filter(
                expires_at__gt=timezone.now(), pod__status=Pod.PENDING, pod__origin=Pod.KUBERNETES
            ).values_list("pod__uid", "card__node__name")
        )
        waiting = []
        listed = list(
            rows.values_list(
                "namespace",
                "name",
                "uid",
                "status",
                "reason",
                "error",
                "latest_decision_id",
                "gated",
                "parked",
            )
        )
        verdicts = dict(  # each decision's triage (engine.triage), for the condition's message
            Decision.objects.filter(pk__in=[row[6] for row in listed if row[6]]).values_list(
                "id", "payload__verdict"
            )
        )
        for namespace, name, uid, status, reason, error, latest, gated, parked in listed:
            obj = self.watched_pods.get(namespace, name)
            if obj is None or pod_objects.uid_of(obj) != uid or pod_objects.node_of(obj):
                continue
            if gated or pod_objects.gates_of(obj):
                self.status.write(obj, Verdict(SCHEDULING_GATED, GATED_MESSAGE))
                continue
            if not (reason or error):
                continue
            if status == Pod.REJECTED or parked:
                self.status.write(obj, Verdict(SCHEDULER_ERROR, error or reason))
            else:
                message = explain.condition_message(reason or error, verdicts.get(latest))
                self.status.write(obj, Verdict(UNSCHEDULABLE, message, nominated.get(uid) or ""))
            waiting.append((PodRef(namespace, name, uid), status, reason or error, latest))
        ids = [latest for _, status, _, latest in waiting if status == Pod.PENDING and latest]
        payloads = dict(Decision.objects.filter(pk__in=ids).values_list("id", "payload")) if ids else {}
        tenants = card_tenants(
            uuid for payload in payloads.values() for uuid in explain.card_tenant_uuids(payload)
        )
        for ref, _status, text, latest in waiting:
            if not self.is_leader():
                return
            payload = payloads.get(latest)
            if payload:
                text = explain.failed_scheduling_message(payload, text, MAX_MESSAGE, tenants)
            self.events.failed_scheduling(ref, text)


def _names_claim(pod: dict, claim: tuple[str, str]) -> bool:
    """Whether the pod names the ResourceClaim `claim` ((namespace, name)), by name or as its
    template's claim; a pod whose claims do not read names none."""
    if (pod_objects.key_of(pod)[0] or "default") != (claim[0] or "default"):
        return False
    try:
        return any(name == claim[1] for _, name in dra_claim_names(pod))
    except DraUnsupported:
        return False


def _decode(allocated: str) -> list[list[str]]:
    try:
        return [[uuid for uuid, _, _ in cards] for cards in decode_allocation(allocated or "")]
    except ScenarioError:
        return []
