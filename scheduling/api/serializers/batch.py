"""Queues and pod groups (jobs): the tree with its usage, the jobs with their members, and the
operator's writes. Figures are objects by resource (`vgpus`, `gpumem` MiB, `gpucores` percent
of a card), the same keys in and out; null is none (guarantee, quota) or unlimited (limit)."""

from __future__ import annotations

import math

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.engine.batch.queues import RESOURCES
from scheduling.models import INT32_MAX, NamespaceQuota, Pod, PodGroup, Queue
from scheduling.services.batch import KINDS, QueueNode, QuotaView

from .fields import OutputModelSerializer, StrictCharField, StrictIntegerField, max_length
from .history import DecisionSerializer
from .pods import DNS_LABEL

#: The largest figure taken: far above any cluster, well inside a signed 64-bit column.
MOST = 10**15


class FiguresSerializer(serializers.Serializer):
    """One figure per resource; null: none (guarantee, quota) or unlimited (limit)."""

    vgpus = StrictIntegerField(min_value=0, max_value=MOST, allow_null=True, required=False)
    gpumem = StrictIntegerField(min_value=0, max_value=MOST, allow_null=True, required=False, help_text="MiB")
    gpucores = StrictIntegerField(
        min_value=0, max_value=MOST, allow_null=True, required=False, help_text="percent of a card"
    )


class UsageSerializer(serializers.Serializer):
    """What the active allocations hold, in vGPU units (per vGPU: a 2-card 4000 MiB ask is 8000 MiB)."""

    vgpus = serializers.IntegerField()
    gpumem = serializers.IntegerField(help_text="MiB")
    gpucores = serializers.IntegerField(help_text="percent of a card")


class CountsSerializer(serializers.Serializer):
    pending = serializers.IntegerField()
    running = serializers.IntegerField(help_text="scheduled or running (pods); running (jobs)")


class QueueSerializer(serializers.Serializer):
    """A queue of the tree: usage and counts are its own plus its children's."""

    name = serializers.CharField()
    parent = serializers.CharField(allow_null=True)  # type: ignore[assignment]  # a declared field, not DRF's Field.parent (the stubs mix the two)
    children = serializers.ListField(child=serializers.CharField())
    depth = serializers.IntegerField(help_text="0 for a root queue")
    leaf = serializers.BooleanField(help_text="only leaf queues take pods")
    weight = serializers.FloatField()
    namespaces = serializers.ListField(child=serializers.CharField())
    used = UsageSerializer()
    guarantee = FiguresSerializer()
    lend_guarantee = serializers.BooleanField(
        help_text="other queues may use the idle guarantee and give it back by reclaim; false: kept empty"
    )
    quota = FiguresSerializer()
    limit = FiguresSerializer()
    fair_share = serializers.DictField(
        child=serializers.FloatField(),
        help_text="per resource: guarantee, then quota, then the parent's rest by weight among queues with "
        "work waiting, never past the limit (docs/queues.md, Fair share)",
    )
    pods = CountsSerializer()
    jobs = CountsSerializer()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def to_representation(self, node: QueueNode) -> dict:
        queue = node.queue
        return {
            "name": queue.name,
            "parent": node.parent,
            "children": list(node.children),
            "depth": node.depth,
            "leaf": node.leaf,
            "weight": queue.weight,
            "namespaces": list(queue.namespaces or []),
            "used": dict(node.used),
            **{kind: queue.figures(kind) for kind in KINDS},
            "lend_guarantee": queue.lend_guarantee,
            "fair_share": {resource: round(node.fair_share.get(resource, 0.0), 2) for resource in RESOURCES},
            "pods": {"pending": node.pending_pods, "running": node.running_pods},
            "jobs": {"pending": node.pending_jobs, "running": node.running_jobs},
            "created_at": serializers.DateTimeField().to_representation(queue.created_at),
            "updated_at": serializers.DateTimeField().to_representation(queue.updated_at),
        }


class QueueWriteSerializer(serializers.Serializer):
    """`POST queues/` and `PATCH queues/{name}/`: what is sent changes, the rest stays.
    In a figures object, a resource left out stays as it was; null clears it."""

    name = StrictCharField(max_length=max_length(Queue, "name"), help_text="create only")
    parent = StrictCharField(  # type: ignore[assignment]  # a declared field, not DRF's Field.parent
        max_length=max_length(Queue, "name"), allow_null=True, required=False, help_text="a queue name"
    )
    weight = serializers.FloatField(required=False, min_value=0, max_value=1e6)
    namespaces = serializers.ListField(child=StrictCharField(max_length=63), required=False, max_length=1000)
    guarantee = FiguresSerializer(required=False)
    lend_guarantee = serializers.BooleanField(
        required=False, help_text="lend the idle guarantee, taken back by reclaim (default false)"
    )
    quota = FiguresSerializer(required=False)
    limit = FiguresSerializer(required=False)

    def validate_name(self, value: str) -> str:
        if not DNS_LABEL.fullmatch(value):
            raise serializers.ValidationError("must be lower-case letters, digits and '-'")
        return value

    def validate_weight(self, value: float) -> float:
        if not math.isfinite(value) or value <= 0:
            raise serializers.ValidationError("must be greater than 0")
        return value

    def validate_namespaces(self, value: list[str]) -> list[str]:
        bad = [name for name in value if not DNS_LABEL.fullmatch(name)]
        if bad:
            raise serializers.ValidationError(f"not namespace names: {', '.join(bad[:5])}")
        return value

    def changes(self) -> dict:
        """The validated body as service keywords (`guarantee_gpumem=...`), name left out."""
        data = dict(self.validated_data)
        data.pop("name", None)
        out = {}
        for kind in KINDS:
            for resource, value in (data.pop(kind, None) or {}).items():
                out[f"{kind}_{resource}"] = value
        out.update(data)
        return out


class MemberDecisionSerializer(DecisionSerializer):
    """A member's latest decision, with the batch verdict (gang, queue, quota) when one held it."""

    batch = serializers.SerializerMethodField()

    class Meta(DecisionSerializer.Meta):
        fields = DecisionSerializer.Meta.fields + ["batch"]
        read_only_fields = fields

    @extend_schema_field(
        serializers.DictField(
            allow_null=True,
            help_text="reason (GangUnschedulable, QueueLimitExceeded, ...), message, would_fit_on",
        )
    )
    def get_batch(self, decision) -> dict | None:
        return (decision.payload or {}).get("batch")


class MemberSerializer(OutputModelSerializer):
    """A pod of the job: where it landed, or why not."""

    pod = serializers.CharField(source="key", read_only=True, help_text="NAMESPACE/NAME")
    node = serializers.CharField(source="node.name", read_only=True, allow_null=True)
    decision = serializers.SerializerMethodField()

    class Meta:
        model = Pod
        fields = ["pod", "name", "status", "node", "reason", "decision"]
        read_only_fields = fields

    @extend_schema_field(MemberDecisionSerializer(allow_null=True))
    def get_decision(self, pod: Pod) -> dict | None:
        latest = pod.latest_decision
        return MemberDecisionSerializer(latest).data if latest else None


class OwnerSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="JobSet, RayCluster, PyTorchJob, Job...")
    name = serializers.CharField()


class SubgroupSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="a replicated job, a replica type, an LWS leader or workers")
    min_member = serializers.IntegerField(
        help_text="its own minimum: the gang starts only when this part reaches it"
    )


class PodGroupSerializer(OutputModelSerializer):
    """A job (gang): its figures, phase and conditions, and its members with their last decision."""

    queue = serializers.SerializerMethodField()
    min_resources = serializers.SerializerMethodField()
    owner = serializers.SerializerMethodField()
    subgroups = SubgroupSerializer(many=True, read_only=True)
    members = serializers.SerializerMethodField()

    class Meta:
        model = PodGroup
        fields = [
            "namespace",
            "name",
            "min_member",
            "min_resources",
            "queue",
            "priority",
            "schedule_timeout_seconds",
            "on_timeout",
            "max_evicted",
            "topology_key",
            "source",
            "owner",
            "subgroups",
            "phase",
            "reason",
            "conditions",
            "created_at",
            "updated_at",
            "running_at",
            "finished_at",
            "members",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True, help_text="null: the default queue"))
    def get_queue(self, group: PodGroup) -> str | None:
        return group.queue.name if group.queue else None

    @extend_schema_field(OwnerSerializer(allow_null=True))
    def get_owner(self, group: PodGroup) -> dict | None:
        """The members' top controller, for a gang found from it (source `owner`); else null."""
        return {"kind": group.owner_kind, "name": group.owner_name} if group.owner_kind else None

    @extend_schema_field(FiguresSerializer)
    def get_min_resources(self, group: PodGroup) -> dict:
        return {resource: getattr(group, f"min_{resource}") for resource in RESOURCES}

    @extend_schema_field(MemberSerializer(many=True))
    def get_members(self, group: PodGroup) -> list[dict]:
        members = getattr(group, "members", None)
        if members is None:
            members = list(group.pods.select_related("node").with_latest_decision().order_by("name"))
            Pod.objects.latest_decisions(members)
        return MemberSerializer(members, many=True).data  # type: ignore[return-value]  # many=True: a ReturnList, typed ReturnDict by the stubs


class PodGroupWriteSerializer(serializers.Serializer):
    """`POST podgroups/` and `PATCH podgroups/{namespace}/{name}/`: what is sent changes."""

    namespace = StrictCharField(
        max_length=max_length(PodGroup, "namespace"), required=False, default="default"
    )
    name = StrictCharField(max_length=max_length(PodGroup, "name"), help_text="create only")
    min_member = StrictIntegerField(required=False, min_value=1, max_value=1_000_000)
    min_resources = FiguresSerializer(required=False)
    queue = StrictCharField(
        max_length=max_length(Queue, "name"), allow_null=True, required=False, help_text="null: default"
    )
    priority = StrictIntegerField(required=False, min_value=-INT32_MAX - 1, max_value=INT32_MAX)
    schedule_timeout_seconds = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=INT32_MAX
    )
    on_timeout = serializers.ChoiceField(choices=PodGroup.ON_TIMEOUT, required=False)
    max_evicted = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=1_000_000,
        help_text="disruption budget: at most this many members being evicted at once; null: no budget",
    )

    def validate_namespace(self, value: str) -> str:
        if not DNS_LABEL.fullmatch(value):
            raise serializers.ValidationError("must be a Kubernetes namespace name")
        return value

    def changes(self) -> dict:
        data = dict(self.validated_data)
        data.pop("name", None)
        data.pop("namespace", None)
        for resource, value in (data.pop("min_resources", None) or {}).items():
            data[f"min_{resource}"] = value
        return data


class HardSerializer(FiguresSerializer):
    """A namespace quota's hard limits by resource; null: no limit on that resource. A key that
    is not a resource is refused by name, not dropped (a typo must not lift a quota)."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(str(key) for key in data if key not in RESOURCES)
            if unknown:
                raise serializers.ValidationError(
                    {key: [f"not one of {', '.join(RESOURCES)}"] for key in unknown[:10]}
                )
        return super().to_internal_value(data)


class NamespaceQuotaSerializer(serializers.Serializer):
    """A namespace quota: hard limits per resource for the pods of one namespace, counted as
    the cycle counts a queue limit (per vGPU, MiB granted). `source` says who keeps it: a
    Kubernetes ResourceQuota (`kubernetes`, read-only here) or the API and admin (`api`)."""

    namespace = serializers.CharField()
    name = serializers.CharField(source="quota")
    source = serializers.ChoiceField(choices=NamespaceQuota.SOURCES)  # type: ignore[assignment]  # a declared field, not DRF's Field.source
    editable = serializers.SerializerMethodField()
    hard = HardSerializer()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(
        serializers.BooleanField(help_text="false: a ResourceQuota's, changed in Kubernetes")
    )
    def get_editable(self, quota: QuotaView) -> bool:
        return quota.source == NamespaceQuota.API


class NamespaceQuotaWriteSerializer(serializers.Serializer):
    """`POST namespacequotas/` and `PATCH namespacequotas/{namespace}/{name}/`. In `hard`, a
    resource left out stays as it was (none on create), null removes it; at least one stays."""

    namespace = StrictCharField(max_length=max_length(NamespaceQuota, "namespace"), help_text="create only")
    name = StrictCharField(max_length=max_length(NamespaceQuota, "quota"), help_text="create only")
    hard = HardSerializer()

    def validate_namespace(self, value: str) -> str:
        if not DNS_LABEL.fullmatch(value):
            raise serializers.ValidationError("must be a Kubernetes namespace name")
        return value
