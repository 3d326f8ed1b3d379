"""PodGroup objects of Volcano and scheduler-plugins into hamiadmin's pod groups, and their
status back, for clusters that have those CRDs.

A gang's pods name their group (`scheduling.k8s.io/group-name`, `scheduling.x-k8s.io/pod-group`);
the group's figures live in a PodGroup object. When the API server serves the CRD (discovery
of its group/version; 404: not installed, nothing is read), the agent lists and watches the
objects and keeps a `PodGroup` row per object, through the one validated writer
(`services.store_pod_group`; a row it refuses is an object refused, naming the object's
field): `spec.minMember`, `spec.minResources` (`nvidia.com/gpu`, `nvidia.com/gpumem`,
`nvidia.com/gpucores` as min_vgpus/min_gpumem/min_gpucores; other resources are
kube-scheduler's business), Volcano's `spec.queue` (the queue
of that name if it exists, else none: the pods' own or `default`), scheduler-plugins'
`spec.scheduleTimeoutSeconds`. Volcano's `spec.priorityClassName` is not read: members keep
their own `spec.priority`. A deleted object leaves its row (its pods may still name it). A
name whose row another kind of PodGroup holds (`OBJECT_SOURCES`: Volcano's, scheduler-plugins',
the Workload API's, `kube.workloads`) is refused naming `metadata.name`: the first claim stays.

KAI-scheduler's PodGroup (`scheduling.run.ai/v2alpha2`, `KAI_KIND`) is read the same way:
`spec.minMember` (null: the sum of its subgroups' minimums; `minSubGroup` is not read),
`spec.queue`, and the leaves of `spec.subGroups[]` as the row's `subgroups`, each with its
own `minMember`; `spec.priorityClassName` is not read, as Volcano's is not.

The row's phase and verdict go back into `status` when they differ from the object's (see
`VOLCANO_KIND` and `COSCHEDULING_KIND` for the phase names). Volcano's PodGroup also gets one
condition carrying our reason code and message; scheduler-plugins' status has no conditions;
KAI's gets its scheduler's `UnschedulableOnNodePool` scheduling condition (`kai_status`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.core.exceptions import ValidationError

from scheduling import services
from scheduling.engine.batch.queues import quota_resource
from scheduling.models import PodGroup
from scheduling.services.batch import READ_GROUP_FIELDS
from scheduling.storable import printable, why_unstorable

from .api import COSCHEDULING, KAI, VOLCANO, ApiError, ApiUnavailable, KubeApi
from .informer import Handler, cache_key
from .quotas import whole_count
from .sync import Refusals, always

log = logging.getLogger("hamiadmin.kube.groups")

#: `Event.reason` of a PodGroup object that cannot be read.
GROUP_REFUSED = "PodGroupInvalid"
MAX_MEMBERS = 1_000_000
#: The row fields an object sets (`queue` by name).
FIELDS = (*READ_GROUP_FIELDS, "source")
#: A row field -> the object's field it comes from, for the writer's refusals.
OBJECT_FIELDS = {
    "namespace": "metadata.namespace",
    "name": "metadata.name",
    "queue": "spec.queue",
    "min_member": "spec.minMember",
    "min_vgpus": "spec.minResources",
    "min_gpumem": "spec.minResources",
    "min_gpucores": "spec.minResources",
    "schedule_timeout_seconds": "spec.scheduleTimeoutSeconds",
}


@dataclass(frozen=True)
class GroupKind:
    """One PodGroup CRD: where it is served, how its status is written, what its phases are."""

    source: str  # PodGroup.source of its rows
    group: str
    version: str
    #: The discovery name status is written through: the object itself or its subresource.
    status_resource: str
    #: Our phase -> the CRD's.
    phases: dict[str, str] = field(default_factory=dict)
    conditions: bool = False
    reads_queue: bool = False
    reads_timeout: bool = False
    #: Volcano's `spec.minTaskMember` (task -> its own minimum): the row's `subgroups`.
    reads_task_members: bool = False
    #: KAI's `spec.subGroups[]` ({name, minMember, parent}): its leaves are the row's `subgroups`.
    reads_subgroups: bool = False
    lister: str = ""  # KubeApi method names
    watcher: str = ""
    patcher: str = ""


#: Volcano has no Failed phase; `Unknown` is its "part of the gang cannot be scheduled".
VOLCANO_KIND = GroupKind(
    source="volcano",
    group=VOLCANO[0],
    version=VOLCANO[1],
    status_resource="podgroups",
    phases={
        PodGroup.PENDING: "Pending",
        PodGroup.INQUEUE: "Inqueue",
        PodGroup.RUNNING: "Running",
        PodGroup.COMPLETED: "Completed",
        PodGroup.FAILED: "Unknown",
    },
    conditions=True,
    reads_queue=True,
    reads_task_members=True,
    lister="list_volcano_podgroups",
    watcher="watch_volcano_podgroups",
    patcher="patch_volcano_podgroup",
)
#: scheduler-plugins has no Inqueue phase: admitted but not yet placed is still Pending.
COSCHEDULING_KIND = GroupKind(
    source="coscheduling",
    group=COSCHEDULING[0],
    version=COSCHEDULING[1],
    status_resource="podgroups/status",
    phases={
        PodGroup.PENDING: "Pending",
        PodGroup.INQUEUE: "Pending",
        PodGroup.RUNNING: "Running",
        PodGroup.COMPLETED: "Finished",
        PodGroup.FAILED: "Failed",
    },
    reads_timeout=True,
    lister="list_coscheduling_podgroups",
    watcher="watch_coscheduling_podgroups",
    patcher="patch_coscheduling_podgroup_status",
)
#: KAI-scheduler's PodGroup: no phase is written (KAI's scheduler writes none); the verdict goes
#: into `status.schedulingConditions` as KAI's scheduler writes it (`KaiGroupSync`).
KAI_KIND = GroupKind(
    source="kai",
    group=KAI[0],
    version=KAI[1],
    status_resource="podgroups/status",
    reads_queue=True,
    reads_subgroups=True,
    lister="list_kai_podgroups",
    watcher="watch_kai_podgroups",
    patcher="patch_kai_podgroup_status",
)
KINDS = (VOLCANO_KIND, COSCHEDULING_KIND)


class GroupInvalid(Exception):
    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")
        self.where, self.message = where, message


def subject_of(obj: dict) -> str:
    namespace, name = cache_key(obj)
    return printable(f"podgroup/{namespace}/{name}")


def _name(value, where: str, limit: int) -> str:
    if not isinstance(value, str) or not value:
        raise GroupInvalid(where, "required: a non-empty string")
    if len(value) > limit:
        raise GroupInvalid(where, f"at most {limit} characters")
    problem = why_unstorable(value)
    if problem:
        raise GroupInvalid(where, problem)
    return value


def _whole(value, where: str, least: int, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise GroupInvalid(where, f"must be a whole number, got {printable(str(value))[:40]!r}")
    if not least <= value <= most:
        raise GroupInvalid(where, f"must be between {least} and {most}, got {value}")
    return value


def group_fields(obj: dict, kind: GroupKind) -> dict:
    """What the object says of its group, as row fields (`queue`: a name or None). Raises
    GroupInvalid naming the field. `minMember` 0 or absent is 1: each pod on its own."""
    found_metadata, found_spec = obj.get("metadata"), obj.get("spec")
    metadata: dict = found_metadata if isinstance(found_metadata, dict) else {}
    spec: dict = found_spec if isinstance(found_spec, dict) else {}
    fields: dict = {
        "namespace": _name(metadata.get("namespace") or "default", "metadata.namespace", 63),
        "name": _name(metadata.get("name"), "metadata.name", 253),
        "source": kind.source,
        "min_member": max(1, _whole(_min_member(spec, kind), "spec.minMember", 0, MAX_MEMBERS)),
        "min_vgpus": None,
        "min_gpumem": None,
        "min_gpucores": None,
        "queue": None,
    }
    resources = spec.get("minResources") or {}
    if not isinstance(resources, dict):
        raise GroupInvalid("spec.minResources", "must be an object of quantities")
    for key, value in resources.items():
        resource = quota_resource(key) if isinstance(key, str) else None
        if resource is None:
            continue
        try:
            fields[f"min_{resource}"] = whole_count(value)
        except ValueError as exc:
            raise GroupInvalid(f"spec.minResources.{key}", str(exc)) from None
    if kind.reads_queue and spec.get("queue") is not None:
        fields["queue"] = _name(spec.get("queue"), "spec.queue", 63)
    if kind.reads_task_members:
        fields["subgroups"] = task_members(spec.get("minTaskMember"))
    if kind.reads_subgroups:
        fields["subgroups"] = kai_subgroups(spec.get("subGroups"))
        if spec.get("minMember") is None:  # KAI: minMember or minSubGroup; the leaves' sum then
            fields["min_member"] = max(1, sum(part["min_member"] for part in fields["subgroups"]))
    if kind.reads_timeout:
        timeout = spec.get("scheduleTimeoutSeconds")
        fields["schedule_timeout_seconds"] = (
            None if timeout in (None, 0) else _whole(timeout, "spec.scheduleTimeoutSeconds", 1, 2**31 - 1)
        )
    return fields


def _min_member(spec: dict, kind: GroupKind):
    """`spec.minMember` (absent: 1); KAI's may be null (it gives `minSubGroup` instead)."""
    found = spec.get("minMember", 1)
    return 1 if found is None and kind.reads_subgroups else found


def task_members(found) -> list[dict]:
    """Volcano's `spec.minTaskMember` ({task: minimum}) as the row's `subgroups`; GroupInvalid
    naming the task's field."""
    if found is None:
        return []
    if not isinstance(found, dict):
        raise GroupInvalid("spec.minTaskMember", "must be an object of task names and counts")
    return [
        {
            "name": _name(task, "spec.minTaskMember", 253),
            "min_member": _whole(least, f"spec.minTaskMember.{task}", 0, MAX_MEMBERS),
        }
        for task, least in found.items()
    ]


def kai_subgroups(found) -> list[dict]:
    """KAI's `spec.subGroups[]` as the row's `subgroups`: the leaves (no other subgroup names
    them as `parent`; pods are assigned to leaves, `kai.scheduler/subgroup-name`) with their
    `minMember` (absent: 0). GroupInvalid naming the entry's field."""
    if found is None:
        return []
    if not isinstance(found, list):
        raise GroupInvalid("spec.subGroups", "must be a list of subgroups")
    parts, parents = [], set()
    for i, entry in enumerate(found):
        where = f"spec.subGroups[{i}]"
        if not isinstance(entry, dict):
            raise GroupInvalid(where, "must be an object")
        name = _name(entry.get("name"), f"{where}.name", 253)
        least = entry.get("minMember")
        parts.append((name, 0 if least is None else _whole(least, f"{where}.minMember", 0, MAX_MEMBERS)))
        if entry.get("parent") is not None:
            parents.add(_name(entry.get("parent"), f"{where}.parent", 253))
    return [{"name": name, "min_member": least} for name, least in parts if name not in parents]


def unchanged(row: PodGroup, fields: dict) -> bool:
    """Whether the row already holds what the object sets (`group_fields`)."""
    queue = row.queue.name if row.queue else None
    return queue == fields["queue"] and all(
        getattr(row, name) == fields[name] for name in FIELDS if name in fields
    )


def store_group(fields: dict) -> bool:
    """The row of one PodGroup object (`group_fields`), through the one validated writer
    (`services.store_pod_group`); whether anything was written. Raises GroupInvalid naming the
    object's field the writer refused."""
    figures = {name: fields[name] for name in FIELDS if name in fields and name != "source"}
    try:
        return services.store_pod_group(
            fields["namespace"], fields["name"], fields["source"], fields["queue"], **figures
        )
    except ValidationError as exc:
        where, messages = next(iter(exc.message_dict.items()))
        raise GroupInvalid(OBJECT_FIELDS.get(where, where), "; ".join(messages)) from None


#: The row sources read from PodGroup objects: one row, one object.
OBJECT_SOURCES = ("volcano", "coscheduling", "workload", "kai")


def claimed_elsewhere(fields: dict) -> None:
    """Raise GroupInvalid (`metadata.name`) when the row of that name is another kind of
    PodGroup object's (or its pods'): two groups claiming the same pods, neither is overwritten."""
    source = (
        PodGroup.objects.filter(namespace=fields["namespace"], name=fields["name"])
        .values_list("source", flat=True)
        .first()
    )
    if source in OBJECT_SOURCES and source != fields["source"]:
        raise GroupInvalid(
            "metadata.name",
            f"pod group {fields['namespace']}/{fields['name']} is claimed by a {source} PodGroup already; "
            "rename one of them",
        )


def _stamp(moment) -> str:
    """An ISO time (`PodGroup.conditions[].at`) as Kubernetes writes times."""
    try:
        return datetime.fromisoformat(moment).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError):
        return ""


def wanted_status(kind: GroupKind, phase: str, reason: str, conditions: list) -> dict:
    """The object's `status` for a row: its phase in the CRD's words, and (Volcano) one
    condition: `Scheduled` once running or completed, else `Unschedulable`, with our reason code
    (`GangUnschedulable`, `NotEnoughPods`...) and the verdict line as its message."""
    status: dict = {"phase": kind.phases.get(phase, "Pending")}
    if kind.conditions and (reason or conditions):
        last = conditions[-1] if conditions and isinstance(conditions[-1], dict) else {}
        scheduled = phase in (PodGroup.RUNNING, PodGroup.COMPLETED)
        condition = {
            "type": "Scheduled" if scheduled else "Unschedulable",
            "status": "True",
            "reason": str(last.get("reason") or status["phase"]),
            "message": reason[:1024],
        }
        at = _stamp(last.get("at"))
        if at:
            condition["lastTransitionTime"] = at
        status["conditions"] = [condition]
    return status


def status_differs(current, wanted: dict) -> bool:
    """Whether the object's status says something else (transition times aside)."""
    current = current if isinstance(current, dict) else {}
    if current.get("phase") != wanted["phase"]:
        return True
    if "conditions" not in wanted:
        return False
    have = current.get("conditions") if isinstance(current.get("conditions"), list) else []

    def said(conditions):
        return [
            tuple(c.get(k) for k in ("type", "status", "reason", "message"))
            for c in conditions
            if isinstance(c, dict)
        ]

    return said(have) != said(wanted["conditions"])


class GroupSync(Handler):
    """One PodGroup CRD's objects into rows (refused ones said out loud), and rows' status back."""

    def __init__(
        self,
        api: KubeApi,
        kind: GroupKind,
        may_write: Callable[[], bool] = always,
        refusals: Refusals | None = None,
    ):
        self.api, self.kind = api, kind
        self.may_write = may_write
        self.refusals = refusals or Refusals()
        self.writes_status = True  # set from discovery
        #: (namespace, name) -> (resourceVersion patched, status written): the watch may not
        #: have brought our own write back yet, and it is not written twice meanwhile.
        self.written: dict[tuple[str, str], tuple[str, dict]] = {}

    def changed(self, kind: str, obj: dict) -> None:
        if self.may_write() and kind != "DELETED":
            self.apply(obj)

    def synced(self, objects: list[dict], listed: bool) -> None:
        if not self.may_write():
            return
        stored = {
            (group.namespace, group.name): group
            for group in PodGroup.objects.select_related("queue").filter(source=self.kind.source)
        }
        for obj in objects:
            try:
                self.apply(obj, stored)
            except Exception:  # noqa: BLE001 - one group must not stop the others
                log.exception("pod group %s could not be applied", subject_of(obj))

    def apply(self, obj: dict, stored: dict | None = None) -> None:
        try:
            fields = self.fields_of(obj)
        except GroupInvalid as exc:
            self.refused(obj, exc)
            return
        self.refusals.accepted(subject_of(obj))
        if stored is not None:
            row = stored.get((fields["namespace"], fields["name"]))
            if row is not None and unchanged(row, fields):
                return
        try:
            claimed_elsewhere(fields)
            store_group(fields)
        except GroupInvalid as exc:
            self.refused(obj, exc)

    def fields_of(self, obj: dict) -> dict:
        """The row fields the object sets (`group_fields`); GroupInvalid naming its field."""
        return group_fields(obj, self.kind)

    def refused(self, obj: dict, exc: GroupInvalid) -> None:
        self.refusals.refuse(subject_of(obj), GROUP_REFUSED, str(exc))

    def wanted_for(self, obj: dict, phase: str, reason: str, conditions: list) -> dict | None:
        """The object's `status` for its row (None: nothing to write)."""
        return wanted_status(self.kind, phase, reason, conditions)

    def differs(self, current, wanted: dict) -> bool:
        return status_differs(current, wanted)

    def write_status(self, objects: list[dict]) -> None:
        """Patch the status of every object whose row says something else. API trouble is
        logged; the next pass tries again."""
        if not self.writes_status or not objects or not self.may_write():
            return
        rows = {
            (namespace, name): (phase, reason, conditions)
            for namespace, name, phase, reason, conditions in PodGroup.objects.values_list(
                "namespace", "name", "phase", "reason", "conditions"
            )
        }
        patch = getattr(self.api, self.kind.patcher)
        for obj in objects:
            namespace, name = cache_key(obj)
            row = rows.get((namespace or "default", name))
            if row is None:
                continue
            wanted = self.wanted_for(obj, *row)
            version = (obj.get("metadata") or {}).get("resourceVersion", "")
            if (
                wanted is None
                or not self.differs(obj.get("status"), wanted)
                or self.written.get((namespace, name)) == (version, wanted)
            ):
                continue
            try:
                patch(namespace or "default", name, {"status": wanted})
                self.written[(namespace, name)] = (version, wanted)
            except ApiUnavailable as exc:
                log.warning("pod group status not written, API server unavailable: %s", exc)
                return
            except ApiError as exc:
                if exc.status != 404:
                    log.warning("pod group %s: status not written: %s", subject_of(obj), exc)


#: KAI's scheduling condition type for a pod group its scheduler could not place.
KAI_UNSCHEDULABLE = "UnschedulableOnNodePool"


def kai_status(current, phase: str, reason: str, conditions: list) -> dict:
    """KAI's `status.schedulingConditions` for a row: while the gang waits, one
    `UnschedulableOnNodePool` condition (node pool `default`, reason `Unschedulable`, our
    reason code in `reasons[]`, the verdict line as message), as KAI's scheduler writes it; once
    running or completed none (KAI's pod-group assigner removes it likewise). Its
    `transitionID` counts on from the object's last one."""
    if phase in (PodGroup.RUNNING, PodGroup.COMPLETED) or not reason:
        return {"schedulingConditions": []}
    last = conditions[-1] if conditions and isinstance(conditions[-1], dict) else {}
    code = str(last.get("reason") or "Unschedulable")
    have = current.get("schedulingConditions") if isinstance(current, dict) else None
    ids = [c.get("transitionID") for c in have or [] if isinstance(c, dict)]
    numbers = [int(i) for i in ids if isinstance(i, str) and i.isdigit()]
    condition = {
        "type": KAI_UNSCHEDULABLE,
        "nodePool": "default",
        "status": "True",
        "reason": "Unschedulable",
        "message": reason[:1024],
        "reasons": [{"reason": code, "message": reason[:1024]}],
        "transitionID": str(max(numbers, default=-1) + 1),
    }
    at = _stamp(last.get("at"))
    if at:
        condition["lastTransitionTime"] = at
    return {"schedulingConditions": [condition]}


class KaiGroupSync(GroupSync):
    """KAI's PodGroups (`KAI_KIND`): read as the others, the verdict written as KAI's own
    scheduler writes it (`kai_status`)."""

    def __init__(
        self, api: KubeApi, may_write: Callable[[], bool] = always, refusals: Refusals | None = None
    ):
        super().__init__(api, KAI_KIND, may_write, refusals)

    def wanted_for(self, obj: dict, phase: str, reason: str, conditions: list) -> dict | None:
        return kai_status(obj.get("status"), phase, reason, conditions)

    def differs(self, current, wanted: dict) -> bool:
        def said(status) -> list:
            found = status.get("schedulingConditions") if isinstance(status, dict) else None
            return [
                (c.get("type"), c.get("reason"), c.get("message"))
                for c in found or []
                if isinstance(c, dict) and c.get("type") == KAI_UNSCHEDULABLE
            ]

        return said(current) != said(wanted)
