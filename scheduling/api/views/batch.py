"""Queues (the tree with usage against guarantee, quota and limit), pod groups (jobs, with
their members' last decisions) and namespace quotas: read by viewers, written by operators
through the services."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from scheduling import filtersets, services
from scheduling.api import serializers as s
from scheduling.models import NamespaceQuota, Pod, PodGroup, Queue
from scheduling.roles import priority_refusal

from .base import BAD_FILTER, ERRORS, REFUSED, Conflict, RoleView, check_query_parameters


def _node(name: str) -> services.QueueNode:
    found = next((node for node in services.queue_tree() if node.name == name), None)
    if found is None:
        raise Queue.DoesNotExist(f"no queue {name}")
    return found


@extend_schema_view(
    get=extend_schema(
        operation_id="queues_list",
        tags=["batch"],
        responses={200: s.QueueSerializer(many=True), **BAD_FILTER, **REFUSED},
        description=(
            "The queue tree, depth first: each queue with its parent and children, its weight, and per "
            "resource what its pods hold (summed over its children) against its guarantee, quota and limit; "
            "pending and running pods and jobs."
        ),
    ),
    post=extend_schema(
        tags=["batch"],
        request=s.QueueWriteSerializer,
        responses={201: s.QueueSerializer, 400: ERRORS, **REFUSED},
        description="Operators: create a queue. Refused (400, naming the field) when the tree's rules say no.",
    ),
)
class QueueList(RoleView, generics.GenericAPIView):
    """The queue tree with usage per resource; operators add queues."""

    filterset_class = filtersets.QueueFilterSet
    serializer_class = s.QueueSerializer

    def get_queryset(self):
        return Queue.objects.order_by("name")

    def get(self, request):
        chosen = set(self.filter_queryset(self.get_queryset()).values_list("name", flat=True))
        rows = [node for node in services.queue_tree() if node.name in chosen]
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(s.QueueSerializer(page, many=True).data)

    def post(self, request):
        body = s.QueueWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        name = body.validated_data["name"]
        services.create_queue(name, by=request.user.get_username(), **body.changes())
        return Response(s.QueueSerializer(_node(name)).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    get=extend_schema(tags=["batch"], responses={200: s.QueueSerializer, 404: ERRORS, **REFUSED}),
    patch=extend_schema(
        tags=["batch"],
        request=s.QueueWriteSerializer(partial=True),
        responses={200: s.QueueSerializer, 400: ERRORS, 404: ERRORS, **REFUSED},
        description="Operators: change a queue's parent, weight, namespaces or figures (what is sent changes).",
    ),
    delete=extend_schema(
        tags=["batch"],
        responses={204: None, 400: ERRORS, 404: ERRORS, **REFUSED},
        description="Operators: delete a leaf queue that holds no pods or unfinished jobs; never `default`.",
    ),
)
class QueueDetail(RoleView, generics.GenericAPIView):
    """One queue of the tree with its usage; operators change or delete it."""

    serializer_class = s.QueueSerializer

    def get(self, request, name):
        return Response(s.QueueSerializer(_node(name)).data)

    def patch(self, request, name):
        get_object_or_404(Queue, name=name)
        body = s.QueueWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        services.update_queue(name, by=request.user.get_username(), **body.changes())
        return Response(s.QueueSerializer(_node(name)).data)

    def delete(self, request, name):
        services.delete_queue(name, by=request.user.get_username())
        return Response(status=status.HTTP_204_NO_CONTENT)


def group_changes(body, user) -> dict:
    """A pod group body's changes, refused naming `priority` when the caller's role may not set
    that priority (`roles.priority_refusal`)."""
    changes = body.changes()
    refusal = priority_refusal(user, changes.get("priority"))
    if refusal is not None:
        raise ValidationError({"priority": [refusal]})
    return changes


def groups_with_members(groups: list[PodGroup]) -> list[PodGroup]:
    """Each group's `members`, with their latest decisions: two queries for the whole page."""
    members = list(
        Pod.objects.filter(group__in=groups).select_related("node").with_latest_decision().order_by("name")
    )
    Pod.objects.latest_decisions(members)
    by_group: dict[int, list[Pod]] = {}
    for pod in members:
        by_group.setdefault(pod.group_id, []).append(pod)
    for group in groups:
        group.members = by_group.get(group.pk, [])
    return groups


@extend_schema_view(
    get=extend_schema(
        operation_id="podgroups_list",
        tags=["batch"],
        responses={200: s.PodGroupSerializer(many=True), **BAD_FILTER, **REFUSED},
        description=(
            "Jobs (gangs): figures, phase, conditions and the gang verdict (`reason`), and each member with "
            "its status, node and last decision (its `batch` verdict when a gang, queue or quota rule held it)."
        ),
    ),
    post=extend_schema(
        tags=["batch"],
        request=s.PodGroupWriteSerializer,
        responses={201: s.PodGroupSerializer, 400: ERRORS, **REFUSED},
        description="Operators: create a job; pods join it by `hami.io/group-name` in its namespace.",
    ),
)
class PodGroupList(RoleView, generics.GenericAPIView):
    """Jobs with their members; operators create them."""

    filterset_class = filtersets.PodGroupFilterSet
    serializer_class = s.PodGroupSerializer

    def get_queryset(self):
        return PodGroup.objects.select_related("queue").order_by("namespace", "name")

    def get(self, request):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(s.PodGroupSerializer(groups_with_members(page), many=True).data)

    def post(self, request):
        body = s.PodGroupWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        namespace, name = body.validated_data["namespace"], body.validated_data["name"]
        changes = group_changes(body, request.user)
        group = services.create_pod_group(namespace, name, by=request.user.get_username(), **changes)
        return Response(s.PodGroupSerializer(group).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    get=extend_schema(tags=["batch"], responses={200: s.PodGroupSerializer, 404: ERRORS, **REFUSED}),
    patch=extend_schema(
        tags=["batch"],
        request=s.PodGroupWriteSerializer(partial=True),
        responses={200: s.PodGroupSerializer, 400: ERRORS, 404: ERRORS, **REFUSED},
        description="Operators: change a job's min_member, min_resources, queue, priority or timeout.",
    ),
)
class PodGroupDetail(RoleView, generics.GenericAPIView):
    """One job with its members and their last decisions; operators change it."""

    serializer_class = s.PodGroupSerializer

    def _group(self, namespace: str, name: str) -> PodGroup:
        return get_object_or_404(PodGroup.objects.select_related("queue"), namespace=namespace, name=name)

    def get(self, request, namespace, name):
        return Response(s.PodGroupSerializer(self._group(namespace, name)).data)

    def patch(self, request, namespace, name):
        self._group(namespace, name)
        body = s.PodGroupWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        changes = group_changes(body, request.user)
        services.update_pod_group(namespace, name, by=request.user.get_username(), **changes)
        return Response(s.PodGroupSerializer(self._group(namespace, name)).data)


QUOTA_FILTERS = [
    OpenApiParameter("namespace", str, description="only this namespace's quotas"),
    OpenApiParameter(
        "source", str, enum=[s for s, _ in NamespaceQuota.SOURCES], description="who keeps them"
    ),
]


def _quota_write(call, *args, **kwargs):
    """A service write, with a Kubernetes-kept quota answered 409 naming the quota."""
    try:
        return call(*args, **kwargs)
    except services.QuotaOwnedByKubernetes as exc:
        raise Conflict({"name": [str(exc)]}) from None


@extend_schema_view(
    get=extend_schema(
        operation_id="namespacequotas_list",
        tags=["batch"],
        parameters=QUOTA_FILTERS,
        responses={200: s.NamespaceQuotaSerializer(many=True), **BAD_FILTER, **REFUSED},
        description=(
            "Namespace quotas of both sources: Kubernetes ResourceQuotas read by the agent (`kubernetes`, "
            "read-only here) and those made through this API or the admin (`api`). Every quota of a "
            "namespace holds; the tighter one wins."
        ),
    ),
    post=extend_schema(
        tags=["batch"],
        request=s.NamespaceQuotaWriteSerializer,
        responses={201: s.NamespaceQuotaSerializer, 400: ERRORS, 409: ERRORS, **REFUSED},
        description=(
            "Operators: create a namespace quota (hard limits per resource). 409 when a Kubernetes "
            "ResourceQuota has that name in the namespace."
        ),
    ),
)
class NamespaceQuotaList(RoleView, generics.GenericAPIView):
    """Namespace quotas, both sources; operators add their own."""

    serializer_class = s.NamespaceQuotaSerializer
    extra_query_parameters = ("namespace", "source")

    def get_queryset(self):
        return NamespaceQuota.objects.order_by("namespace", "quota", "source", "resource")

    def get(self, request):
        check_query_parameters(self, request)
        namespace = request.query_params.get("namespace") or None
        source = request.query_params.get("source") or None
        sources = [name for name, _ in NamespaceQuota.SOURCES]
        if source is not None and source not in sources:
            raise ValidationError({"source": [f"one of {', '.join(sources)}"]})
        rows = [q for q in services.namespace_quotas(namespace) if source is None or q.source == source]
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(s.NamespaceQuotaSerializer(page, many=True).data)

    def post(self, request):
        body = s.NamespaceQuotaWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        quota = _quota_write(
            services.create_namespace_quota,
            data["namespace"],
            data["name"],
            dict(data["hard"]),
            by=request.user.get_username(),
        )
        return Response(s.NamespaceQuotaSerializer(quota).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    get=extend_schema(tags=["batch"], responses={200: s.NamespaceQuotaSerializer, 404: ERRORS, **REFUSED}),
    patch=extend_schema(
        tags=["batch"],
        request=s.NamespaceQuotaWriteSerializer(partial=True),
        responses={200: s.NamespaceQuotaSerializer, 400: ERRORS, 404: ERRORS, 409: ERRORS, **REFUSED},
        description=(
            "Operators: change an API-made quota's `hard` (a resource left out stays, null removes it). "
            "409 for a Kubernetes ResourceQuota's: change the object instead."
        ),
    ),
    delete=extend_schema(
        tags=["batch"],
        responses={204: None, 404: ERRORS, 409: ERRORS, **REFUSED},
        description="Operators: delete an API-made quota. 409 for a Kubernetes ResourceQuota's.",
    ),
)
class NamespaceQuotaDetail(RoleView, generics.GenericAPIView):
    """One namespace quota (the API-made one when a ResourceQuota has the same name too)."""

    serializer_class = s.NamespaceQuotaSerializer

    def get(self, request, namespace, name):
        return Response(s.NamespaceQuotaSerializer(services.namespace_quota(namespace, name)).data)

    def patch(self, request, namespace, name):
        body = s.NamespaceQuotaWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        fixed = [field for field in ("namespace", "name") if field in body.validated_data]
        if fixed:
            raise ValidationError(
                {field: ["create only: a quota is renamed by deleting it"] for field in fixed}
            )
        quota = _quota_write(
            services.update_namespace_quota,
            namespace,
            name,
            dict(body.validated_data.get("hard", {})),
            by=request.user.get_username(),
        )
        return Response(s.NamespaceQuotaSerializer(quota).data)

    def delete(self, request, namespace, name):
        _quota_write(services.delete_namespace_quota, namespace, name, by=request.user.get_username())
        return Response(status=status.HTTP_204_NO_CONTENT)
