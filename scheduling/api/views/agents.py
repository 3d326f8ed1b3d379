"""`POST agents/report/`: an agent's inventory of its node."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from scheduling import services
from scheduling.api import serializers as s
from scheduling.api.errors import field_error
from scheduling.api.permissions import ReportsOwnNode
from scheduling.engine.errors import ScenarioError
from scheduling.roles import agent_node

from .base import ERRORS, REFUSED


class AgentReportView(APIView):
    """An agent's inventory of its node. Only that node's agent token may send it."""

    permission_classes = [ReportsOwnNode]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "agent-report"

    @extend_schema(
        operation_id="agents_report",
        tags=["agents"],
        request=s.AgentReportSerializer,
        responses={200: s.AgentReportResultSerializer, 400: ERRORS, **REFUSED, 413: ERRORS, 429: ERRORS},
        description=(
            "Upserts the node and its cards and records the heartbeat. A card missing from the "
            "report is marked absent (kept for history, takes no new pods). A card that fails "
            "validation refuses the whole report: nothing is written."
        ),
    )
    def post(self, request):
        own = agent_node(request.user)
        claimed = request.data.get("node") if isinstance(request.data, dict) else None
        if isinstance(claimed, str) and claimed != own:
            raise PermissionDenied(f"this token reports node {own!r} only")
        body = s.AgentReportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        report = body.validated_data
        try:
            node = services.report_inventory(
                report["node"], report["labels"], report["annotations"], report["devices"]
            )
        except ScenarioError as exc:
            where = "node" if exc.where == "name" else exc.where
            raise field_error(where, exc.message) from None
        absent = node.cards.filter(present=False).order_by("index").values_list("uuid", flat=True)
        result = {
            "node": node.name,
            "cards": len(report["devices"]),
            "absent": list(absent),
            "refused": node.refused,
            "heartbeat": node.last_heartbeat,
        }
        return Response(s.AgentReportResultSerializer(result).data)
