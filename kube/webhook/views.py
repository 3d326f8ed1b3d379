"""POST /webhook/validate and /webhook/mutate: the API server's AdmissionReviews.

Answers are always JSON, never an HTML page and never a 500: a body that is not an
AdmissionReview gets 400 with `{"error": ...}` (the API server then applies the webhook's
`failurePolicy`); a review about an object that is not a readable pod is refused in an
AdmissionReview; an unexpected failure is logged and answered `allowed` with a warning, so
a bug here never blocks a pod (the scheduler still checks it: docs/kubernetes.md).
Nothing is written: the cluster defaults are read (the `config/` in force, or the
settings' when the database does not answer).
"""

from __future__ import annotations

import logging
from functools import cache

from django.conf import settings
from django.db import DatabaseError
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from hamiadmin.hamiconfig import current as hami_config
from scheduling.engine.model import ClusterConfig
from scheduling.engine.scenario import parse_config
from scheduling.models import SchedulerConfig
from scheduling.ops import metrics

from .mutate import Mutation, mutate, read_namespace_policies
from .quota import read_namespace_quotas
from .review import Answer, Malformed, answer_body, read_review, refused_review, validate

log = logging.getLogger("hamiadmin.kube.webhook")

MODES = ("all", "off")


def cluster_config() -> ClusterConfig:
    """The defaults in force; the settings' own when the database cannot be read."""
    try:
        return SchedulerConfig.current()
    except DatabaseError as exc:
        log.warning("webhook: cluster defaults not read (%s); using the settings' defaults", exc)
        return parse_config(SchedulerConfig.default_raw())


@cache
def _namespace_policies(text: str) -> dict[str, dict[str, str]]:
    policies, problems = read_namespace_policies(text)
    for problem in problems:
        log.warning("HAMI_WEBHOOK_NAMESPACE_POLICIES: %s", problem)
    return policies


def mutation() -> Mutation:
    conf = settings.HAMIADMIN
    mode = conf.get("WEBHOOK_SCHEDULER_NAME", "all")
    if mode not in MODES:
        log.warning("HAMI_WEBHOOK_SCHEDULER_NAME=%r is not all or off; using all", mode)
        mode = "all"
    return Mutation(
        scheduler_name=conf.get("SCHEDULER_NAME", "hami-scheduler"),
        scheduler_names=tuple(conf.get("SCHEDULER_NAMES", ())),
        mode=mode,
        hide_gpus=bool(conf.get("WEBHOOK_HIDE_GPUS", False)),
        runtime_class=conf.get("WEBHOOK_RUNTIME_CLASS", "") or "",
        namespace_policies=_namespace_policies(conf.get("WEBHOOK_NAMESPACE_POLICIES", "") or ""),
        other_scheduler=conf.get("WEBHOOK_OTHER_FAMILIES_SCHEDULER", "") or "",
    )


def _error(webhook: str, status: int, message: str) -> JsonResponse:
    metrics.admission(webhook, "malformed")
    return JsonResponse({"error": message}, status=status)


def admission_view(webhook: str, decide):
    """A view answering AdmissionReviews with `decide(review, cluster, hami, setup) -> Answer`."""

    @csrf_exempt
    def view(request):
        if request.method != "POST":
            return _error(webhook, 405, "POST an AdmissionReview (admission.k8s.io/v1)")
        limit = settings.HAMIADMIN.get("WEBHOOK_MAX_BODY_BYTES", 16 * 1024 * 1024)
        body = request.read(limit + 1)
        if len(body) > limit:
            return _error(webhook, 413, f"body larger than {limit} bytes")
        try:
            review = read_review(body)
        except Malformed as exc:
            return _error(webhook, 400, f"not an AdmissionReview: {exc}")
        if review.kind == "Pod" and review.operation == "CREATE" and review.pod is None:
            metrics.admission(webhook, "malformed")
            return JsonResponse(refused_review(review, "request.object", "must be a Pod object"))
        try:
            answer = decide(review, cluster_config(), hami_config(), mutation())
        except Exception as exc:  # noqa: BLE001 - a bug here must never block a pod
            log.exception("webhook %s failed on %s/%s", webhook, review.namespace, review.name)
            answer = Answer(
                True,
                "error",
                warnings=[f"hamiadmin's {webhook} webhook failed ({type(exc).__name__}); not checked"],
            )
        metrics.admission(webhook, answer.outcome)
        if answer.outcome == "denied":
            log.info("webhook refused pod %s/%s: %s", review.namespace, review.name, answer.refusal)
        return JsonResponse(answer_body(review, answer))

    view.__name__ = f"{webhook}_view"
    return view


validate_view = admission_view(
    "validate",
    lambda review, cluster, hami, setup: validate(
        review, cluster, hami, setup.served, setup.mode, setup.other_scheduler, read_namespace_quotas
    ),
)
mutate_view = admission_view("mutate", mutate)
