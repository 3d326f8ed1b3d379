"""AdmissionReview in, AdmissionReview out, and the validation. Pure: no Django, no I/O.

The request is `admission.k8s.io/v1` (or `v1beta1`, answered in kind) with a Pod in
`request.object`; the answer echoes `request.uid` and says `allowed`, with `warnings`, a
`status` when refused, and a base64 JSON Patch when the mutating webhook changes the pod.

One validation, the scheduler's: the pod is read as the Kubernetes watcher reads it
(`kube.pods.submission`, with HAMi's resource names and memory factor) and parsed by the
engine (`engine.pod.parse_pod`). A pod the engine refuses is refused with the engine's field
and message (`containers[0].resources.limits.nvidia.com/gpumem: container 'train': must be
a non-negative integer (MiB), got '16Gi': a plain number, without a unit`); what the engine
reads but ignores or changes (an unknown chain name, `gpucores` above 100) is allowed with
an admission warning saying so, in the same words the decision will carry.

Three rules are HAMi's webhook's own (pkg/scheduler/webhook.go), kept for parity: a GPU pod
with a privileged container is refused (it would see every card of the node, beyond its vGPU
limits), so is a GPU pod that already names a node (nothing would book its cards); a
container whose count is 0 (`nvidia.com/gpu: 0`) asks no GPU. A pod labelled
`hami.io/webhook: ignore` is not looked at, as HAMi's chart's `objectSelector` skips it.
Since HAMi v2.9 its webhook also refuses a pod that would pass its namespace's quota
(quota.py), and hamiadmin's refuses a pod asking a device family it schedules beside one it
routes to HAMi's scheduler (families.py).
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hamiadmin.hamiconfig import HamiConfig
from scheduling.engine.batch.jobs import ask_usage
from scheduling.engine.errors import PodInvalid
from scheduling.engine.model import ClusterConfig, PodSpec
from scheduling.engine.pod import ParsedPod, parse_pod

from .. import pods as pod_objects
from . import families
from .quota import NamespaceQuotas, over_quota

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
#: Schedulers whose pods this webhook takes over (mode `all`): none named, Kubernetes'
#: default, and HAMi's, which hamiadmin replaces.
TAKEN_OVER = ("", "default-scheduler", "hami-scheduler")
#: The API server shows at most this many characters of one warning.
WARNING_LIMIT = 256
#: HAMi's opt-out label: a pod carrying it with the value `ignore` is left alone.
OPT_OUT_LABEL = "hami.io/webhook"
CONTAINER_KEYS = ("initContainers", "containers")


class Malformed(ValueError):
    """The body is not an AdmissionReview we can answer: HTTP 400 with this message."""


@dataclass
class Review:
    """The parts of an AdmissionReview request the webhooks read."""

    api_version: str
    uid: str
    operation: str
    kind: str
    namespace: str
    name: str
    pod: dict | None
    dry_run: bool = False


@dataclass
class Answer:
    """What one webhook says about one review."""

    allowed: bool = True
    outcome: str = "allowed"
    warnings: list[str] = field(default_factory=list)
    patch: list[dict] | None = None
    refusal: PodInvalid | None = None


def read_review(body: bytes) -> Review:
    """The review in `body`. Raises Malformed saying what is wrong with it."""
    try:
        review = json.loads(body or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise Malformed(f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise Malformed("the body nests too deeply to be a pod") from None
    if not isinstance(review, dict):
        raise Malformed("the body must be a JSON object: an AdmissionReview")
    if review.get("kind") != "AdmissionReview":
        raise Malformed(f"kind must be AdmissionReview, got {review.get('kind')!r}")
    version = review.get("apiVersion")
    if version not in API_VERSIONS:
        raise Malformed(f"apiVersion must be one of {', '.join(API_VERSIONS)}, got {version!r}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise Malformed("request is required: an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise Malformed("request.uid is required: a non-empty string")
    kind = request.get("kind")
    kind_name = kind.get("kind") if isinstance(kind, dict) else None
    operation = request.get("operation")
    obj = request.get("object")
    namespace, name = request.get("namespace"), request.get("name")
    return Review(
        api_version=version,
        uid=uid,
        operation=operation if isinstance(operation, str) else "",
        kind=kind_name if isinstance(kind_name, str) else "",
        namespace=namespace if isinstance(namespace, str) else "",
        name=name if isinstance(name, str) else "",
        pod=obj if isinstance(obj, dict) else None,
        dry_run=request.get("dryRun") is True,
    )


def answer_body(review: Review, answer: Answer) -> dict:
    """The AdmissionReview response for `answer`."""
    response: dict = {"uid": review.uid, "allowed": answer.allowed}
    if answer.warnings:
        response["warnings"] = [text[:WARNING_LIMIT] for text in answer.warnings]
    if answer.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(answer.patch).encode()).decode()
    if answer.refusal is not None:
        refusal = answer.refusal
        response["status"] = {
            "status": "Failure",
            "code": 422,
            "reason": "Invalid",
            "message": str(refusal),
            "details": {
                "causes": [
                    {"reason": "FieldValueInvalid", "field": refusal.field, "message": refusal.message}
                ]
            },
        }
    return {"apiVersion": review.api_version, "kind": "AdmissionReview", "response": response}


def refused_review(review: Review, where: str, message: str) -> dict:
    """A review we can answer (it has a uid) about an object that is not a pod we can read."""
    return answer_body(review, Answer(False, "malformed", refusal=PodInvalid(where, message)))


def is_pod_create(review: Review) -> bool:
    return review.kind == "Pod" and review.operation == "CREATE"


def takes(pod: dict, scheduler_name: str | tuple[str, ...], mode: str) -> bool:
    """Whether hamiadmin schedules this pod once admitted: it names one of hamiadmin's scheduler
    names (`HAMI_SCHEDULER_NAMES`), or (mode `all`) none, the default one, or HAMi's."""
    names = (scheduler_name,) if isinstance(scheduler_name, str) else scheduler_name
    named = pod_objects.spec(pod).get("schedulerName") or ""
    return named in names or (mode == "all" and named in TAKEN_OVER)


def opted_out(pod: dict) -> bool:
    """Whether the pod carries `hami.io/webhook: ignore` (HAMi's chart skips it by selector)."""
    labels = pod_objects.meta(pod).get("labels")
    return isinstance(labels, dict) and labels.get(OPT_OUT_LABEL) == "ignore"


def _containers(pod: dict, key: str) -> list:
    found = pod_objects.spec(pod).get(key)
    return found if isinstance(found, list) else []


def zero_count_containers(pod: dict, hami: HamiConfig) -> list[tuple[str, int]]:
    """(key, position) of each container whose count is 0: HAMi gives it no device at all, so
    it asks no GPU, whatever memory or cores it also names."""
    zeroed = []
    for key in CONTAINER_KEYS:
        for position, container in enumerate(_containers(pod, key)):
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict):
                continue
            for section in ("limits", "requests"):
                values = resources.get(section)
                if isinstance(values, dict) and hami.resources.count in values:
                    value = values[hami.resources.count]
                    if isinstance(value, str):
                        value = pod_objects.resource_quantity(value)
                    if value == 0 and not isinstance(value, bool):
                        zeroed.append((key, position))
                    break
    return zeroed


def without_zero_counts(pod: dict, hami: HamiConfig) -> dict:
    """The pod as HAMi reads it: the containers counting 0 cards without their GPU resources."""
    zeroed = zero_count_containers(pod, hami)
    if not zeroed:
        return pod
    names = set(hami.resources.canonical())
    pod = copy.deepcopy(pod)
    for key, position in zeroed:
        resources = pod["spec"][key][position]["resources"]
        for section in ("limits", "requests"):
            if isinstance(resources.get(section), dict):
                resources[section] = {k: v for k, v in resources[section].items() if k not in names}
    return pod


def refused_as_hami(pod: dict) -> PodInvalid | None:
    """HAMi's own refusals of a GPU pod, in its words: a privileged container, a node named."""
    for key in CONTAINER_KEYS:
        for position, container in enumerate(_containers(pod, key)):
            context = container.get("securityContext") if isinstance(container, dict) else None
            if isinstance(context, dict) and context.get("privileged") is True:
                return PodInvalid(
                    f"{key}[{position}].securityContext.privileged",
                    f"container {container.get('name')!r} is privileged: it would see every card "
                    "of the node, beyond its vGPU limits",
                )
    node = pod_objects.spec(pod).get("nodeName")
    if node:
        return PodInvalid(
            "nodeName",
            f"pod has node assigned ({node!r}): a GPU pod must be placed by the scheduler, "
            "which books its cards",
        )
    return None


def _as_admitted(review: Review) -> dict:
    """The pod with the name and namespace it will have: at creation a pod may carry only
    `generateName`, and its namespace only in the request."""
    pod = copy.copy(review.pod or {})
    metadata = dict(pod_objects.meta(pod))
    metadata["namespace"] = metadata.get("namespace") or review.namespace or "default"
    if not metadata.get("name"):
        generated = metadata.get("generateName")
        metadata["name"] = review.name or (f"{generated}xxxxx" if isinstance(generated, str) else "") or "pod"
    pod["metadata"] = metadata
    return pod


def _field_as_written(error: PodInvalid, hami: HamiConfig) -> PodInvalid:
    """The engine names SPEC 2 resources by their SPEC 2 names; a cluster that renamed them
    (`resourceCountName: hami.io/gpu`) sees its own name in the field."""
    for canonical, written in hami.resources.as_written().items():
        if canonical != written and error.field.endswith(f".{canonical}"):
            return PodInvalid(error.field[: -len(canonical)] + written, error.message, error.code)
    return error


def check(review: Review, cluster: ClusterConfig, hami: HamiConfig) -> tuple[ParsedPod | None, Answer]:
    """The engine's verdict on the pod: parsed with warnings, or refused naming the field."""
    pod = _as_admitted(review)
    try:
        submitted = pod_objects.submission(pod, hami)
        parsed = parse_pod(
            PodSpec(
                name=submitted["name"],
                namespace=submitted["namespace"],
                annotations=submitted["annotations"],
                containers=submitted["containers"],
                init_containers=submitted["init_containers"],
            ),
            cluster,
        )
    except PodInvalid as exc:
        return None, Answer(False, "denied", refusal=_field_as_written(exc, hami))
    refusal = refused_as_hami(pod)
    if refusal is not None:
        return None, Answer(False, "denied", refusal=refusal)
    warnings = [
        f"{_field_as_written(PodInvalid(where, ''), hami).field}: {message}"
        for where, messages in parsed.warnings().items()
        for message in messages
    ]
    return parsed, Answer(True, "warned" if warnings else "allowed", warnings=warnings)


def mixed_families(pod: dict, hami: HamiConfig, other_scheduler: str) -> PodInvalid | None:
    """The refusal of a pod asking a family hamiadmin schedules and one it routes to
    `other_scheduler`: neither scheduler would place it whole (families.py)."""
    found = families.asks(pod, hami)
    ours, theirs = families.scheduled_asks(found), families.unscheduled(found)
    if not ours or not theirs:
        return None
    return PodInvalid(
        theirs[0].field,
        f"pod asks {ours[0].resource} ({ours[0].family}, scheduled by hamiadmin) and "
        f"{theirs[0].resource} ({theirs[0].family}, scheduled by {other_scheduler}): no one "
        "scheduler places both families; split it into one pod per family",
    )


def validate(
    review: Review,
    cluster: ClusterConfig,
    hami: HamiConfig,
    scheduler_name: str | tuple[str, ...],
    mode: str,
    other_scheduler: str = "",
    quotas: Callable[[str], NamespaceQuotas] | None = None,
) -> Answer:
    """The validating webhook: refuse what the scheduler would refuse, warn what it ignores;
    anything that is not the creation of a GPU pod hamiadmin schedules passes untouched.

    With `other_scheduler` (families routed: `families.routes`), a pod asking one of hamiadmin's
    families and one of the others is refused naming both; a pod asking only others is
    that scheduler's to check. With `quotas` (the namespace's, read by the caller), a pod
    that would pass one of them is refused naming it (quota.py)."""
    if not is_pod_create(review) or opted_out(review.pod or {}):
        return Answer(True, "skipped")
    pod = without_zero_counts(review.pod or {}, hami)
    served = (scheduler_name,) if isinstance(scheduler_name, str) else scheduler_name
    if families.routes(other_scheduler, served, mode) and takes(pod, served, mode):
        refusal = mixed_families(pod, hami, other_scheduler)
        if refusal is not None:
            return Answer(False, "denied", refusal=refusal)
    if not pod_objects.asks_gpu(pod, hami) or not takes(pod, scheduler_name, mode):
        return Answer(True, "skipped")
    parsed, answer = check(replace(review, pod=pod), cluster, hami)
    if parsed is None or quotas is None:
        return answer
    try:
        found = quotas(pod_objects.meta(_as_admitted(review)).get("namespace") or "default")
    except Exception as exc:  # noqa: BLE001 - the cycle still enforces the quota
        return replace(
            answer,
            outcome="warned",
            warnings=[*answer.warnings, f"namespace quotas not checked ({type(exc).__name__})"],
        )
    refusal = over_quota(found, ask_usage(parsed), hami)
    if refusal is not None:
        return Answer(False, "denied", refusal=refusal)
    return answer
