"""Queues and pod groups: the operator's writes (REST API, admin), and the queue tree as every
face reads it (`queue_tree`).

Each write validates first (a `ValidationError` keyed by the field at fault, nothing written),
writes in one transaction, records an `operator_action` Event saying who did it, and asks for a
cycle on commit: a raised limit or a smaller `min_member` may let a waiting job in.

The tree's rules: weight > 0; no queue is its own ancestor; only leaf queues take pods, so a
queue holding pods or unfinished jobs cannot become a parent, nor be deleted, and `default`
(where pods of no queue go) is never a parent nor deleted; per resource guarantee <= quota <=
limit where set, and the children's guarantees sum to at most the parent's guarantee (its limit
when it guarantees nothing).

A write to the tree (create, change, delete) first locks every queue (`lock_queue_tree`), then
reads and validates: two writes that each pass alone (two queues made each other's parent, two
children's guarantees that together pass the parent's) take turns, and the second validates
against what the first wrote. A delete waits for the submissions holding the queue (they share
it, `rowlocks.share_queues`) and sees their pods; a submission that waited for a delete answers
409 naming the queue (`services.pods.QueueGone`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Count
from django.db.transaction import TransactionManagementError
from prometheus_client.core import GaugeMetricFamily

from scheduling.dbretry import retry_on_conflict
from scheduling.engine.batch.queues import DEFAULT_QUEUE, RESOURCES, Usage, zero
from scheduling.models import Event, NamespaceQuota, Pod, PodGroup, Queue, record_event
from scheduling.pipeline.batch import fair_share_book, queue_usage
from scheduling.pipeline.rowlocks import lock_namespace_quotas, lock_pod_group, lock_queue_tree
from scheduling.pipeline.triggers import request_cycle

from .pods import capacity_changed, members_due

log = logging.getLogger(__name__)

KINDS = ("guarantee", "quota", "limit")
FIGURES = tuple(f"{kind}_{resource}" for kind in KINDS for resource in RESOURCES)
QUEUE_FIELDS = ("parent", "weight", "namespaces", "lend_guarantee", *FIGURES)
GROUP_FIELDS = (
    "min_member",
    "min_vgpus",
    "min_gpumem",
    "min_gpucores",
    "queue",
    "priority",
    "schedule_timeout_seconds",
    "on_timeout",
    "max_evicted",
)
#: What a Kubernetes PodGroup object sets on its row, besides its source and queue.
READ_GROUP_FIELDS = (
    "min_member",
    "min_vgpus",
    "min_gpumem",
    "min_gpucores",
    "schedule_timeout_seconds",
    "priority",
    "topology_key",
    "subgroups",
)
#: The largest `NamespaceQuota.hard` (a PostgreSQL bigint).
LARGEST_HARD = 2**63 - 1
#: Pod statuses that hold or wait for cards: a queue with such pods is in use.
LIVE_STATUSES = (Pod.PENDING, Pod.SCHEDULED, Pod.RUNNING)
LIVE_PHASES = (PodGroup.PENDING, PodGroup.INQUEUE, PodGroup.RUNNING)
NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _audit(subject: str, reason: str, message: str, by: str) -> None:
    record_event(Event.OPERATOR_ACTION, subject, reason, message, actor=by, severity=Event.NORMAL)


def _in_use(queue: Queue) -> str | None:
    """Why the queue holds work (live pods, unfinished jobs), else None."""
    pods = Pod.objects.filter(queue=queue, status__in=LIVE_STATUSES).count()
    if queue.name == DEFAULT_QUEUE:
        pods += Pod.objects.filter(queue__isnull=True, status__in=LIVE_STATUSES).count()
    groups = PodGroup.objects.filter(queue=queue, phase__in=LIVE_PHASES).count()
    if pods or groups:
        return f"queue {queue.name} holds {pods} pods and {groups} unfinished jobs"
    return None


def _guarantee_room(parent: Queue, children: list[Queue]) -> dict[str, str]:
    """Errors by field when the children's guarantees exceed what the parent can give."""
    errors = {}
    for resource in RESOURCES:
        bound = getattr(parent, f"guarantee_{resource}")
        what = "guarantee"
        if bound is None:
            bound, what = getattr(parent, f"limit_{resource}"), "limit"
        if bound is None:
            continue
        total = sum(getattr(child, f"guarantee_{resource}") or 0 for child in children)
        if total > bound:
            names = ", ".join(sorted(child.name for child in children))
            errors[f"guarantee_{resource}"] = (
                f"children of {parent.name} ({names}) guarantee {total} in all, over its {what} {bound}"
            )
    return errors


def validate_queue(queue: Queue) -> None:
    """Raise ValidationError naming each field at fault; `queue` is the row as it would be saved."""
    errors: dict[str, list[str]] = {}

    def fail(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    if not isinstance(queue.name, str) or not NAME.fullmatch(queue.name or "") or len(queue.name) > 63:
        fail("name", "must be a Kubernetes name: lower-case letters, digits and '-', at most 63")
    elif Queue.objects.filter(name=queue.name).exclude(pk=queue.pk).exists():
        fail("name", f"a queue named {queue.name} exists")
    if not isinstance(queue.namespaces, list) or not all(
        isinstance(n, str) and NAME.fullmatch(n) and len(n) <= 63 for n in queue.namespaces
    ):
        fail("namespaces", "must be a list of Kubernetes namespace names")
    try:
        queue.clean()
    except ValidationError as exc:
        for name, messages in exc.message_dict.items():
            for message in messages:
                fail(name, message)
    for resource, unit in RESOURCES.items():
        guarantee, quota, limit = (getattr(queue, f"{kind}_{resource}") for kind in KINDS)
        if guarantee is not None and quota is not None and guarantee > quota:
            fail(f"guarantee_{resource}", f"guarantee {guarantee} is over the quota {quota} ({unit})")
        if quota is not None and limit is not None and quota > limit:
            fail(f"quota_{resource}", f"quota {quota} is over the limit {limit} ({unit})")
        if guarantee is not None and limit is not None and guarantee > limit:
            fail(f"guarantee_{resource}", f"guarantee {guarantee} is over the limit {limit} ({unit})")
    parent = queue.parent
    if parent is not None and "parent" not in errors:
        if parent.name == DEFAULT_QUEUE:
            fail("parent", "the default queue takes the pods of no queue: it cannot have children")
        elif (why := _in_use(parent)) is not None:
            fail("parent", f"only leaf queues take pods: {why}")
        else:
            siblings = [q for q in Queue.objects.filter(parent=parent).exclude(pk=queue.pk)]
            for name, message in _guarantee_room(parent, [*siblings, queue]).items():
                fail(name, message)
    if queue.pk is not None:
        children = list(Queue.objects.filter(parent_id=queue.pk))
        if children and queue.name == DEFAULT_QUEUE:
            fail("name", "the default queue cannot have children")
        for name, message in _guarantee_room(queue, children).items():
            fail(name, message)
    if errors:
        raise ValidationError(errors)


def _parent(name: str | None) -> Queue | None:
    if name in (None, ""):
        return None
    found = Queue.objects.filter(name=name).first()
    if found is None:
        raise ValidationError({"parent": [f"no queue named {name}"]})
    return found


def _apply_queue(queue: Queue, changes: dict) -> list[str]:
    unknown = sorted(set(changes) - set(QUEUE_FIELDS))
    if unknown:
        raise ValidationError({name: ["not a queue field"] for name in unknown})
    changed = []
    for name, value in changes.items():
        if name == "parent":
            value = _parent(value)
            if (value.pk if value else None) == queue.parent_id:
                continue
        elif getattr(queue, name) == value:
            continue
        setattr(queue, name, value)
        changed.append(name)
    return changed


@retry_on_conflict
def create_queue(name: str, by: str = "", **changes) -> Queue:
    """A new queue; `parent` by name. Raises ValidationError naming the field."""
    with transaction.atomic():
        lock_queue_tree()
        queue = Queue(name=name)
        _apply_queue(queue, changes)
        validate_queue(queue)
        queue.save()
        request_cycle(f"queue {name} created")
    parent = f" under {queue.parent.name}" if queue.parent else ""
    _audit(f"queue/{name}", "QueueCreate", f"queue {name}{parent} created by {by}", by)
    return queue


@retry_on_conflict
def update_queue(name: str, by: str = "", **changes) -> Queue:
    """Change a queue's parent, weight, namespaces or figures. Raises Queue.DoesNotExist,
    ValidationError naming the field."""
    with transaction.atomic():
        lock_queue_tree()
        queue = Queue.objects.get(name=name)
        changed = _apply_queue(queue, changes)
        if not changed:
            return queue
        validate_queue(queue)
        queue.save()
        request_cycle(f"queue {name} changed")
    _audit(f"queue/{name}", "QueueUpdate", f"queue {name}: {', '.join(changed)} changed by {by}", by)
    return queue


@retry_on_conflict
def delete_queue(name: str, by: str = "") -> None:
    """Delete an unused leaf queue. Raises Queue.DoesNotExist, ValidationError when it is
    `default`, has children, or holds pods or unfinished jobs."""
    with transaction.atomic():
        lock_queue_tree()
        queue = Queue.objects.get(name=name)
        if queue.name == DEFAULT_QUEUE:
            raise ValidationError({"name": ["the default queue is never deleted"]})
        children = sorted(queue.children.values_list("name", flat=True))
        if children:
            raise ValidationError({"name": [f"queue {name} has children: {', '.join(children)}"]})
        if (why := _in_use(queue)) is not None:
            raise ValidationError({"name": [why]})
        queue.delete()
    _audit(f"queue/{name}", "QueueDelete", f"queue {name} deleted by {by}", by)


def validate_pod_group(group: PodGroup) -> None:
    """Raise ValidationError naming each field at fault; `group` as it would be saved."""
    errors: dict[str, list[str]] = {}
    if not isinstance(group.min_member, int) or group.min_member < 1:
        errors["min_member"] = ["must be at least 1"]
    if not isinstance(group.namespace, str) or not NAME.fullmatch(group.namespace or ""):
        errors["namespace"] = ["must be a Kubernetes namespace name"]
    if not isinstance(group.name, str) or not group.name.strip() or len(group.name) > 253:
        errors["name"] = ["must be a name of at most 253 characters"]
    elif PodGroup.objects.filter(namespace=group.namespace, name=group.name).exclude(pk=group.pk).exists():
        errors["name"] = [f"a pod group {group.key} exists"]
    if group.queue is not None and Queue.objects.filter(parent=group.queue).exists():
        errors["queue"] = [f"queue {group.queue.name} has children: only leaf queues take pods"]
    if group.on_timeout not in dict(PodGroup.ON_TIMEOUT):
        errors["on_timeout"] = [f"one of {', '.join(dict(PodGroup.ON_TIMEOUT))}"]
    budget = group.max_evicted
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
        errors["max_evicted"] = ["must be a whole number from 0, or null for no disruption budget"]
    if errors:
        raise ValidationError(errors)


def _apply_group(group: PodGroup, changes: dict) -> list[str]:
    unknown = sorted(set(changes) - set(GROUP_FIELDS))
    if unknown:
        raise ValidationError({name: ["not a pod group field"] for name in unknown})
    changed = []
    for name, value in changes.items():
        if name == "queue":
            if value in (None, ""):
                value = None
            else:
                found = Queue.objects.filter(name=value).first()
                if found is None:
                    raise ValidationError({"queue": [f"no queue named {value}"]})
                value = found
            if (value.pk if value else None) == group.queue_id:
                continue
        elif getattr(group, name) == value:
            continue
        setattr(group, name, value)
        changed.append(name)
    return changed


@retry_on_conflict
def create_pod_group(namespace: str, name: str, by: str = "", **changes) -> PodGroup:
    """A job made by an operator (source `api`); `queue` by name. Raises ValidationError."""
    with transaction.atomic():
        group = PodGroup(namespace=namespace, name=name, source="api")
        _apply_group(group, changes)
        validate_pod_group(group)
        group.save()
        request_cycle(f"pod group {group.key} created")
    _audit(f"podgroup/{group.key}", "PodGroupCreate", f"pod group {group.key} created by {by}", by)
    return group


@retry_on_conflict
def update_pod_group(namespace: str, name: str, by: str = "", **changes) -> PodGroup:
    """Change a job's figures or queue. Raises PodGroup.DoesNotExist, ValidationError."""
    with transaction.atomic():
        group = lock_pod_group(PodGroup.objects.filter(namespace=namespace, name=name)).get()
        changed = _apply_group(group, changes)
        if not changed:
            return group
        validate_pod_group(group)
        group.save()
        request_cycle(f"pod group {group.key} changed")
    _audit(
        f"podgroup/{group.key}",
        "PodGroupUpdate",
        f"pod group {group.key}: {', '.join(changed)} changed by {by}",
        by,
    )
    return group


@retry_on_conflict
def store_pod_group(namespace: str, name: str, source: str, queue: str | None = None, **figures) -> bool:
    """Create or update the row of a pod group read from Kubernetes (a Volcano or scheduler-plugins
    PodGroup object, `source`); `queue` by name, none when no queue has that name (its pods' own
    queue or `default` then), `figures` of `READ_GROUP_FIELDS` (those left out stay as they are);
    a change tries its backed-off members again at once. Checked by `validate_pod_group` as an operator's job is (a ValidationError naming the field,
    nothing written); asks for a cycle when anything changed. Not audited: the object is the
    record. Whether anything was written."""
    unknown = sorted(set(figures) - set(READ_GROUP_FIELDS))
    if unknown:
        raise ValidationError({column: ["not a pod group field read from Kubernetes"] for column in unknown})
    found = Queue.objects.filter(name=queue).first() if queue else None
    with transaction.atomic():
        group = lock_pod_group(PodGroup.objects.filter(namespace=namespace, name=name)).first()
        created = group is None
        if group is None:
            group = PodGroup(namespace=namespace, name=name)
        wanted = {"source": source, **figures}
        changed = [column for column, value in wanted.items() if getattr(group, column) != value]
        for column in changed:
            setattr(group, column, wanted[column])
        if group.queue_id != (found.pk if found else None):
            group.queue = found
            changed.append("queue")
        if not created and not changed:
            return False
        validate_pod_group(group)
        if created:
            group.save()
            request_cycle(f"pod group {group.key} read")
        else:
            group.save(update_fields=[*changed, "updated_at"])
            request_cycle(f"pod group {group.key} changed")
    if not created:
        # Its figures changed: its backed-off members are tried at once (after the group's
        # lock is let go: pods are locked before groups).
        Pod.objects.filter(group=group, status=Pod.PENDING, next_attempt_at__isnull=False).update(
            next_attempt_at=None
        )
    return True


def rescale_owner_gang(pk: int, min_member: int, subgroups: list[dict], message: str) -> bool:
    """A gang found from its pods' owner (`source` "owner") takes the owner's new count and
    parts: `min_member` and `subgroups` set, an `OwnerScaled` condition naming the change
    (its verdict line is left to the next cycle), its backed-off members tried at once and a
    cycle asked for. Validated as any group is; whether anything changed."""
    with transaction.atomic():
        group = lock_pod_group(PodGroup.objects.filter(pk=pk, source="owner")).first()
        if group is None or (group.min_member, group.subgroups) == (min_member, subgroups):
            return False
        before = group.min_member
        group.min_member, group.subgroups = min_member, subgroups
        validate_pod_group(group)
        group.owner_scaled(before, message)
        group.save(update_fields=["min_member", "subgroups", "conditions", "updated_at"])
        request_cycle(f"pod group {group.key} resized by its owner")
    members_due(pk)
    return True


def validate_namespace_quota(namespace: str, quota: str, limits: dict[str, int]) -> None:
    """Raise ValidationError naming each field at fault: the namespace (a Kubernetes name), the
    quota's name (at most 253 characters), each limit (`hard.<resource>`: one of the queue
    resources, a whole number from 0)."""
    errors: dict[str, list[str]] = {}
    if not isinstance(namespace, str) or not NAME.fullmatch(namespace) or len(namespace) > 63:
        errors["namespace"] = ["must be a Kubernetes namespace name"]
    if not isinstance(quota, str) or not quota.strip() or len(quota) > 253:
        errors["quota"] = ["must be a name of at most 253 characters"]
    for resource, hard in limits.items():
        if resource not in RESOURCES:
            errors[f"hard.{resource}"] = [f"not one of {', '.join(RESOURCES)}"]
        elif isinstance(hard, bool) or not isinstance(hard, int) or not 0 <= hard <= LARGEST_HARD:
            errors[f"hard.{resource}"] = [f"must be a whole number from 0 to {LARGEST_HARD}"]
    if errors:
        raise ValidationError(errors)


def _write_quota(namespace: str, quota: str, source: str, limits: dict[str, int], keep=frozenset()) -> bool:
    """Make the rows of one quota of `source` equal to `limits`, inside the caller's
    transaction; the rows of the other source are never read nor written."""
    changed = False
    rows = {
        row.resource: row
        for row in lock_namespace_quotas(
            NamespaceQuota.objects.filter(namespace=namespace, quota=quota, source=source)
        )
    }
    for resource, row in rows.items():
        if resource not in limits and resource not in keep:
            row.delete()
            changed = True
    for resource, hard in limits.items():
        found = rows.get(resource)
        if found is None:
            NamespaceQuota.objects.create(
                namespace=namespace, quota=quota, source=source, resource=resource, hard=hard
            )
            changed = True
        elif found.hard != hard:
            found.hard = hard
            found.save(update_fields=["hard", "updated_at"])
            changed = True
    if changed:
        capacity_changed(f"namespace quota {namespace}/{quota} changed")
    return changed


@retry_on_conflict
def store_namespace_quota(
    namespace: str, quota: str, limits: dict[str, int], keep: frozenset[str] = frozenset()
) -> bool:
    """Make the rows of one ResourceQuota object `limits` (resource -> hard); rows of resources
    in `keep` (entries refused this time) stay as they were, so a typo never lifts a quota.
    Only the Kubernetes rows: a quota of the same name made through the API is another quota.
    Checked first (`validate_namespace_quota`). Asks for a cycle, after waking the backed-off
    pods, when anything changed (a looser quota may let pods in). Whether anything was written."""
    validate_namespace_quota(namespace, quota, limits)
    with transaction.atomic():
        return _write_quota(namespace, quota, NamespaceQuota.KUBERNETES, limits, keep)


@retry_on_conflict
def forget_namespace_quotas(present: set[tuple[str, str]]) -> int:
    """Delete the rows of every ResourceQuota not in `present` (namespace, name): its object is
    gone. Rows made through the API are not Kubernetes' to delete. The number of rows deleted."""
    with transaction.atomic():
        gone = [
            pk
            for pk, namespace, quota in NamespaceQuota.objects.filter(
                source=NamespaceQuota.KUBERNETES
            ).values_list("pk", "namespace", "quota")
            if (namespace, quota) not in present
        ]
        if gone:
            NamespaceQuota.objects.filter(pk__in=gone).delete()
            capacity_changed("namespace quotas removed")
    return len(gone)


# --- namespace quotas made by operators (REST API, admin) ---------------------------------


class QuotaOwnedByKubernetes(Exception):
    """A write through the API to a quota the Kubernetes agent keeps (a ResourceQuota object):
    the object is the record, so it is changed in Kubernetes (409)."""

    def __init__(self, namespace: str, quota: str):
        self.namespace, self.quota = namespace, quota
        super().__init__(
            f"namespace quota {namespace}/{quota} is a Kubernetes ResourceQuota, kept by the Kubernetes "
            "agent: change the ResourceQuota object, or give this quota another name"
        )


@dataclass
class QuotaView:
    """One namespace quota as the API and the admin show it: its rows gathered."""

    namespace: str
    quota: str
    source: str
    hard: dict[str, int | None]
    updated_at: datetime


def namespace_quotas(namespace: str | None = None, quota: str | None = None) -> list[QuotaView]:
    """Every namespace quota (both sources), by namespace, name and source."""
    rows = NamespaceQuota.objects.order_by("namespace", "quota", "source", "resource")
    if namespace is not None:
        rows = rows.filter(namespace=namespace)
    if quota is not None:
        rows = rows.filter(quota=quota)
    found: dict[tuple[str, str, str], QuotaView] = {}
    for row in rows:
        view = found.get((row.namespace, row.quota, row.source))
        if view is None:
            view = found[(row.namespace, row.quota, row.source)] = QuotaView(
                row.namespace, row.quota, row.source, dict.fromkeys(RESOURCES), row.updated_at
            )
        view.hard[row.resource] = row.hard
        view.updated_at = max(view.updated_at, row.updated_at)
    return list(found.values())


def namespace_quota(namespace: str, quota: str) -> QuotaView:
    """The quota named so: the one made through the API, else the ResourceQuota's. Raises
    NamespaceQuota.DoesNotExist."""
    found = namespace_quotas(namespace, quota)
    if not found:
        raise NamespaceQuota.DoesNotExist(f"no namespace quota {namespace}/{quota}")
    return next((q for q in found if q.source == NamespaceQuota.API), found[0])


def _api_limits(hard: dict[str, int | None]) -> dict[str, int]:
    limits = {resource: value for resource, value in hard.items() if value is not None}
    if not limits:
        raise ValidationError({"hard": [f"must set at least one of {', '.join(RESOURCES)}"]})
    return limits


def _owned_by_kubernetes(namespace: str, quota: str) -> bool:
    return NamespaceQuota.objects.filter(
        namespace=namespace, quota=quota, source=NamespaceQuota.KUBERNETES
    ).exists()


@retry_on_conflict
def create_namespace_quota(
    namespace: str, quota: str, hard: dict[str, int | None], by: str = ""
) -> QuotaView:
    """A namespace quota made by an operator (source `api`): `hard` per resource, null or left
    out for none, at least one set. Enforced as a ResourceQuota's rows are. Raises
    ValidationError (naming the field), QuotaOwnedByKubernetes when a ResourceQuota has the name."""
    limits = _api_limits(hard)
    validate_namespace_quota(namespace, quota, limits)
    exists = ValidationError({"name": [f"a namespace quota {namespace}/{quota} exists"]})
    try:
        with transaction.atomic():
            if _owned_by_kubernetes(namespace, quota):
                raise QuotaOwnedByKubernetes(namespace, quota)
            if NamespaceQuota.objects.filter(
                namespace=namespace, quota=quota, source=NamespaceQuota.API
            ).exists():
                raise exists
            _write_quota(namespace, quota, NamespaceQuota.API, limits)
    except IntegrityError:  # a create of the same name committed first
        raise exists from None
    _audit(
        f"namespacequota/{namespace}/{quota}",
        "NamespaceQuotaCreate",
        f"namespace quota {namespace}/{quota} created by {by}: {_said(limits)}",
        by,
    )
    return namespace_quota(namespace, quota)


@retry_on_conflict
def update_namespace_quota(
    namespace: str, quota: str, hard: dict[str, int | None], by: str = ""
) -> QuotaView:
    """Change an operator's namespace quota: each resource in `hard` set, null removes it, the
    ones left out stay; at least one stays set. Raises NamespaceQuota.DoesNotExist,
    ValidationError, QuotaOwnedByKubernetes for a ResourceQuota's rows."""
    with transaction.atomic():
        rows = _api_quota_rows(namespace, quota)
        wanted: dict[str, int | None] = {row.resource: row.hard for row in rows}
        wanted.update(hard)
        limits = _api_limits(wanted)
        validate_namespace_quota(namespace, quota, limits)
        changed = _write_quota(namespace, quota, NamespaceQuota.API, limits)
    if changed:
        _audit(
            f"namespacequota/{namespace}/{quota}",
            "NamespaceQuotaUpdate",
            f"namespace quota {namespace}/{quota} changed by {by}: {_said(limits)}",
            by,
        )
    return namespace_quota(namespace, quota)


def _api_quota_rows(namespace: str, quota: str) -> list[NamespaceQuota]:
    """An operator's quota rows, locked; NamespaceQuota.DoesNotExist when there are none,
    QuotaOwnedByKubernetes when the name is a ResourceQuota's."""
    rows = list(
        lock_namespace_quotas(
            NamespaceQuota.objects.filter(namespace=namespace, quota=quota, source=NamespaceQuota.API)
        )
    )
    if not rows:
        if _owned_by_kubernetes(namespace, quota):
            raise QuotaOwnedByKubernetes(namespace, quota)
        raise NamespaceQuota.DoesNotExist(f"no namespace quota {namespace}/{quota}")
    return rows


@retry_on_conflict
def delete_namespace_quota(namespace: str, quota: str, by: str = "") -> None:
    """Delete an operator's namespace quota. Raises NamespaceQuota.DoesNotExist,
    QuotaOwnedByKubernetes for a ResourceQuota's rows (deleted with their object only)."""
    with transaction.atomic():
        _api_quota_rows(namespace, quota)
        _write_quota(namespace, quota, NamespaceQuota.API, {})
    _audit(
        f"namespacequota/{namespace}/{quota}",
        "NamespaceQuotaDelete",
        f"namespace quota {namespace}/{quota} deleted by {by}",
        by,
    )


def _said(limits: dict[str, int]) -> str:
    return ", ".join(f"{resource} <= {hard}" for resource, hard in sorted(limits.items()))


# --- the queue tree, as the API, the pages and the metrics read it ----------------------


@dataclass
class QueueNode:
    """One queue with what its subtree holds and waits for (usage summed into ancestors)."""

    queue: Queue
    depth: int = 0
    children: list[str] = field(default_factory=list)
    used: Usage = field(default_factory=zero)
    pending_pods: int = 0
    running_pods: int = 0
    pending_jobs: int = 0
    running_jobs: int = 0
    #: Fair share per resource as the next cycle computes it (`QueueBook.fair_shares`).
    fair_share: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.queue.name

    @property
    def parent(self) -> str | None:
        return self.queue.parent.name if self.queue.parent else None

    @property
    def leaf(self) -> bool:
        return not self.children

    def resources(self) -> list[dict]:
        """Per resource: used against guarantee, quota and limit (None: none / unlimited)."""
        return [
            {
                "resource": resource,
                "unit": unit,
                "used": self.used[resource],
                **{kind: getattr(self.queue, f"{kind}_{resource}") for kind in KINDS},
                "fair_share": round(self.fair_share.get(resource, 0.0), 2),
            }
            for resource, unit in RESOURCES.items()
        ]


def queue_tree() -> list[QueueNode]:
    """Every queue, depth first (roots and siblings by name), with usage from the active
    allocations and pod and job counts, each summed into its ancestors; five queries."""
    Queue.default()
    queues = list(Queue.objects.select_related("parent").order_by("name"))
    nodes = {queue.name: QueueNode(queue) for queue in queues}
    for queue in queues:
        if queue.parent and queue.parent.name in nodes:
            nodes[queue.parent.name].children.append(queue.name)
    own: dict[str, QueueNode] = {name: QueueNode(node.queue) for name, node in nodes.items()}
    usage = queue_usage()
    for name, used in usage.items():
        if name in own:
            own[name].used = used
    pods = (
        Pod.objects.filter(status__in=LIVE_STATUSES).values("queue__name", "status").annotate(n=Count("id"))
    )
    for row in pods.order_by():
        mine = own.get(row["queue__name"] or DEFAULT_QUEUE)
        if mine is None:
            continue
        if row["status"] == Pod.PENDING:
            mine.pending_pods += row["n"]
        else:
            mine.running_pods += row["n"]
    jobs = (
        PodGroup.objects.filter(phase__in=LIVE_PHASES).values("queue__name", "phase").annotate(n=Count("id"))
    )
    for job in jobs.order_by():
        mine = own.get(job["queue__name"] or DEFAULT_QUEUE)
        if mine is None:
            continue
        if job["phase"] == PodGroup.RUNNING:
            mine.running_jobs += job["n"]
        else:
            mine.pending_jobs += job["n"]
    for name, mine in own.items():
        seen: set[str] = set()
        current: str | None = name
        while current is not None and current not in seen and current in nodes:
            seen.add(current)
            node = nodes[current]
            for resource in RESOURCES:
                node.used[resource] += mine.used[resource]
            node.pending_pods += mine.pending_pods
            node.running_pods += mine.running_pods
            node.pending_jobs += mine.pending_jobs
            node.running_jobs += mine.running_jobs
            current = node.parent
    for name, share in fair_share_book(usage).fair.items():
        if name in nodes:
            nodes[name].fair_share = share
    out: list[QueueNode] = []

    def walk(name: str, depth: int, path: set[str]) -> None:
        if name in path:
            return
        node = nodes[name]
        node.depth = depth
        out.append(node)
        for child in node.children:
            walk(child, depth + 1, path | {name})

    for node in list(nodes.values()):
        if node.parent is None or node.parent not in nodes:
            walk(node.name, 0, set())
    return out


class QueueStateCollector:
    """Per-queue gauges from `queue_tree` (usage summed into parents, per vGPU), read
    on each scrape; a database error leaves them out (`hamiadmin_cluster_state_up` tells)."""

    def collect(self):
        try:
            tree = queue_tree()
        except (DatabaseError, TransactionManagementError) as exc:
            # inside a transaction an earlier collector's error leaves (the default queue's
            # get_or_create then refuses to start its savepoint): left out all the same
            log.warning("metrics: queues not read: %s", type(exc).__name__)
            return
        used = GaugeMetricFamily(
            "hamiadmin_queue_used",
            "What a queue's pods hold now, its children's included: vgpus, gpumem (MiB), gpucores (%).",
            labels=["queue", "resource"],
        )
        limit = GaugeMetricFamily(
            "hamiadmin_queue_limit",
            "A queue's hard cap per resource, where it has one.",
            labels=["queue", "resource"],
        )
        jobs = GaugeMetricFamily(
            "hamiadmin_queue_pending_jobs", "Jobs (pod groups) of a queue not yet running.", labels=["queue"]
        )
        pods = GaugeMetricFamily("hamiadmin_queue_pending_pods", "Pending pods of a queue.", labels=["queue"])
        for node in tree:
            for row in node.resources():
                used.add_metric([node.name, row["resource"]], row["used"])
                if row["limit"] is not None:
                    limit.add_metric([node.name, row["resource"]], row["limit"])
            jobs.add_metric([node.name], node.pending_jobs)
            pods.add_metric([node.name], node.pending_pods)
        yield from (used, limit, jobs, pods)


_REGISTERED: set[int] = set()


def register_queue_metrics(registry) -> None:
    """Add the queue gauges to the scrape's cluster-state registry, once per registry."""
    if id(registry) not in _REGISTERED:
        registry.register(QueueStateCollector())
        _REGISTERED.add(id(registry))
