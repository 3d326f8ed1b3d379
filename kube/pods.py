"""Reading a Kubernetes pod (the API server's JSON) into what the scheduler stores. Pure.

Only what decides a placement is kept: the GPU resources of SPEC 2, the labels (queues and
gangs) and the annotations, minus the ones that are outputs (SPEC 8 placement annotations, written by the binder) or
noise (kubectl's last-applied copy), so writing them back does not look like a new spec.

The SPEC 2 resources are plain numbers (`nvidia.com/gpumem` counts MiB), but the API server
rewrites every quantity in canonical form: a manifest's `gpumem: 3000` comes back as `"3k"`,
`1.0` as `"1"`. So a whole number spelled as the API server spells plain numbers (digits,
the `k` suffix, an exponent, a decimal point) is read as that number; any other unit
(`16Gi`, `500M`, `1500m`) is kept as written, and the engine refuses the pod naming the
field, as the simulator does: read as MiB, `16Gi` would be 17179869184 MiB and wait forever.

A cluster that renamed HAMi's resources (`resourceCountName: hami.io/gpu`...) or counts
`gpumem` in units of `memoryFactor` MiB (`hamiadmin.hamiconfig`) is read in those terms: the
stored containers carry the SPEC 2 names and MiB, as the engine reads them.
"""

from __future__ import annotations

import math
import re
from typing import Protocol

from hamiadmin.hamiconfig import HamiConfig, current
from scheduling.engine.annotations import GroupRef, group_ref
from scheduling.engine.encoding import PLACEMENT_ANNOTATIONS
from scheduling.engine.errors import PodInvalid
from scheduling.engine.families import written_annotations
from scheduling.engine.families.dra import refuse_own_names
from scheduling.engine.quantity import LARGEST_QUANTITY, quantity
from scheduling.engine.requests import FAMILY_OF_RESOURCE, GPUMEM
from scheduling.storable import printable, why_unstorable

from .volumes import Volumes, pod_volumes

#: What a submission drops from a pod's annotations: SPEC 8's outputs (and what a device
#: family writes beside them: MIG reservations), and kubectl's copy.
IGNORED_ANNOTATIONS = (
    *PLACEMENT_ANNOTATIONS,
    *written_annotations(),
    "kubectl.kubernetes.io/last-applied-configuration",
)

FINAL_PHASES = {"Succeeded": "succeeded", "Failed": "failed"}

#: How the API server writes a plain number (SPEC 2 resources take no other unit): digits
#: with an optional decimal part, then `k` (it writes 3000 as 3k) or an exponent (3e3).
_PLAIN_NUMBER = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:k|[eE][+-]?[0-9]+)?$")

INT32 = 2**31 - 1


def resource_quantity(value: str):
    """A SPEC 2 resource as written by the API server: an int when it is a whole plain number
    (`"3"`, `"3k"`, `"1.0"`, `"3e3"`); with any other unit (`"16Gi"`, `"500M"`, `"1500m"`),
    or not whole, it is returned unchanged, for the engine to refuse naming the field."""
    if not _PLAIN_NUMBER.match(value.strip()):
        return value
    return quantity(value)


def resource_value(value, where: str):
    """One GPU resource as stored: a plain number read (`resource_quantity`), or the value as
    written. Raises PodInvalid for what cannot be stored: text the database refuses, a number
    that is not finite or out of range, an object or a list."""
    if isinstance(value, str):
        problem = why_unstorable(value)
        if problem:
            raise PodInvalid(where, problem)
        return resource_quantity(value)
    if value is None or isinstance(value, bool):
        return value  # stored as written; the engine refuses it naming the field
    if isinstance(value, int):
        if abs(value) > LARGEST_QUANTITY:
            raise PodInvalid(where, f"out of range: at most {LARGEST_QUANTITY}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PodInvalid(where, f"must be a finite number, got {value!r}")
        return value
    raise PodInvalid(where, f"must be a quantity (a string or a number), got {type(value).__name__}")


def gpu_resources(resources, where: str = "resources", config: HamiConfig | None = None) -> dict:
    """limits/requests restricted to the SPEC 2 resources (as this cluster names them, stored
    under the SPEC 2 names), quantities read, `gpumem` times `memoryFactor`. Raises PodInvalid
    for a value that cannot be stored (`resource_value`), naming the field as written."""
    if not isinstance(resources, dict):
        return {}
    config = config or current()
    names = config.resources.canonical()
    kept = {}
    for section in ("limits", "requests"):
        values = resources.get(section)
        if isinstance(values, dict):
            picked = {}
            for written, canonical in names.items():
                if written not in values:
                    continue
                path = f"{where}.{section}.{written}"
                value = resource_value(values[written], path)
                if canonical == GPUMEM and config.memory_factor > 1 and _whole(value):
                    value *= config.memory_factor
                    if abs(value) > LARGEST_QUANTITY:
                        raise PodInvalid(path, f"out of range: at most {LARGEST_QUANTITY} MiB")
                picked[canonical] = value
            if picked:
                kept[section] = picked
    return kept


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def node_resources(resources, where: str = "resources", config: HamiConfig | None = None) -> dict:
    """limits/requests of every resource that is not a SPEC 2 GPU resource (cpu, memory,
    ephemeral-storage, extended resources such as `huawei.com/Ascend910`), kept as written:
    the node rules (SPEC 10) read them as Kubernetes quantities and refuse a malformed one
    naming the field. A name that is a SPEC 2 resource under another setup (`nvidia.com/gpu`
    when HAMi's resources are renamed) is left out: the cards decide those. Raises PodInvalid
    for a value that cannot be stored."""
    if not isinstance(resources, dict):
        return {}
    config = config or current()
    skipped = set(config.resources.canonical()) | set(config.resources.canonical().values())
    kept = {}
    for section in ("limits", "requests"):
        values = resources.get(section)
        if not isinstance(values, dict):
            continue
        picked = {}
        for written, value in values.items():
            if not isinstance(written, str) or written in skipped:
                continue
            path = f"{where}.{section}.{printable(written)}"
            problem = why_unstorable(written)
            if problem:
                raise PodInvalid(path, f"the name {problem}")
            picked[written] = _scalar(value, path)
        if picked:
            kept[section] = picked
    return kept


def _scalar(value, where: str):
    """A quantity or port field as written: a storable string or a finite number."""
    if isinstance(value, str):
        problem = why_unstorable(value)
        if problem:
            raise PodInvalid(where, problem)
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PodInvalid(where, f"must be a string or a number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise PodInvalid(where, f"must be a finite number, got {value!r}")
    if isinstance(value, int) and abs(value) > LARGEST_QUANTITY:
        raise PodInvalid(where, f"out of range: at most {LARGEST_QUANTITY}")
    return value


#: The fields of a container port that decide `NodePorts`.
PORT_FIELDS = ("containerPort", "hostPort", "protocol", "hostIP")


def host_ports(ports, where: str) -> list[dict]:
    """The container's ports that take a port on the node (a `hostPort` other than 0), with
    the fields `NodePorts` compares; the others take nothing and are not kept."""
    if ports is None:
        return []
    if not isinstance(ports, list):
        raise PodInvalid(where, "must be a list of ports")
    kept = []
    for i, port in enumerate(ports):
        if not isinstance(port, dict) or not port.get("hostPort"):
            continue
        kept.append(
            {
                key: _scalar(port[key], f"{where}[{i}].{key}")
                for key in PORT_FIELDS
                if port.get(key) is not None
            }
        )
    return kept


def container_view(container, where: str = "containers[0]", config: HamiConfig | None = None) -> dict:
    """A container as stored: its name, its resources (the SPEC 2 ones read as numbers, the
    others as written), its host ports, and `restartPolicy: Always` of a sidecar (an init
    container that keeps running counts toward the pod's request). Raises PodInvalid for a
    name that is not a storable string, or a value that cannot be stored."""
    if not isinstance(container, dict):
        return {"name": "", "resources": {}}
    name = container.get("name") or ""
    if not isinstance(name, str):
        raise PodInvalid(f"{where}.name", f"must be a string, got {type(name).__name__}")
    problem = why_unstorable(name)
    if problem:
        raise PodInvalid(f"{where}.name", problem)
    resources = gpu_resources(container.get("resources"), f"{where}.resources", config)
    for section, values in node_resources(container.get("resources"), f"{where}.resources", config).items():
        resources[section] = {**values, **resources.get(section, {})}
    view = {"name": name, "resources": resources}
    ports = host_ports(container.get("ports"), f"{where}.ports")
    if ports:
        view["ports"] = ports
    if container.get("restartPolicy") == "Always":
        view["restartPolicy"] = "Always"
    return view


def as_dict(value) -> dict:
    """`value` if it is an object, else {}: how a field of an API object is read leniently."""
    return value if isinstance(value, dict) else {}


def meta(pod) -> dict:
    found = pod.get("metadata") if isinstance(pod, dict) else None
    return found if isinstance(found, dict) else {}


def spec(pod) -> dict:
    found = pod.get("spec") if isinstance(pod, dict) else None
    return found if isinstance(found, dict) else {}


def key_of(pod: dict) -> tuple[str, str]:
    return meta(pod).get("namespace") or "default", meta(pod).get("name") or ""


def subject_of(pod: dict) -> str:
    """`pod/<namespace>/<name>`: what an Event about this pod names."""
    namespace, name = key_of(pod)
    return printable(f"pod/{namespace}/{name}")


def uid_of(pod: dict) -> str:
    return meta(pod).get("uid") or ""


def node_of(pod: dict) -> str:
    return spec(pod).get("nodeName") or ""


def scheduler_of(pod: dict) -> str:
    return spec(pod).get("schedulerName") or "default-scheduler"


def annotations_of(pod: dict) -> dict:
    found = meta(pod).get("annotations")
    return found if isinstance(found, dict) else {}


def final_status(pod: dict) -> str | None:
    """`succeeded` / `failed` once the pod has run to an end, else None."""
    status = pod.get("status") if isinstance(pod, dict) else None
    phase = status.get("phase", "") if isinstance(status, dict) else ""
    return FINAL_PHASES.get(phase) if isinstance(phase, str) else None


def _containers(pod: dict, key: str) -> list:
    found = spec(pod).get(key)
    return found if isinstance(found, list) else []


#: The resources of the device families the engine registers beside NVIDIA (Ascend's chips).
OTHER_FAMILIES = frozenset(
    name for name, family in FAMILY_OF_RESOURCE.items() if family not in ("nvidia", "dra")
)


def container_asks_gpu(container, config: HamiConfig | None = None, others: bool = True) -> bool:
    """Whether the container names a SPEC 2 resource (as this cluster names them) or a
    resource of another family the engine schedules (`huawei.com/Ascend910B3`); NVIDIA's
    alone without `others` (what NVIDIA's own defaults and card hiding apply to)."""
    names = (config or current()).resources.canonical()
    resources = container.get("resources") if isinstance(container, dict) else None
    for section in ("limits", "requests"):
        values = resources.get(section) if isinstance(resources, dict) else None
        if isinstance(values, dict) and (
            any(name in values for name in names)
            or (others and any(name in OTHER_FAMILIES for name in values))
        ):
            return True
    return False


def asks_gpu(pod: dict, config: HamiConfig | None = None) -> bool:
    """Whether any container or init container names a SPEC 2 resource."""
    config = config or current()
    return any(
        container_asks_gpu(container, config)
        for container in _containers(pod, "containers") + _containers(pod, "initContainers")
    )


def _text(value, field: str, limit: int, default: str = "") -> str:
    """A name-like field: a storable string of at most `limit` characters."""
    value = value or default
    if not isinstance(value, str):
        raise PodInvalid(field, f"must be a string, got {type(value).__name__}")
    if len(value) > limit:
        raise PodInvalid(field, f"at most {limit} characters")
    problem = why_unstorable(value)
    if problem:
        raise PodInvalid(field, problem)
    return value


def _annotations(pod: dict) -> dict[str, str]:
    """The annotations that decide a placement, every one a storable string (the outputs and
    kubectl's copy are left out before anything is checked: they are never stored)."""
    return _strings(meta(pod).get("annotations"), "annotations", IGNORED_ANNOTATIONS)


def _labels(pod: dict) -> dict[str, str]:
    """The labels, checked as annotations are: they name queues and gangs
    (`kai.scheduler/queue`, `scheduling.x-k8s.io/pod-group`)."""
    return _strings(meta(pod).get("labels"), "labels")


def _strings(found, field: str, ignored=()) -> dict[str, str]:
    """An object of storable string keys and values, or PodInvalid naming `<field>.<key>`."""
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise PodInvalid(field, "must be an object of string values")
    kept = {}
    for key, value in found.items():
        if key in ignored:
            continue
        if not isinstance(key, str):
            raise PodInvalid(f"{field}.{printable(key)}", "the key must be a string")
        problem = why_unstorable(key)
        if problem:
            raise PodInvalid(f"{field}.{printable(key)}", f"the key {problem}")
        if not isinstance(value, str):
            raise PodInvalid(f"{field}.{key}", f"must be a string, got {type(value).__name__}")
        problem = why_unstorable(value)
        if problem:
            raise PodInvalid(f"{field}.{key}", f"the value {problem}")
        kept[key] = value
    return kept


def _container_list(pod: dict, key: str, required: bool, config: HamiConfig) -> list[dict]:
    found = spec(pod).get(key)
    if found is None:
        found = []
    if not isinstance(found, list):
        raise PodInvalid(key, "must be a list of containers")
    if required and not found:
        raise PodInvalid(key, "a pod needs at least one container")
    return [container_view(c, f"{key}[{i}]", config) for i, c in enumerate(found)]


#: `spec` fields that decide which nodes may take the pod (SPEC 10), by their API names: what
#: `submit_pod(scheduling=...)` takes. `nodeName` is not among them: a pod naming a node is
#: bound already (the kubelet runs it), never queued; it counts as a pod others bound.
SCHEDULING_SPEC_FIELDS = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "schedulingGates",
)
#: How deep a scheduling field may nest (affinity terms are the deepest, at 7 levels).
_DEEPEST = 16


def _document(value, field: str, depth: int = 0):
    """A JSON value as the API server sent it, every string storable (no NUL) and every number
    finite; PodInvalid naming the field otherwise. Its meaning is judged later (the pod is
    stored parked naming the field when it is malformed)."""
    if depth > _DEEPEST:
        raise PodInvalid(field, f"nested deeper than {_DEEPEST} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or why_unstorable(key):
                raise PodInvalid(f"{field}.{printable(key)}", "the key must be a storable string")
            _document(item, f"{field}.{key}", depth + 1)
    elif isinstance(value, list):
        for position, item in enumerate(value):
            _document(item, f"{field}[{position}]", depth + 1)
    elif isinstance(value, str):
        problem = why_unstorable(value)
        if problem:
            raise PodInvalid(field, problem)
    elif isinstance(value, float) and not math.isfinite(value):
        raise PodInvalid(field, f"must be a finite number, got {value!r}")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > LARGEST_QUANTITY:
        raise PodInvalid(field, f"out of range: at most {LARGEST_QUANTITY}")
    return value


def scheduling_fields(pod: dict) -> dict:
    """The pod's SPEC 10 scheduling fields as `submit_pod(scheduling=...)` takes them: those
    present, as written, each storable (PodInvalid naming the field otherwise)."""
    found = spec(pod)
    return {key: _document(found[key], key) for key in SCHEDULING_SPEC_FIELDS if found.get(key) is not None}


#: Where `submit_pod(scheduling=...)` takes a pod's owners (`services.fields.OWNER_REFERENCES`),
#: and the text kept of each, with the lengths Kubernetes allows.
OWNER_REFERENCES = "ownerReferences"
_OWNER_TEXT = {"apiVersion": 317, "kind": 63, "name": 253, "uid": 64}


def owner_references(pod: dict) -> list[dict]:
    """`metadata.ownerReferences` as stored (`services.fields.OWNER_KEYS` of each, the text
    storable; an entry that is not an object is left out): kept for the Workload/owners work,
    read by no scheduling rule yet. PodInvalid naming the field for text that cannot be stored."""
    found = meta(pod).get("ownerReferences")
    owners = []
    for position, owner in enumerate(found if isinstance(found, list) else []):
        if not isinstance(owner, dict):
            continue
        where = f"ownerReferences[{position}]"
        kept = {key: _text(owner.get(key), f"{where}.{key}", limit) for key, limit in _OWNER_TEXT.items()}
        owners.append({**kept, "controller": owner.get("controller") is True})
    return owners


def gates_of(pod: dict) -> list:
    """`spec.schedulingGates` as written (`[{name}]`), or [] when there are none."""
    gates = spec(pod).get("schedulingGates")
    return gates if isinstance(gates, list) else []


def submission(
    pod: dict, config: HamiConfig | None = None, volumes: Volumes | None = None, dra: DraAsks | None = None
) -> dict:
    """Keyword arguments of `services.submit_pod` for this pod, every one of them storable.

    The containers keep cpu, memory, ephemeral-storage and extended requests and host ports,
    and `scheduling` the SPEC 10 fields (`SCHEDULING_SPEC_FIELDS`): the node rules judge them,
    and a malformed one parks the pod naming the field (it is never tried, never bound);
    `scheduling` also keeps `ownerReferences` (`owner_references`), not used for scheduling yet.

    Raises PodInvalid naming the field (`name`, `annotations.<key>`, `labels.<key>`,
    `containers[0].name`, `containers[0].resources.limits.nvidia.com/gpu`, `priority`...) when the pod cannot enter
    as read: text the database cannot store (NUL), a wrong type, a number out of range. The
    watcher records such a pod as refused (docs/kubernetes.md, *Refused objects*). What the
    engine judges (a resource of "lots", a bad policy annotation) is stored as written, and
    the next cycle parks the pod with the field named, as for any pod. `config`: HAMi's
    resource names and memory factor (`hamiadmin.hamiconfig.current()` when not given).
    `volumes`: the agent's claims, volumes and classes; with them, a pod whose volumes name
    claims stores those volumes and what they are judged against (`kube.volumes`), without
    them its volumes are not judged (the extender: kube-scheduler judges them).
    `dra`: the agent's DRA state (`kube.drastate`); with it, a pod with `spec.resourceClaims`
    gets a container per request asking the DRA family's resources, its candidate devices as
    `nvidia.com/use-gpuuuid`, and `resourceClaims` (a `hold` while they cannot be asked for);
    so does a pod whose extended resources a DeviceClass maps (KEP-5004), those resources
    taken from its own containers (`strip`).
    """
    config = config or current()
    if not isinstance(pod, dict):
        raise PodInvalid("pod", "must be an object")
    metadata = meta(pod)
    name = _text(metadata.get("name"), "name", 253)
    if not name:
        raise PodInvalid("name", "required: a non-empty string")
    priority = spec(pod).get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool):
        priority = 0
    if abs(priority) > INT32:
        raise PodInvalid("priority", f"must be a 32-bit integer, got {priority}")
    found = {
        "namespace": _text(metadata.get("namespace"), "namespace", 63, default="default"),
        "name": name,
        "annotations": _annotations(pod),
        "labels": _labels(pod),
        "containers": _container_list(pod, "containers", required=True, config=config),
        "init_containers": _container_list(pod, "initContainers", required=False, config=config),
        "priority": priority,
        "uid": _text(metadata.get("uid"), "uid", 64),
        "scheduling": _with_owners(
            {**scheduling_fields(pod), **_claims(pod, name, volumes)}, owner_references(pod)
        ),
        **_workload_group(pod),
    }
    refuse_own_names(found["containers"], "containers")
    refuse_own_names(found["init_containers"], "initContainers")
    if dra is not None:
        asked = dra.asks(pod)
        if asked.get("path") == "cycle":
            if asked.get("strip"):
                found["containers"] = _stripped(found["containers"], asked["strip"], config)
                found["init_containers"] = _stripped(found["init_containers"], asked["strip"], config)
            found["containers"] = [*found["containers"], *asked["containers"]]
            found["annotations"] = {**found["annotations"], **asked["annotations"]}
            found["scheduling"] = {
                **found["scheduling"],
                **{key: _document(value, key) for key, value in asked["scheduling"].items()},
            }
    return found


def _stripped(containers: list[dict], names: list[str], config: HamiConfig) -> list[dict]:
    """The containers without the resources `names` (as written, and as stored under SPEC 2's
    names): a DRA-family container asks for them instead."""
    canonical = config.resources.canonical()
    gone = set(names) | {canonical[name] for name in names if name in canonical}
    kept = []
    for container in containers:
        resources = {
            section: {k: v for k, v in values.items() if k not in gone}
            for section, values in (container.get("resources") or {}).items()
        }
        kept.append({**container, "resources": {k: v for k, v in resources.items() if v}})
    return kept


class DraAsks(Protocol):
    """What `submission` reads of the agent's DRA state (`kube.drastate.DraState`)."""

    def asks(self, pod: dict) -> dict: ...


def _claims(pod: dict, name: str, volumes: Volumes | None) -> dict:
    """`volumes` naming claims and their storage (`Volumes.storage_for`), each storable."""
    if volumes is None:
        return {}
    claimed = pod_volumes(pod)
    if not claimed:
        return {}
    namespace = meta(pod).get("namespace") or "default"
    found = {"volumes": claimed, **volumes.storage_for(namespace, name, claimed)}
    return {key: _document(value, key) for key, value in found.items()}


#: Where a pod names its Workload API PodGroup (Kubernetes 1.37, `scheduling.k8s.io/v1beta1`).
SCHEDULING_GROUP = "spec.schedulingGroup.podGroupName"


def workload_group(pod: dict) -> GroupRef | None:
    """The Workload API PodGroup the pod names (`spec.schedulingGroup.podGroupName`, source
    `workload`), or None. Its figures come from the object (`kube.workloads`). PodInvalid
    naming the field when it is malformed, or when the pod's annotations or labels name
    another group: two groups claiming one pod, neither is taken."""
    found = spec(pod).get("schedulingGroup")
    if found is None:
        return None
    if not isinstance(found, dict):
        raise PodInvalid("spec.schedulingGroup", "must be an object")
    name = found.get("podGroupName")
    if name is None:
        return None
    name = _text(name, SCHEDULING_GROUP, 253)
    if not name:
        raise PodInvalid(SCHEDULING_GROUP, "must be a non-empty name")
    try:
        named = group_ref(annotations_of(pod), meta(pod).get("labels") or {})
    except (PodInvalid, AttributeError, TypeError):
        named = None  # judged with the pod's annotations and labels, naming their field
    if named is not None and named.name != name:
        raise PodInvalid(
            SCHEDULING_GROUP,
            f"names pod group {name!r}, but the pod's {named.source} annotation or label names {named.name!r}",
        )
    return GroupRef(name=name, source="workload")


def _workload_group(pod: dict) -> dict:
    """`submit_pod`'s `group` for a pod naming a Workload API PodGroup, else nothing."""
    found = workload_group(pod)
    return {"group": found} if found is not None else {}


def _with_owners(scheduling: dict, owners: list[dict]) -> dict:
    return {**scheduling, OWNER_REFERENCES: owners} if owners else scheduling
