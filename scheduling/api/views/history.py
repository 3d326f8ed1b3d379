"""What happened: decisions, active allocations, cycles, events. Read-only, newest first."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, viewsets
from rest_framework.exceptions import NotFound

from scheduling import filtersets
from scheduling.api import serializers as s
from scheduling.models import Allocation, Cycle, Decision, Event, Pod

from .base import BAD_FILTER, ERRORS, REFUSED, RoleView


@extend_schema_view(
    list=extend_schema(
        tags=["history"],
        responses={200: s.DecisionSerializer(many=True), 404: ERRORS, **BAD_FILTER, **REFUSED},
        description="Scheduling attempts, newest first; `?pod=NAMESPACE/NAME` gives one pod's history.",
    ),
    retrieve=extend_schema(tags=["history"], responses={200: s.DecisionSerializer, 404: ERRORS, **REFUSED}),
)
class DecisionViewSet(RoleView, viewsets.ReadOnlyModelViewSet):
    """Scheduling attempts, one per pod per cycle that tried it, newest first: the engine's
    explanation (chain, card and node scores, reasons) with the outcome and the one-line reason."""

    lookup_value_regex = r"[^/]+"  # a malformed id is DRF's JSON 404, not Django's HTML one
    serializer_class = s.DecisionSerializer
    filterset_class = filtersets.DecisionFilterSet

    def get_queryset(self):
        return Decision.objects.select_related("pod").order_by("-id")

    def list(self, request, *args, **kwargs):
        decisions = self.filter_queryset(self.get_queryset())  # validates the filters first
        key = request.query_params.get("pod")
        if key:
            namespace, name = Pod.split_key(key)
            if not Pod.objects.filter(namespace=namespace, name=name).exists():
                raise NotFound(f"no pod {namespace}/{name}")
        page = self.paginate_queryset(decisions)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)


@extend_schema_view(
    list=extend_schema(
        tags=["history"], responses={200: s.AllocationSerializer(many=True), **BAD_FILTER, **REFUSED}
    ),
    retrieve=extend_schema(tags=["history"], responses={200: s.AllocationSerializer, 404: ERRORS, **REFUSED}),
)
class AllocationViewSet(RoleView, viewsets.ReadOnlyModelViewSet):
    """Active allocations: one vGPU of one container on one card."""

    lookup_value_regex = r"[^/]+"  # a malformed id is DRF's JSON 404, not Django's HTML one
    serializer_class = s.AllocationSerializer
    filterset_class = filtersets.AllocationFilterSet

    def get_queryset(self):
        return (
            Allocation.objects.filter(active=True).select_related("pod", "card", "card__node").order_by("id")
        )


@extend_schema_view(
    list=extend_schema(
        tags=["history"], responses={200: s.CycleSerializer(many=True), **BAD_FILTER, **REFUSED}
    ),
    retrieve=extend_schema(tags=["history"], responses={200: s.CycleSerializer, 404: ERRORS, **REFUSED}),
)
class CycleViewSet(RoleView, viewsets.ReadOnlyModelViewSet):
    """Recent scheduling cycles with their counts and durations, newest first."""

    lookup_value_regex = r"[^/]+"  # a malformed id is DRF's JSON 404, not Django's HTML one
    serializer_class = s.CycleSerializer
    filterset_class = filtersets.CycleFilterSet

    def get_queryset(self):
        return Cycle.objects.order_by("-id")


@extend_schema_view(
    get=extend_schema(
        operation_id="events_list",
        tags=["history"],
        responses={200: s.EventSerializer(many=True), **BAD_FILTER, **REFUSED},
        description=(
            "Refusals and repairs (objects the kube agent could not take in, card claims refused, "
            "half-done binds repaired...), newest first: `?kind=object_refused&subject=pod/ml/`."
        ),
    )
)
class EventList(RoleView, generics.ListAPIView):
    """What the scheduler refused or repaired (`Event`), newest first.

    An Event is one row per (kind, subject, reason), counted: an object the kube agent refuses
    on every resync shows once, with `count` and `last_seen` moving. Read-only, for viewers up.
    """

    serializer_class = s.EventSerializer
    filterset_class = filtersets.EventFilterSet

    def get_queryset(self):
        return Event.objects.order_by("-last_seen", "-id")
