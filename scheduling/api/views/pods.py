"""Pods: submit, list, read, delete, complete; and the pending queue."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle

from scheduling import filtersets, services
from scheduling.api import serializers as s
from scheduling.models import Pod
from scheduling.roles import priority_refusal
from scheduling.services.pods import WriteOutcome, release_pods

from .base import BAD_FILTER, ERRORS, REFUSED, Conflict, RoleView
from .bulk import submission_of


@extend_schema_view(
    list=extend_schema(tags=["pods"], responses={200: s.PodSerializer(many=True), **BAD_FILTER, **REFUSED}),
    retrieve=extend_schema(
        tags=["pods"],
        responses={200: s.PodDetailSerializer, 404: ERRORS, **REFUSED},
        description="The pod, the vGPUs each container holds, `allocated`, and the latest decision.",
    ),
    create=extend_schema(
        tags=["pods"],
        request=s.PodSubmitSerializer,
        responses={
            201: s.PodSubmittedSerializer,
            200: OpenApiResponse(
                s.PodSubmittedSerializer, description="the pod existed: updated or unchanged"
            ),
            400: ERRORS,
            413: ERRORS,
            415: ERRORS,
            429: ERRORS,
            **REFUSED,
        },
        description=(
            "Submit a pod. Resources and annotations are validated as SPEC 2, 3 and 5 say; an "
            "invalid pod is refused with errors keyed by the field, e.g. "
            "`annotations.hami.io/device-scoring-weights`, every problem at once. An unknown key "
            "(`annotatons`), container key or GPU-like resource name hamiadmin does not read "
            "(`nvidia.com/gpumemory`: did you mean nvidia.com/gpumem?) is refused naming it. "
            "Unknown chain names and `hami.io/` annotations hamiadmin does not read are accepted "
            "and reported in `warnings`. The same pod again changes nothing (200); a new spec re-queues "
            "a waiting pod; a placed pod may change its annotations, not its containers. A "
            "`priority` above 1,000,000,000 (Kubernetes' system range) needs the admin role."
        ),
    ),
    destroy=extend_schema(
        tags=["pods"],
        responses={200: s.PodDetailSerializer, 404: ERRORS, **REFUSED},
        description="Delete the pod: its allocations are released, its history kept (status `deleted`).",
    ),
    complete=extend_schema(
        tags=["pods"],
        request=None,
        responses={200: s.PodDetailSerializer, 404: ERRORS, 409: ERRORS, **REFUSED},
        description="Mark the pod succeeded and release its allocations.",
    ),
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
        pod = get_object_or_404(
            self.get_queryset(), namespace=self.kwargs["namespace"], name=self.kwargs["name"]
        )
        self.check_object_permissions(self.request, pod)
        return pod

    def create(self, request):
        body = s.PodSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        pod = body.validated_data
        refusal = priority_refusal(request.user, pod["priority"])
        if refusal is not None:
            raise ValidationError({"priority": [refusal]})
        (done,) = services.submit_pods([submission_of(pod)], origin=Pod.API)
        if done.error is not None:
            raise done.error  # a 400 naming the field (scheduling/api/errors.py)
        if done.inserted:  # a new row: the answer built by hand, as the serializer writes it
            answer = s.new_pod_answer(done.pod, done.warnings)
        else:
            context = {"warnings": done.warnings, "request": request}
            answer = s.PodSubmittedSerializer(done.pod, context=context).data
        created = done.outcome == WriteOutcome.CREATED
        return Response(answer, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    def destroy(self, request, namespace=None, name=None):
        return self._release(Pod.DELETED)

    @action(detail=True, methods=["post"])
    def complete(self, request, namespace=None, name=None):
        return self._release(Pod.SUCCEEDED)

    def _release(self, final_status: str) -> Response:
        """`release_pods` for this one pod: its row locked once, a complete of a pod that is
        not placed refused under that lock (409), no such pod 404."""
        (done,) = release_pods(
            [{"namespace": self.kwargs["namespace"], "name": self.kwargs["name"]}],
            final_status,
            placed_only=final_status == Pod.SUCCEEDED,
        )
        if done.pod is None:
            raise NotFound("No Pod matches the given query.")
        if done.error is not None:
            pod = done.pod
            raise Conflict(f"pod {pod.key} is {pod.status}: only a scheduled or running pod can complete")
        return Response(s.released_pod_answer(done.pod, self.request))  # the row as written


@extend_schema_view(
    get=extend_schema(
        operation_id="pending_list",
        tags=["pods"],
        responses={200: s.PendingPodSerializer(many=True), **BAD_FILTER, **REFUSED},
        description="Pending pods, oldest first, with their chain and why they wait (reasons summed over nodes).",
    )
)
class PendingView(RoleView, generics.ListAPIView):
    """Pending pods, oldest first, with their chain and why they wait."""

    serializer_class = s.PendingPodSerializer
    filterset_class = filtersets.PendingFilterSet

    def get_queryset(self):
        return Pod.objects.filter(status=Pod.PENDING).with_latest_decision().order_by("submitted_at", "id")

    def paginate_queryset(self, queryset):
        """Each pod of the page with its latest decision: one more query for the whole page."""
        page = super().paginate_queryset(queryset)
        Pod.objects.latest_decisions(page if page is not None else queryset)
        return page
