"""`POST pods/bulk/`: many pods in one request and one transaction (`services.submit_pods`).

Each pod is checked as `POST pods/` checks it (the same serializer, then the engine), and
answered on its own: a bad pod is refused naming its field and never keeps the others out.
Included by `scheduling/api/urls.py` as `pods/bulk/` (this module's `urlpatterns`).
"""

from __future__ import annotations

from collections import Counter

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from scheduling import services
from scheduling.api import serializers as s
from scheduling.api.parsers import ItemwiseJSONParser, nul_character_at
from scheduling.engine import PodInvalid
from scheduling.models import Pod
from scheduling.models.pods import SCHEDULING_FIELDS
from scheduling.roles import priority_refusal
from scheduling.services.pods import WriteOutcome, named_again

from .base import ERRORS, RoleView
from .base import REFUSED as REFUSED_ANSWERS

#: The most pods one request may carry.
MAX_PODS = 1000
OUTCOMES = (WriteOutcome.CREATED, WriteOutcome.UPDATED, WriteOutcome.UNCHANGED, WriteOutcome.REFUSED)
NUL_REFUSED = "must not contain NUL (\\u0000) characters"


class PodBulkItemSerializer(s.PodSubmitSerializer):
    """One pod of `POST pods/bulk/`: the body of `POST pods/`, and the labels that may name a
    queue or a group (`kai.scheduler/queue`, `scheduling.x-k8s.io/pod-group`)."""

    labels = s.StringMapField(required=False, default=dict)


class PodBulkSubmitSerializer(serializers.Serializer):
    pods = PodBulkItemSerializer(many=True, help_text=f"1 to {MAX_PODS} pods")


class PodRefSerializer(serializers.Serializer):
    namespace = serializers.CharField()
    name = serializers.CharField()
    id = serializers.IntegerField()


class ItemErrorSerializer(serializers.Serializer):
    field = serializers.CharField(
        help_text="path in the item, e.g. containers[0].resources.limits.nvidia.com/gpu"
    )
    message = serializers.CharField()


class PodBulkResultSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="the item's position in `pods`")
    outcome = serializers.CharField(
        help_text=f"one of {', '.join(OUTCOMES)}"
    )  # not an enum: the name is taken by Decision.outcome
    pod = PodRefSerializer(allow_null=True, help_text="the row written; null when refused")
    error = ItemErrorSerializer(allow_null=True, help_text="the first of `errors`; null when not refused")
    # the answer's key: DRF takes declared fields off the class, so `Serializer.errors` stays
    errors = ItemErrorSerializer(  # type: ignore[assignment]
        many=True, help_text="every problem of a refused item, at once; [] otherwise"
    )
    warnings = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="by field: values accepted but ignored (unknown chain names, unknown node policy)",
    )


class PodBulkAnswerSerializer(serializers.Serializer):
    pods = PodBulkResultSerializer(many=True, help_text="one result per item, in order")
    created = serializers.IntegerField()
    updated = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    refused = serializers.IntegerField()


def submission_of(pod: dict) -> dict:
    """A pod as `PodSubmitSerializer` (or its bulk item) validated it, as `submit_pods` takes it."""
    submission = {
        "namespace": pod["namespace"],
        "name": pod["name"],
        "annotations": pod["annotations"],
        "containers": pod["containers"],
        "init_containers": pod["initContainers"],
        "priority": pod["priority"],
        "uid": pod["uid"],
    }
    if "labels" in pod:
        submission["labels"] = pod["labels"]
    scheduling = {name: pod[name] for name in SCHEDULING_FIELDS if name in pod}
    if scheduling:
        submission["scheduling"] = scheduling
    return submission


def checked_item(
    item, again: PodInvalid | None, envelope: serializers.Serializer, shape: str
) -> tuple[dict | None, tuple[str, str] | None]:
    """One item of a bulk body validated by `envelope` (one serializer for the whole batch, as
    a list serializer uses its child: building one per item costs more than the writes), or
    why not as (field, message): the first of `item_problems`."""
    pod, problems = item_problems(item, again, envelope, shape)
    return pod, problems[0] if problems else None


def item_problems(
    item, again: PodInvalid | None, envelope: serializers.Serializer, shape: str
) -> tuple[dict | None, list[tuple[str, str]]]:
    """`checked_item` with every problem of the item, in order: a NUL character (which no
    name needs and PostgreSQL cannot store), not an object (`shape` says what it must be), an
    unknown field, an invalid one, or a pod an earlier item names (`again`). A pod's envelope
    (`PodSubmitSerializer`) names its unknown fields itself, with its other problems, in the
    pod schema's words (`engine.podschema`)."""
    where = nul_character_at(item)
    if where is not None:
        return None, [(where or "pod", NUL_REFUSED)]
    if not isinstance(item, dict):
        return None, [("pod", f"must be an object: {shape}")]
    if not isinstance(envelope, s.PodSubmitSerializer):
        stray = sorted(str(key) for key in item if key not in envelope.fields)
        if stray:
            return None, [(stray[0], f"unknown field; a pod takes {', '.join(envelope.fields)}")]
    try:
        pod = envelope.run_validation(item)
    except ValidationError as exc:
        return None, every_error(exc.detail)
    if again is not None:
        return None, [(again.field, again.message)]
    return pod, []


def every_error(detail, where: str = "") -> list[tuple[str, str]]:
    """A serializer's errors as (field path, message), in order: `annotations.team`,
    `containers[0]`; DRF nests them by field, key and position."""
    if isinstance(detail, dict):
        found = []
        for key, inner in detail.items():
            at = f"{where}[{key}]" if isinstance(key, int) else (f"{where}.{key}" if where else str(key))
            found += every_error(inner, at)
        return found
    if isinstance(detail, list):
        return [error for inner in detail for error in every_error(inner, where)]
    return [(where or "pod", str(detail))]


def _refused(index: int, problems: list[tuple[str, str]]) -> dict:
    """A refused item's answer: `error` the first problem, `errors` every one."""
    errors = [{"field": field, "message": message} for field, message in problems]
    return {
        "index": index,
        "outcome": WriteOutcome.REFUSED,
        "pod": None,
        "error": errors[0],
        "errors": errors,
        "warnings": {},
    }


def pods_of(body, takes: tuple[str, ...] = ("pods",)) -> list:
    """The request's `pods`, or a 400 naming `pods` (or the stray key: the body takes the
    keys `takes`)."""
    if not isinstance(body, dict):
        raise ValidationError({"pods": ["the body must be an object with a list of pods"]})
    where = nul_character_at({key: value for key, value in body.items() if key != "pods"})
    if where is not None:
        raise ValidationError({where: [NUL_REFUSED]})  # outside the items: the request's fault
    stray = sorted(str(key) for key in body if key not in takes)
    if stray:
        raise ValidationError({key: [f"unknown field; the body takes {', '.join(takes)}"] for key in stray})
    pods = body.get("pods")
    if not isinstance(pods, list) or not pods:
        raise ValidationError({"pods": [f"required: a list of 1 to {MAX_PODS} pods"]})
    if len(pods) > MAX_PODS:
        raise ValidationError({"pods": [f"at most {MAX_PODS} pods in one request, got {len(pods)}"]})
    return pods


class PodBulkSubmitView(RoleView, APIView):
    """Submit many pods at once: one result per pod, all written in one transaction."""

    throttle_scope = "pod-submit"
    throttle_classes = [ScopedRateThrottle]
    parser_classes = [ItemwiseJSONParser]  # a NUL refuses its item only (`checked_item`)

    @extend_schema(
        operation_id="pods_bulk_create",
        tags=["pods"],
        request=PodBulkSubmitSerializer,
        responses={
            200: PodBulkAnswerSerializer,
            400: ERRORS,
            413: ERRORS,
            415: ERRORS,
            429: ERRORS,
            **REFUSED_ANSWERS,
        },
        description=(
            f"Submit up to {MAX_PODS} pods in one request and one transaction. Each pod is the "
            "body of `POST pods/` plus `labels`, checked the same way, and answered on its own "
            "(200 whatever the outcomes): `created`, `updated`, `unchanged` or `refused` with "
            "`error.field` naming the field in the item (`errors`: every problem of the item at "
            "once, `error` the first); a refused pod never keeps the others out. A pod named by an earlier item is refused naming `name`; an unknown field of "
            "an item is refused naming it, as is a NUL character in an item. The request counts once against the `pod-submit` "
            "rate. 400 names `pods` when it is not a list of 1 to 1000 pods."
        ),
    )
    def post(self, request):
        raw = pods_of(request.data)
        again = named_again(
            [{"namespace": "default", **item} if isinstance(item, dict) else item for item in raw]
        )
        answers: dict[int, dict] = {}
        checked: list[tuple[int, dict]] = []
        envelope = PodBulkItemSerializer()
        for index, item in enumerate(raw):
            submission, problems = self._checked(item, again.get(index), envelope, request.user)
            if submission is None:
                answers[index] = _refused(index, problems)
            else:
                checked.append((index, submission))
        results = services.submit_pods([pod for _, pod in checked], origin=Pod.API)
        for (index, _), done in zip(checked, results, strict=True):
            answers[index] = self._answer(index, done)
        ordered = [answers[index] for index in range(len(raw))]
        counts = Counter(answer["outcome"] for answer in ordered)
        return Response({"pods": ordered, **{outcome: counts[outcome] for outcome in OUTCOMES}})

    @staticmethod
    def _checked(
        item, again: PodInvalid | None, envelope: PodBulkItemSerializer, user
    ) -> tuple[dict | None, list[tuple[str, str]]]:
        """The item as `submit_pods` takes it, or why not as every (field, message): `POST
        pods/`'s envelope rules and pod schema (`envelope`, one serializer for the batch, as a
        list serializer uses its child: building one per item costs more than the writes), not
        named by an earlier item, a priority the caller's role may set."""
        pod, problems = item_problems(item, again, envelope, "the body of POST pods/ plus labels")
        if pod is None:
            return None, problems
        too_high = priority_refusal(user, pod["priority"])
        if too_high is not None:
            return None, [("priority", too_high)]
        return submission_of(pod), []

    @staticmethod
    def _answer(index: int, done) -> dict:
        if done.outcome == WriteOutcome.REFUSED:
            error = done.error
            answer = _refused(index, getattr(error, "problems", None) or [(error.field, error.message)])
            answer["error"] = {"field": error.field, "message": error.message}
            return answer
        pod = done.pod
        return {
            "index": index,
            "outcome": done.outcome,
            "pod": {"namespace": pod.namespace, "name": pod.name, "id": pod.pk},
            "error": None,
            "errors": [],
            "warnings": done.warnings,
        }


urlpatterns = [path("", PodBulkSubmitView.as_view(), name="pod-bulk")]
