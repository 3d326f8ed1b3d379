"""What every endpoint shares: roles and pages (`RoleView`), the 409 answer, and the
documented error responses."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound
from rest_framework.pagination import LimitOffsetPagination

from scheduling.api.permissions import RoleRequired
from scheduling.roles import OPERATOR, VIEWER


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The resource is not in a state that allows this."
    default_code = "conflict"


ERRORS = OpenApiResponse(
    OpenApiTypes.OBJECT, description='errors keyed by the field at fault, e.g. {"containers": ["..."]}'
)
REFUSED = {
    401: OpenApiResponse(description="no or bad credentials"),
    403: OpenApiResponse(description="role too low"),
}
BAD_FILTER = {
    400: OpenApiResponse(OpenApiTypes.OBJECT, description="a filter value is invalid, keyed by the filter")
}


class Pages(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000


class RoleView:
    """Mixin: role-based permission, bounded pages. Views set `read_role` / `write_role`."""

    permission_classes = [RoleRequired]
    pagination_class = Pages
    read_role = VIEWER
    write_role = OPERATOR

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if any("\x00" in str(value) for value in kwargs.values()):
            raise NotFound("Not found.")  # no name holds a NUL, and PostgreSQL text cannot
