"""Evictions: who gave way to whom, on which cards, why, and how far it got. Read-only: the
scheduler's cycle chooses them and the services and the kube agent carry them out."""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import viewsets

from scheduling import filtersets
from scheduling.api import serializers as s
from scheduling.models import Eviction

from .base import BAD_FILTER, ERRORS, REFUSED, RoleView, StrictOrderingFilter


@extend_schema_view(
    list=extend_schema(
        tags=["history"],
        responses={200: s.EvictionSerializer(many=True), **BAD_FILTER, **REFUSED},
        description=(
            "Evictions, newest first: one row per victim of a preemption (lower priority in the same "
            "queue) or reclaim (a queue above its fair share), with the preemptor, the node and cards, "
            "the reason with its figures, and the state (`requested`, `evicting`, `done`, `refused`, "
            "`timed_out`, `cancelled`). `decision` is the preemptor's decision that chose the victim: "
            "its `preemption` lists the alternatives compared. `?victim=` and `?preemptor=` take "
            "NAMESPACE/NAME or a pod id."
        ),
    ),
    retrieve=extend_schema(
        tags=["history"],
        responses={200: s.EvictionSerializer, 404: ERRORS, **REFUSED},
        description="One eviction: victim, preemptor, cards, reason and state.",
    ),
)
class EvictionViewSet(RoleView, viewsets.ReadOnlyModelViewSet):
    """Evictions chosen by the scheduler, one per victim, newest first. Read by viewers and up."""

    lookup_value_regex = r"[^/]+"  # a malformed id is DRF's JSON 404, not Django's HTML one
    serializer_class = s.EvictionSerializer
    filterset_class = filtersets.EvictionFilterSet
    filter_backends = [DjangoFilterBackend, StrictOrderingFilter]
    ordering_fields = ["created_at"]
    ordering = ["-created_at", "-id"]

    def get_queryset(self):
        return Eviction.objects.select_related("victim", "preemptor")
