"""The write paths: the one place where the API, the admin, the agents and the demo change
the cluster and the pods. Each validates before it writes (errors name the field and
nothing is written), writes in one transaction, and asks for a cycle on commit.

Lock order everywhere (docs/architecture.md, "Lock order"): pods by primary key, then the
node, then cards by primary key; rows are locked FOR NO KEY UPDATE, since no write here
changes a key, so the key-share locks that foreign-key checks take never wait on them.
Waking backed-off pods locks pods, so it runs after the commit that freed capacity, in its
own transaction, never while card locks are held. Every write is retried from the start
if PostgreSQL still picks it as a deadlock victim (`dbretry`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import timedelta
from functools import partial

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from scheduling.engine import PodInvalid, PodSpec, ScenarioError
from scheduling.engine.scenario import parse_config, parse_node
from scheduling.engine.scheduler import parse_pod

from .dbretry import retry_on_conflict
from .metrics import count_claim_refused
from .models import Allocation, Card, Event, Node, Pod, SchedulerConfig, record_event
from .triggers import request_cycle

log = logging.getLogger(__name__)

ORIGIN_VALUES = tuple(value for value, _ in Pod.ORIGINS)
INT32_MAX = 2**31 - 1  # the database columns' size
CAPACITY_FIELDS = ("type", "slots", "memory", "cores", "numa", "health", "mode", "index", "links")


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
    writer's transaction, which holds card or node locks (see the lock order above)."""
    transaction.on_commit(wake_pending_pods, robust=True)
    request_cycle(reason)


# --- Nodes and cards ------------------------------------------------------------------


def _parse_report(node_name, labels, annotations, devices):
    """The report as an engine Node, validated by the engine's scenario rules (SPEC 9),
    and each card's position in `devices` (for error messages)."""
    if not isinstance(devices, list):
        raise ScenarioError("devices", "must be a list of cards")
    for position, device in enumerate(devices):
        if isinstance(device, dict) and "used" in device:
            raise ScenarioError(f"devices[{position}].used", "usage is kept by the scheduler; do not report it")
    raw = {"name": node_name, "labels": labels or {}, "annotations": annotations or {}, "devices": devices}
    try:
        parsed = parse_node(raw, "")
    except ScenarioError as exc:
        raise ScenarioError(exc.where.lstrip("."), exc.message) from None
    if len(parsed.name) > 253:
        raise ScenarioError("name", "at most 253 characters")
    positions: dict[str, int] = {}
    for position, device in enumerate(devices):
        uuid = device["uuid"].strip()
        if uuid in positions:
            raise ScenarioError(f"devices[{position}].uuid", f"{uuid!r} repeats devices[{positions[uuid]}]")
        if len(uuid) > 128 or len(device.get("type") or "") > 128:
            raise ScenarioError(f"devices[{position}]", "uuid and type are at most 128 characters")
        for name in ("index", "slots", "memory", "cores", "numa"):
            value = device.get(name)
            if isinstance(value, int) and not -(2**31) <= value <= INT32_MAX:
                raise ScenarioError(f"devices[{position}].{name}", f"at most {INT32_MAX}, got {value}")
        positions[uuid] = position
    return parsed, positions


@retry_on_conflict
def report_inventory(node_name: str, labels=None, annotations=None, devices=None) -> Node:
    """An agent's report of its node: upsert the node and its cards, and beat its heart.

    `devices` are SPEC 9 cards without `used` (usage is the scheduler's). Cards missing from
    the report are kept, marked absent: their tenants and history stay, they take no new pods.
    A card's `cordoned` is changed only when the report names it (else `cordon_card` rules).
    Raises ScenarioError naming the field; then nothing is written. A valid report makes the
    node ready and clears `not_ready_reason`. Asks for a cycle when anything but the
    heartbeat changed.

    A card belongs to the node that first reported it, ready or not, until an operator
    moves it (`reassign_card`). A report naming another node's card is refused for that
    card only: the rest of the report is taken, the claim is recorded as an Event and
    listed on the returned node as `refused` ([{"field", "uuid", "message"}]), so a token
    of one node can never take another's cards, nor lock the rightful agent out.

    A report that shrinks a card below what its tenants hold keeps the tenants (they run),
    sets `Card.over_capacity` saying by how much, and records an Event; the card takes no
    new pods until it fits again (`over_capacity` is cleared then).
    """
    devices = [] if devices is None else devices
    parsed, positions = _parse_report(node_name, labels, annotations, devices)
    now = timezone.now()
    refused: list[dict] = []
    with transaction.atomic():
        node = Node.objects.select_for_update(no_key=True).filter(name=parsed.name).first()
        if node is None:
            changed = True
            node = Node.objects.create(
                name=parsed.name, labels=parsed.labels, annotations=parsed.annotations, ready=True, last_heartbeat=now
            )
        else:
            changed = not node.ready or node.annotations != parsed.annotations or node.labels != parsed.labels
            node.labels, node.annotations, node.ready, node.not_ready_reason, node.last_heartbeat = (
                parsed.labels, parsed.annotations, True, "", now,
            )  # fmt: skip
            node.save(update_fields=["labels", "annotations", "ready", "not_ready_reason", "last_heartbeat",
                                     "updated_at"])  # fmt: skip
        existing = {
            card.uuid: card
            for card in Card.objects.select_for_update(of=("self",), no_key=True)
            .select_related("node")
            .filter(Q(node=node) | Q(uuid__in=list(positions)))
            .order_by("pk")
        }
        foreign = {uuid for uuid, row in existing.items() if row.node_id != node.id}
        links = _symmetric_links(parsed, foreign)
        creates, updates, shrunk = [], [], []
        for card in parsed.cards:
            device = devices[positions[card.uuid]]
            row = existing.get(card.uuid)
            if card.uuid in foreign:
                refused.append(_refuse_claim(node.name, row, positions[card.uuid]))
                continue
            values = {
                "index": card.index, "type": card.type, "slots": card.slots, "memory": card.memory,
                "cores": card.cores, "numa": card.numa, "health": card.health, "mode": card.mode[:64],
                "links": links[card.uuid], "present": True,
            }  # fmt: skip
            if "cordoned" in device:
                values["cordoned"] = device["cordoned"]
            if row is None:
                creates.append(Card(uuid=card.uuid, node=node, **values))
                continue
            values["over_capacity"] = over_capacity_text(row.used_slots, row.used_memory, row.used_cores,
                                                         card.slots, card.memory, card.cores)  # fmt: skip
            if values["over_capacity"] and values["over_capacity"] != row.over_capacity:
                shrunk.append((row, values["over_capacity"]))
            differs = {name: value for name, value in values.items() if getattr(row, name) != value}
            if differs:
                for name, value in differs.items():
                    setattr(row, name, value)
                updates.append(row)
        for uuid, row in existing.items():
            if uuid not in positions and row.node_id == node.id and row.present:
                row.present = False
                updates.append(row)
        if creates:
            Card.objects.bulk_create(creates)
        if updates:
            Card.objects.bulk_update(updates, ["present", "cordoned", "over_capacity", *CAPACITY_FIELDS, "updated_at"])
        for row, text in shrunk:
            log.warning("card %s of %s reported smaller than its tenants hold: %s", row.uuid, node.name, text)
            record_event(Event.CARD_OVERCOMMITTED, f"card/{row.uuid}", "ShrunkUnderTenants",
                         f"node {node.name} reported card {row.uuid} smaller than its tenants hold: {text}; "
                         "the tenants keep running, the card takes no new pods until it fits again",
                         actor=f"agent:{node.name}")  # fmt: skip
        if changed or creates or updates:
            capacity_changed(f"inventory {node.name}")
    node.refused = refused
    return node


def _symmetric_links(parsed, left_out: set[str]) -> dict[str, dict[str, int]]:
    """Each reported card's pair scores as {other uuid: score}, both ways, leaving out the
    cards whose claim is refused."""
    links: dict[str, dict[str, int]] = {card.uuid: {} for card in parsed.cards}
    for pair, score in parsed.links.items():
        first, second = sorted(pair)
        if first in left_out or second in left_out:
            continue
        links[first][second] = score
        links[second][first] = score
    return links


def _refuse_claim(claimant: str, row: Card, position: int) -> dict:
    """Record a refused claim on another node's card, and say it to the reporter."""
    message = (f"card {row.uuid} belongs to node {row.node.name}; this report of node {claimant} is refused for "
               "this card only (an operator can reassign it)")  # fmt: skip
    log.warning("%s", message)
    record_event(Event.CARD_CLAIM_REFUSED, f"card/{row.uuid}", "ClaimedByAnotherNode", message,
                 actor=f"agent:{claimant}")  # fmt: skip
    count_claim_refused()
    return {"field": f"devices[{position}].uuid", "uuid": row.uuid, "message": message}


def over_capacity_text(used_slots, used_memory, used_cores, slots, memory, cores) -> str:
    """'' when the tenants fit the capacity, else what is held beyond it, per dimension."""
    parts = [
        f"{name} {used} held, {capacity} reported"
        for name, used, capacity in (("slots", used_slots, slots), ("memory MiB", used_memory, memory),
                                     ("cores %", used_cores, cores))  # fmt: skip
        if used > capacity
    ]
    return "; ".join(parts)[:300]


@retry_on_conflict
def reassign_card(uuid: str, node_name: str, by: str = "") -> Card:
    """An operator moves a card to another node (it was physically moved, or its node was
    rebuilt under another name). Refused while the card has tenants: release them first.
    Audited as an Event. Raises Card.DoesNotExist, Node.DoesNotExist, ValueError."""
    with transaction.atomic():
        target = Node.objects.select_for_update(no_key=True).get(name=node_name)
        card = Card.objects.select_for_update(no_key=True).select_related("node").get(uuid=uuid)
        if card.node_id == target.id:
            return card
        if card.used_slots:
            raise ValueError(f"card {uuid} has {card.used_slots} tenant(s) on {card.node.name}; release them first")
        before = card.node.name
        card.node, card.present = target, False  # until the new node's agent reports it
        card.links = {}
        card.save(update_fields=["node", "present", "links", "updated_at"])
        record_event(Event.CARD_REASSIGNED, f"card/{uuid}", "Reassigned", f"card {uuid} moved from node {before} to "
                     f"node {node_name}", actor=by or "operator", severity=Event.NORMAL)  # fmt: skip
    return card


@retry_on_conflict
def cordon_card(uuid: str, on: bool, by: str = "") -> Card:
    """Keep a card from new allocations (on) or give it back (off). Tenants are untouched.
    Raises Card.DoesNotExist for an unknown UUID."""
    with transaction.atomic():
        card = Card.objects.select_for_update(no_key=True).get(uuid=uuid)
        if card.cordoned != bool(on):
            card.cordoned = bool(on)
            card.save(update_fields=["cordoned", "updated_at"])
            if not on:
                capacity_changed(f"uncordon {uuid}")
    return card


@retry_on_conflict
def set_config(
    node_scheduler_policy: str | None = None,
    gpu_scheduler_policy: str | None = None,
    memory_percentage: int | None = None,
    default_cores: int | None = None,
    exclusive_cores: int | None = None,
    changed_by: str = "",
) -> SchedulerConfig:
    """Change the cluster defaults (a new row; the old ones are the history). Unnamed values
    stay as they are. Raises ScenarioError naming the field (`config.…`)."""
    latest = SchedulerConfig.objects.order_by("-id").first()
    raw = latest.as_raw() if latest else parse_config_defaults()
    given = {"node_scheduler_policy": node_scheduler_policy, "gpu_scheduler_policy": gpu_scheduler_policy}
    raw.update({key: value for key, value in given.items() if value is not None})
    resources = dict(raw.get("resources") or {})
    for key, value in (("memory_percentage", memory_percentage), ("cores", default_cores),
                       ("exclusive_cores", exclusive_cores)):  # fmt: skip
        if value is not None:
            resources[key] = value
    raw["resources"] = resources
    config = parse_config(raw)
    if config.resources.memory_percentage > 100:
        raise ScenarioError("config.resources.memory_percentage", "must be at most 100")
    for key in ("cores", "exclusive_cores"):
        if getattr(config.resources, key) > 100:
            raise ScenarioError(f"config.resources.{key}", "must be at most 100")
    with transaction.atomic():
        row = SchedulerConfig.objects.create(
            node_scheduler_policy=config.node_scheduler_policy,
            gpu_scheduler_policy=config.gpu_scheduler_policy[:200],
            memory_percentage=config.resources.memory_percentage,
            default_cores=config.resources.cores,
            exclusive_cores=config.resources.exclusive_cores,
            changed_by=(changed_by or "")[:150],
        )
        capacity_changed("config changed")
    return row


def parse_config_defaults() -> dict:
    raw = SchedulerConfig.default_raw()
    config = parse_config(raw)
    raw["resources"] = {
        "memory_percentage": config.resources.memory_percentage,
        "cores": config.resources.cores,
        "exclusive_cores": config.resources.exclusive_cores,
    }
    return raw


# --- Pods -------------------------------------------------------------------------------


def spec_hash(annotations, containers, init_containers, priority) -> str:
    body = json.dumps([annotations, containers, init_containers, priority], sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def _check_envelope(namespace, name, annotations, containers, init_containers, priority, uid) -> None:
    for field, value, limit in (("namespace", namespace, 63), ("name", name, 253)):
        if not isinstance(value, str) or not value.strip():
            raise PodInvalid(field, "required: a non-empty string")
        if len(value) > limit:
            raise PodInvalid(field, f"at most {limit} characters")
    if not isinstance(uid, str) or len(uid) > 64:
        raise PodInvalid("uid", "must be a string of at most 64 characters")
    if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > 2**31 - 1:
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
    """
    annotations = {} if annotations is None else annotations
    containers = [] if containers is None else containers
    init_containers = [] if init_containers is None else init_containers
    if origin not in ORIGIN_VALUES:
        raise ValueError(f"origin must be one of {', '.join(ORIGIN_VALUES)}, got {origin!r}")
    _check_envelope(namespace, name, annotations, containers, init_containers, priority, uid)
    spec = PodSpec(name=name, namespace=namespace, annotations=annotations, containers=containers,
                   init_containers=init_containers, uid=uid)  # fmt: skip
    if validate:
        parse_pod(spec, SchedulerConfig.current())
    digest = spec_hash(annotations, containers, init_containers, priority)
    now = timezone.now()
    with transaction.atomic():
        row = Pod.objects.select_for_update(no_key=True).filter(namespace=namespace, name=name)
        pod = row.first()
        if pod is None:
            try:
                with transaction.atomic():
                    pod = Pod.objects.create(
                        namespace=namespace, name=name, uid=uid, origin=origin, annotations=annotations,
                        containers=containers, init_containers=init_containers, priority=priority,
                        spec_hash=digest, submitted_at=now,
                    )  # fmt: skip
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
                raise PodInvalid("containers", f"the pod is placed on {pod.node}; its containers cannot change")
            pod.annotations, pod.spec_hash, pod.revision = annotations, digest, pod.revision + 1
            pod.save(update_fields=["annotations", "spec_hash", "revision", "updated_at"])
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
        pod.priority, pod.spec_hash = priority, digest
        pod.status, pod.parked, pod.next_attempt_at = Pod.PENDING, False, None
        pod.error = pod.error_field = pod.reason = ""
        pod.revision += 1
        pod.save()
        if freed:
            capacity_changed(f"released the replaced incarnation of {pod.key}")
        request_cycle("pod updated")
    return pod


def _pod_for_update(pod) -> Pod:
    """`pod` as a Pod, a primary key, or "namespace/name"; locked."""
    queryset = Pod.objects.select_for_update(no_key=True)
    if isinstance(pod, Pod):
        return queryset.get(pk=pod.pk)
    if isinstance(pod, str):
        namespace, _, name = pod.rpartition("/")
        return queryset.get(namespace=namespace or "default", name=name)
    return queryset.get(pk=pod)


FINAL_STATUSES = (Pod.DELETED, Pod.SUCCEEDED, Pod.FAILED)


def _release_allocations(pod: Pod, now) -> bool:
    """Give back the cards of `pod`'s active allocations: counters lowered, rows marked
    released. The caller holds the pod row's lock (taken first); the cards are locked here,
    in primary-key order, as every counter writer does. Whether anything was held."""
    held = list(Allocation.objects.filter(pod=pod, active=True).values_list("pk", "card_id", "memory", "cores"))
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
            card.over_capacity = over_capacity_text(card.used_slots, card.used_memory, card.used_cores, card.slots,
                                                    card.memory, card.cores)  # fmt: skip
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
        pod.reason = f"{final_status} after {'running on ' + pod.node.name if pod.node_id else 'no placement'}"
        pod.revision += 1
        pod.save(update_fields=["status", "finished_at", "next_attempt_at", "reason", "revision", "updated_at"])
        if freed:
            capacity_changed(f"released {pod.key}")
    return pod


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
def mark_node_not_ready(node_name: str, reason: str) -> Node:
    """An agent cannot vouch for the node now (unreadable inventory, Kubernetes says NotReady,
    node deleted): it takes no new pods (`NodeNotReady`), its tenants stay. The reason is kept
    in `not_ready_reason`; the next valid `report_inventory` makes the node ready again and
    clears it. A node never seen before is created, not ready."""
    reason = str(reason)[:1000]
    with transaction.atomic():
        node = Node.objects.select_for_update(no_key=True).filter(name=node_name).first()
        if node is None:
            return Node.objects.create(name=node_name, ready=False, not_ready_reason=reason)
        if node.ready or node.not_ready_reason != reason:
            node.ready, node.not_ready_reason = False, reason
            node.save(update_fields=["ready", "not_ready_reason", "updated_at"])
    return node


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
def requeue_placed_pod(pod, retry_after: float = 0.0, reason: str = "",
                       expected_uid: str | None = None) -> Pod | None:  # fmt: skip
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
            transaction.on_commit(partial(wake_pending_pods, but=pod.pk), robust=True)  # the others: this pod waits
        pod.status, pod.node, pod.allocated = Pod.PENDING, None, ""
        pod.scheduled_at = pod.bound_at = None
        pod.next_attempt_at = now + timedelta(seconds=retry_after) if retry_after > 0 else None
        pod.reason = (reason or "placement given back")[:1000]
        pod.revision += 1
        pod.save(update_fields=["status", "node", "allocated", "scheduled_at", "bound_at", "next_attempt_at",
                                "reason", "revision", "updated_at"])  # fmt: skip
        request_cycle(f"requeue {pod.key}")
    return pod
