"""Pods: the submission (`POST pods/`), the pod as listed and as read, and the pending queue."""

from __future__ import annotations

import re

from django.db.models import Count, Exists, OuterRef, Q, Subquery
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.engine import explain
from scheduling.engine.annotations import GPU_POLICY, parse_chain
from scheduling.engine.podschema import API_POD_KEYS, Problem, pod_problems
from scheduling.models import INT32_MAX, Decision, Eviction, Nomination, Pod
from scheduling.models.pods import SCHEDULING_GATED, decisive_reason, waiting_verdict
from scheduling.statements import Statement

from .fields import (
    BuiltOnceSerializer,
    OutputModelSerializer,
    StrictCharField,
    StrictIntegerField,
    StringMapField,
    max_length,
    round_ms,
    round_score,
)
from .history import DecisionSerializer
from .preemption import EvictionSerializer, NominationSerializer
from .scenario import ContainerSpecSerializer, DeviceSerializer

# Kubernetes names: namespaces are DNS-1123 labels, pod names DNS-1123 subdomains.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


@extend_schema_field(ContainerSpecSerializer(many=True))
class ContainerListField(serializers.ListField):
    """Kubernetes containers, taken as sent: the engine reads their resources (SPEC 2)."""


def with_problems(detail, problems: list[Problem]) -> dict:
    """A serializer's errors (by field) with the pod schema's problems added, each by its path."""
    keyed: dict = dict(detail) if isinstance(detail, dict) else {"non_field_errors": detail}
    for field, message in problems:
        messages = keyed.setdefault(field, [])
        if message not in messages:
            messages.append(message)
    return keyed


class PodSubmitSerializer(BuiltOnceSerializer):
    """`POST pods/`: the envelope. Its keys and containers are shaped as the engine's pod
    schema says (`engine.podschema`, `API_POD_KEYS`: an unknown key or a GPU-like resource name
    hamiadmin does not read is refused, every one at once with the envelope's errors);
    resources and annotations are then checked by the engine, whose errors name the field
    (`containers[0].resources.limits.nvidia.com/gpu`)."""

    #: The keys this body takes: the pod schema's, which the fields below are.
    pod_keys = API_POD_KEYS

    name = StrictCharField(max_length=max_length(Pod, "name"))
    namespace = StrictCharField(max_length=max_length(Pod, "namespace"), required=False, default="default")
    uid = StrictCharField(max_length=max_length(Pod, "uid"), required=False, allow_blank=True, default="")
    annotations = StringMapField(required=False, default=dict)
    containers = ContainerListField(allow_empty=False)
    initContainers = ContainerListField(required=False, default=list)  # noqa: N815 (Kubernetes name)
    priority = StrictIntegerField(required=False, default=0, min_value=-INT32_MAX - 1, max_value=INT32_MAX)
    labels = StringMapField(required=False, default=dict)
    # The Kubernetes scheduling fields (SPEC 10), in the API's own names and forms; checked by
    # `services.submit_pod`, whose errors name the field (`tolerations[0].effect`).
    nodeName = StrictCharField(max_length=253, required=False, allow_blank=True)  # noqa: N815
    nodeSelector = StringMapField(required=False)  # noqa: N815
    affinity = serializers.JSONField(required=False, help_text="nodeAffinity, podAffinity, podAntiAffinity")
    tolerations = serializers.JSONField(required=False, help_text="[{key, operator, value, effect}]")
    topologySpreadConstraints = serializers.JSONField(  # noqa: N815
        required=False, help_text="[{maxSkew, topologyKey, whenUnsatisfiable, labelSelector...}]"
    )
    schedulingGates = serializers.JSONField(  # noqa: N815
        required=False, help_text="[{name}]: the pod is not tried until they are removed"
    )
    volumes = serializers.JSONField(required=False, help_text="[{name, persistentVolumeClaim: {claimName}}]")
    # what the claims are judged against (VolumeBinding), in the scenario's forms (SPEC 10)
    persistentVolumeClaims = serializers.JSONField(required=False)  # noqa: N815
    persistentVolumes = serializers.JSONField(required=False)  # noqa: N815
    storageClasses = serializers.JSONField(required=False)  # noqa: N815

    def to_internal_value(self, data):
        problems = pod_problems(data, keys=self.pod_keys)
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if not problems:
                raise
            raise serializers.ValidationError(with_problems(exc.detail, problems)) from None
        if problems:
            raise serializers.ValidationError(with_problems({}, problems))
        return value

    def validate_name(self, value: str) -> str:
        if not DNS_SUBDOMAIN.fullmatch(value):
            raise serializers.ValidationError(
                "must be a Kubernetes name: lower-case letters, digits, '-' and '.', "
                "starting and ending with a letter or digit"
            )
        return value

    def validate_namespace(self, value: str) -> str:
        if not DNS_LABEL.fullmatch(value):
            raise serializers.ValidationError(
                "must be a Kubernetes namespace: lower-case letters, digits and '-', "
                "starting and ending with a letter or digit"
            )
        return value


class ContainerStatusSerializer(serializers.Serializer):
    name = serializers.CharField(allow_blank=True)
    resources = serializers.DictField(required=False)
    devices = DeviceSerializer(many=True, help_text="the vGPUs this container holds now")


class PodSerializer(OutputModelSerializer):
    """A pod as the list shows it."""

    node = serializers.CharField(source="node.name", read_only=True, allow_null=True)
    allocated = serializers.SerializerMethodField()
    verdict = serializers.SerializerMethodField()

    class Meta:
        model = Pod
        fields = [
            "namespace",
            "name",
            "uid",
            "origin",
            "status",
            "node",
            "priority",
            "allocated",
            "reason",
            "verdict",
            "error",
            "error_field",
            "attempts",
            "submitted_at",
            "scheduled_at",
            "bound_at",
            "finished_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True, help_text="hami.io/vgpu-devices-allocated"))
    def get_allocated(self, pod: Pod) -> str | None:
        return pod.allocated or None

    @extend_schema_field(
        serializers.ChoiceField(
            choices=[value for value, _ in Pod.VERDICTS],
            allow_null=True,
            help_text="a waiting pod's class: never, capacity, rule or invalid; null when placed, "
            "finished or not tried yet",
        )
    )
    def get_verdict(self, pod: Pod) -> str | None:
        if pod.status not in (Pod.PENDING, Pod.REJECTED):
            return None
        return waiting_verdict(pod.verdict, pod.gated, pod.error) or None


#: How many evictions a pod's detail lists each way (newest first); `GET evictions/` has them all.
EVICTIONS_SHOWN = 50


def listed(serializer: type[serializers.Serializer], rows) -> list[dict]:
    """`rows` rendered by `serializer`; an empty list without building one. Most pods have
    no evictions, preemptions or nominations, and a nested list serializer costs more to set
    up than its query (a third of a `complete/` answer's CPU)."""
    found = list(rows)
    return serializer(found, many=True).data if found else []  # type: ignore[return-value]  # many=True: a ReturnList, typed ReturnDict by the stubs


class PodDetailSerializer(PodSerializer):
    """A pod with its spec, the vGPUs each container holds, the latest decision, and its part
    in preemption: evicted for whom (`evictions`), who gave way to it (`preemptions`), and the
    cards it holds while its victims leave (`nominations`)."""

    containers = serializers.SerializerMethodField()
    initContainers = serializers.JSONField(source="init_containers", read_only=True)  # noqa: N815
    decision = serializers.SerializerMethodField()
    evictions = serializers.SerializerMethodField()
    preemptions = serializers.SerializerMethodField()
    nominations = serializers.SerializerMethodField()

    class Meta(PodSerializer.Meta):
        fields = PodSerializer.Meta.fields + [
            "annotations",
            "containers",
            "initContainers",
            "decision",
            "evictions",
            "preemptions",
            "nominations",
        ]
        read_only_fields = fields

    @extend_schema_field(EvictionSerializer(many=True))
    def get_evictions(self, pod: Pod) -> list[dict]:
        """The pod as a victim, newest first: by whom, when, how far the eviction got."""
        if not self.eviction_sides(pod)["victim"]:
            return []
        rows = pod.evictions.select_related("victim", "preemptor").order_by("-created_at", "-id")
        return listed(EvictionSerializer, rows[:EVICTIONS_SHOWN])

    @extend_schema_field(EvictionSerializer(many=True))
    def get_preemptions(self, pod: Pod) -> list[dict]:
        """The pod as a preemptor, newest first: its victims."""
        if not self.eviction_sides(pod)["preemptor"]:
            return []
        rows = pod.preemptions.select_related("victim", "preemptor").order_by("-created_at", "-id")
        return listed(EvictionSerializer, rows[:EVICTIONS_SHOWN])

    def eviction_sides(self, pod: Pod) -> dict[str, int]:
        """How many evictions the pod is in as victim and as preemptor, in one light query
        (a fifth of the two lists' own): most pods are in none, and then neither list is read."""
        known = self.__dict__.setdefault("_eviction_sides", {})
        if pod.pk not in known:
            as_victim, as_preemptor = Q(victim_id=pod.pk), Q(preemptor_id=pod.pk)
            known[pod.pk] = Eviction.objects.filter(as_victim | as_preemptor).aggregate(
                victim=Count("id", filter=as_victim), preemptor=Count("id", filter=as_preemptor)
            )
        return known[pod.pk]

    @extend_schema_field(NominationSerializer(many=True))
    def get_nominations(self, pod: Pod) -> list[dict]:
        """The vGPUs the pod holds while it waits for its victims (unexpired only); looked
        for before they are read with their cards and nodes, since most pods hold none."""
        rows = pod.nominations.filter(expires_at__gt=timezone.now())
        if not rows.exists():
            return []
        return listed(NominationSerializer, rows.select_related("card", "card__node").order_by("id"))

    def held(self, pod: Pod) -> dict[int, list[dict]]:
        """The vGPUs each container holds, by container position. Nothing when the context says
        the pod was `released` by this request: the release gave them all back in its own
        transaction, and no cycle places a finished pod (answered without a query)."""
        if self.context.get("released") and pod.status in Pod.FINISHED:
            return {}
        held: dict[int, list[dict]] = {}
        active = pod.allocations.filter(active=True).select_related("card").order_by("container_index", "id")
        for allocation in active:
            held.setdefault(allocation.container_index, []).append(
                {"uuid": allocation.card.uuid, "memory": allocation.memory, "cores": allocation.cores}
            )
        return held

    @extend_schema_field(ContainerStatusSerializer(many=True))
    def get_containers(self, pod: Pod) -> list[dict]:
        held = self.held(pod)
        out = []
        for position, spec in enumerate(pod.containers if isinstance(pod.containers, list) else []):
            spec = spec if isinstance(spec, dict) else {}
            out.append(
                {
                    "name": spec.get("name") or "",
                    "resources": spec.get("resources") or {},
                    "devices": held.get(position, []),
                }
            )
        return out

    @extend_schema_field(DecisionSerializer(allow_null=True))
    def get_decision(self, pod: Pod) -> dict | None:
        latest = pod.latest_decision
        return DecisionSerializer(latest).data if latest else None


class PodSubmittedSerializer(PodDetailSerializer):
    """The answer to a submission: the pod, and what was accepted but ignored."""

    warnings = serializers.SerializerMethodField()

    class Meta(PodDetailSerializer.Meta):
        fields = PodDetailSerializer.Meta.fields + ["warnings"]
        read_only_fields = fields

    @extend_schema_field(
        serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()),
            help_text="by field: values accepted but ignored (unknown chain names, unknown node policy)",
        )
    )
    def get_warnings(self, pod: Pod) -> dict[str, list[str]]:
        return self.context.get("warnings", {})

    # A row this submission created has no history yet: answered without a query each
    # (they were half the cost of a submission).
    def _new(self) -> bool:
        return bool(self.context.get("new_row"))

    def get_evictions(self, pod: Pod) -> list[dict]:
        return [] if self._new() else super().get_evictions(pod)

    def get_preemptions(self, pod: Pod) -> list[dict]:
        return [] if self._new() else super().get_preemptions(pod)

    def get_nominations(self, pod: Pod) -> list[dict]:
        return [] if self._new() else super().get_nominations(pod)

    def get_decision(self, pod: Pod) -> dict | None:
        return None if self._new() else super().get_decision(pod)

    def held(self, pod: Pod) -> dict[int, list[dict]]:
        return {} if self._new() else super().held(pod)


def _text(value) -> str | None:
    """`OptionalTextField`'s rule: "" (or None) is null."""
    return None if value in ("", None) else str(value)


def _moment(value) -> str | None:
    """DRF's `DateTimeField` in ISO 8601, UTC written `Z` (the settings' time zone is UTC)."""
    if value is None:
        return None
    text = timezone.localtime(value).isoformat() if timezone.is_aware(value) else value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _pod_fields(pod: Pod, node: str | None) -> dict:
    """`PodSerializer`'s fields of a pod, by hand (its keys, order and values)."""
    return {
        "namespace": pod.namespace,
        "name": pod.name,
        "uid": _text(pod.uid),
        "origin": pod.origin,
        "status": pod.status,
        "node": node,
        "priority": int(pod.priority),
        "allocated": pod.allocated or None,
        "reason": _text(pod.reason),
        "verdict": (
            (waiting_verdict(pod.verdict, pod.gated, pod.error) or None)
            if pod.status in (Pod.PENDING, Pod.REJECTED)
            else None
        ),
        "error": _text(pod.error),
        "error_field": _text(pod.error_field),
        "attempts": int(pod.attempts),
        "submitted_at": _moment(pod.submitted_at),
        "scheduled_at": _moment(pod.scheduled_at),
        "bound_at": _moment(pod.bound_at),
        "finished_at": _moment(pod.finished_at),
    }


def _holding_nothing(pod: Pod, decision: dict | None) -> dict:
    """`PodDetailSerializer`'s answer for a pod that holds no vGPU and is in no eviction and
    no nomination: the pod's fields, its spec, and its latest decision (as rendered)."""
    return {
        **_pod_fields(pod, pod.node.name if pod.node is not None else None),
        "annotations": pod.annotations,
        "containers": [
            {
                "name": (spec.get("name") or "") if isinstance(spec, dict) else "",
                "resources": (spec.get("resources") or {}) if isinstance(spec, dict) else {},
                "devices": [],
            }
            for spec in (pod.containers if isinstance(pod.containers, list) else [])
        ],
        "initContainers": pod.init_containers,
        "decision": decision,
        "evictions": [],
        "preemptions": [],
        "nominations": [],
    }


def new_pod_answer(pod: Pod, warnings: dict[str, list[str]]) -> dict:
    """What `PodSubmittedSerializer` writes for a row this submission inserted, built by hand
    (a fifth of a submission's CPU went to the serializer's fields): no node, no devices, no
    history. The same keys in the same order, the same values; `tests/api` holds it to the
    serializer's answer for the same rows."""
    return {**_holding_nothing(pod, None), "warnings": warnings}


def decision_answer(decision: Decision, pod_key: str) -> dict:
    """What `DecisionSerializer` writes for a decision, built by hand (half of a `complete/`
    answer's CPU went to the serializers). `tests/api` holds it to the serializer's answer."""
    explained = decision.payload if isinstance(decision.payload, dict) else {}
    scores = explained.get("node_scores")
    return {
        "id": decision.pk,
        "pod": pod_key,
        "cycle": decision.cycle_id,
        "outcome": decision.outcome,
        "node": _text(decision.node),
        "reason": _text(decision.reason),
        "error": decision.error or explained.get("error") or None,
        "duration_ms": round_ms(decision.duration_ms),
        "created_at": _moment(decision.created_at),
        "policy": explained.get("policy"),
        "containers": explained.get("containers"),
        "node_scores": (
            {node: round_score(score) for node, score in scores.items()}
            if isinstance(scores, dict)
            else scores
        ),
        "failed_nodes": explained.get("failed_nodes"),
        "nodes_fit": explained.get("nodes_fit"),
        "nodes_failed": explained.get("nodes_failed"),
        "reasons": explained.get("reasons"),
        "allocated": explained.get("allocated"),
        "preemption": explained.get("preemption"),
    }


def released_pod_answer(pod: Pod, request=None) -> dict:
    """What `PodDetailSerializer` writes for a pod a release of this request just ended (its
    vGPUs given back in the release's transaction): built by hand when the pod is in no
    eviction and holds no nomination, which the statement reading its latest decision says
    too (a second reads them for a pod without a decision); else the serializer's answer."""
    now = timezone.now()
    latest = _LATEST_DECISION.first(pod.pk)
    flags = _RELEASED_FLAGS.first(pod.pk) if latest is None else vars(latest)
    nominated = flags is not None and flags["nominated_until"] is not None and flags["nominated_until"] > now
    if pod.status not in Pod.FINISHED or flags is None or flags["evicted"] or nominated:
        context = {"request": request, "released": True}
        return PodDetailSerializer(pod, context=context).data  # type: ignore[return-value]
    decision = decision_answer(latest, pod.key) if isinstance(latest, Decision) else None
    return _holding_nothing(pod, decision)


def _pod_flags(pod: str) -> dict:
    """A pod's eviction flag and the latest expiry of its nominations, as expressions over
    the pod id `pod` names (`released_pod_answer`)."""
    return {
        "evicted": Exists(
            Eviction.objects.filter(Q(victim_id=OuterRef(pod)) | Q(preemptor_id=OuterRef(pod)))
        ),
        "nominated_until": Subquery(
            Nomination.objects.filter(pod_id=OuterRef(pod)).order_by("-expires_at").values("expires_at")[:1]
        ),
    }


#: A pod's latest decision with its flags (`_pod_flags`), and its flags alone for a pod
#: without a decision: statements compiled once (every `complete/` and DELETE answers with
#: them).
_LATEST_DECISION = Statement(
    lambda pk: Decision.objects.filter(pod_id=pk).annotate(**_pod_flags("pod_id")).order_by("-id")[:1]
)
_RELEASED_FLAGS = Statement(lambda pk: Pod.objects.filter(pk=pk).values(**_pod_flags("pk"))[:1])


class DecisiveSerializer(serializers.Serializer):
    """A waiting pod's decisive reason (`engine.triage.Triage`)."""

    verdict = serializers.ChoiceField(choices=[value for value, _ in Pod.VERDICTS])
    code = serializers.CharField(help_text="the reason code the Pending page's facet counts")
    fact = serializers.CharField(help_text="the one fact that decides it")
    actions = serializers.ListField(child=serializers.CharField(), help_text="what would make it fit")
    node = serializers.CharField(allow_null=True, help_text="where the fact holds, when one node decides it")


class PendingPodSerializer(OutputModelSerializer):
    """A waiting pod: how long, with which chain, and why (summed over nodes)."""

    age_seconds = serializers.SerializerMethodField()
    chain = serializers.SerializerMethodField()
    reasons = serializers.SerializerMethodField()
    verdict = serializers.SerializerMethodField()
    decisive = serializers.SerializerMethodField()

    class Meta:
        model = Pod
        fields = [
            "namespace",
            "name",
            "priority",
            "submitted_at",
            "age_seconds",
            "attempts",
            "chain",
            "verdict",
            "decisive",
            "reason",
            "reasons",
            "error",
            "error_field",
            "parked",
            "next_attempt_at",
        ]
        read_only_fields = fields

    def _latest(self, pod: Pod) -> dict:
        """The latest decision's explanation: no query for a page read `Pod.objects.latest_decisions`."""
        decision = pod.latest_decision
        return decision.payload if isinstance(decision, Decision) else {}

    @extend_schema_field(OpenApiTypes.FLOAT)
    def get_age_seconds(self, pod: Pod) -> float:
        return round((timezone.now() - pod.submitted_at).total_seconds(), 3)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_chain(self, pod: Pod) -> list[str]:
        policy = explain.policy_of(self._latest(pod))
        if policy.get("gpu") is not None:
            return explain.chain_of(policy)
        annotations = pod.annotations if isinstance(pod.annotations, dict) else {}
        value = annotations.get(GPU_POLICY)
        if not isinstance(value, str):
            return []
        return list(parse_chain(value)[0])

    @extend_schema_field(
        serializers.ChoiceField(
            choices=[value for value, _ in Pod.VERDICTS],
            allow_null=True,
            help_text="never, capacity, rule or invalid (engine.triage); null when not tried yet",
        )
    )
    def get_verdict(self, pod: Pod) -> str | None:
        return waiting_verdict(pod.verdict, pod.gated, pod.error) or None

    @extend_schema_field(DecisiveSerializer(allow_null=True))
    def get_decisive(self, pod: Pod) -> dict | None:
        """The decisive reason: what the row's first line says, chosen by what would make it fit."""
        found = decisive_reason(pod, self._latest(pod))
        if found is None:
            return None
        return {
            "verdict": found.verdict,
            "code": found.code,
            "fact": found.fact,
            "actions": list(found.actions),
            "node": found.node,
        }

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_reasons(self, pod: Pod) -> dict[str, int]:
        if pod.gated:  # never tried while gated: its gates are the reason, not an old decision
            return {SCHEDULING_GATED: 1}
        return self._latest(pod).get("reasons") or {}
