"""Queues (the tree with usage against guarantee, quota and limit) and pod groups (jobs, with
their members' last decisions): read by viewers, written by operators through the services."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from scheduling import filtersets, services
from scheduling.api import serializers as s
from scheduling.models import Pod, PodGroup, Queue
from scheduling.roles import priority_refusal

from .base import BAD_FILTER, ERRORS, REFUSED, RoleView


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
