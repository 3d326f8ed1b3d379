"""What every endpoint shares: roles and pages (`RoleView`), the 409 answer, and the
documented error responses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.filters import OrderingFilter
from rest_framework.pagination import BasePagination, LimitOffsetPagination
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView

from scheduling.api.permissions import RoleRequired
from scheduling.api.throttles import TokenWriteThrottle
from scheduling.roles import OPERATOR, VIEWER

if TYPE_CHECKING:
    from rest_framework.permissions import _PermissionClass  # the stubs' name for what DRF takes


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
    """`limit` (1..1000, default 100) and `offset` (0 or more); anything else is a 400 naming
    the parameter, not silently the default. The browsable API (a browser asking for HTML)
    shows 20 unless a `limit` is given: a page of 100 nodes is megabytes of highlighted JSON,
    while scripts reading JSON keep the default of 100."""

    default_limit = 100
    browsable_limit = 20
    max_limit = 1000

    def _number(self, request, name: str, default: int, least: int) -> int:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ValidationError({name: [f"must be a whole number, got {raw!r}"]}) from None
        if value < least:
            raise ValidationError({name: [f"must be at least {least}, got {value}"]})
        return value

    def get_limit(self, request):
        renderer = getattr(request, "accepted_renderer", None)
        default = self.browsable_limit if getattr(renderer, "format", "") == "api" else self.default_limit
        return min(self._number(request, self.limit_query_param, default, 1), self.max_limit)

    def get_offset(self, request):
        return self._number(request, self.offset_query_param, 0, 0)


class StrictOrderingFilter(OrderingFilter):
    """`?ordering=name,-ready`: fields of the view's `ordering_fields`, `-` for descending;
    an unknown field is a 400 naming the ones allowed (DRF's own filter ignores it)."""

    def get_ordering(self, request, queryset, view):
        raw = request.query_params.get(self.ordering_param)
        if raw is None:
            return self.get_default_ordering(view)
        allowed = list(getattr(view, "ordering_fields", ()))
        fields = [term.strip() for term in raw.split(",") if term.strip()]
        bad = [term for term in fields if term.lstrip("-") not in allowed]
        if bad or not fields:
            raise ValidationError(
                {
                    self.ordering_param: [
                        f"unknown field {', '.join(bad) or repr(raw)}; one of {', '.join(allowed)} (- for descending)"
                    ]
                }
            )
        return fields


#: Query parameters every list takes besides its filters.
LIST_PARAMETERS = frozenset({"limit", "offset", "format"})


def check_query_parameters(view, request) -> None:
    """A list endpoint refuses parameters it does not know (a typo in a filter name would
    otherwise return everything), naming them and the ones it takes."""
    known = set(LIST_PARAMETERS) | set(getattr(view, "extra_query_parameters", ()))
    filterset_class = getattr(view, "filterset_class", None)
    if filterset_class is not None:
        known |= set(filterset_class.base_filters)
    if getattr(view, "ordering_fields", None):
        known.add("ordering")
    if getattr(view, "search_fields", None):
        known.add("search")
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise ValidationError(
            {
                name: [f"unknown query parameter; this list takes {', '.join(sorted(known))}"]
                for name in unknown
            }
        )


class RoleView:
    """Mixin: role-based permission, bounded pages, and the `token-writes` limit on top of
    the view's own throttles. Views set `read_role` / `write_role`."""

    permission_classes: Sequence[_PermissionClass] = [RoleRequired]
    pagination_class: type[BasePagination] | None = Pages
    read_role = VIEWER
    write_role = OPERATOR
    #: Lists refuse unknown query parameters (`check_query_parameters`).
    strict_query = True

    def check_throttles(self, request):
        super().check_throttles(request)
        throttle = TokenWriteThrottle()
        if not throttle.allow_request(request, self):
            self.throttled(request, throttle.wait())

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if any("\x00" in str(value) for value in kwargs.values()):
            raise NotFound("Not found.")  # no name holds a NUL, and PostgreSQL text cannot
        if (
            request.method == "GET"
            and getattr(self, "action", "list") == "list"
            and getattr(self, "filterset_class", None) is not None
            and self.strict_query
        ):
            check_query_parameters(self, request)


#: The lists named by the API root, as URL names in the `api` namespace.
ROOT_LINKS = (
    "node-list",
    "card-list",
    "pod-list",
    "pending",
    "decision-list",
    "allocation-list",
    "cycle-list",
    "event-list",
    "eviction-list",
    "config",
    "simulate",
    "agent-report",
)


class ApiRootView(RoleView, APIView):
    """`GET /api/v1/`: the endpoints of this version, by name, and where the schema lives."""

    @extend_schema(
        tags=["meta"],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="endpoint name -> URL"), **REFUSED},
    )
    def get(self, request):
        links = {name.removesuffix("-list"): reverse(f"api:{name}", request=request) for name in ROOT_LINKS}
        links["schema"] = reverse("api-schema", request=request)
        links["docs"] = reverse("api-docs", request=request)
        return Response(links)
