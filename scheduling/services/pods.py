"""Pods: submission, release, binding marks and requeues, and what follows a change of
capacity (`capacity_changed`: wake the backed-off pods after the commit, ask for a cycle).
Locks the pod first, then the cards its allocations hold, by primary key
(docs/architecture.md, "Lock order").
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from functools import partial

from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduling.dbretry import retry_on_conflict
from scheduling.engine import PodInvalid, PodSpec
from scheduling.engine.batch import GroupRef, group_ref, queue_ref
from scheduling.engine.pod import parse_pod
from scheduling.models import INT32_MAX, Allocation, Card, Pod, PodGroup, Queue, SchedulerConfig
from scheduling.models.cluster import over_capacity_text
from scheduling.pipeline.triggers import request_cycle

ORIGIN_VALUES = tuple(value for value, _ in Pod.ORIGINS)
FINAL_STATUSES = (Pod.DELETED, Pod.SUCCEEDED, Pod.FAILED)


@retry_on_conflict
def wake_pending_pods(but: int | None = None) -> int:
    """Capacity changed: every backed-off pending pod may be tried at once.

    Its own transaction, holding nothing else: the pods are locked in primary-key order,
    as the cycle commit locks them, so a wake and a commit wait for each other at worst."""
    with transaction.atomic():
        backed_off = Pod.objects.filter(status=Pod.PENDING, parked=False, next_attempt_at__isnull=False)
        if but is not None:
            backed_off = backed_off.exclude(pk=but)
        pks = list(backed_off.select_for_update(no_key=True).order_by("pk").values_list("pk", flat=True))
        if not pks:
            return 0
        return backed_off.filter(pk__in=pks).update(next_attempt_at=None)


def capacity_changed(reason: str) -> None:
    """After the commit: wake backed-off pods, then ask for a cycle. Never inside the
    writer's transaction, which holds card or node locks (the lock order: `scheduling.services`)."""
    transaction.on_commit(wake_pending_pods, robust=True)
    request_cycle(reason)


def spec_hash(annotations, containers, init_containers, priority, labels=None) -> str:
    """What a submission asks, as a digest: the same spec again changes nothing. Labels count
    only when there are some (they name queues and groups), so older digests stay valid."""
    fields = [annotations, containers, init_containers, priority]
    if labels:
        fields.append(labels)
    body = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def _max_length(field: str) -> int:
    return Pod._meta.get_field(field).max_length


def _check_envelope(namespace, name, annotations, containers, init_containers, priority, uid) -> None:
    """The envelope of a submission, for callers without the API's serializer (Kubernetes):
    the limits are the columns'."""
    for field, value in (("namespace", namespace), ("name", name)):
        if not isinstance(value, str) or not value.strip():
            raise PodInvalid(field, "required: a non-empty string")
        if len(value) > _max_length(field):
            raise PodInvalid(field, f"at most {_max_length(field)} characters")
    if not isinstance(uid, str) or len(uid) > _max_length("uid"):
        raise PodInvalid("uid", f"must be a string of at most {_max_length('uid')} characters")
    if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > INT32_MAX:
        raise PodInvalid("priority", f"must be a 32-bit integer, got {priority!r}")
    if not isinstance(annotations, dict):
        raise PodInvalid("annotations", "must be an object of string values")
    if not isinstance(containers, list) or not containers:
        raise PodInvalid("containers", "a pod needs at least one container")
    if not isinstance(init_containers, list):
        raise PodInvalid("initContainers", "must be a list of containers")
    try:
        json.dumps([annotations, containers, init_containers])
    except (TypeError, ValueError) as exc:
        raise PodInvalid("containers", f"must be plain JSON: {exc}") from None


@retry_on_conflict
def submit_pod(
    namespace: str,
    name: str,
    annotations=None,
    containers=None,
    init_containers=None,
    priority: int = 0,
    uid: str = "",
    *,
    validate: bool = True,
    origin: str = Pod.API,
    labels=None,
) -> Pod:
    """Queue a pod, or update a queued one.

    Validated like SPEC 2, 3 and 5 with the engine's `parse_pod`; raises PodInvalid naming
    the field. `validate=False` is for pods that exist anyway (read from Kubernetes): an
    invalid one is stored, and the next cycle parks it with the error shown.

    The same spec again changes nothing. A new spec re-queues a pod that waits (pending or
    rejected); a finished pod, or one with a new uid, starts over as a new incarnation. A
    new uid means the earlier pod of this name is gone (deleted and created again, unseen):
    its active allocations are released in the same transaction, so its cards never leak.
    A placed pod keeps its placement: new annotations are stored, new containers refused.

    `origin` (`Pod.ORIGINS`) records who submitted the incarnation: pipeline cycles never
    place `extender` pods, and the kube agent's cleanup never touches `api` ones.

    `labels` (and annotations) may name a pod group (`engine.batch.group_ref`), created here
    when it is new, and a queue (`engine.batch.queue_ref`); a group's queue wins. A name the
    cycle cannot use (an unknown queue) is stored, and the cycle says so.
    """
    annotations = {} if annotations is None else annotations
    containers = [] if containers is None else containers
    init_containers = [] if init_containers is None else init_containers
    labels = {} if labels is None else labels
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise PodInvalid("labels", "must be an object of string values")
    if origin not in ORIGIN_VALUES:
        raise ValueError(f"origin must be one of {', '.join(ORIGIN_VALUES)}, got {origin!r}")
    _check_envelope(namespace, name, annotations, containers, init_containers, priority, uid)
    spec = PodSpec(
        name=name,
        namespace=namespace,
        annotations=annotations,
        containers=containers,
        init_containers=init_containers,
        uid=uid,
    )
    if validate:
        parse_pod(spec, SchedulerConfig.current())
    try:
        ref = group_ref(annotations, labels)
        named_queue = queue_ref(annotations, labels)
    except PodInvalid:
        if validate:
            raise
        ref = named_queue = None  # stored as written: the cycle rejects it naming the field
    digest = spec_hash(annotations, containers, init_containers, priority, labels)
    now = timezone.now()
    with transaction.atomic():
        group = _group_for(namespace, ref, named_queue)
        queue = _queue_named(group.queue.name if group and group.queue else named_queue)
        row = Pod.objects.select_for_update(no_key=True).filter(namespace=namespace, name=name)
        pod = row.first()
        if pod is None:
            try:
                with transaction.atomic():
                    pod = Pod.objects.create(
                        namespace=namespace,
                        name=name,
                        uid=uid,
                        origin=origin,
                        annotations=annotations,
                        labels=labels,
                        group=group,
                        queue=queue,
                        containers=containers,
                        init_containers=init_containers,
                        priority=priority,
                        spec_hash=digest,
                        submitted_at=now,
                    )
            except IntegrityError:  # a concurrent submission of this name created it first
                pod = row.get()
            else:
                request_cycle("pod submitted")
                return pod
        replaced = bool(uid and pod.uid and uid != pod.uid)
        new_incarnation = pod.status in Pod.FINISHED or replaced
        if not new_incarnation and pod.spec_hash == digest:
            if uid and not pod.uid:
                pod.uid = uid
                pod.save(update_fields=["uid", "updated_at"])
            return pod
        if not new_incarnation and pod.status in Pod.BOUND:
            if (pod.containers, pod.init_containers, pod.priority) != (containers, init_containers, priority):
                raise PodInvalid(
                    "containers", f"the pod is placed on {pod.node}; its containers cannot change"
                )
            pod.annotations, pod.spec_hash, pod.revision = annotations, digest, pod.revision + 1
            pod.labels = labels
            pod.save(update_fields=["annotations", "labels", "spec_hash", "revision", "updated_at"])
            return pod
        freed = False
        if new_incarnation:
            if pod.status not in Pod.FINISHED:
                freed = _release_allocations(pod, now)
            pod.submitted_at, pod.attempts, pod.node, pod.origin = now, 0, None, origin
            pod.scheduled_at = pod.bound_at = pod.finished_at = None
            pod.allocated = ""
        pod.uid = uid or pod.uid
        pod.annotations, pod.containers, pod.init_containers = annotations, containers, init_containers
        pod.labels, pod.group, pod.queue = labels, group, queue
        pod.priority, pod.spec_hash = priority, digest
        pod.status, pod.parked, pod.next_attempt_at = Pod.PENDING, False, None
        pod.error = pod.error_field = pod.reason = ""
        pod.revision += 1
        pod.save()
        if freed:
            capacity_changed(f"released the replaced incarnation of {pod.key}")
        request_cycle("pod updated")
    return pod


def _queue_named(name: str | None) -> Queue | None:
    """The queue a name stands for now, if it exists (the cycle re-resolves it on every try)."""
    if not name:
        return None
    return Queue.objects.filter(name=name).first()


def _group_for(namespace: str, ref: GroupRef | None, named_queue: str | None) -> PodGroup | None:
    """The pod group a pod names, created on first sight (from the annotation's `min_member`,
    else 1, and the pod's queue); an annotation's `min_member` or timeout updates it."""
    if ref is None:
        return None
    defaults = {
        "min_member": ref.min_member or 1,
        "schedule_timeout_seconds": ref.timeout_seconds,
        "source": ref.source,
        "queue": _queue_named(named_queue),
    }
    group, created = PodGroup.objects.get_or_create(namespace=namespace, name=ref.name, defaults=defaults)
    if not created:
        changed = []
        if ref.min_member is not None and group.min_member != ref.min_member:
            group.min_member = ref.min_member
            changed.append("min_member")
        if ref.timeout_seconds is not None and group.schedule_timeout_seconds != ref.timeout_seconds:
            group.schedule_timeout_seconds = ref.timeout_seconds
            changed.append("schedule_timeout_seconds")
        if changed:
            group.save(update_fields=[*changed, "updated_at"])
    return group


def _pod_for_update(pod) -> Pod:
    """`pod` as a Pod, a primary key, or "namespace/name"; locked."""
    queryset = Pod.objects.select_for_update(no_key=True)
    if isinstance(pod, Pod):
        return queryset.get(pk=pod.pk)
    if isinstance(pod, str):
        namespace, name = Pod.split_key(pod)
        return queryset.get(namespace=namespace, name=name)
    return queryset.get(pk=pod)


def _release_allocations(pod: Pod, now) -> bool:
    """Give back the cards of `pod`'s active allocations: counters lowered, rows marked
    released. The caller holds the pod row's lock (taken first); the cards are locked here,
    in primary-key order, as every counter writer does. Whether anything was held."""
    held = list(
        Allocation.objects.filter(pod=pod, active=True).values_list("pk", "card_id", "memory", "cores")
    )
    if not held:
        return False
    freed: dict[int, list[int]] = {}
    for _, card_id, memory, cores in held:
        total = freed.setdefault(card_id, [0, 0, 0])
        total[0] += 1
        total[1] += memory
        total[2] += cores
    cards = list(Card.objects.select_for_update(no_key=True).filter(pk__in=sorted(freed)).order_by("pk"))
    for card in cards:
        slots, memory, cores = freed[card.pk]
        card.used_slots -= slots
        card.used_memory -= memory
        card.used_cores -= cores
        if card.over_capacity:
            card.over_capacity = over_capacity_text(
                card.used_slots, card.used_memory, card.used_cores, card.slots, card.memory, card.cores
            )
    Card.objects.bulk_update(cards, ["used_slots", "used_memory", "used_cores", "over_capacity"])
    Allocation.objects.filter(pk__in=[pk for pk, *_ in held]).update(active=False, released_at=now)
    return True


@retry_on_conflict
def release_pod(pod, final_status: str = Pod.DELETED, expected_uid: str | None = None) -> Pod | None:
    """The pod finished, failed or was deleted: give back its cards and wake the scheduler.
    Releasing a finished pod again changes nothing.

    `expected_uid`: release only that incarnation. When the row now holds another uid (the
    pod was deleted and created again meanwhile), nothing is written and None is returned,
    so a late release meant for the old pod can never hit the new one.
    Raises Pod.DoesNotExist, ValueError."""
    if final_status not in FINAL_STATUSES:
        raise ValueError(f"final_status must be one of {', '.join(FINAL_STATUSES)}, got {final_status!r}")
    now = timezone.now()
    with transaction.atomic():
        pod = _pod_for_update(pod)
        if expected_uid is not None and pod.uid != expected_uid:
            return None
        if pod.status in Pod.FINISHED:
            return pod
        freed = _release_allocations(pod, now)
        pod.status, pod.finished_at, pod.next_attempt_at = final_status, now, None
        pod.reason = (
            f"{final_status} after {'running on ' + pod.node.name if pod.node_id else 'no placement'}"
        )
        pod.revision += 1
        pod.save(
            update_fields=["status", "finished_at", "next_attempt_at", "reason", "revision", "updated_at"]
        )
        if pod.group_id is not None:
            group_after_release(pod.group_id, now)
        if freed:
            capacity_changed(f"released {pod.key}")
    return pod


def group_after_release(group_id: int, now) -> None:
    """A member ended: the group completes when every member succeeded, fails when all ended
    and some did not succeed, and goes back in the queue when it fell below `min_member`.
    Written last, after the pod and cards (the lock order)."""
    group = PodGroup.objects.filter(pk=group_id).first()
    if group is None:
        return
    statuses = list(group.pods.values_list("status", flat=True))
    live = [status for status in statuses if status not in Pod.FINISHED and status != Pod.REJECTED]
    placed = sum(status in Pod.BOUND for status in statuses)
    if not live:
        succeeded = statuses.count(Pod.SUCCEEDED)
        if statuses and succeeded == len(statuses):
            changed = group.set_phase(PodGroup.COMPLETED, "Completed", f"{succeeded} members succeeded", now)
        else:
            changed = group.set_phase(
                PodGroup.FAILED, "MembersEnded", f"{succeeded}/{len(statuses)} members succeeded", now
            )
    elif group.phase == PodGroup.RUNNING and placed < group.min_member:
        changed = group.set_phase(
            PodGroup.INQUEUE,
            "BelowMinMember",
            f"{placed}/{group.min_member} members placed after one ended",
            now,
        )
    else:
        return
    if changed:
        group.save(update_fields=["phase", "reason", "conditions", "running_at", "finished_at", "updated_at"])


@retry_on_conflict
def mark_bound(pod, node: str, expected_uid: str | None = None) -> Pod | None:
    """Kubernetes accepted the pod's Binding to `node` (or shows it there): scheduled ->
    running, `bound_at` set. This is not the kubelet starting it; hamiadmin does not follow
    that. A row that is not scheduled on `node` is left alone (already bound, released, or
    placed again meanwhile). None when `expected_uid` is given and the row holds another
    incarnation. Raises Pod.DoesNotExist."""
    with transaction.atomic():
        pod = _pod_for_update(pod)
        if expected_uid is not None and pod.uid != expected_uid:
            return None
        if pod.status == Pod.SCHEDULED and pod.node_id is not None and pod.node.name == node:
            pod.status, pod.bound_at = Pod.RUNNING, timezone.now()
            pod.revision += 1
            pod.save(update_fields=["status", "bound_at", "revision", "updated_at"])
    return pod


@retry_on_conflict
def requeue_pod(pod) -> Pod:
    """Try a waiting pod in the next cycle: clear its back-off and un-park it, so an invalid
    spec is read again (it parks again if still invalid). Placed and finished pods are left
    alone: raises ValueError naming the status. Raises Pod.DoesNotExist."""
    with transaction.atomic():
        pod = _pod_for_update(pod)
        if pod.status not in (Pod.PENDING, Pod.REJECTED):
            raise ValueError(f"only a waiting pod can be requeued; {pod.key} is {pod.status}")
        pod.status, pod.parked, pod.next_attempt_at = Pod.PENDING, False, None
        pod.revision += 1
        pod.save(update_fields=["status", "parked", "next_attempt_at", "revision", "updated_at"])
        request_cycle(f"requeue {pod.key}")
    return pod


@retry_on_conflict
def requeue_placed_pod(
    pod, retry_after: float = 0.0, reason: str = "", expected_uid: str | None = None
) -> Pod | None:
    """A placement that cannot be used (Kubernetes refused the Binding; kube-scheduler now
    offers other nodes): give the cards back and put the same incarnation back in the queue,
    not before `retry_after` seconds. Attempts, submission time (its place in the queue) and
    origin are kept; the pod goes straight from `scheduled` to `pending`, never `failed`.

    Only a `scheduled` pod is requeued; any other row is returned unchanged (a bound pod
    keeps its cards). None when `expected_uid` is given and the row holds another
    incarnation. Raises Pod.DoesNotExist."""
    now = timezone.now()
    with transaction.atomic():
        pod = _pod_for_update(pod)
        if expected_uid is not None and pod.uid != expected_uid:
            return None
        if pod.status != Pod.SCHEDULED:
            return pod
        if _release_allocations(pod, now):
            transaction.on_commit(
                partial(wake_pending_pods, but=pod.pk), robust=True
            )  # the others: this pod waits
        pod.status, pod.node, pod.allocated = Pod.PENDING, None, ""
        pod.scheduled_at = pod.bound_at = None
        pod.next_attempt_at = now + timedelta(seconds=retry_after) if retry_after > 0 else None
        pod.reason = (reason or "placement given back")[:1000]
        pod.revision += 1
        pod.save(
            update_fields=[
                "status",
                "node",
                "allocated",
                "scheduled_at",
                "bound_at",
                "next_attempt_at",
                "reason",
                "revision",
                "updated_at",
            ]
        )
        request_cycle(f"requeue {pod.key}")
    return pod
