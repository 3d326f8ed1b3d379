"""Nodes and cards: read, cordon, uncordon, reassign."""

from __future__ import annotations

from django.db.models import Prefetch
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.filters import SearchFilter
from rest_framework.response import Response

from scheduling import filtersets, services
from scheduling.api import serializers as s
from scheduling.api.errors import field_error
from scheduling.models import Allocation, Card, Node
from scheduling.roles import ADMIN, has_role

from .base import BAD_FILTER, ERRORS, REFUSED, Conflict, RoleView, StrictOrderingFilter

#: What a card's `tenants` read of an allocation: not the pod's JSON columns, whose decoding
#: was most of a page of 100 nodes' time.
TENANT_FIELDS = (
    "id",
    "card_id",
    "pod_id",
    "container_name",
    "memory",
    "cores",
    "pod__namespace",
    "pod__name",
)


def active_allocations() -> Prefetch:
    return Prefetch(
        "allocations",
        queryset=Allocation.objects.filter(active=True)
        .select_related("pod")
        .only(*TENANT_FIELDS)
        .order_by("id"),
        to_attr="active_allocations",
    )


def cards_with_tenants():
    return Card.objects.select_related("node").prefetch_related(active_allocations())


CARDS_PARAMETER = OpenApiParameter(
    "cards",
    OpenApiTypes.BOOL,
    description="false: the slim node, without its cards (`usage` still sums them); default true",
)


@extend_schema_view(
    list=extend_schema(
        tags=["cluster"],
        parameters=[CARDS_PARAMETER],
        responses={200: s.NodeSerializer(many=True), **BAD_FILTER, **REFUSED},
    ),
    retrieve=extend_schema(
        tags=["cluster"],
        parameters=[CARDS_PARAMETER],
        responses={200: s.NodeSerializer, 404: ERRORS, **REFUSED},
    ),
)
class NodeViewSet(RoleView, viewsets.ReadOnlyModelViewSet):
    """Nodes with their cards (present or absent), usage and tenants; `?cards=false` leaves
    the cards out (a page of 100 nodes is then one query)."""

    serializer_class = s.NodeSerializer
    filterset_class = filtersets.NodeFilterSet
    filter_backends = [DjangoFilterBackend, StrictOrderingFilter, SearchFilter]
    ordering_fields = ["name", "ready", "last_heartbeat"]
    search_fields = ["name"]
    extra_query_parameters = ["cards"]
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"

    def with_cards(self) -> bool:
        raw = self.request.query_params.get("cards", "true").lower()
        if raw not in ("true", "false", "1", "0"):
            raise ValidationError({"cards": [f"true or false, got {raw!r}"]})
        return raw in ("true", "1")

    def get_serializer_class(self):
        return s.NodeSerializer if self.with_cards() else s.SlimNodeSerializer

    def get_queryset(self):
        if not self.with_cards():
            return Node.objects.with_totals().order_by("name")
        cards = Card.objects.prefetch_related(active_allocations()).order_by("index")
        return Node.objects.prefetch_related(Prefetch("cards", queryset=cards)).order_by("name")


@extend_schema_view(
    list=extend_schema(
        tags=["cluster"], responses={200: s.CardSerializer(many=True), **BAD_FILTER, **REFUSED}
    ),
    retrieve=extend_schema(tags=["cluster"], responses={200: s.CardSerializer, 404: ERRORS, **REFUSED}),
)
class CardViewSet(RoleView, viewsets.ReadOnlyModelViewSet):
    """Cards with used and free slots, memory and cores, and their tenants."""

    serializer_class = s.CardSerializer
    filterset_class = filtersets.CardFilterSet
    lookup_field = "uuid"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self):
        return cards_with_tenants().order_by("node__name", "index")

    def _cordon(self, on: bool) -> Response:
        card = self.get_object()
        services.cordon_card(card.uuid, on)  # its own transaction, retried on a deadlock
        return Response(s.CardSerializer(cards_with_tenants().get(pk=card.pk)).data)

    @extend_schema(
        tags=["cluster"],
        request=None,
        responses={200: s.CardSerializer, 404: ERRORS, **REFUSED},
        description="Keep the card from new allocations; its tenants stay.",
    )
    @action(detail=True, methods=["post"])
    def cordon(self, request, uuid=None):
        return self._cordon(True)

    @extend_schema(
        tags=["cluster"],
        request=None,
        responses={200: s.CardSerializer, 404: ERRORS, **REFUSED},
        description="Let the card take new allocations again.",
    )
    @action(detail=True, methods=["post"])
    def uncordon(self, request, uuid=None):
        return self._cordon(False)

    @extend_schema(
        tags=["cluster"],
        request=s.CardReassignSerializer,
        responses={200: s.CardSerializer, 400: ERRORS, 404: ERRORS, 409: ERRORS, **REFUSED},
        description="Admins only: move the card to another node (it was moved physically, or its node was "
        "rebuilt under another name). A card belongs to the node that first reported it; no agent can move it. "
        "Refused (409) while the card has tenants. Recorded as an event.",
    )
    @action(detail=True, methods=["post"])
    def reassign(self, request, uuid=None):
        if not has_role(request.user, ADMIN):
            raise PermissionDenied("only an admin can reassign a card")
        card = self.get_object()
        body = s.CardReassignSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            services.reassign_card(card.uuid, body.validated_data["node"], by=request.user.get_username())
        except Node.DoesNotExist:
            raise field_error("node", f"no node {body.validated_data['node']!r}") from None
        except ValueError as exc:
            raise Conflict(str(exc)) from None
        return Response(s.CardSerializer(cards_with_tenants().get(pk=card.pk)).data)
