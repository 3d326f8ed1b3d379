"""Filters shared by the REST API and the pages: one definition of "cards of node X" etc."""

from __future__ import annotations

import datetime as dt

import django_filters as filters
from django import forms
from django.db.models import Exists, OuterRef, Q
from django_filters.fields import IsoDateTimeField
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from .engine.batch.queues import DEFAULT_QUEUE
from .models import Allocation, Card, Cycle, Decision, Event, Eviction, Node, Pod, PodGroup, Queue
from .models.pods import verdict_filter


@extend_schema_field(OpenApiTypes.BOOL)
class StrictBooleanFilter(filters.TypedChoiceFilter):
    """`true` or `false`; anything else is a 400 rather than silently no filter."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("choices", [("true", "true"), ("false", "false")])
        kwargs.setdefault("coerce", lambda value: value == "true")
        super().__init__(*args, **kwargs)


class NodeFilterSet(filters.FilterSet):
    ready = StrictBooleanFilter()
    name = filters.CharFilter(lookup_expr="icontains", help_text="part of the node name")

    class Meta:
        model = Node
        fields = ["ready", "name"]


class NodeTableFilterSet(filters.FilterSet):
    """The Cluster page's node table: search by name, narrow by card type and readiness."""

    q = filters.CharFilter(
        field_name="name", lookup_expr="icontains", label="Search", help_text="part of the node name"
    )
    type = filters.CharFilter(method="with_card_type", help_text="part of a card type, any case")
    ready = StrictBooleanFilter()

    class Meta:
        model = Node
        fields = ["q", "type", "ready"]

    def with_card_type(self, qs, name, value):
        if not value:
            return qs
        return qs.filter(Exists(Card.objects.filter(node=OuterRef("pk"), type__icontains=value)))


class CardFilterSet(filters.FilterSet):
    node = filters.CharFilter(field_name="node__name", help_text="node name")
    type = filters.CharFilter(lookup_expr="icontains", help_text="part of the card type, any case")
    health = StrictBooleanFilter()
    cordoned = StrictBooleanFilter()
    present = StrictBooleanFilter(help_text="false: cards missing from their node's latest report")

    class Meta:
        model = Card
        fields = ["node", "type", "health", "cordoned", "present"]


class VerdictFilter(filters.MultipleChoiceFilter):
    """One or more verdict classes of a waiting pod (`engine.triage`: never, capacity, rule,
    invalid), as `models.pods.waiting_verdict` gives them."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("choices", Pod.VERDICTS)
        kwargs.setdefault(
            "help_text",
            "never (never fits here), capacity (waits for capacity), rule (held by a rule), invalid",
        )
        super().__init__(*args, **kwargs)

    def filter(self, qs, value):
        return qs.filter(verdict_filter(value)) if value else qs


class PodFilterSet(filters.FilterSet):
    status = filters.MultipleChoiceFilter(choices=Pod.STATUSES)
    namespace = filters.CharFilter()
    node = filters.CharFilter(field_name="node__name", help_text="node name")
    origin = filters.MultipleChoiceFilter(choices=Pod.ORIGINS, help_text="who submitted the pod")
    verdict = VerdictFilter()

    class Meta:
        model = Pod
        fields = ["status", "namespace", "node", "origin", "verdict"]


class PodKeyFilter(filters.CharFilter):
    """``NAMESPACE/NAME`` (a bare NAME means namespace ``default``)."""

    def filter(self, qs, value):
        if not value:
            return qs
        namespace, name = Pod.split_key(value)
        return qs.filter(**{f"{self.field_name}__namespace": namespace, f"{self.field_name}__name": name})


#: The largest primary key (a BigAutoField); a bigger number names no row.
BIGINT_MAX = 2**63 - 1


class PodRefFilter(filters.CharFilter):
    """A pod by ``NAMESPACE/NAME``, by a bare NAME (namespace ``default``), or by its id (a
    bare number: give ``default/123`` for a pod whose name is a number)."""

    def filter(self, qs, value):
        if not value:
            return qs
        if value.isascii() and value.isdigit():
            number = int(value)
            return qs.filter(**{f"{self.field_name}_id": number}) if number <= BIGINT_MAX else qs.none()
        namespace, name = Pod.split_key(value)
        return qs.filter(**{f"{self.field_name}__namespace": namespace, f"{self.field_name}__name": name})


class DecisionFilterSet(filters.FilterSet):
    pod = PodKeyFilter(field_name="pod", help_text="NAMESPACE/NAME")
    outcome = filters.MultipleChoiceFilter(choices=Decision.OUTCOMES)
    node = filters.CharFilter()
    cycle = filters.NumberFilter(field_name="cycle_id")

    class Meta:
        model = Decision
        fields = ["pod", "outcome", "node", "cycle"]


class AllocationFilterSet(filters.FilterSet):
    node = filters.CharFilter(field_name="card__node__name", help_text="node name")
    card = filters.CharFilter(field_name="card__uuid", help_text="card UUID")
    namespace = filters.CharFilter(field_name="pod__namespace")
    pod = PodKeyFilter(field_name="pod", help_text="NAMESPACE/NAME")

    class Meta:
        model = Allocation
        fields = ["node", "card", "namespace", "pod"]


class PendingFilterSet(filters.FilterSet):
    namespace = filters.CharFilter()
    name = filters.CharFilter(lookup_expr="icontains", help_text="part of the pod name")
    reason = filters.CharFilter(method="with_reason", help_text="a reason code, e.g. CardInsufficientMemory")
    verdict = VerdictFilter()

    class Meta:
        model = Pod
        fields = ["namespace", "name", "reason", "verdict"]

    def with_reason(self, qs, name, value):
        return qs.filter(Q(reason__contains=value) | Q(error__contains=value)) if value else qs


class EvictionFilterSet(filters.FilterSet):
    """Evictions by how far they got, why (preempt or reclaim), who gave way, for whom, where."""

    state = filters.MultipleChoiceFilter(choices=Eviction.STATES, help_text="one or more states")
    kind = filters.MultipleChoiceFilter(choices=Eviction.KINDS, help_text="preempt or reclaim")
    victim = PodRefFilter(field_name="victim", help_text="the evicted pod: NAMESPACE/NAME or its id")
    preemptor = PodRefFilter(
        field_name="preemptor", help_text="the pod it gave way to: NAMESPACE/NAME or its id"
    )
    node = filters.CharFilter(help_text="node name")

    class Meta:
        model = Eviction
        fields = ["state", "kind", "victim", "preemptor", "node"]


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 time moved to UTC: databases refuse odd offsets such as -22:02."""

    def to_python(self, value):
        value = super().to_python(value)
        if value is None:
            return None
        try:
            return value.astimezone(dt.UTC)
        except OverflowError:
            raise forms.ValidationError("out of range once moved to UTC", code="invalid") from None


class UtcDateTimeFilter(filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class CycleFilterSet(filters.FilterSet):
    since = UtcDateTimeFilter(field_name="started_at", lookup_expr="gte", help_text="ISO 8601 time")

    class Meta:
        model = Cycle
        fields = ["since"]


class EventFilterSet(filters.FilterSet):
    kind = filters.MultipleChoiceFilter(choices=Event.KINDS, help_text="one or more kinds of event")
    subject = filters.CharFilter(
        lookup_expr="startswith", help_text="the start of the subject: node/a, pod/ml/, card/GPU-1"
    )
    since = UtcDateTimeFilter(
        field_name="last_seen", lookup_expr="gte", help_text="ISO 8601 time: last seen since"
    )

    class Meta:
        model = Event
        fields = ["kind", "subject", "since"]


class QueueFilterSet(filters.FilterSet):
    name = filters.CharFilter(lookup_expr="icontains", help_text="part of the queue name")
    parent = filters.CharFilter(field_name="parent__name", help_text="the parent queue's name")
    leaf = StrictBooleanFilter(method="only_leaves", help_text="true: queues without children")

    class Meta:
        model = Queue
        fields = ["name", "parent", "leaf"]

    def only_leaves(self, qs, name, value):
        has_children = Exists(Queue.objects.filter(parent=OuterRef("pk")))
        return qs.filter(~has_children) if value else qs.filter(has_children)


class PodGroupFilterSet(filters.FilterSet):
    namespace = filters.CharFilter()
    name = filters.CharFilter(lookup_expr="icontains", help_text="part of the job name")
    phase = filters.MultipleChoiceFilter(choices=PodGroup.PHASES)
    source = filters.MultipleChoiceFilter(choices=PodGroup.SOURCES, help_text="where the group came from")
    queue = filters.CharFilter(method="in_queue", help_text="queue name; default also takes jobs of no queue")

    class Meta:
        model = PodGroup
        fields = ["namespace", "name", "phase", "source", "queue"]

    def in_queue(self, qs, name, value):
        if not value:
            return qs
        if value == DEFAULT_QUEUE:
            return qs.filter(Q(queue__name=value) | Q(queue__isnull=True))
        return qs.filter(queue__name=value)
