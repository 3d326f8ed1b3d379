"""`POST pods/bulk/release/`: many pods end in one request and one transaction
(`services.pods.release_pods`).

The batch form of `POST pods/<ns>/<name>/complete/` (`succeeded`; `failed` by the same rule:
only a scheduled or running pod) and of `DELETE pods/<ns>/<name>/` (`deleted`: any pod, a
finished one left unchanged). Each pod is answered on its own: an unknown or refused pod is
named with its field and never keeps the others from ending.
Included by `scheduling/api/urls.py` as `pods/bulk/release/` (this module's URL patterns).
"""

from __future__ import annotations

from collections import Counter

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.api.parsers import ItemwiseJSONParser
from scheduling.api.serializers.fields import StrictCharField, max_length
from scheduling.engine import PodInvalid
from scheduling.models import Pod
from scheduling.services.pods import WriteOutcome, named_again, release_pods

from .base import ERRORS, RoleView
from .base import REFUSED as REFUSED_ANSWERS
from .bulk import MAX_PODS, ItemErrorSerializer, PodRefSerializer, checked_item, pods_of

OUTCOMES = (WriteOutcome.RELEASED, WriteOutcome.UNCHANGED, WriteOutcome.REFUSED)
#: The statuses a release may end pods in, and whether only a placed pod may end so (the
#: rule of `POST pods/<ns>/<name>/complete/`).
ENDINGS = {Pod.SUCCEEDED: True, Pod.FAILED: True, Pod.DELETED: False}


class PodReleaseItemSerializer(serializers.Serializer):
    """One pod of `POST pods/bulk/release/`: which pod, and optionally which incarnation."""

    namespace = StrictCharField(max_length=max_length(Pod, "namespace"), required=False, default="default")
    name = StrictCharField(max_length=max_length(Pod, "name"))
    uid = StrictCharField(
        max_length=max_length(Pod, "uid"),
        required=False,
        allow_blank=True,
        default="",
        help_text="release only this incarnation; another one is refused naming uid",
    )


class PodBulkReleaseSerializer(serializers.Serializer):
    pods = PodReleaseItemSerializer(many=True, help_text=f"1 to {MAX_PODS} pods")
    status = serializers.ChoiceField(
        choices=list(ENDINGS),
        help_text="what the pods end as: succeeded or failed (scheduled or running pods only), deleted (any)",
    )


class PodReleaseResultSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="the item's position in `pods`")
    outcome = serializers.CharField(help_text=f"one of {', '.join(OUTCOMES)}")
    pod = PodRefSerializer(allow_null=True, help_text="the pod's row; null when there is none")
    status = serializers.CharField(
        allow_null=True, help_text="the pod's status after this request; null when there is no row"
    )
    error = ItemErrorSerializer(allow_null=True)


class PodBulkReleaseAnswerSerializer(serializers.Serializer):
    pods = PodReleaseResultSerializer(many=True, help_text="one result per item, in order")
    released = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    refused = serializers.IntegerField()


def _result(index: int, outcome: str, pod: Pod | None, error: tuple[str, str] | None) -> dict:
    return {
        "index": index,
        "outcome": outcome,
        "pod": None if pod is None else {"namespace": pod.namespace, "name": pod.name, "id": pod.pk},
        "status": None if pod is None else pod.status,
        "error": None if error is None else {"field": error[0], "message": error[1]},
    }


def _ending_of(body: dict) -> str:
    """The body's `status`, or a 400 naming it."""
    ending = body.get("status")
    if not isinstance(ending, str) or ending not in ENDINGS:
        raise ValidationError({"status": [f"required: one of {', '.join(ENDINGS)}, got {ending!r}"]})
    return ending


class PodBulkReleaseView(RoleView, APIView):
    """End many pods at once: one result per pod, all written in one transaction."""

    parser_classes = [ItemwiseJSONParser]  # a NUL refuses its item only (`checked_item`)

    @extend_schema(
        operation_id="pods_bulk_release",
        tags=["pods"],
        request=PodBulkReleaseSerializer,
        responses={
            200: PodBulkReleaseAnswerSerializer,
            400: ERRORS,
            413: ERRORS,
            415: ERRORS,
            429: ERRORS,
            **REFUSED_ANSWERS,
        },
        description=(
            f"End up to {MAX_PODS} pods in one request and one transaction: their cards are given "
            "back and one scheduling cycle is asked for. `status` `succeeded` is "
            "`POST pods/<ns>/<name>/complete/` for each pod, `failed` the same with that status "
            "(only a scheduled or running pod; another is refused naming `status`), `deleted` is "
            "`DELETE pods/<ns>/<name>/` (any pod; a finished one is `unchanged`). Each pod is "
            "answered on its own (200 whatever the outcomes): `released`, `unchanged` or "
            "`refused` with `error.field`: `name` for no such pod or a pod an earlier item "
            "names, `uid` for another incarnation than the one named, the field of a malformed "
            f"item. 400 names `pods` when it is not a list of 1 to {MAX_PODS} pods, `status` when "
            "it is not one of succeeded, failed, deleted. The request counts once against "
            "`token-writes`, as one complete does."
        ),
    )
    def post(self, request):
        raw = pods_of(request.data, takes=("pods", "status"))
        ending = _ending_of(request.data)
        again = named_again(
            [{"namespace": "default", **item} if isinstance(item, dict) else item for item in raw]
        )
        answers: dict[int, dict] = {}
        checked: list[tuple[int, dict]] = []
        envelope = PodReleaseItemSerializer()
        for index, item in enumerate(raw):
            asked, refusal = self._checked(item, again.get(index), envelope)
            if asked is None:
                answers[index] = _result(index, WriteOutcome.REFUSED, None, refusal)
            else:
                checked.append((index, asked))
        done = release_pods([asked for _, asked in checked], ending, placed_only=ENDINGS[ending])
        for (index, _), released in zip(checked, done, strict=True):
            error = None if released.error is None else (released.error.field, released.error.message)
            answers[index] = _result(index, released.outcome, released.pod, error)
        ordered = [answers[index] for index in range(len(raw))]
        counts = Counter(answer["outcome"] for answer in ordered)
        return Response({"pods": ordered, **{outcome: counts[outcome] for outcome in OUTCOMES}})

    @staticmethod
    def _checked(
        item, again: PodInvalid | None, envelope: PodReleaseItemSerializer
    ) -> tuple[dict | None, tuple[str, str] | None]:
        """The item as `release_pods` takes it, or why not as (field, message): an object of
        the envelope's fields (one serializer for the batch, as `POST pods/bulk/` uses it),
        valid, not named by an earlier item."""
        pod, refusal = checked_item(item, again, envelope, "namespace, name and uid")
        if pod is None:
            return None, refusal
        return {"namespace": pod["namespace"], "name": pod["name"], "uid": pod["uid"]}, None


urlpatterns = [path("", PodBulkReleaseView.as_view(), name="pod-bulk-release")]
