"""Pods waiting for or holding cards, and the allocations that hold them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from django.db import models
from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone
from django.utils.functional import cached_property

from scheduling.engine import PodSpec, triage

from .batch import PodGroup, Queue
from .cluster import Card, Node
from .fields import JSONField


def _decisions() -> type[models.Model]:
    """The Decision model, reached through its foreign key to Pod (history.py imports this
    module, so this one does not import it back)."""
    return cast("type[models.Model]", Pod._meta.get_field("decisions").related_model)


class PodQuerySet(models.QuerySet):
    """Reads of pods that the API, the pages and the services share."""

    def with_latest_decision(self) -> PodQuerySet:
        """Each pod with `latest_decision_id`, the id of its newest decision or None: a subquery
        on the (pod, -id) index, no query of its own."""
        newest = _decisions()._default_manager.filter(pod=OuterRef("pk")).order_by("-id").values("id")[:1]
        return self.annotate(latest_decision_id=Subquery(newest))

    def latest_decisions(self, pods: Iterable[Pod]) -> dict[int, models.Model]:
        """The newest decision of each of `pods` (read `with_latest_decision`), by pod id, in one
        query whatever their number. Each pod's `latest_decision` is set on the way."""
        pods = list(pods)
        ids = [found for found in (getattr(pod, "latest_decision_id", None) for pod in pods) if found]
        decisions = {
            decision.pod_id: decision  # type: ignore[attr-defined]
            for decision in _decisions()._default_manager.filter(pk__in=ids)
        }
        for pod in pods:
            pod.latest_decision = decisions.get(pod.pk)
        return decisions


class Pod(models.Model):
    """A pod as submitted, and where the scheduler has got with it.

    `revision` grows with every write, so a cycle that decided on an older row can tell
    and leave the pod for the next cycle. `parked` marks a pod whose spec is invalid:
    cycles skip it until its spec changes.

    `scheduled` is placed (cards held) but not yet bound; `running` is bound to its node
    (Kubernetes accepted the Binding, `bound_at`): hamiadmin does not follow the kubelet,
    so a running pod's containers may still be starting. It holds its cards until it ends.
    """

    PENDING = "pending"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    DELETED = "deleted"
    STATUSES = [
        (PENDING, "pending"),
        (SCHEDULED, "scheduled"),
        (RUNNING, "running"),
        (SUCCEEDED, "succeeded"),
        (FAILED, "failed"),
        (REJECTED, "rejected"),
        (DELETED, "deleted"),
    ]
    BOUND = (SCHEDULED, RUNNING)
    #: `engine.triage`'s classes of a waiting pod, as the Pending page and the API filter them.
    VERDICTS = [(value, triage.VERDICT_WORDS[value]) for value in triage.VERDICTS]
    FINISHED = (SUCCEEDED, FAILED, DELETED)

    API = "api"
    KUBERNETES = "kubernetes"
    EXTENDER = "extender"
    ORIGINS = [
        (API, "REST API"),
        (KUBERNETES, "Kubernetes watcher"),
        (EXTENDER, "kube-scheduler extender"),
    ]

    namespace = models.CharField(max_length=63, default="default")
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True, default="")
    origin = models.CharField(
        max_length=16,
        choices=ORIGINS,
        default=API,
        db_default=API,
        help_text="who submitted it: extender pods are placed only by kube-scheduler's filter calls",
    )
    annotations = JSONField(default=dict, blank=True)
    labels = JSONField(default=dict, blank=True, help_text="read for queue and group labels")
    group = models.ForeignKey(PodGroup, null=True, blank=True, on_delete=models.SET_NULL, related_name="pods")
    queue = models.ForeignKey(
        Queue,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="pods",
        help_text="the leaf queue it joined; empty: the default queue",
    )
    containers = JSONField(default=list)
    init_containers = JSONField(default=list, blank=True)
    scheduling = JSONField(
        default=dict,
        db_default=models.Value({}, output_field=models.JSONField()),
        blank=True,
        help_text="Kubernetes scheduling fields in the API's forms (SCHEDULING_FIELDS), those given only",
    )
    gated = models.BooleanField(
        default=False, db_default=False, help_text="has scheduling gates: never tried until they go"
    )
    priority = models.IntegerField(default=0)
    status = models.CharField(max_length=16, choices=STATUSES, default=PENDING)
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="pods")
    submitted_at = models.DateTimeField(default=timezone.now)
    scheduled_at = models.DateTimeField(null=True, blank=True)
    bound_at = models.DateTimeField(null=True, blank=True, help_text="Kubernetes accepted the Binding")
    finished_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    reason = models.TextField(blank=True, default="", help_text="the latest decision, in one line")
    verdict = models.CharField(
        max_length=16,
        choices=VERDICTS,
        blank=True,
        default="",
        db_default="",
        help_text="the latest waiting decision's class (engine.triage); empty once placed or not tried",
    )
    error = models.TextField(blank=True, default="")
    error_field = models.CharField(max_length=300, blank=True, default="")
    parked = models.BooleanField(default=False)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    held_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="a back-off no change of capacity cuts short (a placement given back: retry after this)",
    )
    allocated = models.TextField(blank=True, default="", help_text="hami.io/vgpu-devices-allocated")
    extra_annotations = JSONField(
        default=dict,
        blank=True,
        help_text="what the placement writes beside the allocation (hami.io/vgpu-mig-allocations)",
    )
    spec_hash = models.CharField(max_length=64, blank=True, default="")
    revision = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    objects = PodQuerySet.as_manager()

    class Meta:
        ordering = ["-priority", "submitted_at", "id"]
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="pod_unique_name")]
        indexes = [
            models.Index(
                fields=["-priority", "submitted_at", "id"],
                name="pod_pending_queue",
                condition=Q(status="pending", parked=False, gated=False),
            ),
            # which pending pods are due (back-off over, or none): without it each cycle and
            # wake walked every pending pod (28 ms at 100,000 backed off, issue 29)
            models.Index(
                fields=["next_attempt_at"],
                name="pod_pending_due",
                condition=Q(status="pending", parked=False, gated=False),
            ),
            models.Index(fields=["status", "-updated_at"], name="pod_status_recent"),
        ]

    def __str__(self) -> str:
        return self.key

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def as_spec(self) -> PodSpec:
        return PodSpec(
            name=self.name,
            namespace=self.namespace,
            annotations=self.annotations,
            containers=self.containers,
            init_containers=self.init_containers,
            uid=self.uid,
            labels=self.labels if isinstance(self.labels, dict) else {},
            **spec_fields(self.scheduling),
        )

    @property
    def gate_names(self) -> list[str]:
        return gate_names(self.scheduling)

    @classmethod
    def split_key(cls, key: str) -> tuple[str, str]:
        """`NAMESPACE/NAME` as (namespace, name); a bare NAME is in namespace `default`."""
        namespace, _, name = key.rpartition("/")
        return namespace or "default", name

    @cached_property
    def latest_decision(self) -> models.Model | None:
        """The newest decision (one query; none when read through `Pod.objects.latest_decisions`)."""
        return self.decisions.order_by("-id").first()


#: The Kubernetes scheduling fields a pod may carry (SPEC 10), by their API names, and the
#: `PodSpec` attribute each fills; stored in `Pod.scheduling` as given.
SCHEDULING_FIELDS = {
    "nodeName": "node_name",
    "nodeSelector": "node_selector",
    "affinity": "affinity",
    "tolerations": "tolerations",
    "topologySpreadConstraints": "topology_spread_constraints",
    "schedulingGates": "scheduling_gates",
    "volumes": "volumes",
    # what the pod's claims are judged against (`VolumeBinding`), gathered into `storage`
    "persistentVolumeClaims": "storage",
    "persistentVolumes": "storage",
    "storageClasses": "storage",
    # the pod's ResourceClaims as the watcher read them (`engine.claimhold`, `kube.drastate`)
    "resourceClaims": "claims",
}
#: The reason a gated pod shows instead of a decision (kube-scheduler's name).
SCHEDULING_GATED = "SchedulingGated"


def gate_names(scheduling) -> list[str]:
    """The names of a pod's scheduling gates (`schedulingGates: [{name}]`). A malformed gate
    still gates (its text stands for its name): a pod is never tried by mistake."""
    gates = scheduling.get("schedulingGates") if isinstance(scheduling, dict) else None
    if not isinstance(gates, list):
        return []
    return [str(gate.get("name", gate)) if isinstance(gate, dict) else str(gate) for gate in gates]


def waiting_verdict(verdict: str, gated: bool, error: str) -> str:
    """The class a waiting pod shows (`engine.triage`): a spec error parks it (`invalid`) and
    gates hold it (`rule`) whatever its last decision said; else that decision's class, empty
    when it was not tried. `verdict_filter` is the same rule in SQL."""
    if error or verdict == triage.INVALID:
        return triage.INVALID
    if gated:
        return triage.RULE
    return verdict


def decisive_reason(pod: Pod, payload: dict | None) -> triage.Triage | None:
    """What a waiting pod's first line says (`engine.triage`): its spec error, its gates, else
    the triage its latest decision stored; None when it has none (not tried, a lost race)."""
    if pod.error:
        return triage.Triage(triage.INVALID, triage.INVALID_CODE, pod.error, ("fix the pod's spec",))
    if pod.gated:
        why = gated_reason(pod.gate_names)
        return triage.Triage(triage.RULE, SCHEDULING_GATED, why, ("remove its scheduling gates",))
    return triage.Triage.from_dict((payload or {}).get("verdict"))


def verdict_filter(verdicts: Iterable[str]) -> Q:
    """Pods whose `waiting_verdict` is one of `verdicts`."""
    found = Q(pk__in=[])
    for value in verdicts:
        if value == triage.INVALID:
            found |= ~Q(error="") | Q(verdict=triage.INVALID)
        elif value == triage.RULE:
            found |= Q(error="") & (Q(gated=True) | Q(verdict=triage.RULE))
        else:
            found |= Q(error="", gated=False, verdict=value)
    return found


def gated_reason(names: list[str]) -> str:
    """The one-line reason of a gated pod (`Pod.reason`)."""
    return f"waiting for scheduling gates: {', '.join(names)}"


def spec_fields(scheduling) -> dict:
    """`PodSpec` keyword arguments from a stored `Pod.scheduling` (API forms kept as given;
    the engine judges them). A value of the wrong shape is passed as stored only where the
    engine reads a dict or list anyway; a missing field is left at PodSpec's default."""
    if not isinstance(scheduling, dict):
        return {}
    found: dict = {}
    for api_name, attribute in SCHEDULING_FIELDS.items():
        if api_name not in scheduling or scheduling[api_name] is None:
            continue
        if attribute == "storage":
            found.setdefault("storage", {})[api_name] = scheduling[api_name]
            continue
        found[attribute] = scheduling[api_name]
    if "scheduling_gates" in found:
        found["scheduling_gates"] = gate_names(scheduling)
    return found


class Allocation(models.Model):
    """One vGPU of one container on one card. Active ones make up the card's usage."""

    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="allocations")
    container_index = models.PositiveSmallIntegerField()
    container_name = models.CharField(max_length=253, blank=True, default="")
    card = models.ForeignKey(Card, on_delete=models.PROTECT, related_name="allocations")
    memory = models.PositiveIntegerField(help_text="MiB")
    cores = models.PositiveSmallIntegerField()
    active = models.BooleanField(default=True)
    #: Released, but its card's counters not lowered yet: the card was locked by another writer
    #: (a scheduling commit) and a release never waits for one. The card's counters still count
    #: it until the next settler that holds the card lowers them (`pipeline.settle`).
    owed = models.BooleanField(
        default=False, help_text="released, its card's counters not lowered yet (pipeline.settle)"
    )
    created_at = models.DateTimeField(default=timezone.now)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pod_id", "container_index", "id"]
        indexes = [
            models.Index(fields=["card"], name="allocation_active_card", condition=Q(active=True)),
            models.Index(fields=["pod"], name="allocation_active_pod", condition=Q(active=True)),
            models.Index(fields=["card"], name="allocation_owed_card", condition=Q(owed=True)),
        ]

    def __str__(self) -> str:
        state = "active" if self.active else "released, owed" if self.owed else "released"
        return f"{self.pod_id}[{self.container_index}] on {self.card_id}: {self.memory} MiB, {self.cores}% ({state})"
