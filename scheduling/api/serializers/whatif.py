"""A pod's latest decision explained, what-if answers and capacity: the shapes of
`pods/{ns}/{name}/decision/`, `whatif/` and `capacity/`, for the schema (the views answer
`explain.explained` as it is, so a payload keeps every key). Every word in them comes from
`scheduling.engine.explain`, the one reader of a decision."""

from __future__ import annotations

from rest_framework import serializers


class CloseCardSerializer(serializers.Serializer):
    """One card of a close node, for the container that did not fit."""

    uuid = serializers.CharField()
    index = serializers.IntegerField()
    numa = serializers.IntegerField()
    reason = serializers.CharField(allow_null=True, help_text="the SPEC 4 reason code; null: it fits alone")
    stage = serializers.CharField(allow_null=True, help_text="the check that removed it")
    score = serializers.FloatField(help_text="the predicted card score (SPEC 5)")
    free = serializers.DictField(
        child=serializers.IntegerField(), help_text="slots, memory (MiB), cores free"
    )
    ask = serializers.DictField(child=serializers.IntegerField(), help_text="memory (MiB) and cores asked")
    short = serializers.DictField(child=serializers.IntegerField(), help_text="memory and cores lacking")
    freeable = serializers.BooleanField(help_text="tenants leaving would let it fit")
    css = serializers.CharField(help_text="colour class: fits, capacity, unavailable, excluded, numa")
    words = serializers.CharField()


class CloseNodeSerializer(serializers.Serializer):
    node = serializers.CharField()
    rank = serializers.IntegerField(help_text="1 = closest (engine.closeness)")
    container = serializers.CharField(help_text="the container that did not fit")
    count = serializers.IntegerField(help_text="cards it asks")
    missing = serializers.IntegerField(help_text="cards short of the count")
    never = serializers.BooleanField(help_text="never fits on this node, whatever its tenants")
    ready = serializers.BooleanField()
    cards_total = serializers.IntegerField()
    cards = CloseCardSerializer(many=True)
    hints = serializers.ListField(child=serializers.CharField(), help_text="what would make it fit here")
    hint_data = serializers.ListField(child=serializers.DictField(), help_text="the same, as data")


class ReasonLineSerializer(serializers.Serializer):
    node = serializers.CharField()
    code = serializers.CharField()
    n = serializers.IntegerField()
    m = serializers.IntegerField()
    words = serializers.CharField()


class ExplainedDecisionSerializer(serializers.Serializer):
    """A decision as every face shows it: the payload, plus its words."""

    summary = serializers.CharField(help_text="the one-line reason (kubectl-describe style)")
    unschedulable = serializers.BooleanField()
    unschedulable_words = serializers.CharField(allow_null=True)
    would_fit = serializers.ListField(child=serializers.CharField(), help_text="what would make it fit")
    closest_nodes = CloseNodeSerializer(many=True)
    waiting = ReasonLineSerializer(many=True, help_text="every kept failed node's reasons in words")
    payload = serializers.DictField(
        help_text=(
            "the SPEC 9 pod object (see PodDecision), with failed_reasons, node_order, "
            "closest_nodes, unschedulable and unschedulable_reason"
        )
    )


class PodDecisionViewSerializer(ExplainedDecisionSerializer):
    pod = serializers.CharField(help_text="namespace/name")
    pod_status = serializers.CharField()
    decision = serializers.IntegerField(allow_null=True, help_text="the decision's id")
    outcome = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField(allow_null=True)


class WhatIfRequestSerializer(serializers.Serializer):
    """Pods in the shape of a submission, and optional edits of the live snapshot."""

    pods = serializers.ListField(child=serializers.DictField(), help_text="as `POST pods/` takes them")
    edits = serializers.DictField(
        required=False,
        help_text=(
            "cordon: [card UUID], drain: [node], empty: [node], add: [{like: node, count: N}], "
            "policies: {node_scheduler_policy, gpu_scheduler_policy}"
        ),
    )
    job = serializers.DictField(
        required=False,
        help_text=(
            "the pods as one job, decided as the next cycle would (gang, queue, priority, "
            "preemption): name, namespace, queue, priority, min_member, each optional"
        ),
    )


class WhatIfJobSerializer(serializers.Serializer):
    """Whether the job would start now, and at what cost."""

    name = serializers.CharField(help_text="namespace/name of the job")
    queue = serializers.CharField(allow_null=True, help_text="the leaf queue it joins (null: not found)")
    priority = serializers.IntegerField()
    min_member = serializers.IntegerField()
    members = serializers.IntegerField()
    placed = serializers.IntegerField(help_text="members placed now, without evicting anybody")
    starts = serializers.BooleanField(help_text="min_member placed now")
    starts_after_evictions = serializers.BooleanField(
        help_text="it would start once the evictions listed are done (its members nominated)"
    )
    verdict = serializers.CharField(allow_null=True, help_text="why it does not start now, in one line")
    evictions = serializers.ListField(
        child=serializers.DictField(), help_text="the tenants it would evict: by, pod, node, cards, kind, why"
    )


class WhatIfSerializer(serializers.Serializer):
    snapshot = serializers.DictField(help_text="nodes and cards decided against")
    pods = ExplainedDecisionSerializer(many=True)
    job = WhatIfJobSerializer(required=False, help_text="only with a `job` in the request")


class NodeCapacitySerializer(serializers.Serializer):
    node = serializers.CharField()
    pods = serializers.IntegerField()


class CapacityAnswerSerializer(serializers.Serializer):
    total = serializers.IntegerField(help_text="more pods of this ask that fit now, in all")
    more = serializers.BooleanField(help_text="the count stopped at `limit`: at least `total`")
    nodes = NodeCapacitySerializer(many=True, help_text="nodes taking at least one, by name")
    reason = serializers.CharField(allow_null=True, help_text="why none fits (when total is 0)")
    would_fit = serializers.ListField(child=serializers.CharField())
