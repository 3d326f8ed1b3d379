"""Dynamic Resource Allocation against the API server: read `resource.k8s.io/v1`, place the
pods whose claims ask for DRA devices, write each claim's allocation, then bind.

The calls are `kube.api`'s (`DRA_CALLS`, each with its RBAC grant). `DraCycle.run_once` is one
pass, run by the agent's loop with `HAMI_DRA` (watcher mode): list the slices, classes, taint
rules and claims, then the pods; take the pods that are gone out of `reservedFor`; decide the
pending pods of our scheduler names that have `spec.resourceClaims` with
`scheduling.engine.dra.DraAllocator` (the engine's chain on DRA cards; one ledger of every
allocated claim), a gang's members all or nothing (a Workload API PodGroup's members are one
gang; a claim of the PodGroup's `spec.resourceClaims`, KEP-5729, is allocated once for them
and reserved for the PodGroup until it is gone), and a pod that does not fit preempting
claim pods of lower priority; for each placed pod PATCH each claim's `status` (allocation
results with `consumedCapacity`, config, the node's `nodeSelector`, `reservedFor` the pod)
carrying the resourceVersion listed, and only then the Binding. A 409 on a claim means it
changed since the list: what the pod (or its gang) wrote is taken back and the pass plans
again from a fresh list (up to `replans` times). A pod that cannot be placed gets
`PodScheduled=False` with the reason code, its words and a hint, and (with the agent's
recorder) a FailedScheduling Event; placed pods a Scheduled one, preemptions Preempting and
Preempted ones, as the watcher writes them.

The pods whose claims one scheduling decision can place go through the cycle instead
(`kube.drastate`): the agent sets `takes` so this pass only places the others (several
`firstAvailable` subrequests, attribute constraints, partitions, pods that only join
allocated claims). It keeps no rows; what the cycle placed and has not bound yet counts here
as held (`placed_unbound`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

from scheduling import services
from scheduling.engine import ClusterConfig
from scheduling.engine.annotations import queue_ref
from scheduling.engine.batch.jobs import NOT_ENOUGH_PODS
from scheduling.engine.dra import DEFAULT_DRIVERS, DraAllocator, DraPlacement, read_inventory
from scheduling.engine.dra.allocate import (
    NOT_CAPACITY,
    PODGROUPS,
    WORKLOAD_GROUP,
    held,
    priority_of,
    tenants_of,
    units,
)
from scheduling.engine.dra.claims import QUOTA_UNSUPPORTED, REASON_WORDS
from scheduling.engine.errors import PodInvalid
from scheduling.engine.families.dra import MODE as DRA_MODE
from scheduling.models import Allocation, NamespaceQuota, Pod, Queue

from . import pods as pod_objects
from .api import DRA_CALLS, WORKLOAD_API, ApiError, ApiUnavailable, KubeApi, rules_for
from .draclaims import ClaimConflict, release_claim, undo_writes
from .events import MAX_MESSAGE, EventRecorder, PodRef
from .groups import GroupInvalid
from .workloads import workload_group_fields

log = logging.getLogger("hamiadmin.kube.dra")

#: The outcome of a pod whose claims were written but whose Binding was refused.
BIND_FAILED = "BindFailed"


#: The DRA pass's grants beyond the watcher's own pods, bindings, evictions and pods/status.
DRA_RBAC_RULES = rules_for(DRA_CALLS)


@dataclass
class DraOutcome:
    namespace: str
    name: str
    node: str | None
    reason: str = ""
    message: str = ""
    #: the node a preemption is clearing for the pod (`status.nominatedNodeName`)
    nominated: str = ""


#: How long a victim whose eviction was refused (a PodDisruptionBudget) is left alone.
REFUSED_SECONDS = 60.0
#: A pod whose victims were evicted and are still terminating.
PREEMPTING = "Preempting"


def placed_unbound(allocator: DraAllocator) -> tuple[list, frozenset[int]]:
    """What the scheduling cycle placed on DRA cards and the binder has not written to the
    claims yet (pods `scheduled`, not bound): counted by the pass as held, so the two never
    give one device's capacity twice. A pod whose claims were just written counts twice
    until it is bound, which only errs on the safe side. With it, in the same read, the ids of
    every active allocation on DRA cards (bound pods' too, counted through their claims): a
    placement of the pass is stored only if none landed on its cards since
    (`services.assume_bound_pod`), which closes the window between this read and its claims."""
    rows = Allocation.objects.filter(active=True, card__mode=DRA_MODE).values_list(
        "pk", "pod__status", "card__uuid", "memory", "cores"
    )
    held, seen = [], []
    for pk, status, uuid, memory, cores in rows:
        seen.append(pk)
        if status == Pod.SCHEDULED and uuid in allocator.by_uuid:
            held.append((allocator.by_uuid[uuid], memory, cores))
    return held, frozenset(seen)


def withdraw_queued(pods: list[dict]) -> set[tuple[str, str]]:
    """The pods the pass is to place that the watcher queued for the cycle before their claims
    said otherwise (a claim another waiting pod names too, or one allocated since): their
    waiting rows are withdrawn (ended as deleted; queued again should the claims say so), so
    the cycle and the pass never both place one pod. The pods the cycle placed already (the
    binder is on them) are returned: the pass leaves them this time."""
    keys = {pod_objects.key_of(pod): pod_objects.uid_of(pod) for pod in pods}
    if not keys:
        return set()
    rows = Pod.objects.filter(
        namespace__in={namespace for namespace, _ in keys},
        name__in={name for _, name in keys},
        status__in=(Pod.PENDING, Pod.SCHEDULED),
    )
    busy = set()
    for row in rows:
        key = (row.namespace, row.name)
        if key not in keys or (row.uid and keys[key] and row.uid != keys[key]):
            continue
        if row.status == Pod.SCHEDULED:
            busy.add(key)
        elif services.release_pod(row, Pod.DELETED, expected_uid=row.uid) is not None:
            log.info("pod %s/%s: handed from the cycle to the DRA pass", *key)
    return busy


def quota_holds(pod: dict) -> str:
    """Why a pod the pass would place must wait for the quotas it cannot count ("" when none
    binds it): the pass keeps no rows, so a namespace quota or a queue limit could not see what
    it placed. Such a pod waits, said, rather than slip past them (`QuotaUnsupported`)."""
    namespace = pod_objects.key_of(pod)[0] or "default"
    if NamespaceQuota.objects.filter(namespace=namespace).exists():
        return f"namespace {namespace} has a GPU quota"
    queues = list(Queue.objects.all())
    limited = {
        q.id for q in queues if (q.limit_vgpus, q.limit_gpumem, q.limit_gpucores) != (None, None, None)
    }
    if not limited:
        return ""
    labels = pod_objects.meta(pod).get("labels")
    try:
        named = queue_ref(pod_objects.annotations_of(pod), pod_objects.as_dict(labels))
    except PodInvalid:
        named = None
    if named is None:  # as the cycle resolves it: the namespace's queue, else `default`
        named = next((q.name for q in queues if namespace in (q.namespaces or [])), "default")
    by_id = {q.id: q for q in queues}
    queue = next((q for q in queues if q.name == named), None)
    while queue is not None:  # the queue, then its parents: a parent's limit bounds it too
        if queue.id in limited:
            return f"queue {queue.name} has a limit"
        queue = by_id.get(queue.parent_id) if queue.parent_id is not None else None
    return ""


def wants_dra(pod: dict) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


class DraCycle:
    """One pass over the pending DRA pods of `scheduler_names` (see the module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        scheduler_names: tuple[str, ...] = ("hami-scheduler",),
        drivers: tuple[str, ...] | None = None,
        config: ClusterConfig | None = None,
        replans: int = 3,
        events: EventRecorder | None = None,
    ):
        self.api = api
        #: FailedScheduling, Scheduled, Preempting and Preempted Events (the agent's recorder)
        self.events = events
        self.scheduler_names = scheduler_names
        if drivers is None:
            drivers = tuple(settings.HAMIADMIN.get("DRA_DRIVERS") or DEFAULT_DRIVERS)
        self.drivers = tuple(drivers)
        self.config = config
        self.replans = replans
        #: victims whose eviction was refused (uid -> monotonic time they may be tried again)
        self.refused: dict[str, float] = {}
        #: which pending pods this pass takes (the agent leaves it the pods the scheduling
        #: cycle cannot place, `kube.drastate`); None: every DRA pod of ours
        self.takes: Callable[[dict], bool] | None = None
        #: what others hold beyond the claims (the agent: `placed_unbound`, the cycle's
        #: placements not written to their claims yet), and the ids of the allocations it
        #: read (None: not checked again at `assume`); nothing when the pass runs alone
        self.held: Callable[[DraAllocator], tuple[list, frozenset[int] | None]] = lambda allocator: ([], None)
        #: the allocation ids the last `allocator` read counted (`held`)
        self.seen: frozenset[int] | None = None
        #: the pods to place that the cycle holds (the agent: `withdraw_queued`); none alone
        self.withdraw: Callable[[list[dict]], set[tuple[str, str]]] = lambda pods: set()
        #: a placed pod whose claims are written, before its Binding (the agent:
        #: `BoundPodSync.assume`, so the scheduling cycle counts its devices from then on),
        #: given the allocation ids `held` read; false when a cycle's placement landed on its
        #: cards since (the unit's claims are then taken back and it is planned again)
        self.assume: Callable[[dict, str, dict[str, dict], frozenset[int] | None], bool] = (
            lambda pod, node, claims, seen: True
        )
        #: the pods of a unit `assume` stored whose claims were then taken back: their rows go
        #: (the agent: `services.forget_bound_pods`)
        self.unassume: Callable[[list[dict]], object] = lambda items: None
        #: why a pod must wait for quotas the pass cannot count (the agent: `quota_holds`)
        self.quotas: Callable[[dict], str] = lambda pod: ""
        #: whether the Workload API serves PodGroups (discovery, asked until it does)
        self.podgroups_served = False
        #: the Workload API PodGroups listed with the claims; None when not served
        self.podgroups: list[dict] | None = None

    def allocator(self) -> DraAllocator:
        slices, _ = self.api.list_resource_slices()
        rules, _ = self.api.list_device_taint_rules()
        classes, _ = self.api.list_device_classes()
        claims, _ = self.api.list_resource_claims()
        nodes, _ = self.api.list_nodes()
        self.podgroups = self.list_podgroups()  # after the claims: a PodGroup they reserve is listed
        allocator = DraAllocator(
            read_inventory(slices, self.drivers, rules),
            {c["metadata"]["name"]: c for c in classes},
            {(c["metadata"].get("namespace", "default"), c["metadata"]["name"]): c for c in claims},
            self.config,
            nodes,
            {pod_objects.key_of(g): g for g in self.podgroups or []},
        )
        held, self.seen = self.held(allocator)
        allocator.hold(held)
        return allocator

    def within_quotas(self, pending: list[dict], outcomes: dict) -> list[dict]:
        """The pending pods no quota the pass cannot count binds (`quotas`); the others wait,
        `QuotaUnsupported` naming the quota."""
        kept = []
        for pod in pending:
            why = self.quotas(pod)
            if why:
                key = pod_objects.key_of(pod)
                outcomes[key] = DraOutcome(*key, None, QUOTA_UNSUPPORTED, why)
            else:
                kept.append(pod)
        return kept

    def list_podgroups(self) -> list[dict] | None:
        """The Workload API's PodGroups (`scheduling.k8s.io/v1beta1`), or None while discovery
        says they are not served (asked each pass until they are, as the agent's informers
        ask once): their members are one gang, and their `spec.resourceClaims` the gang's."""
        if not self.podgroups_served:
            try:
                served = self.api.served_resources(*WORKLOAD_API)
            except (ApiError, ApiUnavailable) as exc:
                log.info("discovery of %s/%s failed: %s", *WORKLOAD_API, exc)
                return None
            if not served or PODGROUPS not in served:
                return None
            self.podgroups_served = True
        try:
            found, _ = self.api.list_workload_podgroups()
        except ApiError as exc:
            if exc.status != 404:
                raise
            self.podgroups_served = False  # no longer served: discovery again next pass
            return None
        return found

    def minimums(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], str]]:
        """Each listed PodGroup's minimum (`kube.workloads.workload_group_fields`, as the cycle
        reads it: `gang.minCount`, 1 for `basic`, else its Workload template's), and why a
        PodGroup that cannot be read keeps its members waiting."""
        found: dict[tuple[str, str], int] = {}
        refused: dict[tuple[str, str], str] = {}
        workloads: list[dict] | None = None

        def workload_of(namespace: str, name: str) -> dict | None:
            nonlocal workloads
            if workloads is None:
                workloads, _ = self.api.list_workloads()
            return next((w for w in workloads if pod_objects.key_of(w) == (namespace, name)), None)

        for obj in self.podgroups or []:
            key = pod_objects.key_of(obj)
            try:
                found[key] = workload_group_fields(obj, workload_of)["min_member"]
            except GroupInvalid as exc:
                refused[key] = f"PodGroup {key[0]}/{key[1]} cannot be read: {exc}"
            except ApiError as exc:
                refused[key] = f"PodGroup {key[0]}/{key[1]}: its Workload could not be listed: {exc}"
        return found, refused

    def waiting_for_podgroup(
        self, pending: list[dict], minimums: dict, refused: dict, outcomes: dict
    ) -> list[dict]:
        """`pending` less the pods naming a Workload API PodGroup not listed (or unreadable)
        while the API is served: they wait for it, as kube-scheduler waits, with a reason."""
        if self.podgroups is None:
            return pending
        kept = []
        for pod in pending:
            try:
                ref = pod_objects.workload_group(pod)
            except PodInvalid:
                ref = None
            key = (pod_objects.key_of(pod)[0] or "default", ref.name if ref is not None else "")
            if ref is None or key in minimums:
                kept.append(pod)
                continue
            why = refused.get(key) or f"PodGroup {key[0]}/{key[1]} is not read yet: its members wait for it"
            outcomes[pod_objects.key_of(pod)] = DraOutcome(
                *pod_objects.key_of(pod), None, NOT_ENOUGH_PODS, why
            )
        return kept

    def pending(self, pods: list[dict]) -> list[dict]:
        """The DRA pods of our scheduler names to place, oldest first."""
        return sorted(
            (
                pod
                for pod in pods
                if wants_dra(pod)
                and pod_objects.scheduler_of(pod) in self.scheduler_names
                and not pod_objects.node_of(pod)
                and not pod_objects.gates_of(pod)
                and not pod_objects.final_status(pod)
                and not pod_objects.meta(pod).get("deletionTimestamp")
                and (self.takes is None or self.takes(pod))
            ),
            key=lambda pod: ((pod["metadata"].get("creationTimestamp") or ""), pod_objects.key_of(pod)),
        )

    def run_once(self) -> list[DraOutcome]:
        """Release the claims of pods gone; place, allocate and bind what fits now (a gang all
        or nothing, a pod that does not fit preempting lower-priority claim pods); the outcome
        of every pod tried."""
        outcomes: dict[tuple[str, str], DraOutcome] = {}
        for _ in range(self.replans + 1):
            allocator = self.allocator()
            everything, _ = self.api.list_pods()  # after the claims: a pod they reserve is listed
            pending = [
                pod
                for pod in self.pending(everything)
                if pod_objects.key_of(pod) not in outcomes or not outcomes[pod_objects.key_of(pod)].node
            ]
            busy = self.withdraw(pending)
            pending = [pod for pod in pending if pod_objects.key_of(pod) not in busy]
            if self.release_gone(everything, allocator):
                allocator = self.allocator()
            for pod, problem in allocator.beside(everything):
                log.warning("pod %s is not counted on its node: %s", pod.key, problem)
            pending = self.within_quotas(pending, outcomes)
            minimums, refused = self.minimums()
            pending = self.waiting_for_podgroup(pending, minimums, refused, outcomes)
            if not pending:
                break
            try:
                for gang, members, minimum in units(pending, everything, minimums):
                    if gang:
                        placements = allocator.place_gang(members, minimum, gang)
                    else:
                        placements = [self.place_or_preempt(allocator, members[0], everything, outcomes)]
                    self.commit(allocator, [p for p in placements if p.placed], outcomes, members)
                    for placement in placements:
                        key = (placement.namespace, placement.name)
                        waiting = outcomes.get(key)
                        if not placement.placed and (waiting is None or waiting.reason != PREEMPTING):
                            outcomes[key] = DraOutcome(*key, None, placement.reason, placement.message)
            except ClaimConflict as exc:
                log.info("%s; planning again", exc)
                continue
            break
        for outcome in outcomes.values():
            if outcome.node is None:
                self.report(outcome)
        return list(outcomes.values())

    def place_or_preempt(
        self, allocator: DraAllocator, pod: dict, everything: list[dict], outcomes: dict
    ) -> DraPlacement:
        """The pod's placement; when it does not fit for want of capacity, the lower-priority
        claim pods it preempts are evicted and, once gone, their claims released first. While
        a victim is still terminating the pod waits (`Preempting`, nominated to the node)."""
        placement = allocator.place(pod)
        if placement.placed or placement.reason in NOT_CAPACITY:
            return placement
        listed = dict(allocator.claims)  # with the resourceVersions the releases carry
        now = time.monotonic()
        tenants = [
            t
            for t in tenants_of(everything, allocator.claims, allocator.inventory)
            if self.refused.get(t.uid, 0.0) <= now
        ]
        preempted, victims = allocator.preempt(pod, tenants)
        if not victims:
            return placement
        still = []
        preemptor = PodRef(placement.namespace, placement.name, placement.uid)
        for victim in victims:
            log.info(
                "pod %s/%s preempts %s on %s", placement.namespace, placement.name, victim.key, victim.node
            )
            devices = sorted({f"{d.pool}/{d.name}" for d, _, _ in victim.holdings})
            try:
                self.api.evict_pod(victim.namespace, victim.name, victim.uid)
                if self.events is not None:
                    self.events.preempting(preemptor, victim.key, victim.node, devices)
                    self.events.preempted(
                        PodRef(victim.namespace, victim.name, victim.uid),
                        f"{placement.namespace}/{placement.name}",
                        devices,
                        f"priority {victim.priority} below {priority_of(pod)}",
                    )
                self.api.get_pod(victim.namespace, victim.name)
                still.append(victim.key)
            except ApiError as exc:
                if exc.status != 404:  # a disruption budget (429) or another refusal: not again soon
                    self.refused[victim.uid] = now + REFUSED_SECONDS
                    if self.events is not None:
                        self.events.preemption_refused(preemptor, victim.key, str(exc))
                    still.append(f"{victim.key} ({exc})")
                    continue
            for name in victim.claims:
                release_claim(
                    self.api, victim.namespace, name, listed[(victim.namespace, name)], {victim.uid}
                )
        if still or not preempted.placed:
            node = victims[0].node
            key = (placement.namespace, placement.name)
            outcomes[key] = DraOutcome(
                *key, None, PREEMPTING, f"preempting on {node}: waiting for {', '.join(still)} to go", node
            )
            raise ClaimConflict(f"pod {key[0]}/{key[1]}: victims evicted")
        return preempted

    def forget(self, placements: list[DraPlacement]) -> None:
        """Take back what `assume` stored for these placements (their claims were undone)."""
        items = [{"namespace": p.namespace, "name": p.name, "uid": p.uid or ""} for p in placements]
        try:
            self.unassume(items)
        except Exception:  # noqa: BLE001 - the pods stay counted until the next resync: safe
            log.exception("the pods of a unit taken back stay counted until the next resync")

    def commit(
        self,
        allocator: DraAllocator,
        placements: list[DraPlacement],
        outcomes: dict,
        pods: Sequence[dict] = (),
    ) -> None:
        """Write the claims of every placement, then bind each: a gang's members are all
        allocated before any is bound, and a 409 takes back every write of the unit. Between
        the two, each placed pod of `pods` is told to `assume` (counted as placed from now)."""
        done: list[tuple[str, list[tuple[str, dict]]]] = []
        answers: list[dict[str, dict]] = []
        for placement in placements:
            try:
                written, undo = self.allocate(placement, allocator)
            except ClaimConflict:
                for namespace, writes in reversed(done):  # the last write first
                    undo_writes(self.api, namespace, writes)
                raise
            done.append((placement.namespace, undo))
            answers.append(written)
            allocator.record(placement, written)
        by_key = {pod_objects.key_of(pod): pod for pod in pods}
        for placement, written in zip(placements, answers, strict=True):
            pod = by_key.get((placement.namespace, placement.name))
            if pod is None or placement.node is None:
                continue
            try:
                stored = self.assume(pod, placement.node, written, self.seen)
            except Exception:  # noqa: BLE001 - the watch event stores it once bound
                log.exception(
                    "pod %s/%s: not counted before its binding", placement.namespace, placement.name
                )
                continue
            if not stored:  # a cycle placed on its cards after this pass read them
                for namespace, writes in reversed(done):  # the last write first
                    undo_writes(self.api, namespace, writes)
                self.forget(placements)
                raise ClaimConflict(
                    f"pod {placement.namespace}/{placement.name}: the scheduling cycle placed on"
                    f" its devices on {placement.node} since this pass read them"
                )
        for placement in placements:
            key = (placement.namespace, placement.name)
            try:
                self.api.bind_pod(placement.namespace, placement.name, placement.uid, placement.node or "")
            except ApiError as exc:  # the claims stay reserved for it: the next pass binds it there
                log.warning("pod %s/%s: binding to %s failed: %s", *key, placement.node, exc)
                outcomes[key] = DraOutcome(
                    *key, None, BIND_FAILED, f"binding to {placement.node} failed: {exc}"
                )
                continue
            outcomes[key] = DraOutcome(*key, placement.node)
            if self.events is not None:
                devices = [
                    f"{r['pool']}/{r['device']}" for found in placement.results.values() for r in found
                ]
                ref = PodRef(placement.namespace, placement.name, placement.uid)
                self.events.scheduled(ref, placement.node or "", devices)
                self.events.forget(placement.uid)

    def release_gone(self, pods: list[dict], allocator: DraAllocator) -> bool:
        """Take the pods that are gone (or ended) out of `reservedFor` of the claims allocated
        on our drivers' devices, deallocating a claim left to nobody, as kube-controller-manager
        does: so a preemption's freed capacity is seen at once. A claim reserved for a Workload
        API PodGroup (KEP-5729) stays while the PodGroup exists, whatever its pods do; once the
        PodGroup is gone it is taken out too (never while PodGroups are not listed). Whether
        anything was written."""
        present = {pod_objects.uid_of(pod) for pod in pods if not pod_objects.final_status(pod)}
        groups = None if self.podgroups is None else {pod_objects.uid_of(g) for g in self.podgroups}
        wrote = False
        for (namespace, name), claim in allocator.claims.items():
            if not held(allocator.inventory, [claim]):
                continue
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            gone = {
                r.get("uid") for r in reserved if r.get("resource") == "pods" and r.get("uid") not in present
            } | {
                r.get("uid")
                for r in reserved
                if groups is not None
                and r.get("apiGroup") == WORKLOAD_GROUP
                and r.get("resource") == PODGROUPS
                and r.get("uid") not in groups
            }
            if gone:
                wrote = release_claim(self.api, namespace, name, claim, gone) or wrote
        return wrote

    def allocate(
        self, placement: DraPlacement, allocator: DraAllocator
    ) -> tuple[dict[str, dict], list[tuple[str, dict]]]:
        """Write each claim's status with the resourceVersion last seen (listed, or as this pass
        wrote it for an earlier pod of the same gang sharing the claim): the claims as written,
        and what to write to take them back. On a 409 take back what this pod wrote (the
        allocation it set, its `reservedFor` entry) and raise ClaimConflict."""
        assert placement.claims is not None
        written: list[tuple[str, dict]] = []
        answers: dict[str, dict] = {}
        for name, claim in placement.claims.claims.items():
            seen = allocator.claims.get((placement.namespace, name), claim)
            status = placement.status(name, allocator.classes)
            if "allocation" not in status and status["reservedFor"] == (seen.get("status") or {}).get(
                "reservedFor"
            ):
                answers[name] = seen  # reserved for it already (its PodGroup's claim): no write
                continue
            patch = {
                "metadata": {"resourceVersion": seen["metadata"]["resourceVersion"]},
                "status": status,
            }
            try:
                answers[name] = self.api.patch_resource_claim_status(placement.namespace, name, patch)
            except ApiError as exc:
                if exc.status not in (409, 422):
                    raise
                undo_writes(self.api, placement.namespace, written)
                raise ClaimConflict(f"resourceclaim {name}: {exc}") from exc
            written.append((name, claim.get("status") or {}))
        return answers, written

    def report(self, outcome: DraOutcome) -> None:
        """`PodScheduled=False`, reason Unschedulable: the DRA reason code, what it means, the
        details and the hint (`REASON_WORDS`); `nominatedNodeName` while preempting."""
        words, hint = REASON_WORDS.get(outcome.reason, ("", ""))
        text = (
            f"{outcome.reason}: {words + ': ' if words else ''}{outcome.message}{'. ' + hint if hint else ''}"
        )
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": text[:1024],
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        try:
            current = self.api.get_pod(outcome.namespace, outcome.name)
            if self.events is not None:
                uid = str(current["metadata"].get("uid") or "")
                self.events.failed_scheduling(
                    PodRef(outcome.namespace, outcome.name, uid), text[:MAX_MESSAGE]
                )
            others = [
                c
                for c in (current.get("status") or {}).get("conditions") or []
                if c.get("type") != "PodScheduled"
            ]
            self.api.patch_pod_status(
                outcome.namespace,
                outcome.name,
                {
                    "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                    "status": {
                        "conditions": [*others, condition],
                        **({"nominatedNodeName": outcome.nominated} if outcome.nominated else {}),
                    },
                },
            )
        except ApiError as exc:
            log.info("pod %s/%s: condition not written: %s", outcome.namespace, outcome.name, exc)
