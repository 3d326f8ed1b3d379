"""The Kubernetes scheduling fields of pods and nodes (SPEC 10), checked before they are stored:
what a field must look like to be kept, each error naming the field (`tolerations[0].effect`,
`allocatable.cpu`, `containers[0].ports[1].hostPort`). The rules are the engine's
(`engine.kubefields`, the scenario reader's too), so the REST API, bulk, the Kubernetes watcher
and scenarios refuse the same values with the same field names; the node rules judge what
they mean.

Public API:
- `checked_scheduling(scheduling, containers, init_containers, labels)`: a pod's `scheduling`
  map (API names of `SCHEDULING_FIELDS`, plus `ownerReferences`) as stored, only the fields
  given; FieldProblems (a PodInvalid naming the first) listing every bad field.
- `checked_node_fields(taints, unschedulable, allocatable)`: a node's fields as stored, each None
  when not given; ScenarioError naming the field.
- `FieldProblems`: PodInvalid with `problems`, every (field, message) at once.
- `OWNER_REFERENCES`: the key of a pod's owners in `Pod.scheduling` (not used for scheduling).
"""

from __future__ import annotations

from scheduling.engine import PodInvalid, ScenarioError
from scheduling.engine.errors import ScenarioProblems
from scheduling.engine.kubefields import (
    Problem,
    node_field_problems,
    pod_field_problems,
    running_pod_problems,
)
from scheduling.engine.noderules.volumes import CLAIMS, CLASSES, VOLUMES, read_storage
from scheduling.engine.quantity import amounts, effective_request
from scheduling.models.pods import SCHEDULING_FIELDS

#: Where a pod keeps its `metadata.ownerReferences` in `Pod.scheduling`: stored for the
#: Workload/owners work to come, read by no scheduling rule yet.
OWNER_REFERENCES = "ownerReferences"
_OWNER_TEXT = {"apiVersion": 317, "kind": 63, "name": 253, "uid": 64}
#: What is kept of each owner reference (`blockOwnerDeletion` says nothing about the pod).
OWNER_KEYS = (*_OWNER_TEXT, "controller")
#: The longest node name (a DNS subdomain).
NODE_NAME_LENGTH = 253


class FieldProblems(PodInvalid):
    """Every problem of one pod's fields (`problems`: (field, message) in the order met), so
    the REST API names them all in one answer; a PodInvalid naming the first, so the
    callers that keep one field (bulk items, a parked pod's `error_field`) keep working."""

    def __init__(self, problems: list[Problem]):
        field, message = problems[0]
        more = len(problems) - 1
        super().__init__(field, message + (f" (and {more} more)" if more else ""))
        self.problems = problems


def _string_map(value, field: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise PodInvalid(field, "must be an object of string values")
    return value


def _refused(problems: list[Problem]) -> None:
    """Raise FieldProblems when there are any. A missing or malformed value comes before a
    stray key beside it (`title` for `name`): it is the one the pod cannot do without."""
    if problems:
        raise FieldProblems(sorted(problems, key=lambda problem: problem[1].startswith("unknown field")))


def checked_owners(value, field: str = OWNER_REFERENCES) -> list[dict]:
    """A pod's `metadata.ownerReferences` as stored: `OWNER_KEYS` of each, text within the
    column limits Kubernetes sets; PodInvalid naming the field."""
    if not isinstance(value, list):
        raise PodInvalid(field, "must be a list of {apiVersion, kind, name, uid, controller}")
    owners = []
    for position, owner in enumerate(value):
        where = f"{field}[{position}]"
        if not isinstance(owner, dict):
            raise PodInvalid(where, "must be an object")
        kept: dict = {}
        for key, longest in _OWNER_TEXT.items():
            text = owner.get(key, "")
            if not isinstance(text, str) or "\x00" in text or len(text) > longest:
                raise PodInvalid(f"{where}.{key}", f"must be a string of at most {longest} characters")
            kept[key] = text
        kept["controller"] = owner.get("controller") is True
        owners.append(kept)
    return owners


def checked_scheduling(scheduling, containers=(), init_containers=(), labels=None) -> dict:
    """A pod's scheduling fields as stored (`Pod.scheduling`: only those given, None dropped),
    with its labels and its containers' requests and ports checked by the engine's rules
    (`engine.kubefields`). Raises FieldProblems listing every bad field (a PodInvalid naming
    the first); a value of the wrong type or an unknown key is refused on its own."""
    if scheduling is None:
        scheduling = {}
    if not isinstance(scheduling, dict):
        raise PodInvalid("scheduling", f"must be an object of {', '.join(SCHEDULING_FIELDS)}")
    kept = {}
    for key, value in scheduling.items():
        if key == OWNER_REFERENCES:
            kept[key] = checked_owners(value)
            continue
        if key not in SCHEDULING_FIELDS:
            raise PodInvalid(str(key), f"unknown scheduling field; one of {', '.join(SCHEDULING_FIELDS)}")
        if value is None:
            continue
        if key == "nodeName":
            if not isinstance(value, str) or len(value) > NODE_NAME_LENGTH:
                raise PodInvalid(
                    key, f"must be a node name: a string of at most {NODE_NAME_LENGTH} characters"
                )
            if not value:
                continue
        elif key == "nodeSelector":
            _string_map(value, key)
        kept[key] = value
    fields = {key: value for key, value in kept.items() if key != OWNER_REFERENCES}
    raw = {**fields, "labels": labels, "containers": containers, "initContainers": init_containers}
    _refused(pod_field_problems(raw))
    storage = {key: kept[key] for key in (CLAIMS, VOLUMES, CLASSES) if key in kept}
    if storage:
        try:
            read_storage(storage)
        except PodInvalid as exc:
            raise FieldProblems([(exc.field, exc.message)]) from None
    effective_request(containers, init_containers)
    return kept


def checked_running_pod(labels, affinity, containers, init_containers) -> None:
    """The fields of a pod someone else bound that count here (`engine.kubefields`'s rules);
    FieldProblems listing every bad field."""
    raw = {
        "labels": labels,
        "affinity": affinity,
        "containers": containers,
        "initContainers": init_containers,
    }
    # Its ports are slim (only those that take a node port, without `containerPort`).
    _refused(
        [
            (field, message)
            for field, message in running_pod_problems(raw)
            if not (field.endswith(".containerPort") and message.startswith("required"))
        ]
    )
    effective_request(containers, init_containers)


def checked_node_fields(taints=None, unschedulable=None, allocatable=None) -> dict:
    """A node's Kubernetes fields as `Node` columns, only those given (None: keep what is
    stored). Raises ScenarioError naming the field (ScenarioProblems: every one)."""
    given = {"taints": taints, "unschedulable": unschedulable, "allocatable": allocatable}
    fields = {key: value for key, value in given.items() if value is not None}
    problems = node_field_problems(fields)
    if problems:
        raise ScenarioProblems([ScenarioError(field, message) for field, message in problems])
    if allocatable is not None:
        try:
            amounts(allocatable, "allocatable")
        except PodInvalid as exc:
            raise ScenarioError(exc.field, exc.message) from None
    return fields
