"""An agent's report of its node (`POST agents/report/`) and the answer to it."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.models import INT32_MAX, Node

from .fields import StrictCharField, StringMapField, max_length
from .scenario import ScenarioCardSerializer


class ObservedSerializer(serializers.Serializer):
    """What the agent measured on a card (NVML), beside what the scheduler granted; every field
    optional. Documentation: `services.report_inventory` checks them, naming the field."""

    memory = serializers.IntegerField(
        required=False, min_value=0, max_value=INT32_MAX, help_text="MiB in use on the card"
    )
    utilization = serializers.IntegerField(
        required=False, min_value=0, max_value=100, help_text="percent of time the GPU was busy"
    )
    temperature = serializers.IntegerField(required=False, min_value=0, max_value=200, help_text="degrees C")
    power = serializers.FloatField(required=False, min_value=0, max_value=100000, help_text="watts")
    ecc_errors = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=INT32_MAX,
        help_text="uncorrectable ECC errors since the driver loaded",
    )
    xid = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=INT32_MAX, help_text="latest XID seen"
    )


class AgentCardSerializer(ScenarioCardSerializer):
    observed = ObservedSerializer(required=False)


@extend_schema_field(AgentCardSerializer(many=True))
class CardListField(serializers.ListField):
    """SPEC 9 cards without `used`, taken as sent: the engine's scenario rules check them, and
    the inventory service the optional `observed` measurements."""


class AgentReportSerializer(serializers.Serializer):
    """An agent's inventory: the envelope. Cards, labels and annotations are checked by the
    engine's scenario rules, so errors name them as `devices[2].memory` or `labels.zone`."""

    node = StrictCharField(max_length=max_length(Node, "name"))
    labels = StringMapField(required=False, default=dict)
    annotations = StringMapField(required=False, default=dict)
    devices = CardListField(allow_empty=True, help_text="cards as in SPEC 9, without used")

    #: Card numbers the database stores as 32-bit integers (the engine checks the rest).
    CARD_INTEGERS = {"index": 0, "slots": 0, "memory": 0, "cores": 0, "numa": -INT32_MAX - 1}

    def validate(self, attrs):
        for position, card in enumerate(attrs["devices"]):
            if not isinstance(card, dict):
                continue
            for name, low in self.CARD_INTEGERS.items():
                value = card.get(name)
                if isinstance(value, int | float) and not isinstance(value, bool) and value > INT32_MAX:
                    raise serializers.ValidationError(
                        {f"devices[{position}].{name}": [f"must be at most {INT32_MAX}"]}
                    )
                if isinstance(value, int | float) and not isinstance(value, bool) and value < low:
                    raise serializers.ValidationError(
                        {f"devices[{position}].{name}": [f"must be at least {low}"]}
                    )
        return attrs


class RefusedCardSerializer(serializers.Serializer):
    field = serializers.CharField(help_text="where in the report, e.g. devices[1].uuid")
    uuid = serializers.CharField()
    message = serializers.CharField()


class AgentReportResultSerializer(serializers.Serializer):
    node = serializers.CharField()
    cards = serializers.IntegerField(help_text="cards in this report")
    absent = serializers.ListField(
        child=serializers.CharField(),
        help_text="cards of this node missing from the report (kept, take no pods)",
    )
    refused = RefusedCardSerializer(
        many=True,
        help_text="cards of another node named in this report: refused card by card, the rest was taken",
    )
    heartbeat = serializers.DateTimeField()
