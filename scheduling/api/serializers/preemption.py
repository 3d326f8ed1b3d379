"""Preemption: the evictions carried out (`Eviction`), the cards a preemptor holds while its
victims leave (`Nomination`), and the preemptor's explanation (its decision's `preemption`)."""

from __future__ import annotations

from rest_framework import serializers

from scheduling.models import Decision, Eviction, Nomination


class EvictionSerializer(serializers.ModelSerializer):
    """One victim of one preemption or reclaim: who gave way, for whom, which cards, why, and
    how far the eviction got."""

    victim = serializers.CharField(source="victim.key", read_only=True, help_text="NAMESPACE/NAME")
    victim_id = serializers.IntegerField(read_only=True)
    preemptor = serializers.CharField(
        source="preemptor.key",
        read_only=True,
        allow_null=True,
        help_text="NAMESPACE/NAME; null once the preemptor is deleted",
    )
    cards = serializers.ListField(child=serializers.CharField(), read_only=True, help_text="card UUIDs")
    decision: serializers.PrimaryKeyRelatedField[Decision] = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True, help_text="the preemptor's decision that chose this victim"
    )

    class Meta:
        model = Eviction
        fields = [
            "id",
            "victim",
            "victim_id",
            "preemptor",
            "kind",
            "node",
            "cards",
            "reason",
            "state",
            "message",
            "created_at",
            "finished_at",
            "decision",
        ]
        read_only_fields = fields


class NominationSerializer(serializers.ModelSerializer):
    """One vGPU the pod will take on a card once its victims are gone; others see the card
    as holding it until `expires_at`."""

    card = serializers.CharField(source="card.uuid", read_only=True, help_text="card UUID")
    node = serializers.CharField(source="card.node.name", read_only=True)

    class Meta:
        model = Nomination
        fields = ["card", "node", "memory", "cores", "whole", "created_at", "expires_at"]
        read_only_fields = fields


class PreemptionVictimSerializer(serializers.Serializer):
    """A victim as the engine chose it (what the `Eviction` row then carries out)."""

    pod = serializers.CharField(help_text="NAMESPACE/NAME")
    node = serializers.CharField()
    cards = serializers.ListField(child=serializers.CharField())
    priority = serializers.IntegerField()
    queue = serializers.CharField()
    gang = serializers.CharField(allow_null=True, help_text="its pod group, null for a single pod")
    kind = serializers.ChoiceField(choices=[Eviction.PREEMPT, Eviction.RECLAIM])
    why = serializers.CharField(help_text="why this victim, with the figures")
    memory = serializers.IntegerField(help_text="MiB of vGPU work it gives up")


class PreemptionAlternativeSerializer(serializers.Serializer):
    """Another node that could have been freed, and why it lost."""

    node = serializers.CharField()
    victims = serializers.IntegerField()
    memory = serializers.IntegerField(help_text="MiB of vGPU work it would have evicted")
    why = serializers.CharField()


class PreemptionSerializer(serializers.Serializer):
    """A decision's preemption: the chosen victims, cards, grants and rejected alternatives;
    or, when preemption was tried and did not help, only `tried` and `why`."""

    tried = serializers.BooleanField(required=False, help_text="true: tried, nothing to evict helped")
    why = serializers.CharField(required=False, help_text="why preemption did not help, counted by cause")
    node = serializers.CharField(required=False, help_text="the node freed for the pod")
    victims = PreemptionVictimSerializer(many=True, required=False)
    cards = serializers.ListField(child=serializers.CharField(), required=False)
    grants = serializers.ListField(
        child=serializers.ListField(child=serializers.JSONField()),
        required=False,
        help_text="[card UUID, MiB, cores] per vGPU the pod will take",
    )
    alternatives = PreemptionAlternativeSerializer(many=True, required=False)
    dry_run = serializers.BooleanField(required=False, help_text="true: nothing is evicted, only said")
    message = serializers.CharField(required=False)
    whole = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="card UUIDs held whole for the pod until it lands (an exclusive ask: mutex, or 100 cores)",
    )
