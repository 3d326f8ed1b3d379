"""One serializer per resource. Field names follow the scenario format (SPEC 9) wherever the
same thing appears there: a card has `uuid`, `index`, `type`, `slots`, `memory`, `cores`,
`numa`, `health`, `links` and `used`; a decision is a pod object of the simulate output.

Input serializers check the envelope (types, required fields); what a pod asks for and what
its annotations mean is checked by the engine, so there is one rule book.
"""

from __future__ import annotations

import re

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling import simulations
from scheduling.models import Allocation, Card, Cycle, Decision, Node, Pod

# Kubernetes names: namespaces are DNS-1123 labels, pod names DNS-1123 subdomains.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
INT32 = 2**31 - 1


# --- fields that do not coerce: a number is not a name, a string is not a number ---------------


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float) or data != int(data):
            self.fail("invalid")
        return super().to_internal_value(int(data))


# --- shapes shared by several resources ------------------------------------------------------


class CapacitySerializer(serializers.Serializer):
    slots = serializers.IntegerField()
    memory = serializers.IntegerField(help_text="MiB")
    cores = serializers.IntegerField(help_text="percent of one card")


class DeviceSerializer(serializers.Serializer):
    """One vGPU held by a container (SPEC 9 `devices`)."""

    uuid = serializers.CharField()
    memory = serializers.IntegerField(help_text="MiB")
    cores = serializers.IntegerField()


class CardVerdictSerializer(serializers.Serializer):
    uuid = serializers.CharField()
    index = serializers.IntegerField()
    score = serializers.FloatField()
    eligible = serializers.BooleanField()
    reason = serializers.CharField(allow_null=True)
    stage = serializers.CharField(allow_null=True, required=False)
    chosen = serializers.BooleanField(required=False)
    decided_by = serializers.CharField(allow_null=True, required=False)
    numa = serializers.IntegerField(required=False)


class PlacementSerializer(serializers.Serializer):
    name = serializers.CharField(allow_blank=True)
    devices = DeviceSerializer(many=True)
    cards = CardVerdictSerializer(many=True, help_text="every card of the chosen node, in chain order")


class WeightsSerializer(serializers.Serializer):
    slot = serializers.IntegerField()
    core = serializers.IntegerField()
    memory = serializers.IntegerField()


class PolicySerializer(serializers.Serializer):
    node = serializers.CharField()
    gpu = serializers.ListField(child=serializers.CharField(), help_text="the chain as parsed")
    filters = serializers.ListField(child=serializers.CharField())
    sort_keys = serializers.ListField(child=serializers.CharField())
    ignored = serializers.ListField(child=serializers.CharField())
    weights = WeightsSerializer(allow_null=True)
    node_ignored = serializers.CharField(allow_null=True, required=False)
    numa_bind = serializers.BooleanField(required=False)


class PodDecisionSerializer(serializers.Serializer):
    """A pod object of the simulate output (SPEC 9)."""

    name = serializers.CharField()
    namespace = serializers.CharField()
    status = serializers.ChoiceField(choices=["scheduled", "pending", "rejected"])
    node = serializers.CharField(allow_null=True)
    containers = PlacementSerializer(many=True)
    allocated = serializers.CharField(allow_null=True, help_text="hami.io/vgpu-devices-allocated")
    node_scores = serializers.DictField(child=serializers.FloatField())
    failed_nodes = serializers.DictField(child=serializers.CharField())
    nodes_fit = serializers.IntegerField()
    nodes_failed = serializers.IntegerField()
    reasons = serializers.DictField(child=serializers.IntegerField())
    policy = PolicySerializer(allow_null=True)
    error = serializers.CharField(allow_null=True)


class SimulationSerializer(serializers.Serializer):
    pods = PodDecisionSerializer(many=True)


class SimulationJobSerializer(serializers.Serializer):
    """A simulation too big for the request, run in the background (scheduling.simulations)."""

    id = serializers.CharField()
    url = serializers.URLField(required=False, help_text="in the 202 answer: where to read the status and result")
    status = serializers.ChoiceField(choices=simulations.STATUSES)
    work = serializers.IntegerField(help_text="pods x (nodes + cards)")
    submitted_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(allow_null=True, help_text="why it failed")
    result = SimulationSerializer(required=False, help_text="once done: the same JSON as a simulation answered at once")


class ScenarioCardSerializer(serializers.Serializer):
    """A card of SPEC 9 (documentation; the engine validates)."""

    uuid = serializers.CharField()
    index = serializers.IntegerField(required=False, min_value=0)
    type = serializers.CharField(required=False, default="NVIDIA")
    slots = serializers.IntegerField(required=False, min_value=0, default=10)
    memory = serializers.IntegerField(min_value=0, help_text="MiB")
    cores = serializers.IntegerField(required=False, min_value=0, default=100)
    numa = serializers.IntegerField(required=False, default=0)
    health = serializers.BooleanField(required=False, default=True)
    mode = serializers.CharField(required=False, allow_blank=True)
    links = serializers.DictField(
        child=serializers.IntegerField(min_value=0), required=False, help_text="pair scores by card UUID"
    )


class ScenarioUsedCardSerializer(ScenarioCardSerializer):
    used = CapacitySerializer(required=False)


class ScenarioNodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    annotations = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    labels = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    ready = serializers.BooleanField(required=False, default=True)
    devices = ScenarioUsedCardSerializer(many=True, required=False)


class ContainerSpecSerializer(serializers.Serializer):
    """A Kubernetes container as far as the scheduler reads it: `name` and `resources`."""

    name = serializers.CharField(required=False, allow_blank=True)
    resources = serializers.DictField(
        required=False,
        help_text='{"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, ...}, "requests": {...}}',
    )


class ScenarioPodSerializer(serializers.Serializer):
    name = serializers.CharField()
    namespace = serializers.CharField(required=False, default="default")
    annotations = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    containers = ContainerSpecSerializer(many=True, allow_empty=False, min_length=1)
    initContainers = ContainerSpecSerializer(many=True, required=False)  # noqa: N815 (Kubernetes name)


class ScenarioResourcesSerializer(serializers.Serializer):
    """SPEC 2 defaults: what a container gets for a resource it does not name."""

    memory_percentage = StrictIntegerField(
        min_value=1, max_value=100, required=False, default=100,
        help_text="memory share of a container naming neither gpumem nor gpumem-percentage",
    )  # fmt: skip
    cores = StrictIntegerField(
        min_value=0, max_value=100, required=False, default=0, help_text="cores of a container not naming gpucores"
    )
    exclusive_cores = StrictIntegerField(
        min_value=0, max_value=100, required=False, default=100,
        help_text="cores of a container that wants the whole card",
    )  # fmt: skip


class ClusterConfigSerializer(serializers.Serializer):
    node_scheduler_policy = serializers.ChoiceField(choices=["binpack", "spread"], required=False)
    gpu_scheduler_policy = serializers.CharField(required=False, allow_blank=True, max_length=200)
    resources = ScenarioResourcesSerializer(required=False)


class ScenarioSerializer(serializers.Serializer):
    """The body of `POST simulate/`: the scenario format of SPEC 9."""

    config = ClusterConfigSerializer(required=False)
    nodes = ScenarioNodeSerializer(many=True)
    pods = ScenarioPodSerializer(many=True)


# --- cluster -------------------------------------------------------------------------------


class TenantSerializer(serializers.Serializer):
    """A vGPU held on a card: which pod and container, how much."""

    pod = serializers.CharField(help_text="NAMESPACE/NAME")
    container = serializers.CharField(allow_blank=True)
    memory = serializers.IntegerField()
    cores = serializers.IntegerField()


class CardSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    used = serializers.SerializerMethodField()
    free = serializers.SerializerMethodField()
    tenants = serializers.SerializerMethodField()

    class Meta:
        model = Card
        fields = [
            "uuid", "node", "index", "type", "slots", "memory", "cores", "numa", "health", "mode",
            "cordoned", "present", "over_capacity", "links", "used", "free", "tenants", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(CapacitySerializer)
    def get_used(self, card: Card) -> dict:
        return {"slots": card.used_slots, "memory": card.used_memory, "cores": card.used_cores}

    @extend_schema_field(CapacitySerializer)
    def get_free(self, card: Card) -> dict:
        return {
            "slots": max(0, card.slots - card.used_slots),
            "memory": max(0, card.memory - card.used_memory),
            "cores": max(0, card.cores - card.used_cores),
        }

    @extend_schema_field(TenantSerializer(many=True))
    def get_tenants(self, card: Card) -> list[dict]:
        held = getattr(card, "active_allocations", None)
        if held is None:
            held = card.allocations.filter(active=True).select_related("pod")
        return [
            {"pod": a.pod.key, "container": a.container_name, "memory": a.memory, "cores": a.cores} for a in held
        ]


class NodeUsageSerializer(serializers.Serializer):
    cards = serializers.IntegerField(help_text="present cards")
    used = CapacitySerializer()
    total = CapacitySerializer()


class NodeSerializer(serializers.ModelSerializer):
    usage = serializers.SerializerMethodField()
    cards = CardSerializer(many=True, read_only=True)

    class Meta:
        model = Node
        fields = ["name", "labels", "annotations", "ready", "not_ready_reason", "last_heartbeat", "usage", "cards"]
        read_only_fields = fields

    @extend_schema_field(NodeUsageSerializer)
    def get_usage(self, node: Node) -> dict:
        cards = [card for card in node.cards.all() if card.present]
        total = {"slots": 0, "memory": 0, "cores": 0}
        used = {"slots": 0, "memory": 0, "cores": 0}
        for card in cards:
            total["slots"] += card.slots
            total["memory"] += card.memory
            total["cores"] += card.cores
            used["slots"] += card.used_slots
            used["memory"] += card.used_memory
            used["cores"] += card.used_cores
        return {"cards": len(cards), "used": used, "total": total}


# --- agents --------------------------------------------------------------------------------


class AgentReportSerializer(serializers.Serializer):
    """An agent's inventory: the envelope. Cards, labels and annotations are checked by the
    engine's scenario rules, so errors name them as `devices[2].memory` or `labels.zone`."""

    node = StrictCharField(max_length=253)
    labels = serializers.DictField(required=False, default=dict)
    annotations = serializers.DictField(required=False, default=dict)
    devices = serializers.ListField(allow_empty=True)

    #: Card numbers the database stores as 32-bit integers (the engine checks the rest).
    CARD_INTEGERS = {"index": 0, "slots": 0, "memory": 0, "cores": 0, "numa": -INT32 - 1}

    def validate(self, attrs):
        for position, card in enumerate(attrs["devices"]):
            if not isinstance(card, dict):
                continue
            for name, low in self.CARD_INTEGERS.items():
                value = card.get(name)
                if isinstance(value, int | float) and not isinstance(value, bool) and value > INT32:
                    raise serializers.ValidationError({f"devices[{position}].{name}": [f"must be at most {INT32}"]})
                if isinstance(value, int | float) and not isinstance(value, bool) and value < low:
                    raise serializers.ValidationError({f"devices[{position}].{name}": [f"must be at least {low}"]})
        return attrs


class AgentReportDocSerializer(AgentReportSerializer):
    """The same body with the card fields spelled out (schema only)."""

    labels = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    annotations = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    devices = ScenarioCardSerializer(many=True, help_text="cards as in SPEC 9, without used")

    class Meta:
        ref_name = "AgentReport"


class CardReassignSerializer(serializers.Serializer):
    node = serializers.CharField(max_length=253, help_text="the node the card now belongs to")


class RefusedCardSerializer(serializers.Serializer):
    field = serializers.CharField(help_text="where in the report, e.g. devices[1].uuid")
    uuid = serializers.CharField()
    message = serializers.CharField()


class AgentReportResultSerializer(serializers.Serializer):
    node = serializers.CharField()
    cards = serializers.IntegerField(help_text="cards in this report")
    absent = serializers.ListField(
        child=serializers.CharField(), help_text="cards of this node missing from the report (kept, take no pods)"
    )
    refused = RefusedCardSerializer(
        many=True, help_text="cards of another node named in this report: refused card by card, the rest was taken"
    )
    heartbeat = serializers.DateTimeField()


# --- pods ----------------------------------------------------------------------------------


class PodSubmitSerializer(serializers.Serializer):
    """`POST pods/`: the envelope. Resources and annotations are then checked by the engine,
    whose errors name the field (`containers[0].resources.limits.nvidia.com/gpu`)."""

    name = StrictCharField(max_length=253)
    namespace = StrictCharField(max_length=63, required=False, default="default")
    uid = StrictCharField(max_length=64, required=False, allow_blank=True, default="")
    annotations = serializers.DictField(required=False, default=dict)
    containers = serializers.ListField(allow_empty=False)
    initContainers = serializers.ListField(required=False, default=list)  # noqa: N815 (Kubernetes name)
    priority = StrictIntegerField(required=False, default=0, min_value=-INT32 - 1, max_value=INT32)

    def validate_name(self, value: str) -> str:
        if not DNS_SUBDOMAIN.fullmatch(value):
            raise serializers.ValidationError(
                "must be a Kubernetes name: lower-case letters, digits, '-' and '.', "
                "starting and ending with a letter or digit"
            )
        return value

    def validate_namespace(self, value: str) -> str:
        if not DNS_LABEL.fullmatch(value):
            raise serializers.ValidationError(
                "must be a Kubernetes namespace: lower-case letters, digits and '-', "
                "starting and ending with a letter or digit"
            )
        return value


class PodSubmitDocSerializer(PodSubmitSerializer):
    """The same body with the container fields spelled out (schema only)."""

    annotations = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    containers = ContainerSpecSerializer(many=True, allow_empty=False, min_length=1)
    initContainers = ContainerSpecSerializer(many=True, required=False)  # noqa: N815


class ContainerStatusSerializer(serializers.Serializer):
    name = serializers.CharField(allow_blank=True)
    resources = serializers.DictField(required=False)
    devices = DeviceSerializer(many=True, help_text="the vGPUs this container holds now")


class DecisionSerializer(serializers.ModelSerializer):
    """One attempt at one pod: the engine's explanation (a pod of the simulate output) plus
    when, in which cycle, and the one-line reason."""

    pod = serializers.CharField(source="pod.key", read_only=True)
    explanation = serializers.SerializerMethodField()

    class Meta:
        model = Decision
        fields = ["id", "pod", "cycle", "outcome", "node", "reason", "error", "duration_ms", "created_at",
                  "explanation"]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(PodDecisionSerializer)
    def get_explanation(self, decision: Decision) -> dict:
        return decision.payload

    def to_representation(self, instance):
        """The explanation's fields at the top level, so a decision reads like a simulated pod."""
        out = super().to_representation(instance)
        explanation = out.pop("explanation") or {}
        for key in ("policy", "containers", "node_scores", "failed_nodes", "nodes_fit", "nodes_failed",
                    "reasons", "allocated"):  # fmt: skip
            out[key] = explanation.get(key)
        if not out["error"]:
            out["error"] = explanation.get("error")
        return out


class DecisionDocSerializer(serializers.Serializer):
    """Schema of `DecisionSerializer`'s flattened output."""

    id = serializers.IntegerField()
    pod = serializers.CharField(help_text="NAMESPACE/NAME")
    cycle = serializers.IntegerField(allow_null=True)
    outcome = serializers.ChoiceField(choices=Decision.OUTCOMES)
    node = serializers.CharField(allow_blank=True)
    reason = serializers.CharField(allow_blank=True)
    error = serializers.CharField(allow_null=True, allow_blank=True)
    duration_ms = serializers.FloatField()
    created_at = serializers.DateTimeField()
    policy = PolicySerializer(allow_null=True)
    containers = PlacementSerializer(many=True, allow_null=True)
    node_scores = serializers.DictField(child=serializers.FloatField(), allow_null=True)
    failed_nodes = serializers.DictField(child=serializers.CharField(), allow_null=True)
    nodes_fit = serializers.IntegerField(allow_null=True)
    nodes_failed = serializers.IntegerField(allow_null=True)
    reasons = serializers.DictField(child=serializers.IntegerField(), allow_null=True)
    allocated = serializers.CharField(allow_null=True)


class PodSerializer(serializers.ModelSerializer):
    """A pod as the list shows it."""

    node = serializers.CharField(source="node.name", read_only=True, allow_null=True)
    allocated = serializers.SerializerMethodField()

    class Meta:
        model = Pod
        fields = [
            "namespace", "name", "uid", "origin", "status", "node", "priority", "allocated", "reason", "error",
            "error_field", "attempts", "submitted_at", "scheduled_at", "bound_at", "finished_at",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True, help_text="hami.io/vgpu-devices-allocated"))
    def get_allocated(self, pod: Pod) -> str | None:
        return pod.allocated or None


class PodDetailSerializer(PodSerializer):
    """A pod with its spec, the vGPUs each container holds, and the latest decision."""

    containers = serializers.SerializerMethodField()
    initContainers = serializers.JSONField(source="init_containers", read_only=True)  # noqa: N815
    decision = serializers.SerializerMethodField()

    class Meta(PodSerializer.Meta):
        fields = PodSerializer.Meta.fields + ["annotations", "containers", "initContainers", "decision"]
        read_only_fields = fields

    @extend_schema_field(ContainerStatusSerializer(many=True))
    def get_containers(self, pod: Pod) -> list[dict]:
        held: dict[int, list[dict]] = {}
        for allocation in pod.allocations.filter(active=True).select_related("card").order_by(
            "container_index", "id"
        ):
            held.setdefault(allocation.container_index, []).append(
                {"uuid": allocation.card.uuid, "memory": allocation.memory, "cores": allocation.cores}
            )
        out = []
        for position, spec in enumerate(pod.containers if isinstance(pod.containers, list) else []):
            spec = spec if isinstance(spec, dict) else {}
            out.append(
                {
                    "name": spec.get("name") or "",
                    "resources": spec.get("resources") or {},
                    "devices": held.get(position, []),
                }
            )
        return out

    @extend_schema_field(DecisionDocSerializer(allow_null=True))
    def get_decision(self, pod: Pod) -> dict | None:
        latest = pod.decisions.order_by("-id").first()
        return DecisionSerializer(latest).data if latest else None


class PodSubmittedSerializer(PodDetailSerializer):
    """The answer to a submission: the pod, and what was accepted but ignored."""

    warnings = serializers.SerializerMethodField()

    class Meta(PodDetailSerializer.Meta):
        fields = PodDetailSerializer.Meta.fields + ["warnings"]
        read_only_fields = fields

    @extend_schema_field(
        serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()),
            help_text="by field: values accepted but ignored (unknown chain names, unknown node policy)",
        )
    )
    def get_warnings(self, pod: Pod) -> dict[str, list[str]]:
        return self.context.get("warnings", {})


class PendingPodSerializer(serializers.ModelSerializer):
    """A waiting pod: how long, with which chain, and why (summed over nodes)."""

    age_seconds = serializers.SerializerMethodField()
    chain = serializers.SerializerMethodField()
    reasons = serializers.SerializerMethodField()

    class Meta:
        model = Pod
        fields = ["namespace", "name", "priority", "submitted_at", "age_seconds", "attempts", "chain",
                  "reason", "reasons", "error", "error_field", "parked", "next_attempt_at"]  # fmt: skip
        read_only_fields = fields

    def _latest(self, pod: Pod) -> dict:
        latest = getattr(pod, "latest_decisions", None)
        if latest is None:
            decision = pod.decisions.order_by("-id").first()
            return decision.payload if decision else {}
        return latest[0].payload if latest else {}

    @extend_schema_field(OpenApiTypes.FLOAT)
    def get_age_seconds(self, pod: Pod) -> float:
        return round((timezone.now() - pod.submitted_at).total_seconds(), 3)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_chain(self, pod: Pod) -> list[str]:
        policy = self._latest(pod).get("policy") or {}
        if policy.get("gpu") is not None:
            return policy["gpu"]
        annotations = pod.annotations if isinstance(pod.annotations, dict) else {}
        value = annotations.get("hami.io/gpu-scheduler-policy")
        if not isinstance(value, str):
            return []
        from scheduling.engine.annotations import parse_chain

        return list(parse_chain(value)[0])

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_reasons(self, pod: Pod) -> dict[str, int]:
        return self._latest(pod).get("reasons") or {}


# --- history -------------------------------------------------------------------------------


class AllocationSerializer(serializers.ModelSerializer):
    pod = serializers.CharField(source="pod.key", read_only=True)
    namespace = serializers.CharField(source="pod.namespace", read_only=True)
    container = serializers.CharField(source="container_name", read_only=True)
    card = serializers.CharField(source="card.uuid", read_only=True)
    node = serializers.CharField(source="card.node.name", read_only=True)

    class Meta:
        model = Allocation
        fields = ["id", "pod", "namespace", "container", "container_index", "card", "node", "memory", "cores",
                  "created_at"]  # fmt: skip
        read_only_fields = fields


class CycleSerializer(serializers.ModelSerializer):
    class Meta:
        model = Cycle
        fields = [
            "id", "started_at", "finished_at", "trigger", "worker", "considered", "placed", "pending",
            "rejected", "conflicts", "skipped", "nodes", "snapshot_ms", "decide_ms", "commit_ms", "duration_ms",
        ]  # fmt: skip
        read_only_fields = fields


class ConfigSerializer(serializers.Serializer):
    """The cluster defaults, in the `config` form of a scenario (SPEC 9)."""

    node_scheduler_policy = serializers.ChoiceField(choices=["binpack", "spread"])
    gpu_scheduler_policy = StrictCharField(
        max_length=200, allow_blank=True, trim_whitespace=False, help_text="the default chain, e.g. spread"
    )
    resources = ScenarioResourcesSerializer()
    changed_by = serializers.CharField(read_only=True, allow_blank=True)
    changed_at = serializers.DateTimeField(read_only=True, allow_null=True)
