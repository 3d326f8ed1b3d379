"""`GET history/samples/`: the usage history behind the dashboard's charts, oldest first.

One row per sample (raw, 5-minute or hourly, as the retention left it); shares are 0..1.
With `?node=` each row carries that node's share instead of the cluster's pending reasons
(then null), read from the row's JSON in SQL so the other nodes' shares never leave the
database. With `?queues=true` each row carries its per-queue figures (null otherwise).
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models.fields.json import KeyTransform
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.models import Node, UsageSample
from scheduling.models.samples import MAX_ROWS

from .base import BAD_FILTER, ERRORS, REFUSED, RoleView, check_query_parameters

#: The window a request without `since` gets.
DEFAULT_HOURS = 6


class SampleQuerySerializer(serializers.Serializer):
    since = serializers.DateTimeField(required=False, help_text="from this time (default: 6 hours ago)")
    until = serializers.DateTimeField(required=False, help_text="up to this time (default: now)")
    node = serializers.CharField(required=False, max_length=253, help_text="one node's share too")
    queues = serializers.BooleanField(required=False, default=False, help_text="per-queue figures too")

    def validate(self, attrs):
        if "since" in attrs and "until" in attrs and attrs["since"] > attrs["until"]:
            raise serializers.ValidationError({"since": ["must not be after until"]})
        return attrs


class QueueFiguresSerializer(serializers.Serializer):
    vgpus = serializers.FloatField(help_text="vGPUs its pods hold (an average when folded)")
    memory = serializers.FloatField(help_text="MiB its pods hold")
    pending = serializers.FloatField(help_text="its pods pending")


class SampleSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    span = serializers.IntegerField(help_text="seconds this row stands for; 0 = one raw sample")
    slots = serializers.FloatField(help_text="share of the cluster's slots allocated, 0..1")
    memory = serializers.FloatField(help_text="share of the cluster's memory allocated, 0..1")
    cores = serializers.FloatField(help_text="share of the cluster's cores allocated, 0..1")
    pending = serializers.FloatField(help_text="pending pods (an average when folded)")
    pending_reasons = serializers.DictField(
        child=serializers.FloatField(),
        allow_null=True,
        help_text="top reasons -> pending pods; null with ?node=",
    )
    placements = serializers.IntegerField(help_text="pods placed since the previous row")
    cycle_p50_ms = serializers.FloatField(allow_null=True)
    cycle_max_ms = serializers.FloatField(allow_null=True)
    node = serializers.FloatField(
        allow_null=True, help_text="with ?node=, the node's fullest share, 0..1; else null"
    )
    queues = serializers.DictField(
        child=QueueFiguresSerializer(),
        allow_null=True,
        help_text="with ?queues=true, queue -> its own pods' figures (the busiest 50); else null",
    )


class SamplesSerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    node = serializers.CharField(allow_null=True)
    results = SampleSerializer(many=True)


COLUMNS = (
    "at",
    "span",
    "slots_share",
    "memory_share",
    "cores_share",
    "pending",
    "placements",
    "cycle_p50_ms",
    "cycle_max_ms",
)


class SampleHistoryView(RoleView, APIView):
    """Cluster usage over time: allocated shares, pending pods, placements and cycle times."""

    extra_query_parameters = ("since", "until", "node", "queues")

    @extend_schema(
        operation_id="history_samples",
        tags=["history"],
        parameters=[SampleQuerySerializer],
        responses={200: SamplesSerializer, 404: ERRORS, **BAD_FILTER, **REFUSED},
        description=(
            f"Samples oldest first, at most {MAX_ROWS}: raw every 30 s for 6 hours, then 5-minute "
            "averages for 7 days, then hourly. Unknown parameters are a 400 naming them."
        ),
    )
    def get(self, request):
        check_query_parameters(self, request)
        query = SampleQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        until = query.validated_data.get("until") or timezone.now()
        since = query.validated_data.get("since") or until - timedelta(hours=DEFAULT_HOURS)
        node = query.validated_data.get("node")
        rows = UsageSample.objects.filter(at__gte=since, at__lte=until).order_by("at")
        columns = list(COLUMNS)
        if node is not None:
            if not Node.objects.filter(name=node).exists():
                raise NotFound(f"no node {node!r}")
            rows = rows.annotate(node_share=KeyTransform(node, "nodes"))
            columns.append("node_share")
        else:
            columns.append("pending_reasons")
        if query.validated_data["queues"]:
            columns.append("queues")
        results = [_row(values, node is not None) for values in rows.values(*columns)[:MAX_ROWS]]
        body = {"since": since, "until": until, "node": node, "results": results}
        return Response(SamplesSerializer(body).data)


def _row(values: dict, for_node: bool) -> dict:
    row = {
        "at": values["at"],
        "span": values["span"],
        "slots": values["slots_share"],
        "memory": values["memory_share"],
        "cores": values["cores_share"],
        "pending": values["pending"],
        "placements": values["placements"],
        "cycle_p50_ms": values["cycle_p50_ms"],
        "cycle_max_ms": values["cycle_max_ms"],
        "node": None,
        "pending_reasons": None,
        "queues": values.get("queues"),
    }
    if for_node:
        share = values["node_share"]
        row["node"] = None if share is None else round(float(share) / 100, 2)
    else:
        row["pending_reasons"] = values["pending_reasons"]
    return row
