"""Kubernetes objects into the scheduler's tables, through `scheduling.services` only.

`PodSync` queues pods that ask for our scheduler and have no node yet, and gives the
cards back when a pod ends (Succeeded/Failed) or is deleted. `NodeSync` turns HAMi's node
annotations into inventory reports. Both only write while `may_write()` says so (this
instance leads), and a bad object is skipped, never fatal.

Every object read either enters or is refused out loud (`Refusals`): an `object_refused`
Event naming the field (REST API, dashboard), a Warning Event on the object in Kubernetes
when the agent writes events, a log line once per distinct reason.

The watch thread, the resync and the binder may act on the same pod at once. No lock in
this process orders them: every write names the incarnation it means (`expected_uid`),
and a submission itself releases an earlier incarnation's cards when a new uid arrives, so
each write is checked against the row as locked in the database.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from django.db import DataError

from scheduling import services
from scheduling.engine import PodInvalid, ScenarioError
from scheduling.engine.annotations import group_ref
from scheduling.models import Event, Pod, record_event
from scheduling.services.pods import GROUP_KEY, WriteOutcome
from scheduling.storable import printable, why_unstorable

from . import nodes as node_objects
from . import pods as pod_objects
from .api import ApiError, ApiUnavailable, KubeApi
from .drastate import CYCLE, DraState
from .events import ACTOR, EventRecorder, PodRef
from .informer import Handler
from .owners import OwnerGangs, OwnerInvalid, OwnerUnavailable
from .volumes import Volumes

log = logging.getLogger("hamiadmin.kube.sync")

ACTIVE = (Pod.PENDING, Pod.SCHEDULED, Pod.RUNNING, Pod.REJECTED)
#: Pods a resync queues per transaction (`services.submit_pods`).
QUEUE_BATCH = 500
#: `Event.reason` (and the Kubernetes Warning's reason) of a refused pod / node.
POD_REFUSED, NODE_REFUSED = "PodInvalid", "InventoryInvalid"
#: `Event.reason` of a pod whose owners cannot be read into a gang (kube/owners.py), and the
#: Normal event of a pod whose controller is of a kind no gang is read from.
OWNER_REFUSED, NO_GANG = "OwnerInvalid", "NoGangFromOwner"
#: Node fields whose fault leaves no row to mark not ready: its name, or annotations that are
#: not even an object (it cannot be told whether it is a HAMi node at all).
UNMARKED = (node_objects.NAME, "metadata.annotations")


def always() -> bool:
    return True


class Refusals:
    """Objects that cannot enter the scheduler's tables, said out loud: an `object_refused`
    Event (counted per subject and reason, so a resync every 20 s adds to one row), a Warning
    Event on the object when `events` is given (watcher mode; the extender agent writes no
    events), and a log line once per distinct message."""

    def __init__(self, events: EventRecorder | None = None):
        self.events = events
        self.logged: dict[str, str] = {}  # subject -> message last logged

    def refuse(self, subject: str, reason: str, message: str, ref: PodRef | None = None) -> None:
        subject, message = printable(subject), printable(message, limit=1000)
        if self.logged.get(subject) != message:
            if len(self.logged) > 10_000:
                self.logged.clear()
            log.warning("%s refused: %s", subject, message)
            self.logged[subject] = message
        record_event(Event.OBJECT_REFUSED, subject, reason, message, actor=ACTOR)
        if self.events is not None and ref is not None:
            self.events.record(ref, "Warning", reason, message)

    def accepted(self, subject: str) -> None:
        if self.logged.pop(printable(subject), None) is not None:
            log.info("%s accepted again", subject)


def _clean(*texts) -> bool:
    """Whether all are non-empty strings Kubernetes and the database can both take (for the
    object reference of a Warning Event)."""
    return all(isinstance(text, str) and text and not why_unstorable(text) for text in texts)


class PodSync(Handler):
    """Pods of our scheduler names, queued and released; or (`queue_pods` off, extender mode)
    every pod, only released when it ends."""

    def __init__(
        self,
        api: KubeApi,
        scheduler_name: str | tuple[str, ...],
        may_write: Callable[[], bool] = always,
        on_release: Callable[[str], None] | None = None,
        queue_pods: bool = True,
        events: EventRecorder | None = None,
    ):
        self.api = api
        #: the `spec.schedulerName`s served (`HAMI_SCHEDULER_NAMES`)
        self.scheduler_names = (scheduler_name,) if isinstance(scheduler_name, str) else tuple(scheduler_name)
        #: gangs from the pods' top controllers (watcher mode); None: not looked for
        self.owners: OwnerGangs | None = None
        #: KAI's PodGroup objects by (namespace, name), once their CRD is read: a pod naming one
        #: with `pod-group-name` takes the object's figures, not its owner's
        self.kai_group: Callable[[str, str], dict | None] | None = None
        #: Whether the Workload API's PodGroups are read (`KubeAgent`): a group a pod names in
        #: `spec.schedulingGroup` before its object is read then waits for it.
        self.workload_groups_read = False
        self.queue_pods = queue_pods
        self.may_write = may_write
        self.on_release = on_release or (lambda uid: None)
        self.refusals = Refusals(events)
        #: the claims, volumes and classes a pod's volumes are judged against (watcher mode);
        #: None: pods' volumes are not judged (`pods.submission`)
        self.volumes: Volumes | None = None
        #: the DRA informers' state (watcher mode with `HAMI_DRA`): pods with claims are asked
        #: for through it (`kube.drastate`); None: such pods are left to the DRA pass or wait
        self.dra: DraState | None = None

    # -- informer callbacks ---------------------------------------------------------------

    def changed(self, kind: str, obj: dict) -> None:
        if not self.may_write():
            return
        if kind == "DELETED":
            self.release(obj, Pod.DELETED)
        else:
            self.apply(obj)

    def synced(self, objects: list[dict], listed: bool) -> None:
        """Apply every pod that needs a write (one query tells which); after a real list,
        also release pods that vanished unseen."""
        if not self.may_write():
            return
        active = {
            (namespace, name): (uid, digest, status, node)
            for namespace, name, uid, digest, status, node in Pod.objects.filter(
                status__in=ACTIVE
            ).values_list("namespace", "name", "uid", "spec_hash", "status", "node__name")
        }
        seen = set()
        waiting = []
        for obj in objects:
            key = pod_objects.key_of(obj)
            try:
                seen.add(key)
                if self.up_to_date(obj, active.get(key)):
                    continue
                if self.to_queue(obj):
                    waiting.append(obj)
                    continue
                self.apply(obj)
            except Exception:  # noqa: BLE001 - one pod must not stop the others
                log.exception("pod %s could not be applied", pod_objects.subject_of(obj))
        for start in range(0, len(waiting), QUEUE_BATCH):
            self.queue_batch(waiting[start : start + QUEUE_BATCH])
        if listed:
            self.release_vanished(seen)

    def up_to_date(self, obj: dict, row: tuple | None) -> bool:
        """Whether `apply` would write nothing, judged from the pod and its active row (or None)."""
        same_pod = row is not None and row[0] == pod_objects.uid_of(obj)
        if pod_objects.final_status(obj):
            return not same_pod  # nothing active to release
        node = pod_objects.node_of(obj)
        if node:
            return (
                row is None
                or not same_pod
                or row[2] not in Pod.BOUND
                or (row[2] == Pod.RUNNING and row[3] == node)
            )
        if not self.queue_pods or pod_objects.scheduler_of(obj) not in self.scheduler_names:
            return True
        if row is None or not same_pod:
            return False
        try:
            wanted = pod_objects.submission(obj, volumes=self.volumes, dra=self.dra)
        except PodInvalid:
            return False  # `apply` records the refusal
        return row[1] == services.spec_hash(
            wanted["annotations"],
            wanted["containers"],
            wanted["init_containers"],
            wanted["priority"],
            labels=wanted["labels"],
            scheduling=wanted["scheduling"],
        )

    # -- the rules ------------------------------------------------------------------------

    def row_for(self, obj: dict) -> Pod | None:
        """The Pod row of this very pod (same namespace, name and uid), or None."""
        namespace, name = pod_objects.key_of(obj)
        if not _clean(namespace, name):
            return None  # no row can have such a name: it was refused, never stored
        row = Pod.objects.select_related("node").filter(namespace=namespace, name=name).first()
        if row is None:
            return None
        uid = pod_objects.uid_of(obj)
        if row.uid and uid and row.uid != uid:
            return None
        return row

    def to_queue(self, obj: dict) -> bool:
        """Whether `apply` would queue the pod: not ended, no node yet, asking for our scheduler,
        and, for a pod with claims and no device-plugin GPU, one the cycle places
        (`DraState.asks`; the DRA pass, `kube.dra`, places the others). A pod asking an
        extended resource (`nvidia.com/gpu`) is queued either way: as a device-plugin pod, or,
        with `HAMI_DRA` and a DeviceClass of ours mapping it, asking DRA devices (`submission`)."""
        if (
            pod_objects.final_status(obj)
            or pod_objects.node_of(obj)
            or not self.queue_pods
            or pod_objects.scheduler_of(obj) not in self.scheduler_names
        ):
            return False
        if pod_objects.spec(obj).get("resourceClaims") and not pod_objects.asks_gpu(obj):
            return self.dra is not None and self.dra.asks(obj).get("path") == CYCLE
        return True

    def dra_extended(self, obj: dict) -> bool:
        """Whether the pod asks extended resources a DeviceClass of ours maps (KEP-5004)."""
        return self.dra is not None and bool(self.dra.extended(obj))

    def apply(self, obj: dict) -> None:
        ended = pod_objects.final_status(obj)
        if ended:
            self.release(obj, ended)
            return
        node = pod_objects.node_of(obj)
        if not node:
            if self.to_queue(obj):
                self.ungate(obj)
                self.queue(obj)
            return
        row = self.row_for(obj)
        if row is None or row.status not in Pod.BOUND:
            return
        if row.node is not None and row.node.name == node:
            if row.status == Pod.SCHEDULED:
                services.mark_bound(row, node, expected_uid=row.uid)
        else:
            log.warning(
                "pod %s is on node %s but its cards were placed on %s; giving them back",
                row.key,
                node,
                row.node,
            )
            self._release_row(row, Pod.FAILED)

    def ungate(self, obj: dict) -> None:
        """Gates only ever go: when the pod shows fewer than its waiting row holds, tell the
        row (`services.set_scheduling_gates`), so a pod whose gates all went is tried at once."""
        row = self.row_for(obj)
        if row is None or row.status != Pod.PENDING or not row.gated:
            return
        gates = pod_objects.gates_of(obj)
        if len(gates) < len(row.gate_names):
            try:
                services.set_scheduling_gates(row, gates, expected_uid=row.uid)
            except PodInvalid:
                pass  # the submission that follows stores it parked, naming the field

    def queue(self, obj: dict) -> None:
        """Queue (or update) the pod, or record it refused (`queue_many`)."""
        self.queue_many([obj])

    def queue_batch(self, objs: list[dict]) -> None:
        """`queue_many`, and should the batch fail as a whole (what no refusal covers), each
        pod alone, so one pod never keeps the others out."""
        try:
            self.queue_many(objs)
        except Exception:  # noqa: BLE001 - one pod must not stop the others
            log.exception("a batch of %d pods could not be queued; queueing them one by one", len(objs))
            for obj in objs:
                try:
                    self.queue(obj)
                except Exception:  # noqa: BLE001
                    log.exception("pod %s could not be applied", pod_objects.subject_of(obj))

    def queue_many(self, objs: list[dict]) -> None:
        """Queue (or update) these pods in one transaction (`services.submit_pods`), each
        refused on its own (`refuse`) when it cannot be read or stored. A row holding another
        uid is an earlier pod of that name, deleted unseen: the submission releases its cards
        as it starts the new incarnation, and `on_release` hears of the earlier uid."""
        arguments, read = [], []
        for obj in objs:
            try:
                asked = pod_objects.submission(obj, volumes=self.volumes, dra=self.dra)
            except PodInvalid as exc:
                self.refuse(obj, str(exc))
                continue
            try:
                arguments.append(self.with_owner_gang(obj, asked))
            except OwnerInvalid as exc:
                self.refuse(obj, f"no gang from its owners: {exc}", OWNER_REFUSED)
                continue
            except OwnerUnavailable as exc:
                log.warning(
                    "pod %s not queued yet, its owners not read: %s", pod_objects.subject_of(obj), exc
                )
                continue
            read.append(obj)
        if not arguments:
            return
        results = services.submit_pods(arguments, validate=False, origin=Pod.KUBERNETES)
        for obj, asked, done in zip(read, arguments, results, strict=True):
            if done.outcome == WriteOutcome.REFUSED:
                self.refuse(obj, str(done.error))
                continue
            self.refusals.accepted(pod_objects.subject_of(obj))
            earlier, uid = done.previous_uid, asked["uid"]
            if earlier and uid and earlier != uid:
                log.info(
                    "pod %s/%s: uid %s replaced by %s; the earlier one's cards are released",
                    asked["namespace"],
                    asked["name"],
                    earlier,
                    uid,
                )
                self.on_release(earlier)

    def with_owner_gang(self, obj: dict, asked: dict) -> dict:
        """The submission with the gang of the pod's top controller (`kube.owners`), unless the
        pod names a group itself (annotations, labels, a Workload's group win) or the rule is
        off. Raises OwnerInvalid, OwnerUnavailable."""
        group = asked.get(GROUP_KEY)
        if group is not None and group.source == "workload" and self.workload_groups_read:
            return {**asked, GROUP_KEY: replace(group, unknown_size=True)}
        if self.owners is None or group is not None:
            return asked
        try:
            named = group_ref(asked["annotations"], asked["labels"])
        except PodInvalid:
            return asked  # stored as written: the cycle parks it naming the field
        if named is not None and not (named.source == "kai" and named.min_member is None):
            return asked
        if named is not None and self.kai_group is not None:
            namespace = pod_objects.meta(obj).get("namespace") or "default"
            if self.kai_group(namespace, named.name) is not None:
                return asked  # KAI's own PodGroup object sizes the gang (kube/groups.py)
        found = self.owners.gang_of(obj)
        if found is not None and named is not None:  # KAI names the gang, the owner sizes it
            found = replace(found, name=named.name, source=named.source)
        return {**asked, GROUP_KEY: found} if found is not None else asked

    def unknown_owner(self, obj: dict, message: str) -> None:
        """The pod's controller is of a kind no gang is read from: a Normal event says so
        (watcher mode), the pod is queued on its own."""
        namespace, name = pod_objects.key_of(obj)
        uid = pod_objects.uid_of(obj)
        if self.refusals.events is not None and _clean(namespace, name):
            ref = PodRef(namespace, name, uid if _clean(uid) else "")
            self.refusals.events.record(ref, "Normal", NO_GANG, printable(message, limit=1000))

    def refuse(self, obj: dict, message: str, reason: str = POD_REFUSED) -> None:
        """The pod cannot be queued as it is: say so until it changes (it is tried again on
        every change and resync). A row of an earlier spec of it, if any, is left as it was."""
        namespace, name = pod_objects.key_of(obj)
        uid = pod_objects.uid_of(obj)
        ref = PodRef(namespace, name, uid if _clean(uid) else "") if _clean(namespace, name) else None
        self.refusals.refuse(pod_objects.subject_of(obj), reason, message, ref)

    def release(self, obj: dict, final_status: str) -> None:
        row = self.row_for(obj)
        if row is not None and row.status in ACTIVE:
            self._release_row(row, final_status)

    def _release_row(self, row: Pod, final_status: str) -> None:
        """Release this incarnation only: if the row has moved on to another uid meanwhile,
        nothing is written."""
        if services.release_pod(row, final_status, expected_uid=row.uid) is None:
            log.info("pod %s: not released, the row now holds another pod of this name", row.key)
            return
        log.info("pod %s %s: its cards are released", row.key, final_status)
        self.on_release(row.uid)

    def release_vanished(self, seen: set[tuple[str, str]]) -> None:
        """Active rows of Kubernetes pods (origin `kubernetes` or `extender`) missing from a
        full list: ask the API server about each; release those that are gone, replaced or
        ended. Pods submitted through the REST API are never touched, uid or not; a pod that
        merely does not match this list's selector (another scheduler's) is left alone."""
        candidates = (
            Pod.objects.filter(status__in=ACTIVE, origin__in=(Pod.KUBERNETES, Pod.EXTENDER))
            .exclude(uid="")
            .values_list("namespace", "name", "uid")
        )
        for namespace, name, uid in candidates:
            if (namespace, name) in seen:
                continue
            try:
                current = self.api.get_pod(namespace, name)
            except ApiError as exc:
                if exc.status != 404:
                    log.warning("pod %s/%s: %s", namespace, name, exc)
                    continue
                current = None
            except ApiUnavailable as exc:
                log.warning("pod %s/%s not checked: %s", namespace, name, exc)
                return
            if current is None or pod_objects.uid_of(current) != uid:
                row = Pod.objects.filter(namespace=namespace, name=name, uid=uid).first()
                if row is not None and row.status in ACTIVE:
                    self._release_row(row, Pod.DELETED)
            else:
                self.apply(current)


class NodeSync(Handler):
    """Nodes with `hami.io/node-nvidia-register`: report their cards (and beat their heart)."""

    def __init__(self, may_write: Callable[[], bool] = always, events: EventRecorder | None = None):
        self.may_write = may_write
        self.invalid: dict[str, str] = {}  # node -> why, logged once per distinct reason
        self.refusals = Refusals(events)
        #: the DRA informers' state (`HAMI_DRA`): a node's DRA devices are reported as its cards
        self.dra: DraState | None = None
        #: nodes last reported with DRA devices (so losing them all is reported too)
        self.dra_nodes: set[str] = set()

    def changed(self, kind: str, obj: dict) -> None:
        if not self.may_write():
            return
        if kind == "DELETED":
            name = node_objects.name_of(obj)
            if node_objects.has_register(obj) and _clean(name):
                self.not_ready(name, "the node was deleted from Kubernetes")
            return
        self.apply(obj)

    def synced(self, objects: list[dict], listed: bool) -> None:
        if not self.may_write():
            return
        for obj in objects:
            try:
                self.apply(obj)
            except Exception:  # noqa: BLE001 - one node must not stop the others
                log.exception("node %s could not be applied", node_objects.name_of(obj))

    def apply(self, obj: dict) -> None:
        name = node_objects.name_of(obj)
        dra_devices, dra_marks = self.dra.node_report(name) if self.dra is not None else ([], {})
        try:
            found = node_objects.inventory(obj)
            if found is None and (dra_devices or name in self.dra_nodes):
                found = node_objects.plain_inventory(obj)
        except node_objects.InventoryInvalid as exc:
            self.refuse(obj, f"malformed {exc.where}: {exc.message}", mark=exc.where not in UNMARKED)
            return
        if found is None:
            return
        marks = None
        if found.devices and dra_devices:
            if self.invalid.get(f"dra:{name}") is None:
                log.warning(
                    "node %s: HAMi's device plugin registers its cards and a DRA driver publishes "
                    "devices; HAMi runs one mode per cluster, so the DRA devices are left out",
                    name,
                )
                self.invalid[f"dra:{name}"] = "both"
        elif not found.devices and (dra_devices or name in self.dra_nodes):
            found.devices, marks = dra_devices, dra_marks
            if dra_devices:
                self.dra_nodes.add(name)
            else:
                self.dra_nodes.discard(name)
        if not node_objects.is_ready(obj):
            self.not_ready(name, "Kubernetes reports the node NotReady")
            return
        try:
            services.report_inventory(
                found.name,
                found.labels,
                found.annotations,
                found.devices,
                taints=found.taints,
                unschedulable=found.unschedulable,
                allocatable=found.allocatable,
                dra=marks,
            )
        except ScenarioError as exc:
            self.refuse(obj, f"inventory refused: {exc}")
            return
        except DataError as exc:  # what the reader missed: still said out loud
            self.refuse(obj, f"inventory refused by the database: {exc}")
            return
        self.refusals.accepted(node_objects.subject_of(obj))
        if self.invalid.pop(name, None) is not None:
            log.info("node %s: inventory valid again", name)

    def refuse(self, obj: dict, why: str, mark: bool = True) -> None:
        """Record the node refused and keep new pods off it (`not_ready`), unless its very name
        is at fault (no row can hold it) or it cannot be told to be a HAMi node (`UNMARKED`)."""
        name = node_objects.name_of(obj)
        uid = node_objects.metadata_of(obj).get("uid")
        ref = (
            PodRef("default", name, uid if isinstance(uid, str) and _clean(uid) else "", kind="Node")
            if _clean(name)
            else None
        )
        self.refusals.refuse(node_objects.subject_of(obj), NODE_REFUSED, why, ref)
        if mark and _clean(name) and len(name) <= 253:
            self.not_ready(name, why)

    def not_ready(self, name: str, why: str) -> None:
        """Keep new pods off the node (tenants stay) and say why, once per distinct reason."""
        if self.invalid.get(name) != why:
            log.warning("node %s: %s; it takes no new pods", name, why)
        self.invalid[name] = why
        services.mark_node_not_ready(name, why)
