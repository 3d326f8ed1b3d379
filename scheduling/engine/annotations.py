"""SPEC 3, 5, 6.1: reading a pod's annotations into a `PodPolicy`. Parsing only; no deciding."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .chain import DEFAULT_SORT_KEYS, FILTERS, SORT_KEYS, Filter, chain_names, fitting_hooks
from .errors import PodInvalid
from .families import ASCEND, NVIDIA
from .model import ClusterConfig

NODE_POLICY = "hami.io/node-scheduler-policy"
GPU_POLICY = "hami.io/gpu-scheduler-policy"
WEIGHTS = "hami.io/device-scoring-weights"
USE_UUID = "nvidia.com/use-gpuuuid"
NOUSE_UUID = "nvidia.com/nouse-gpuuuid"
USE_TYPE = "nvidia.com/use-gputype"
NOUSE_TYPE = "nvidia.com/nouse-gputype"
NUMA_BIND = "nvidia.com/numa-bind"
VGPU_MODE = NVIDIA.mode_annotation
#: Each Ascend chip's own UUID lists (HAMi: `hami.io/use-<commonWord>-uuid`,
#: `hami.io/no-use-<commonWord>-uuid`), read as `use-gpuuuid` / `nouse-gpuuuid` are: one
#: pod-wide list, so on a pod asking two families a use list names the cards of both.
FAMILY_USE_UUID = tuple(chip.use_uuid for chip in ASCEND.values())
FAMILY_NOUSE_UUID = tuple(chip.nouse_uuid for chip in ASCEND.values())

NODE_POLICIES = ("binpack", "spread")
WEIGHT_KEYS = ("slot", "core", "memory")
_DIGITS = re.compile(r"[0-9]+")
#: `numa-bind` reads as HAMi's device plugin reads it (Go's strconv.ParseBool), in any case;
#: empty is off. Anything else is refused: `"yes"` would otherwise silently mean no binding.
_TRUE = frozenset({"true", "t", "1"})
_FALSE = frozenset({"false", "f", "0", ""})
#: A card UUID (`GPU-…`, `MIG-…/1/0`) has no blank and no control character.
_UUID = re.compile(r"[^\s,]+")
#: A card mode as HAMi's device plugin registers it (`hami-core`, `mig`, `mps`).
_MODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Weights:
    slot: int = 1
    core: int = 1
    memory: int = 1

    def as_dict(self) -> dict[str, int]:
        return {"slot": self.slot, "core": self.core, "memory": self.memory}


@dataclass(frozen=True, slots=True)
class PodPolicy:
    """Everything the annotations say about where and how to place the pod.

    `active_filters` are the registered filters this policy turns on (the chain's, and
    numa-bind's by its annotation), in the order their hooks run.
    """

    node_policy: str
    node_policy_ignored: str | None
    chain: tuple[str, ...]
    filters: tuple[str, ...]
    sort_keys: tuple[str, ...]
    ignored: tuple[str, ...]
    weights: Weights
    use_uuids: frozenset[str] = field(default_factory=frozenset)
    nouse_uuids: frozenset[str] = field(default_factory=frozenset)
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    numa_bind: bool = False
    use_modes: tuple[str, ...] = ()
    #: The pod's group (`namespace/name`) when the chain names `gang-spread`; else "".
    gang: str = ""
    active_filters: tuple[Filter, ...] = field(default=(), init=False, compare=False, repr=False)
    #: those of them with a hook over a container's fitting cards that decides fit (check 11)
    fitting_hooks: tuple[Filter, ...] = field(default=(), init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        active = tuple(f for f in FILTERS.values() if f.active(self))
        object.__setattr__(self, "active_filters", active)
        object.__setattr__(self, "fitting_hooks", fitting_hooks(active))

    def uses(self, name: str) -> bool:
        """Whether the registered filter `name` is active for this pod."""
        return any(f.name == name for f in self.active_filters)

    def warnings(self) -> dict[str, list[str]]:
        """What the annotations name that is accepted but ignored, per annotation field."""
        warnings: dict[str, list[str]] = {}
        if self.ignored:
            known = ", ".join(chain_names())
            warnings[f"annotations.{GPU_POLICY}"] = [
                f"unknown policy {name!r} ignored (known: {known})" for name in self.ignored
            ]
        if self.node_policy_ignored is not None:
            warnings[f"annotations.{NODE_POLICY}"] = [
                f"unknown node policy {self.node_policy_ignored!r} ignored; using {self.node_policy}"
            ]
        return warnings

    def as_dict(self) -> dict:
        """The `policy` object of SPEC 9's output."""
        return {
            "node": self.node_policy,
            "gpu": list(self.chain),
            "filters": list(self.filters),
            "sort_keys": list(self.sort_keys),
            "ignored": list(self.ignored),
            "weights": self.weights.as_dict(),
            "node_ignored": self.node_policy_ignored,
            "numa_bind": self.numa_bind,
        }


def parse_chain(value: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(chain, filters, sort keys, ignored): trim, lower-case, dedupe, ignore unknown names."""
    chain: list[str] = []
    ignored: list[str] = []
    for item in value.split(","):
        name = item.strip().lower()
        if not name or name in chain or name in ignored:
            continue
        if name in SORT_KEYS or (name in FILTERS and FILTERS[name].in_chain):
            chain.append(name)
        else:
            ignored.append(name)
    filters = tuple(name for name in chain if name in FILTERS)
    sort_keys = tuple(name for name in chain if name in SORT_KEYS) or DEFAULT_SORT_KEYS
    return tuple(chain), filters, sort_keys, tuple(ignored)


def parse_weights(value: object) -> Weights:
    """`slot=A,core=B,memory=C`: the three keys once each, non-negative integers, one above zero."""
    if not isinstance(value, str) or not value.strip():
        raise PodInvalid(f"annotations.{WEIGHTS}", f"{WEIGHTS} is empty; expected slot=A,core=B,memory=C")
    seen: dict[str, int] = {}
    for pair in value.split(","):
        key, sep, number = pair.partition("=")
        key, number = key.strip(), number.strip()
        if not sep:
            raise PodInvalid(f"annotations.{WEIGHTS}", f"{WEIGHTS}: {pair.strip()!r} is not key=value")
        if key not in WEIGHT_KEYS:
            raise PodInvalid(
                f"annotations.{WEIGHTS}", f"{WEIGHTS}: unknown key {key!r}; keys are slot, core, memory"
            )
        if key in seen:
            raise PodInvalid(f"annotations.{WEIGHTS}", f"{WEIGHTS}: key {key!r} given twice")
        if not _DIGITS.fullmatch(number):
            raise PodInvalid(
                f"annotations.{WEIGHTS}", f"{WEIGHTS}: {key}={number!r} is not a non-negative integer"
            )
        seen[key] = int(number)
    missing = [key for key in WEIGHT_KEYS if key not in seen]
    if missing:
        raise PodInvalid(f"annotations.{WEIGHTS}", f"{WEIGHTS}: missing {', '.join(missing)}")
    if not any(seen.values()):
        raise PodInvalid(f"annotations.{WEIGHTS}", f"{WEIGHTS}: at least one weight must be above 0")
    return Weights(**seen)


def _csv(value: object) -> list[str]:
    return [item.strip() for item in str(value or "").split(",") if item.strip()]


def _entries(annotations: dict, key: str, pattern: re.Pattern | None, what: str) -> list[str]:
    """A comma list annotation (SPEC 3), trimmed, empty entries skipped. Raises PodInvalid
    for an entry with a control character (a list written one per line), or, with `pattern`,
    one that does not match it (`GPU-a GPU-b`: blank-separated UUIDs that would match no card)."""
    entries = _csv(annotations.get(key))
    for entry in entries:
        if _CONTROL.search(entry) or (pattern is not None and not pattern.fullmatch(entry)):
            raise PodInvalid(
                f"annotations.{key}", f"{key}: {entry!r} is not {what}; separate entries with commas"
            )
    return entries


def parse_numa_bind(annotations: dict) -> bool:
    """`nvidia.com/numa-bind`: true/t/1 or false/f/0/empty, any case. Raises PodInvalid otherwise."""
    value = annotations.get(NUMA_BIND, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise PodInvalid(
        f"annotations.{NUMA_BIND}", f"{NUMA_BIND}: {annotations[NUMA_BIND]!r} is not true or false"
    )


def parse_policy(annotations: dict, config: ClusterConfig) -> PodPolicy:
    """Read the pod's annotations over the cluster defaults. Raises PodInvalid for bad weights,
    a numa-bind that is not a boolean, or a malformed use/nouse or vgpu-mode entry."""
    if annotations is None:
        annotations = {}
    if not isinstance(annotations, dict):
        raise PodInvalid("annotations", "must be an object of string values")
    for key, value in annotations.items():
        if not isinstance(value, str):
            raise PodInvalid(f"annotations.{key}", f"must be a string, got {value!r}")
    # the registries too: a filter or sort key registered later reads the same text otherwise
    known = (tuple(annotations.items()), config, tuple(FILTERS.values()), tuple(SORT_KEYS))
    policy = _POLICIES.get(known)
    if policy is None:
        policy = _read_policy(annotations, config)
        if len(_POLICIES) >= POLICIES_KEPT:
            _POLICIES.clear()
        _POLICIES[known] = policy
    return policy


#: The policies `parse_policy` read, by annotations, defaults and registries: the pods of one
#: workload carry the same annotations, and a `PodPolicy` is never changed once made.
_POLICIES: dict[tuple, PodPolicy] = {}
#: How many `_POLICIES` keeps before it starts again.
POLICIES_KEPT = 1024


def _read_policy(annotations: dict, config: ClusterConfig) -> PodPolicy:
    """`parse_policy` of annotations whose values are strings, read afresh."""
    node_policy, node_ignored = config.node_scheduler_policy, None
    if NODE_POLICY in annotations:
        asked = annotations[NODE_POLICY].strip().lower()
        if asked in NODE_POLICIES:
            node_policy = asked
        else:
            node_ignored = annotations[NODE_POLICY]

    chain_value = annotations[GPU_POLICY] if GPU_POLICY in annotations else config.gpu_scheduler_policy
    chain, filters, sort_keys, ignored = parse_chain(chain_value)
    weights = parse_weights(annotations[WEIGHTS]) if WEIGHTS in annotations else Weights()
    return PodPolicy(
        node_policy=node_policy,
        node_policy_ignored=node_ignored,
        chain=chain,
        filters=filters,
        sort_keys=sort_keys,
        ignored=ignored,
        weights=weights,
        use_uuids=frozenset(
            uuid
            for key in (USE_UUID, *FAMILY_USE_UUID)
            for uuid in _entries(annotations, key, _UUID, "a card UUID")
        ),
        nouse_uuids=frozenset(
            uuid
            for key in (NOUSE_UUID, *FAMILY_NOUSE_UUID)
            for uuid in _entries(annotations, key, _UUID, "a card UUID")
        ),
        use_types=tuple(t.lower() for t in _entries(annotations, USE_TYPE, None, "a card type")),
        nouse_types=tuple(t.lower() for t in _entries(annotations, NOUSE_TYPE, None, "a card type")),
        numa_bind=parse_numa_bind(annotations),
        use_modes=tuple(
            dict.fromkeys(m.lower() for m in _entries(annotations, VGPU_MODE, _MODE, "a card mode"))
        ),
    )


#: Where a pod names its gang, in the order read (the first one present wins).
#: HAMi's, Volcano's, KAI's (`pod-group-name`, KAI-scheduler's `PodGroupAnnotationForPod`).
GROUP_ANNOTATIONS = ("hami.io/group-name", "scheduling.k8s.io/group-name", "pod-group-name")
GROUP_LABELS = ("scheduling.x-k8s.io/pod-group",)  # scheduler-plugins coscheduling
MIN_MEMBER_ANNOTATION = "hami.io/group-min-member"
TIMEOUT_ANNOTATION = "hami.io/group-schedule-timeout-seconds"
#: Where a pod names its queue: HAMi's and Volcano's annotations, KAI's label.
QUEUE_ANNOTATIONS = ("hami.io/queue", "scheduling.volcano.sh/queue-name")
QUEUE_LABELS = ("kai.scheduler/queue",)
SOURCE_OF = {
    "hami.io/group-name": "annotation",
    "scheduling.k8s.io/group-name": "volcano",
    "scheduling.x-k8s.io/pod-group": "coscheduling",
    "pod-group-name": "kai",
}

NAME_LIMIT = 253

#: Where a pod says which part of its gang it is (`subgroup_of`), in the order read: KAI's
#: label, Volcano's task annotation, then what the operators stamp on their pods (JobSet's
#: replicated job, Kubeflow's replica type, Ray's head or worker group).
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
VOLCANO_TASK = "volcano.sh/task-spec"
JOBSET_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
KUBEFLOW_REPLICA = "training.kubeflow.org/replica-type"
RAY_NODE_TYPE = "ray.io/node-type"
RAY_GROUP = "ray.io/group"
#: An LWS pod's place in its group: "0" is the leader (`leader`), the rest `workers`.
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def subgroup_of(annotations: dict | None, labels: dict | None, parts) -> str:
    """The part of its gang (one of `parts`, the group's subgroup names) a pod belongs to, from
    the first of its labels and annotations above that names one (case aside: Kubeflow writes
    `master` for the replica spec `Master`); "" when none does: such a pod counts toward the
    gang's `min_member` only."""
    if not parts:
        return ""
    annotations, labels = annotations or {}, labels or {}
    by_case = {str(name).lower(): name for name in parts}
    said = [labels.get(SUBGROUP_LABEL), annotations.get(VOLCANO_TASK), labels.get(JOBSET_JOB)]
    said.append(labels.get(KUBEFLOW_REPLICA))
    if str(labels.get(RAY_NODE_TYPE, "")).lower() == "head":
        said.append("head")
    said.append(labels.get(RAY_GROUP))
    index = labels.get(LWS_WORKER_INDEX)
    if isinstance(index, str) and index.strip():
        said.append("leader" if index.strip() == "0" else "workers")
    for value in said:
        if isinstance(value, str) and value:
            if value in parts:
                return value
            if value.lower() in by_case:
                return by_case[value.lower()]
    return ""


def _name(value, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PodInvalid(where, "must be a non-empty name")
    value = value.strip()
    if len(value) > NAME_LIMIT or any(ord(ch) < 32 for ch in value):
        raise PodInvalid(where, f"must be a name of at most {NAME_LIMIT} printable characters")
    return value


def _count(value, where: str, least: int) -> int:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        raise PodInvalid(where, f"must be a whole number, got {str(value)[:40]!r}") from None
    if number < least or number > 1_000_000:
        raise PodInvalid(where, f"must be between {least} and 1000000, got {number}")
    return number


@dataclass(frozen=True, slots=True)
class GroupRef:
    """The gang a pod's metadata names; `min_member`/`timeout` only when the pod says them.
    A gang found from the pod's top controller (`source` "owner") also names that owner and
    its parts (`subgroups`: (name, min_member) pairs, each enforced: `subgroup_of`)."""

    name: str
    source: str
    min_member: int | None = None
    timeout_seconds: int | None = None
    owner_kind: str = ""
    owner_name: str = ""
    subgroups: tuple[tuple[str, int], ...] = ()
    #: A group whose object sizes it but is not read yet (a Workload API PodGroup created after
    #: its pods): created holding its pods until the object says its size, never placed pod
    #: by pod (kube-scheduler waits for the object too).
    unknown_size: bool = False


def group_ref(annotations: dict, labels: dict | None = None) -> GroupRef | None:
    """The pod's gang, or None. Raises PodInvalid naming the annotation or label at fault."""
    annotations, labels = annotations or {}, labels or {}
    found = [(key, annotations[key]) for key in GROUP_ANNOTATIONS if key in annotations]
    found += [(key, labels[key]) for key in GROUP_LABELS if key in labels]
    if not found:
        for key in (MIN_MEMBER_ANNOTATION, TIMEOUT_ANNOTATION):
            if key in annotations:
                raise PodInvalid(key, "needs a group: set hami.io/group-name too")
        return None
    key, value = found[0]
    name = _name(value, key)
    for other, other_value in found[1:]:
        if isinstance(other_value, str) and other_value.strip() != name:
            raise PodInvalid(other, f"names group {str(other_value)[:60]!r} but {key} names {name!r}")
    min_member = None
    if MIN_MEMBER_ANNOTATION in annotations:
        min_member = _count(annotations[MIN_MEMBER_ANNOTATION], MIN_MEMBER_ANNOTATION, 1)
    timeout = None
    if TIMEOUT_ANNOTATION in annotations:
        timeout = _count(annotations[TIMEOUT_ANNOTATION], TIMEOUT_ANNOTATION, 1)
    return GroupRef(name=name, source=SOURCE_OF[key], min_member=min_member, timeout_seconds=timeout)


def queue_ref(annotations: dict, labels: dict | None = None) -> str | None:
    """The queue a pod's metadata names, or None (then its group's, its namespace's, `default`)."""
    annotations, labels = annotations or {}, labels or {}
    for key in QUEUE_ANNOTATIONS:
        if key in annotations:
            return _name(annotations[key], key)
    for key in QUEUE_LABELS:
        if key in labels:
            return _name(labels[key], key)
    return None
