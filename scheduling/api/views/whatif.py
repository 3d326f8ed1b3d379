"""Why a pod waits, and what-if on the live cluster: `pods/{ns}/{name}/decision/`, `whatif/`
and `capacity/`. All three read; none writes (the snapshot is a copy in memory), so a
viewer may call them, what-if's POST included."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from scheduling.api.serializers import whatif as ws
from scheduling.engine import explain
from scheduling.engine.batch.whatif import parse_job
from scheduling.engine.errors import Problems, ScenarioProblems
from scheduling.engine.model import PodSpec
from scheduling.engine.requests import GPU, GPUCORES, GPUMEM, GPUMEM_PERCENTAGE
from scheduling.engine.whatif import MAX_CAPACITY, apply_edits, capacity, decide_all, parse_whatif
from scheduling.models import Pod
from scheduling.pipeline.options import option
from scheduling.pipeline.snapshot import card_tenants, load_snapshot
from scheduling.pipeline.whatif import job_whatif
from scheduling.roles import VIEWER

from .base import ERRORS, REFUSED, RoleView
from .simulate import every_problem

GPU_POLICY = "hami.io/gpu-scheduler-policy"
NODE_POLICY = "hami.io/node-scheduler-policy"


def explain_live(payload: dict) -> dict:
    """A payload about this cluster explained, naming the tenants of the cards its hints name."""
    return explain.explained(payload, card_tenants(explain.card_tenant_uuids(payload)))


class PodDecisionView(RoleView, APIView):
    """The pod's latest decision, explained: for a pending pod the closest nodes' card tables
    and what would make it fit, the same words as the pod page and the event."""

    @extend_schema(
        operation_id="pod_decision",
        tags=["pods"],
        responses={200: ws.PodDecisionViewSerializer, 404: ERRORS, **REFUSED},
        description=(
            "The latest decision of the pod (SPEC 9 pod object in `payload`) and its words: "
            "`summary`, `unschedulable` (no node could ever take it), `would_fit` (what would make "
            "it fit, cluster-wide then per close node), `closest_nodes` (the K closest nodes, "
            "HAMI CLOSEST_NODES, each card with reason, stage, predicted score, free against "
            "asked) and `waiting` (every kept failed node's reasons). A pod never decided has "
            "`decision: null` and an empty payload."
        ),
    )
    def get(self, request, namespace, name):
        pod = get_object_or_404(Pod, namespace=namespace, name=name)
        latest = pod.latest_decision
        payload = latest.payload if latest is not None and isinstance(latest.payload, dict) else {}
        answer = {
            "pod": pod.key,
            "pod_status": pod.status,
            "decision": latest.pk if latest is not None else None,
            "outcome": getattr(latest, "outcome", None),
            "created_at": getattr(latest, "created_at", None),
            **explain_live(payload),
        }
        return Response(answer)


class WhatIfView(RoleView, APIView):
    """Decide pods against the live snapshot, with optional edits; nothing is written."""

    write_role = VIEWER  # a read: the snapshot is copied into memory and dropped
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "simulate"

    @extend_schema(
        operation_id="whatif",
        tags=["simulate"],
        request=ws.WhatIfRequestSerializer,
        responses={200: ws.WhatIfSerializer, 400: ERRORS, 429: ERRORS, **REFUSED},
        description=(
            "Where the pods would go now, in order (each seeing the ones before), against the "
            "cluster as the next cycle would see it, after the `edits`: `cordon` card UUIDs, "
            "`drain` nodes (they take no new pod), `empty` nodes (their tenants gone), `add` "
            "N nodes like an existing one, `policies` (the default node and GPU policies). "
            "Nothing is stored and nothing is placed. With a `job` (`name`, `namespace`, `queue`, "
            "`priority`, `min_member`, each optional) the pods are one job, decided as the next "
            "cycle would: all or nothing up to `min_member`, from its queue, with preemption and "
            "reclaim over the running tenants; the answer's `job` says whether it starts now, "
            "its verdict and the evictions it would cause. A bad pod, edit or job field is a 400 "
            "keyed by where it is, e.g. `pods[0].containers`, `edits.cordon[1]` or `job.priority`."
        ),
    )
    def post(self, request):
        found = Problems()
        read = found.check(parse_whatif, request.data)
        job = found.check(parse_job, request.data.get("job")) if isinstance(request.data, dict) else None
        try:
            found.raise_any()
        except ScenarioProblems as exc:
            raise every_problem(exc) from None
        assert read is not None
        pods, edits = read
        if job is not None:
            top = option("DECISION_TOP")
            answer = job_whatif(pods, edits, job, top)
            return Response(
                {
                    "snapshot": answer["snapshot"],
                    "pods": [explain_live(decision.as_dict(top=top)) for decision in answer["decisions"]],
                    "job": answer["job"],
                }
            )
        snapshot = load_snapshot()
        cluster, config = apply_edits(snapshot.cluster, snapshot.config, edits)
        top = option("DECISION_TOP")
        decisions = decide_all(cluster, config, pods)
        return Response(
            {
                "snapshot": {"nodes": len(cluster.nodes), "cards": sum(len(n.cards) for n in cluster.nodes)},
                "pods": [explain_live(decision.as_dict(top=top)) for decision in decisions],
            }
        )


def _count(params, key: str, default: int | None = None, low: int = 0, high: int | None = None) -> int | None:
    value = params.get(key)
    if value is None or value == "":
        return default
    if not value.isdigit() or int(value) < low or (high is not None and int(value) > high):
        bound = f" from {low} to {high}" if high is not None else f" of at least {low}"
        raise ValidationError({key: [f"must be an integer{bound}, got {value!r}"]})
    return int(value)


class CapacityView(RoleView, APIView):
    """How many more pods of one ask fit now, per node and in all."""

    extra_query_parameters = ("gpu", "gpumem", "gpumem_percentage", "gpucores", "chain", "node_policy")
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "simulate"

    @extend_schema(
        operation_id="capacity",
        tags=["simulate"],
        parameters=[
            OpenApiParameter("gpu", int, description="vGPUs per pod (nvidia.com/gpu), default 1"),
            OpenApiParameter("gpumem", int, description="MiB per vGPU (nvidia.com/gpumem)"),
            OpenApiParameter("gpumem_percentage", int, description="percent of a card per vGPU"),
            OpenApiParameter("gpucores", int, description="percent of a card's cores per vGPU"),
            OpenApiParameter("chain", str, description="hami.io/gpu-scheduler-policy, e.g. mutex,binpack"),
            OpenApiParameter("node_policy", str, description="hami.io/node-scheduler-policy"),
            OpenApiParameter(
                "limit", int, description=f"count at most this many (default 1000, max {MAX_CAPACITY})"
            ),
        ],
        responses={200: ws.CapacityAnswerSerializer, 400: ERRORS, 429: ERRORS, **REFUSED},
        description=(
            "How many more pods of the ask fit now: each node is filled alone with copies of the "
            "pod under its chain (a placement changes only its own node, so the total is the sum). "
            "`reason` says why not when none fits. Nothing is written."
        ),
    )
    def get(self, request):
        params = request.query_params
        limits = {GPU: _count(params, "gpu", 1, low=1)}
        for key, resource in (
            ("gpumem", GPUMEM),
            ("gpumem_percentage", GPUMEM_PERCENTAGE),
            ("gpucores", GPUCORES),
        ):
            value = _count(params, key)
            if value is not None:
                limits[resource] = value
        limit = _count(params, "limit", 1000, low=1, high=MAX_CAPACITY)
        annotations = {}
        for key, annotation in (("chain", GPU_POLICY), ("node_policy", NODE_POLICY)):
            if params.get(key):
                annotations[annotation] = params[key]
        pod = PodSpec(
            name="capacity",
            namespace="capacity",
            annotations=annotations,
            containers=[{"name": "main", "resources": {"limits": limits}}],
        )
        snapshot = load_snapshot()
        result = capacity(snapshot.cluster, snapshot.config, pod, limit or 1000)
        first = result.first.as_dict() if result.first is not None else {}
        if first.get("status") == "rejected":
            raise ValidationError({"ask": [first.get("error") or "invalid ask"]})
        none = result.total == 0
        return Response(
            {
                **result.as_dict(),
                "reason": explain.summary_of(first) if none else None,
                "would_fit": explain.what_would_fit(first) if none else [],
            }
        )
