"""Batch scheduling: queues with quotas in vGPU units, and pod groups (gangs).

Resources are counted in vGPU units (`scheduling.engine.batch.queues.RESOURCES`): `vgpus` (one per
vGPU a container asks, times its count), `gpumem` (MiB granted, summed over every vGPU) and
`gpucores` (percent of a card, summed: 100 is one whole card's cores).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from scheduling.engine.batch.queues import DEFAULT_QUEUE, RESOURCES

from .fields import JSONField


class Queue(models.Model):
    """A node of the queue tree. Only leaf queues take pods; a parent's limit bounds the sum of
    its children. Per resource: `guarantee` (kept for it; lent only with `lend_guarantee`),
    `quota` (deserved) and `limit` (hard cap)."""

    name = models.CharField(max_length=63, unique=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    weight = models.FloatField(
        default=1.0, help_text="share of what is left after guarantees, among siblings"
    )
    namespaces = JSONField(
        default=list, blank=True, help_text="namespaces whose pods join this queue when they name none"
    )
    guarantee_vgpus = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="never lent to other queues (vGPUs); empty: none"
    )
    guarantee_gpumem = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="never lent to other queues (MiB); empty: none"
    )
    guarantee_gpucores = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="never lent to other queues (percent of a card); empty: none"
    )
    quota_vgpus = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="deserved share (vGPUs); empty: none"
    )
    quota_gpumem = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="deserved share (MiB); empty: none"
    )
    quota_gpucores = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="deserved share (percent of a card); empty: none"
    )
    limit_vgpus = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="hard cap over this queue and its children (vGPUs); empty: unlimited"
    )
    limit_gpumem = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="hard cap over this queue and its children (MiB); empty: unlimited"
    )
    limit_gpucores = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="hard cap over this queue and its children (percent of a card); empty: unlimited",
    )
    lend_guarantee = models.BooleanField(
        default=False,
        db_default=False,
        help_text="lend the idle guarantee to other queues and take it back by reclaim (KAI); "
        "off: an idle guarantee is kept empty for this queue (Volcano)",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.weight is None or not self.weight > 0:
            raise ValidationError({"weight": "must be greater than 0"})
        seen = {self.pk}
        parent = self.parent
        while parent is not None:
            if parent.pk in seen:
                raise ValidationError({"parent": "a queue cannot be its own ancestor"})
            seen.add(parent.pk)
            parent = parent.parent
        if self.name == DEFAULT_QUEUE and self.parent_id is not None:
            raise ValidationError({"parent": "the default queue is a root queue"})

    def figures(self, kind: str) -> dict[str, int | None]:
        """`guarantee`, `quota` or `limit` per resource (None: none / unlimited)."""
        return {resource: getattr(self, f"{kind}_{resource}") for resource in RESOURCES}

    @classmethod
    def default(cls) -> Queue:
        queue, _ = cls.objects.get_or_create(name=DEFAULT_QUEUE)
        return queue


class PodGroup(models.Model):
    """A gang: its pods are placed together, at least `min_member` of them, or none.

    Phases (Volcano's): `pending` (fewer than `min_member` pods known, or not yet admitted),
    `inqueue` (admitted to cycles), `running` (at least `min_member` placed), `completed` (every
    member succeeded), `failed` (below `min_member` past `schedule_timeout_seconds`).
    """

    PENDING = "pending"
    INQUEUE = "inqueue"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    PHASES = [(p, p) for p in (PENDING, INQUEUE, RUNNING, COMPLETED, FAILED)]

    KEEP_PENDING = "pending"
    REJECT = "reject"
    ON_TIMEOUT = [(KEEP_PENDING, "members stay pending"), (REJECT, "members are rejected")]

    SOURCES = [
        ("annotation", "hami.io/group-name annotation"),
        ("volcano", "Volcano scheduling.k8s.io/group-name"),
        ("coscheduling", "scheduler-plugins scheduling.x-k8s.io/pod-group"),
        ("workload", "Kubernetes Workload API PodGroup (spec.schedulingGroup)"),
        ("api", "REST API or admin"),
        ("kai", "KAI pod-group-name"),
        ("owner", "the pods' top controller (kube/owners.py)"),
    ]

    namespace = models.CharField(max_length=63, default="default")
    name = models.CharField(max_length=253)
    min_member = models.PositiveIntegerField(default=1)
    min_vgpus = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="minResources: vGPUs, checked against the queue limits"
    )
    min_gpumem = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="minResources: MiB, checked against the queue limits"
    )
    min_gpucores = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="minResources: percent of a card, checked against the queue limits"
    )
    queue = models.ForeignKey(Queue, null=True, blank=True, on_delete=models.SET_NULL, related_name="groups")
    priority = models.IntegerField(default=0)
    schedule_timeout_seconds = models.PositiveIntegerField(null=True, blank=True)
    on_timeout = models.CharField(max_length=16, choices=ON_TIMEOUT, default=KEEP_PENDING)
    max_evicted = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="disruption budget: at most this many members being evicted at once (null: no budget)",
    )
    topology_key = models.CharField(
        max_length=317,
        blank=True,
        default="",
        help_text="node label whose one value holds every member (schedulingConstraints.topology[].key)",
    )
    source = models.CharField(max_length=16, choices=SOURCES, default="api")
    owner_kind = models.CharField(
        max_length=63, blank=True, default="", help_text="the members' top controller's kind (JobSet...)"
    )
    owner_name = models.CharField(max_length=253, blank=True, default="", help_text="its name")
    subgroups = JSONField(
        default=list,
        blank=True,
        help_text="the gang's parts, each with its own minimum ([{name, min_member}]): each must reach it",
    )
    phase = models.CharField(max_length=16, choices=PHASES, default=PENDING)
    reason = models.TextField(blank=True, default="", help_text="the latest gang verdict, in one line")
    conditions = JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    running_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: The member pods, where a page of groups read them together (not a column:
    #: `api.views.batch.groups_with_members`); absent otherwise. Pods, typed as models so that
    #: this module does not lean on `pods`, which leans on it.
    members: Sequence[models.Model]

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="podgroup_unique_name")]

    def __str__(self) -> str:
        return self.key

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def min_resources(self) -> dict[str, int]:
        return {
            resource: value
            for resource in RESOURCES
            if (value := getattr(self, f"min_{resource}")) is not None
        }

    #: The condition reason of a gang its owner resized (`owner_scaled`).
    OWNER_SCALED = "OwnerScaled"

    def owner_scaled(self, before: int, message: str, now=None) -> None:
        """Note, as a condition, that the owner it was found from changed its size or parts
        (`min_member` was `before`); the phase and verdict line are left to the next cycle."""
        now = now or timezone.now()
        self.conditions = [
            *self.conditions[-19:],
            {
                "phase": self.phase,
                "reason": self.OWNER_SCALED,
                "message": f"min_member {before} -> {self.min_member}: {message}",
                "at": now.isoformat(),
            },
        ]

    def set_phase(self, phase: str, reason: str, message: str, now=None) -> bool:
        """Move to `phase`, with a condition when the phase or reason changes; True if changed."""
        now = now or timezone.now()
        last = self.conditions[-1] if self.conditions else {}
        changed = self.phase != phase or self.reason != message
        if self.phase != phase or last.get("reason") != reason:
            self.conditions = [
                *self.conditions[-19:],
                {"phase": phase, "reason": reason, "message": message, "at": now.isoformat()},
            ]
        if phase == self.RUNNING and self.running_at is None:
            self.running_at = now
        if phase in (self.COMPLETED, self.FAILED) and self.finished_at is None:
            self.finished_at = now
        self.phase, self.reason = phase, message
        return changed


class NamespaceQuota(models.Model):
    """One hard limit of a namespace quota on a HAMi resource, enforced in the pod's namespace
    like a queue limit. Two sources, kept apart: a Kubernetes ResourceQuota (`nvidia.com/gpu`,
    `nvidia.com/gpumem`, `nvidia.com/gpucores`, with or without `requests.`/`limits.`) read by
    the Kubernetes agent, which alone writes those rows; or a quota an operator made through the
    REST API or the admin, which the agent never touches. Every quota of a namespace holds: the
    tighter one wins."""

    KUBERNETES = "kubernetes"
    API = "api"
    SOURCES = [(KUBERNETES, "Kubernetes ResourceQuota"), (API, "REST API or admin")]

    namespace = models.CharField(max_length=63)
    quota = models.CharField(max_length=253, help_text="the quota's name (a ResourceQuota object's name)")
    source = models.CharField(max_length=16, choices=SOURCES, default=KUBERNETES, db_default=KUBERNETES)
    resource = models.CharField(max_length=16, choices=[(r, r) for r in RESOURCES])
    hard = models.PositiveBigIntegerField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["namespace", "quota", "source", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "quota", "source", "resource"], name="namespacequota_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.quota}: {self.resource} <= {self.hard}"
