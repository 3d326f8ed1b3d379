"""What happened: decisions (the engine's explanation of each attempt), allocations,
cycles, and the refusals and repairs recorded as events."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.models import Allocation, Cycle, Decision, Event

from .fields import OptionalTextField, OutputModelSerializer, ScoreField, round_score
from .preemption import PreemptionSerializer
from .scenario import PlacementSerializer, PolicySerializer


class DecisionSerializer(OutputModelSerializer):
    """One attempt at one pod: the engine's explanation (a pod of the simulate output) plus
    when, in which cycle, and the one-line reason. The explanation's fields are at the top
    level, so a decision reads like a simulated pod; null where the explanation has none."""

    pod = serializers.CharField(source="pod.key", read_only=True, help_text="NAMESPACE/NAME")
    error = serializers.SerializerMethodField()
    policy = serializers.SerializerMethodField()
    containers = serializers.SerializerMethodField()
    node_scores = serializers.SerializerMethodField()
    failed_nodes = serializers.SerializerMethodField()
    nodes_fit = serializers.SerializerMethodField()
    nodes_failed = serializers.SerializerMethodField()
    reasons = serializers.SerializerMethodField()
    allocated = serializers.SerializerMethodField()
    preemption = serializers.SerializerMethodField()

    class Meta:
        model = Decision
        fields = [
            "id",
            "pod",
            "cycle",
            "outcome",
            "node",
            "reason",
            "error",
            "duration_ms",
            "created_at",
            "policy",
            "containers",
            "node_scores",
            "failed_nodes",
            "nodes_fit",
            "nodes_failed",
            "reasons",
            "allocated",
            "preemption",
        ]
        read_only_fields = fields

    @staticmethod
    def _explained(decision: Decision, key: str):
        return (decision.payload or {}).get(key)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_error(self, decision: Decision) -> str | None:
        """The row's error, else the explanation's; null when neither has one."""
        return decision.error or self._explained(decision, "error") or None

    @extend_schema_field(PolicySerializer(allow_null=True))
    def get_policy(self, decision: Decision) -> dict | None:
        return self._explained(decision, "policy")

    @extend_schema_field(PlacementSerializer(many=True, allow_null=True))
    def get_containers(self, decision: Decision) -> list | None:
        return self._explained(decision, "containers")

    @extend_schema_field(serializers.DictField(child=ScoreField(), allow_null=True))
    def get_node_scores(self, decision: Decision) -> dict | None:
        scores = self._explained(decision, "node_scores")
        if not isinstance(scores, dict):
            return scores
        return {node: round_score(score) for node, score in scores.items()}

    @extend_schema_field(serializers.DictField(child=serializers.CharField(), allow_null=True))
    def get_failed_nodes(self, decision: Decision) -> dict | None:
        return self._explained(decision, "failed_nodes")

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_nodes_fit(self, decision: Decision) -> int | None:
        return self._explained(decision, "nodes_fit")

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_nodes_failed(self, decision: Decision) -> int | None:
        return self._explained(decision, "nodes_failed")

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField(), allow_null=True))
    def get_reasons(self, decision: Decision) -> dict | None:
        return self._explained(decision, "reasons")

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_allocated(self, decision: Decision) -> str | None:
        return self._explained(decision, "allocated")

    @extend_schema_field(PreemptionSerializer(allow_null=True))
    def get_preemption(self, decision: Decision) -> dict | None:
        """The victims this attempt chose, or why preemption did not help; null when not tried."""
        return self._explained(decision, "preemption")


class AllocationSerializer(OutputModelSerializer):
    pod = serializers.CharField(source="pod.key", read_only=True)
    namespace = serializers.CharField(source="pod.namespace", read_only=True)
    container = OptionalTextField(source="container_name")
    card = serializers.CharField(source="card.uuid", read_only=True)
    node = serializers.CharField(source="card.node.name", read_only=True)

    class Meta:
        model = Allocation
        fields = [
            "id",
            "pod",
            "namespace",
            "container",
            "container_index",
            "card",
            "node",
            "memory",
            "cores",
            "created_at",
        ]
        read_only_fields = fields


class CycleSerializer(OutputModelSerializer):
    class Meta:
        model = Cycle
        fields = [
            "id",
            "started_at",
            "finished_at",
            "trigger",
            "worker",
            "considered",
            "placed",
            "pending",
            "rejected",
            "conflicts",
            "skipped",
            "nodes",
            "snapshot_ms",
            "decide_ms",
            "commit_ms",
            "duration_ms",
        ]
        read_only_fields = fields


class EventSerializer(OutputModelSerializer):
    class Meta:
        model = Event
        fields = [
            "id",
            "kind",
            "severity",
            "subject",
            "reason",
            "message",
            "actor",
            "count",
            "first_seen",
            "last_seen",
        ]
        read_only_fields = fields
