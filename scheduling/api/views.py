"""REST endpoints under /api/v1/. Thin: reads go through the filtersets and serializers,
every write goes through `scheduling.services` inside one transaction, so a refused
request writes nothing.
"""

from __future__ import annotations

import gzip
import re

from django.core.cache import caches
from django.db.models import OuterRef, Prefetch, Subquery
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.connection import ConnectionProxy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotFound, PermissionDenied, ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle, UserRateThrottle
from rest_framework.views import APIView

from scheduling import filtersets, services, simulations
from scheduling.engine.errors import ScenarioError
from scheduling.engine.scenario import parse_scenario, run_scenario
from scheduling.engine.scheduler import parse_pod
from scheduling.models import Allocation, Card, Cycle, Decision, Node, Pod, SchedulerConfig

from . import serializers as s
from .errors import field_error
from .parsers import ScenarioParser
from .permissions import ADMIN, OPERATOR, VIEWER, ReportsOwnNode, RoleRequired, agent_node, has_role


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The resource is not in a state that allows this."
    default_code = "conflict"


ERRORS = OpenApiResponse(
    OpenApiTypes.OBJECT, description="errors keyed by the field at fault, e.g. {\"containers\": [\"...\"]}"
)
REFUSED = {401: OpenApiResponse(description="no or bad credentials"), 403: OpenApiResponse(description="role too low")}
BAD_FILTER = {400: OpenApiResponse(OpenApiTypes.OBJECT, description="a filter value is invalid, keyed by the filter")}


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


def active_allocations() -> Prefetch:
    return Prefetch(
        "allocations",
        queryset=Allocation.objects.filter(active=True).select_related("pod").order_by("id"),
        to_attr="active_allocations",
    )


def cards_with_tenants():
    return Card.objects.select_related("node").prefetch_related(active_allocations())


# --- agents --------------------------------------------------------------------------------


class AgentReportView(APIView):
    """An agent's inventory of its node. Only that node's agent token may send it."""

    permission_classes = [ReportsOwnNode]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "agent-report"

    @extend_schema(
        operation_id="agents_report",
        tags=["agents"],
        request=s.AgentReportDocSerializer,
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
            node = services.report_inventory(report["node"], report["labels"], report["annotations"], report["devices"])
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


# --- cluster -------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(tags=["cluster"], responses={200: s.NodeSerializer(many=True), **BAD_FILTER, **REFUSED}),
    retrieve=extend_schema(tags=["cluster"], responses={200: s.NodeSerializer, 404: ERRORS, **REFUSED}),
)
class NodeViewSet(RoleView, viewsets.ReadOnlyModelViewSet):
    """Nodes with their cards (present or absent), usage and tenants."""

    serializer_class = s.NodeSerializer
    filterset_class = filtersets.NodeFilterSet
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self):
        cards = Card.objects.prefetch_related(active_allocations()).order_by("index")
        return Node.objects.prefetch_related(Prefetch("cards", queryset=cards)).order_by("name")


@extend_schema_view(
    list=extend_schema(tags=["cluster"], responses={200: s.CardSerializer(many=True), **BAD_FILTER, **REFUSED}),
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
        tags=["cluster"], request=None, responses={200: s.CardSerializer, 404: ERRORS, **REFUSED},
        description="Keep the card from new allocations; its tenants stay.",
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def cordon(self, request, uuid=None):
        return self._cordon(True)

    @extend_schema(
        tags=["cluster"], request=None, responses={200: s.CardSerializer, 404: ERRORS, **REFUSED},
        description="Let the card take new allocations again.",
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def uncordon(self, request, uuid=None):
        return self._cordon(False)

    @extend_schema(
        tags=["cluster"], request=s.CardReassignSerializer,
        responses={200: s.CardSerializer, 400: ERRORS, 404: ERRORS, 409: ERRORS, **REFUSED},
        description="Admins only: move the card to another node (it was moved physically, or its node was "
        "rebuilt under another name). A card belongs to the node that first reported it; no agent can move it. "
        "Refused (409) while the card has tenants. Recorded as an event.",
    )  # fmt: skip
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


# --- pods ----------------------------------------------------------------------------------


def submission_warnings(pod: Pod, config) -> dict[str, list[str]]:
    """What the pod's annotations name that the scheduler accepts but ignores."""
    from scheduling.engine.annotations import GPU_POLICY, NODE_POLICY

    policy = parse_pod(pod.as_spec(), config).policy
    warnings: dict[str, list[str]] = {}
    if policy.ignored:
        warnings[f"annotations.{GPU_POLICY}"] = [
            f"unknown policy {name!r} ignored (known: binpack, spread, numa, mutex, topology-aware)"
            for name in policy.ignored
        ]
    if policy.node_policy_ignored is not None:
        warnings[f"annotations.{NODE_POLICY}"] = [
            f"unknown node policy {policy.node_policy_ignored!r} ignored; using {policy.node_policy}"
        ]
    return warnings


@extend_schema_view(
    list=extend_schema(tags=["pods"], responses={200: s.PodSerializer(many=True), **BAD_FILTER, **REFUSED}),
    retrieve=extend_schema(
        tags=["pods"], responses={200: s.PodDetailSerializer, 404: ERRORS, **REFUSED},
        description="The pod, the vGPUs each container holds, `allocated`, and the latest decision.",
    ),  # fmt: skip
    create=extend_schema(
        tags=["pods"],
        request=s.PodSubmitDocSerializer,
        responses={
            201: s.PodSubmittedSerializer,
            200: OpenApiResponse(s.PodSubmittedSerializer, description="the pod existed: updated or unchanged"),
            400: ERRORS, 413: ERRORS, 415: ERRORS, 429: ERRORS, **REFUSED,
        },  # fmt: skip
        description=(
            "Submit a pod. Resources and annotations are validated as SPEC 2, 3 and 5 say; an "
            "invalid pod is refused with errors keyed by the field, e.g. "
            "`annotations.hami.io/device-scoring-weights`. Unknown chain names are accepted and "
            "reported in `warnings`. The same pod again changes nothing (200); a new spec re-queues "
            "a waiting pod; a placed pod may change its annotations, not its containers."
        ),
    ),
    destroy=extend_schema(
        tags=["pods"], responses={200: s.PodDetailSerializer, 404: ERRORS, **REFUSED},
        description="Delete the pod: its allocations are released, its history kept (status `deleted`).",
    ),  # fmt: skip
    complete=extend_schema(
        tags=["pods"], request=None, responses={200: s.PodDetailSerializer, 404: ERRORS, 409: ERRORS, **REFUSED},
        description="Mark the pod succeeded and release its allocations.",
    ),  # fmt: skip
)
class PodViewSet(
    RoleView,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Pods: submit, list, read (with the latest decision), delete, complete."""

    filterset_class = filtersets.PodFilterSet
    throttle_scope = "pod-submit"

    def get_queryset(self):
        return Pod.objects.select_related("node").order_by("-priority", "submitted_at", "id")

    def get_serializer_class(self):
        if self.action == "list":
            return s.PodSerializer
        if self.action == "create":
            return s.PodSubmitSerializer
        return s.PodDetailSerializer

    def get_throttles(self):
        return [ScopedRateThrottle()] if self.action == "create" else []

    def get_object(self):
        pod = get_object_or_404(self.get_queryset(), namespace=self.kwargs["namespace"], name=self.kwargs["name"])
        self.check_object_permissions(self.request, pod)
        return pod

    def create(self, request):
        body = s.PodSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        pod = body.validated_data
        before = Pod.objects.filter(namespace=pod["namespace"], name=pod["name"]).values_list("status", flat=True)
        before = before.first()
        submitted = services.submit_pod(
            pod["namespace"], pod["name"], pod["annotations"], pod["containers"],
            pod["initContainers"], pod["priority"], uid=pod["uid"], origin=Pod.API,
        )  # fmt: skip
        warnings = submission_warnings(submitted, SchedulerConfig.current())
        answer = s.PodSubmittedSerializer(submitted, context={"warnings": warnings, "request": request})
        created = before is None or before in Pod.FINISHED
        return Response(answer.data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    def destroy(self, request, namespace=None, name=None):
        return self._release(Pod.DELETED)

    @action(detail=True, methods=["post"])
    def complete(self, request, namespace=None, name=None):
        return self._release(Pod.SUCCEEDED)

    def _release(self, final_status: str) -> Response:
        pod = self.get_object()
        if final_status == Pod.SUCCEEDED and pod.status not in Pod.BOUND:
            raise Conflict(f"pod {pod.key} is {pod.status}: only a scheduled or running pod can complete")
        services.release_pod(pod, final_status)  # its own transaction, retried on a deadlock
        pod.refresh_from_db()
        return Response(s.PodDetailSerializer(pod, context={"request": self.request}).data)


@extend_schema_view(
    get=extend_schema(
        operation_id="pending_list", tags=["pods"],
        responses={200: s.PendingPodSerializer(many=True), **BAD_FILTER, **REFUSED},
        description="Pending pods, oldest first, with their chain and why they wait (reasons summed over nodes).",
    )  # fmt: skip
)
class PendingView(RoleView, generics.ListAPIView):
    serializer_class = s.PendingPodSerializer
    filterset_class = filtersets.PendingFilterSet

    def get_queryset(self):
        return Pod.objects.filter(status=Pod.PENDING).order_by("submitted_at", "id")

    def paginate_queryset(self, queryset):
        """Attach each pod's latest decision with one more query for the whole page."""
        page = super().paginate_queryset(queryset)
        pods = page if page is not None else list(queryset)
        latest_ids = dict(
            Pod.objects.filter(pk__in=[pod.pk for pod in pods])
            .annotate(latest=Subquery(Decision.objects.filter(pod=OuterRef("pk")).order_by("-id").values("id")[:1]))
            .values_list("pk", "latest")
        )
        decisions = Decision.objects.in_bulk([i for i in latest_ids.values() if i is not None])
        for pod in pods:
            decision = decisions.get(latest_ids.get(pod.pk))
            pod.latest_decisions = [decision] if decision else []
        return page if page is not None else None


# --- history -------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(
        tags=["history"], responses={200: s.DecisionDocSerializer(many=True), 404: ERRORS, **BAD_FILTER, **REFUSED},
        description="Scheduling attempts, newest first; `?pod=NAMESPACE/NAME` gives one pod's history.",
    ),  # fmt: skip
    retrieve=extend_schema(tags=["history"], responses={200: s.DecisionDocSerializer, 404: ERRORS, **REFUSED}),
)
class DecisionViewSet(RoleView, viewsets.ReadOnlyModelViewSet):
    lookup_value_regex = r"[^/]+"  # a malformed id is DRF's JSON 404, not Django's HTML one
    serializer_class = s.DecisionSerializer
    filterset_class = filtersets.DecisionFilterSet

    def get_queryset(self):
        return Decision.objects.select_related("pod").order_by("-id")

    def list(self, request, *args, **kwargs):
        decisions = self.filter_queryset(self.get_queryset())  # validates the filters first
        key = request.query_params.get("pod")
        if key:
            namespace, _, name = key.rpartition("/")
            if not Pod.objects.filter(namespace=namespace or "default", name=name).exists():
                raise NotFound(f"no pod {namespace or 'default'}/{name}")
        page = self.paginate_queryset(decisions)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)


@extend_schema_view(
    list=extend_schema(tags=["history"], responses={200: s.AllocationSerializer(many=True), **BAD_FILTER, **REFUSED}),
    retrieve=extend_schema(tags=["history"], responses={200: s.AllocationSerializer, 404: ERRORS, **REFUSED}),
)
class AllocationViewSet(RoleView, viewsets.ReadOnlyModelViewSet):
    lookup_value_regex = r"[^/]+"  # a malformed id is DRF's JSON 404, not Django's HTML one
    """Active allocations: one vGPU of one container on one card."""

    serializer_class = s.AllocationSerializer
    filterset_class = filtersets.AllocationFilterSet

    def get_queryset(self):
        return Allocation.objects.filter(active=True).select_related("pod", "card", "card__node").order_by("id")


@extend_schema_view(
    list=extend_schema(tags=["history"], responses={200: s.CycleSerializer(many=True), **BAD_FILTER, **REFUSED}),
    retrieve=extend_schema(tags=["history"], responses={200: s.CycleSerializer, 404: ERRORS, **REFUSED}),
)
class CycleViewSet(RoleView, viewsets.ReadOnlyModelViewSet):
    lookup_value_regex = r"[^/]+"  # a malformed id is DRF's JSON 404, not Django's HTML one
    """Recent scheduling cycles with their counts and durations, newest first."""

    serializer_class = s.CycleSerializer
    filterset_class = filtersets.CycleFilterSet

    def get_queryset(self):
        return Cycle.objects.order_by("-id")


# --- config and simulate ---------------------------------------------------------------------


def config_view() -> dict:
    """The defaults in force, in the scenario's `config` form, and who set them last."""
    latest = SchedulerConfig.objects.order_by("-id").first()
    current = latest.as_engine() if latest else SchedulerConfig.current()
    return {
        "node_scheduler_policy": current.node_scheduler_policy,
        "gpu_scheduler_policy": current.gpu_scheduler_policy,
        "resources": {
            "memory_percentage": current.resources.memory_percentage,
            "cores": current.resources.cores,
            "exclusive_cores": current.resources.exclusive_cores,
        },
        "changed_by": latest.changed_by if latest else "",
        "changed_at": latest.created_at if latest else None,
    }


class ConfigView(RoleView, APIView):
    """The cluster defaults. Everyone signed in reads them; admins change them. A change is
    recorded (who, when) and applies from the next cycle."""

    write_role = ADMIN

    @extend_schema(tags=["config"], responses={200: s.ConfigSerializer, **REFUSED})
    def get(self, request):
        return Response(s.ConfigSerializer(config_view()).data)

    @extend_schema(tags=["config"], request=s.ConfigSerializer, responses={200: s.ConfigSerializer, 400: ERRORS, **REFUSED})
    def put(self, request):
        return self._change(request, partial=False)

    @extend_schema(tags=["config"], request=s.ConfigSerializer, responses={200: s.ConfigSerializer, 400: ERRORS, **REFUSED})
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
        return Response(s.ConfigSerializer(config_view()).data)


class ScenarioTooBig(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Scenario too big to simulate."
    default_code = "scenario_too_big"


class QueuedSimulationThrottle(UserRateThrottle):
    """Simulations sent to the background, per user, counted by every process together."""

    scope = "simulate-queued"
    cache = ConnectionProxy(caches, "shared")


class SimulateView(RoleView, APIView):
    """Run a scenario through the engine; nothing is read from or written to the cluster.
    Small scenarios are answered in the request, big ones in the background (scheduling.simulations)."""

    write_role = VIEWER
    parser_classes = [ScenarioParser]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "simulate"

    @extend_schema(
        tags=["simulate"],
        request=s.ScenarioSerializer,
        parameters=[
            OpenApiParameter(
                "top", {"type": "integer", "minimum": 1}, required=False,
                description="keep the K best node scores and K failed nodes per pod",
            )
        ],
        responses={
            200: s.SimulationSerializer,
            202: OpenApiResponse(s.SimulationJobSerializer, description="queued: read the result at `url`"),
            400: ERRORS, 413: ERRORS, 415: ERRORS, 429: ERRORS, **REFUSED,
        },  # fmt: skip
        description=(
            "The same JSON as `manage.py simulate`. A malformed scenario is a 400 keyed by where "
            "it is wrong, e.g. `nodes[1].devices[0].uuid`. Work is pods x (nodes + cards): up to "
            "HAMI_SIMULATE_SYNC_MAX_WORK the answer comes at once (200); up to HAMI_SIMULATE_MAX_WORK "
            "the simulation is queued (202, `url` gives its status and result); above, or a body over "
            "HAMI_SIMULATE_MAX_BODY_BYTES, 413 naming the limit."
        ),
    )
    def post(self, request):
        top = request.query_params.get("top")
        if top is not None:
            if not top.isdigit() or int(top) < 1:
                raise ValidationError({"top": ["must be a positive integer"]})
            top = int(top)
        work = simulations.measure(request.data)
        limit = simulations.option("SIMULATE_MAX_WORK")
        if work.units > limit:
            raise ScenarioTooBig(f"Scenario too big to simulate: {work}, more than HAMI_SIMULATE_MAX_WORK ({limit}).")
        if work.units <= simulations.option("SIMULATE_SYNC_MAX_WORK"):
            return Response(run_scenario(request.data, top=top))
        parse_scenario(request.data)  # a malformed scenario is a 400 now, not a failed job later
        throttle = QueuedSimulationThrottle()
        if not throttle.allow_request(request, self):
            self.throttled(request, throttle.wait())
        job = simulations.submit(request.data, top, request.user.pk, work)
        url = request.build_absolute_uri(reverse("api:simulation", args=[job["id"]]))
        answer = s.SimulationJobSerializer({**simulations.public(job), "url": url}).data
        return Response(answer, status=status.HTTP_202_ACCEPTED, headers={"Location": url})


_ACCEPTS_GZIP = re.compile(r"\bgzip\b")
_JOB_ID = re.compile(r"[0-9a-f]{32}")


class SimulationView(RoleView, APIView):
    """A simulation queued by `POST simulate/`: its status, and its result once done.
    Only the user who posted it sees it, for HAMI_SIMULATE_RESULT_SECONDS."""

    @extend_schema(
        operation_id="simulate_result", tags=["simulate"],
        responses={200: s.SimulationJobSerializer, 404: ERRORS, **REFUSED},
        description=(
            "`status` is queued, running, done (with `result`, the same JSON as a simulation "
            "answered at once) or failed (with `error`). Sent gzip-encoded to clients that accept it."
        ),
    )  # fmt: skip
    def get(self, request, job):
        state = simulations.read(job) if _JOB_ID.fullmatch(job) else None
        if state is None or state["owner"] != request.user.pk:
            raise NotFound("No such simulation: it expired, or it is not yours.")
        if state["status"] != simulations.DONE:
            return Response(s.SimulationJobSerializer(simulations.public(state)).data)
        document = state["document"]
        if _ACCEPTS_GZIP.search(request.headers.get("Accept-Encoding", "")):
            response = HttpResponse(document, content_type="application/json")
            response["Content-Encoding"] = "gzip"
        else:
            response = HttpResponse(gzip.decompress(document), content_type="application/json")
        response["Vary"] = "Accept-Encoding"
        return response

