"""Kubernetes' own gang scheduling, the Workload API (`scheduling.k8s.io/v1beta1`, beta from
Kubernetes 1.37): PodGroup objects into hamiadmin's pod groups, Workload objects for the
figures a PodGroup leaves to its template, and hamiadmin's verdict back into the PodGroup's
`status.conditions`. Only v1beta1 is read (the v1alpha1 API of 1.35/1.36 is not).

A pod names its group in `spec.schedulingGroup.podGroupName` (`kube.pods.workload_group`);
the PodGroup object, when discovery shows `podgroups` served, gives the row (source
`workload`) its figures, through the writer Volcano's PodGroups go through (`kube.groups`):

- `spec.schedulingPolicy.gang.minCount` is `min_member`; `basic` is 1 (each pod on its own);
  with neither, the policy of the template `spec.workloadRef` names
  (`Workload.spec.podGroupTemplates[name=templateName].schedulingPolicy`);
- `spec.priority` is the gang's priority (else the template's, else 0);
- `spec.schedulingConstraints.topology[0].key` is `topology_key` (else the template's): the
  node label whose one value must hold every member (at most one constraint, as the API says).

Not mapped: `disruptionMode` (hamiadmin's gang preemption already takes a gang below its
minimum whole or not at all; `max_evicted` is an operator's budget, not `single`/`all`),
`preemptionPolicy` (hamiadmin reads no pod's preemption policy either), `priorityClassName`
(admission resolves it into `priority`), `resourceClaims`, `parentCompositePodGroupName`
and a Workload's `compositePodGroupTemplates`, and `minResources` (the API has none).

The verdict goes into one condition of kube-scheduler's type `PodGroupInitiallyScheduled`:
`False`/`Unschedulable` while the gang waits, its message our code and verdict line
(`NotEnoughPods: gang default/job: 3/4 members known`); `True`/`Scheduled` once placed, then
never `False` again (the API makes `True` terminal). Other conditions are kept as they are.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

from scheduling import services
from scheduling.models import PodGroup
from scheduling.storable import printable

from .api import WORKLOAD_API, KubeApi
from .groups import (
    MAX_MEMBERS,
    GroupInvalid,
    GroupKind,
    GroupSync,
    _name,
    _stamp,
    _whole,
    subject_of,
)
from .informer import Handler, cache_key
from .sync import Refusals, always

WORKLOAD_SOURCE = "workload"
WORKLOAD_KIND = GroupKind(
    source=WORKLOAD_SOURCE,
    group=WORKLOAD_API[0],
    version=WORKLOAD_API[1],
    status_resource="podgroups/status",
    conditions=True,
    lister="list_workload_podgroups",
    watcher="watch_workload_podgroups",
    patcher="patch_workload_podgroup_status",
)
#: kube-scheduler's condition type on a PodGroup: whether the gang was placed once.
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
INT32 = 2**31 - 1
#: A node label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63.
_LABEL_KEY = re.compile(
    r"^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)

Lookup = Callable[[str, str], dict | None]


def _object(value, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise GroupInvalid(where, f"must be an object, got {type(value).__name__}")
    return value


def min_count(policy, where: str) -> int | None:
    """`min_member` of a scheduling policy: `gang.minCount`, 1 for `basic`, None for neither."""
    policy = _object(policy, where)
    if policy.get("gang") is not None:
        gang = _object(policy["gang"], f"{where}.gang")
        return _whole(gang.get("minCount"), f"{where}.gang.minCount", 1, MAX_MEMBERS)
    if policy.get("basic") is not None:
        return 1
    return None


def topology_key(found, where: str) -> str | None:
    """`topology[0].key` of scheduling constraints; None when they name no topology."""
    constraints = _object(found, where)
    topology = constraints.get("topology")
    if topology in (None, []):
        return None
    if not isinstance(topology, list):
        raise GroupInvalid(f"{where}.topology", "must be a list of constraints")
    if len(topology) > 1:
        raise GroupInvalid(f"{where}.topology", f"at most one constraint, got {len(topology)}")
    key = _object(topology[0], f"{where}.topology[0]").get("key")
    if not isinstance(key, str) or len(key) > 317 or not _LABEL_KEY.match(key):
        shown = printable(str(key))[:60]
        raise GroupInvalid(f"{where}.topology[0].key", f"must be a node label key, got {shown!r}")
    return key


def template_of(spec: dict, workload_of: Lookup, namespace: str) -> tuple[dict, str]:
    """The Workload template `spec.workloadRef` names ({} when none is named), and where it is
    (for refusals). Raises GroupInvalid when it names one that is not there."""
    ref = _object(spec.get("workloadRef"), "spec.workloadRef")
    if not ref:
        return {}, ""
    workload = _name(ref.get("workloadName"), "spec.workloadRef.workloadName", 253)
    template = _name(ref.get("templateName"), "spec.workloadRef.templateName", 63)
    obj = workload_of(namespace, workload)
    if obj is None:
        raise GroupInvalid("spec.workloadRef.workloadName", f"no Workload {namespace}/{workload} (yet)")
    templates = (obj.get("spec") or {}).get("podGroupTemplates")
    for position, found in enumerate(templates if isinstance(templates, list) else []):
        if isinstance(found, dict) and found.get("name") == template:
            return found, f"workload/{namespace}/{workload} spec.podGroupTemplates[{position}]"
    raise GroupInvalid(
        "spec.workloadRef.templateName", f"Workload {namespace}/{workload} has no template {template!r}"
    )


def workload_group_fields(obj: dict, workload_of: Lookup = lambda namespace, name: None) -> dict:
    """What a Workload API PodGroup says of its gang, as row fields (see the module's mapping);
    what it leaves out, from its Workload's template. Raises GroupInvalid naming the field (in
    the template: the Workload's field, after the PodGroup's)."""
    found = obj.get("metadata")
    metadata: dict = found if isinstance(found, dict) else {}
    namespace = _name(metadata.get("namespace") or "default", "metadata.namespace", 63)
    spec = _object(obj.get("spec"), "spec")
    members = min_count(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
    priority = spec.get("priority")
    key = topology_key(spec.get("schedulingConstraints"), "spec.schedulingConstraints")
    if members is None or priority is None or key is None:
        try:
            template, where = template_of(spec, workload_of, namespace)
        except GroupInvalid:
            if members is None:
                raise
            template, where = {}, ""  # the PodGroup says what matters; its Workload may come later
        try:
            if members is None:
                members = min_count(template.get("schedulingPolicy"), "schedulingPolicy")
            if priority is None:
                priority = template.get("priority")
            if key is None:
                key = topology_key(template.get("schedulingConstraints"), "schedulingConstraints")
        except GroupInvalid as exc:
            raise GroupInvalid(f"spec.workloadRef ({where}.{exc.where})", exc.message) from None
    if members is None:
        raise GroupInvalid("spec.schedulingPolicy", "required: gang (minCount) or basic")
    return {
        "namespace": namespace,
        "name": _name(metadata.get("name"), "metadata.name", 253),
        "source": WORKLOAD_SOURCE,
        "min_member": members,
        "priority": 0 if priority is None else _whole(priority, "spec.priority", -INT32 - 1, INT32),
        "topology_key": key or "",
        "queue": None,
    }


def workload_status(current, phase: str, reason: str, conditions: list, generation=None) -> dict | None:
    """The PodGroup's `status` (its conditions) for a row, or None while there is nothing to
    say: one `PodGroupInitiallyScheduled` condition, the others kept. Once it shows `True` it
    stays (the API's rule)."""
    current = current if isinstance(current, dict) else {}
    found = current.get("conditions")
    kept = [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []
    ours = next((c for c in kept if c.get("type") == INITIALLY_SCHEDULED), None)
    scheduled = phase in (PodGroup.RUNNING, PodGroup.COMPLETED)
    if ours is not None and ours.get("status") == "True" or not (scheduled or reason):
        return None
    last = conditions[-1] if conditions and isinstance(conditions[-1], dict) else {}
    code = str(last.get("reason") or "")
    condition: dict = {
        "type": INITIALLY_SCHEDULED,
        "status": "True" if scheduled else "False",
        "reason": "Scheduled" if scheduled else "Unschedulable",
        "message": (reason if scheduled or not code else f"{code}: {reason}")[:1024],
        "lastTransitionTime": _stamp(last.get("at")) or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if isinstance(generation, int) and not isinstance(generation, bool):
        condition["observedGeneration"] = generation
    others = [c for c in kept if c.get("type") != INITIALLY_SCHEDULED]
    return {"conditions": [*others, condition]}


def _said(status) -> list:
    found = status.get("conditions") if isinstance(status, dict) else None
    return [
        tuple(c.get(k) for k in ("type", "status", "reason", "message"))
        for c in (found if isinstance(found, list) else [])
        if isinstance(c, dict)
    ]


class WorkloadGroupSync(GroupSync):
    """Workload API PodGroups into rows (`workload_group_fields`, templates from the Workloads'
    informer: `workload_of`), and `PodGroupInitiallyScheduled` back. A refused object whose
    row does not exist yet leaves one that holds its pods (`hold`): a gang of unknown size is
    never placed pod by pod."""

    def __init__(
        self,
        api: KubeApi,
        may_write: Callable[[], bool] = always,
        refusals: Refusals | None = None,
        workload_of: Lookup = lambda namespace, name: None,
    ):
        super().__init__(api, WORKLOAD_KIND, may_write, refusals)
        self.workload_of = workload_of
        #: The PodGroup objects known (the informer's snapshot), for a Workload that changed.
        self.podgroups: Callable[[], list[dict]] = list

    def fields_of(self, obj: dict) -> dict:
        return workload_group_fields(obj, self.workload_of)

    def refused(self, obj: dict, exc: GroupInvalid) -> None:
        super().refused(obj, exc)
        namespace, name = cache_key(obj)
        namespace = namespace or "default"
        if not isinstance(name, str) or not name or exc.where == "metadata.name":
            return
        if not PodGroup.objects.filter(namespace=namespace, name=name).exists():
            try:
                services.store_pod_group(namespace, name, WORKLOAD_SOURCE, None, min_member=MAX_MEMBERS)
            except Exception:  # noqa: BLE001 - an unstorable name: refused already, said out loud
                pass

    def wanted_for(self, obj: dict, phase: str, reason: str, conditions: list) -> dict | None:
        generation = (obj.get("metadata") or {}).get("generation")
        return workload_status(obj.get("status"), phase, reason, conditions, generation)

    def differs(self, current, wanted: dict) -> bool:
        return _said(current) != _said(wanted)

    def workload_changed(self, namespace: str, name: str | None = None) -> None:
        """A Workload changed (`name`), or all of them were listed (None): apply again the
        PodGroups whose `spec.workloadRef` names it."""
        if not self.may_write():
            return
        for obj in self.podgroups():
            ref = (obj.get("spec") or {}).get("workloadRef") if isinstance(obj.get("spec"), dict) else None
            if not isinstance(ref, dict) or not ref.get("workloadName"):
                continue
            if name is None or (
                (cache_key(obj)[0] or "default") == namespace and ref.get("workloadName") == name
            ):
                self.apply(obj)


class WorkloadSync(Handler):
    """The Workloads' informer: each change applies its PodGroups again."""

    def __init__(self, groups: WorkloadGroupSync):
        self.groups = groups

    def synced(self, objects: list[dict], listed: bool) -> None:
        if listed:
            self.groups.workload_changed("", None)

    def changed(self, kind: str, obj: dict) -> None:
        namespace, name = cache_key(obj)
        self.groups.workload_changed(namespace or "default", name)


__all__ = [
    "INITIALLY_SCHEDULED",
    "WORKLOAD_KIND",
    "WORKLOAD_SOURCE",
    "WorkloadGroupSync",
    "WorkloadSync",
    "subject_of",
    "workload_group_fields",
    "workload_status",
]
