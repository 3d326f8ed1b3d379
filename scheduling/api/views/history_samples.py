"""`GET history/samples/`: the usage history behind the dashboard's charts, oldest first.

One row per sample (raw, 5-minute or hourly, as the retention left it); shares are 0..1.
With `?node=` each row carries that node's share instead of the cluster's pending reasons
(then null), read from the row's JSON in SQL so the other nodes' shares never leave the
database. With `?queues=true` each row carries its per-queue figures (null otherwise).

Paged by `limit` and `offset`: a page holds at most MAX_ROWS rows, and at most QUEUE_ROWS with
`?queues=true` (each row then carries up to 50 queues' figures: the whole retention at once
was 25.8 MB and 2 s of CPU); `next` is the next page's URL while rows remain. QUEUE_ROWS
covers the default window, so the dashboard's charts read one page.
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
#: The most rows a page holds with `?queues=true` (and its default): the default window's
#: raw samples (6 hours every 30 s: 720) fit.
QUEUE_ROWS = 1000


class SampleQuerySerializer(serializers.Serializer):
    since = serializers.DateTimeField(required=False, help_text="from this time (default: 6 hours ago)")
    until = serializers.DateTimeField(required=False, help_text="up to this time (default: now)")
    node = serializers.CharField(required=False, max_length=253, help_text="one node's share too")
    queues = serializers.BooleanField(required=False, default=False, help_text="per-queue figures too")
    limit = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text=f"rows in this page (default and most: {MAX_ROWS}, {QUEUE_ROWS} with ?queues=true)",
    )
    offset = serializers.IntegerField(required=False, min_value=0, default=0, help_text="rows to skip")

    def validate(self, attrs):
        if "since" in attrs and "until" in attrs and attrs["since"] > attrs["until"]:
            raise serializers.ValidationError({"since": ["must not be after until"]})
        most = QUEUE_ROWS if attrs["queues"] else MAX_ROWS
        if attrs.get("limit", most) > most:
            with_queues = " with queues=true" if attrs["queues"] else ""
            raise serializers.ValidationError({"limit": [f"must be at most {most}{with_queues}"]})
        attrs.setdefault("limit", most)
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
    next = serializers.URLField(allow_null=True, help_text="the next page, while rows remain; else null")
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

    extra_query_parameters = ("since", "until", "node", "queues", "limit", "offset")

    @extend_schema(
        operation_id="history_samples",
        tags=["history"],
        parameters=[SampleQuerySerializer],
        responses={200: SamplesSerializer, 404: ERRORS, **BAD_FILTER, **REFUSED},
        description=(
            f"Samples oldest first, raw every 30 s for 6 hours, then 5-minute averages for 7 days, "
            f"then hourly; paged by `limit` (default and most: {MAX_ROWS}, {QUEUE_ROWS} with "
            "?queues=true) and `offset`, `next` giving the next page. Unknown parameters are a 400 "
            "naming them."
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
        limit, offset = query.validated_data["limit"], query.validated_data["offset"]
        page = list(rows.values(*columns)[offset : offset + limit + 1])
        following = None
        if len(page) > limit:
            page = page[:limit]
            params = request.query_params.copy()
            params["offset"] = str(offset + limit)
            params.setdefault("until", until.isoformat())  # the next page reads the same window
            params.setdefault("since", since.isoformat())
            following = request.build_absolute_uri(f"{request.path}?{params.urlencode()}")
        results = [_row(values, node is not None) for values in page]
        body = {"since": since, "until": until, "node": node, "next": following, "results": results}
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
