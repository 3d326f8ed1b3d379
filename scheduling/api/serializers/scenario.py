"""The scenario format of SPEC 9: the body of `POST simulate/`, its answer (a pod object per
pod, also the explanation every decision keeps), and the queued simulation job. Field names
follow SPEC 9: a card has `uuid`, `index`, `type`, `slots`, `memory`, `cores`, `numa`,
`health`, `links` and `used`. Documentation of what the engine validates, and output shapes.
"""

from __future__ import annotations

from rest_framework import serializers

from scheduling.models import SchedulerConfig
from scheduling.services import simulations

from .fields import StrictIntegerField, max_length


class CapacitySerializer(serializers.Serializer):
    slots = serializers.IntegerField()
    memory = serializers.IntegerField(help_text="MiB")
    cores = serializers.IntegerField(help_text="percent of one card")


class DeviceSerializer(serializers.Serializer):
    """One vGPU held by a container (SPEC 9 `devices`)."""

    uuid = serializers.CharField()
    memory = serializers.IntegerField(help_text="MiB")
    cores = serializers.IntegerField()


# --- the answer: one pod object per pod --------------------------------------------------------


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
    groups = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="scenarios with queues or groups: per group name, min_member, members, placed, scheduled, verdict",
    )
    queues = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="scenarios with queues or groups: per queue name, parent, used and limit in vGPU units",
    )


class SimulationJobSerializer(serializers.Serializer):
    """A simulation too big for the request, run in the background (scheduling.services.simulations)."""

    id = serializers.CharField()
    url = serializers.URLField(
        required=False, help_text="in the 202 answer: where to read the status and result"
    )
    status = serializers.ChoiceField(choices=simulations.STATUSES)
    work = serializers.IntegerField(help_text="pods x (nodes + cards)")
    submitted_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(allow_null=True, help_text="why it failed")
    result = SimulationSerializer(
        required=False, help_text="once done: the same JSON as a simulation answered at once"
    )


# --- the body: cluster, config and pods ---------------------------------------------------------


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
    containers = ContainerSpecSerializer(many=True, allow_empty=False, min_length=1)  # type: ignore[call-arg]  # many=True: ListSerializer's min_length, unknown to the stubs
    initContainers = ContainerSpecSerializer(many=True, required=False)  # noqa: N815 (Kubernetes name)
    priority = serializers.IntegerField(
        required=False, help_text="the pod's priority (a batch scenario: decided as the live cycle)"
    )


class ScenarioResourcesSerializer(serializers.Serializer):
    """SPEC 2 defaults: what a container gets for a resource it does not name."""

    memory_percentage = StrictIntegerField(
        min_value=1,
        max_value=SchedulerConfig.MAX_PERCENT,
        required=False,
        default=100,
        help_text="memory share of a container naming neither gpumem nor gpumem-percentage",
    )
    cores = StrictIntegerField(
        min_value=0,
        max_value=SchedulerConfig.MAX_PERCENT,
        required=False,
        default=0,
        help_text="cores of a container not naming gpucores",
    )
    exclusive_cores = StrictIntegerField(
        min_value=0,
        max_value=SchedulerConfig.MAX_PERCENT,
        required=False,
        default=100,
        help_text="cores of a container that wants the whole card",
    )


class ClusterConfigSerializer(serializers.Serializer):
    node_scheduler_policy = serializers.ChoiceField(choices=["binpack", "spread"], required=False)
    gpu_scheduler_policy = serializers.CharField(
        required=False, allow_blank=True, max_length=max_length(SchedulerConfig, "gpu_scheduler_policy")
    )
    resources = ScenarioResourcesSerializer(required=False)


class ScenarioSerializer(serializers.Serializer):
    """The body of `POST simulate/`: the scenario format of SPEC 9."""

    config = ClusterConfigSerializer(required=False)
    nodes = ScenarioNodeSerializer(many=True)
    pods = ScenarioPodSerializer(many=True)
    queues = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="decide the pods as one live cycle, from these queues (docs/simulate.md, Queues, gangs and preemption)",
    )
    groups = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="pod groups (gangs): name, namespace, min_member, queue, priority, min_resources",
    )
    running = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="pods already running: name, namespace, node, labels, affinity, containers, annotations; "
        "a tenant of hamiadmin's (a possible victim) also names priority, queue, group, preemptible, "
        "runtime_seconds or movable",
    )
    preemption = serializers.DictField(
        required=False,
        help_text="overrides of the server's preemption settings: enabled, reclaim, dry_run, "
        "min_runtime_seconds, protect_priority, max_cards_per_cycle, consolidation",
    )
    namespace_quotas = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="namespace quotas: [{namespace, hard: {vgpus, gpumem, gpucores}}]",
    )
