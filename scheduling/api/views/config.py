"""`config/`: the cluster defaults."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling import services
from scheduling.api import serializers as s
from scheduling.api.errors import field_error
from scheduling.engine.errors import ScenarioError
from scheduling.roles import ADMIN

from .base import ERRORS, REFUSED, RoleView


class ConfigView(RoleView, APIView):
    """The cluster defaults. Everyone signed in reads them; admins change them. A change is
    recorded (who, when) and applies from the next cycle."""

    write_role = ADMIN

    @extend_schema(tags=["config"], responses={200: s.ConfigSerializer, **REFUSED})
    def get(self, request):
        return Response(s.ConfigSerializer(services.current_config_view()).data)

    @extend_schema(
        tags=["config"],
        request=s.ConfigSerializer,
        responses={200: s.ConfigSerializer, 400: ERRORS, **REFUSED},
    )
    def put(self, request):
        return self._change(request, partial=False)

    @extend_schema(
        tags=["config"],
        request=s.ConfigSerializer,
        responses={200: s.ConfigSerializer, 400: ERRORS, **REFUSED},
    )
    def patch(self, request):
        return self._change(request, partial=True)

    def _change(self, request, partial: bool) -> Response:
        body = s.ConfigSerializer(data=request.data, partial=partial)
        body.is_valid(raise_exception=True)
        change = body.validated_data
        resources = change.get("resources", {})
        try:
            services.set_config(
                node_scheduler_policy=change.get("node_scheduler_policy"),
                gpu_scheduler_policy=change.get("gpu_scheduler_policy"),
                memory_percentage=resources.get("memory_percentage"),
                default_cores=resources.get("cores"),
                exclusive_cores=resources.get("exclusive_cores"),
                changed_by=request.user.get_username(),
            )
        except ScenarioError as exc:
            raise field_error(exc.where.removeprefix("config."), exc.message) from None
        return Response(s.ConfigSerializer(services.current_config_view()).data)
