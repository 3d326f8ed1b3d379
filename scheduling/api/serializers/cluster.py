"""Nodes and cards as the agents reported them, with what their tenants hold (`CardUsage`)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.models import Card, Node

from .fields import OutputModelSerializer, max_length
from .scenario import CapacitySerializer


class TenantSerializer(serializers.Serializer):
    """A vGPU held on a card: which pod and container, how much."""

    pod = serializers.CharField(help_text="NAMESPACE/NAME")
    container = serializers.CharField(allow_blank=True)
    memory = serializers.IntegerField()
    cores = serializers.IntegerField()


class CardSerializer(OutputModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    used = CapacitySerializer(source="usage.used", read_only=True)
    free = CapacitySerializer(source="usage.free", read_only=True)
    tenants = serializers.SerializerMethodField()

    class Meta:
        model = Card
        fields = [
            "uuid",
            "node",
            "index",
            "type",
            "slots",
            "memory",
            "cores",
            "numa",
            "health",
            "mode",
            "cordoned",
            "present",
            "over_capacity",
            "links",
            "used",
            "free",
            "tenants",
            "updated_at",
        ]
        read_only_fields = fields

    @extend_schema_field(TenantSerializer(many=True))
    def get_tenants(self, card: Card) -> list[dict]:
        held = getattr(card, "active_allocations", None)
        if held is None:
            held = card.allocations.filter(active=True).select_related("pod")
        return [
            {"pod": a.pod.key, "container": a.container_name, "memory": a.memory, "cores": a.cores}
            for a in held
        ]


class NodeUsageSerializer(serializers.Serializer):
    cards = serializers.IntegerField(help_text="present cards")
    used = CapacitySerializer()
    total = CapacitySerializer()


class NodeSerializer(OutputModelSerializer):
    usage = NodeUsageSerializer(read_only=True)
    cards = CardSerializer(many=True, read_only=True)

    class Meta:
        model = Node
        fields = [
            "name",
            "labels",
            "annotations",
            "ready",
            "not_ready_reason",
            "last_heartbeat",
            "usage",
            "cards",
        ]
        read_only_fields = fields


class SlimNodeSerializer(OutputModelSerializer):
    """A node without its cards (`GET /api/v1/nodes/?cards=false`): the same fields less `cards`."""

    usage = NodeUsageSerializer(read_only=True)

    class Meta:
        model = Node
        fields = ["name", "labels", "annotations", "ready", "not_ready_reason", "last_heartbeat", "usage"]
        read_only_fields = fields


class CardReassignSerializer(serializers.Serializer):
    node = serializers.CharField(
        max_length=max_length(Node, "name"), help_text="the node the card now belongs to"
    )
