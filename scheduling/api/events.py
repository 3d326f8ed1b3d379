"""GET /api/v1/events/: what the scheduler refused or repaired (`Event`), newest first.

An Event is one row per (kind, subject, reason), counted: an object the kube agent refuses
on every resync shows once, with `count` and `last_seen` moving. Read-only, for viewers up.
Mounted by `scheduling/api/urls.py` with `include("scheduling.api.events")`.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, serializers

from scheduling import filtersets
from scheduling.models import Event

from .views import BAD_FILTER, REFUSED, RoleView


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = Event
        fields = ["id", "kind", "severity", "subject", "reason", "message", "actor", "count", "first_seen",
                  "last_seen"]  # fmt: skip
        read_only_fields = fields


@extend_schema_view(
    get=extend_schema(
        operation_id="events_list",
        tags=["history"],
        responses={200: EventSerializer(many=True), **BAD_FILTER, **REFUSED},
        description=(
            "Refusals and repairs (objects the kube agent could not take in, card claims refused, "
            "half-done binds repaired...), newest first: `?kind=object_refused&subject=pod/ml/`."
        ),
    )
)
class EventList(RoleView, generics.ListAPIView):
    serializer_class = EventSerializer
    filterset_class = filtersets.EventFilterSet

    def get_queryset(self):
        return Event.objects.order_by("-last_seen", "-id")


urlpatterns = [path("", EventList.as_view(), name="event-list")]
