"""An agent's report of its node (`POST agents/report/`) and the answer to it."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.models import INT32_MAX, Node

from .fields import StrictCharField, StringMapField, max_length
from .scenario import ScenarioCardSerializer


@extend_schema_field(ScenarioCardSerializer(many=True))
class CardListField(serializers.ListField):
    """SPEC 9 cards without `used`, taken as sent: the engine's scenario rules check them."""


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
