"""SPEC 2 + 3: a pod read and validated, before any deciding.

A pod is valid when every container's ask (SPEC 2) and every annotation (SPEC 3, the
weights of SPEC 5) reads; `parse_pod` raises PodInvalid naming the field otherwise, and
also for a pod none of whose containers asks for a GPU (code `NO_GPU`: it is rejected for
good). What reads but is changed or ignored is kept as warnings, per field
(`ParsedPod.warnings`). `describe_policy` shows as much of the policy of an invalid pod as
can be read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .annotations import (
    GPU_POLICY,
    NODE_POLICIES,
    NODE_POLICY,
    WEIGHTS,
    PodPolicy,
    group_ref,
    parse_chain,
    parse_policy,
    parse_weights,
)
from .errors import NO_GPU, PodInvalid
from .families.ascend import VNPU_MODE
from .model import ClusterConfig, PodSpec
from .podschema import Problem, annotation_warnings
from .requests import ContainerAsk, parse_containers


def _ask_key(ask: ContainerAsk | None) -> tuple[int, int | None, int, int, str] | None:
    """What of one container's ask decides a node verdict: everything but its name."""
    return None if ask is None else (ask.count, ask.memory, ask.memory_percentage, ask.cores, ask.family)


@dataclass(frozen=True, slots=True)
class ParsedPod:
    """A pod read and validated: policy plus per-container asks.

    `inits` and `apps` hold one entry per container of the spec, in its order, None for one
    that asks no GPU (an init container without GPU still has its place in `allocated`).
    """

    policy: PodPolicy
    inits: tuple[ContainerAsk | None, ...]
    apps: tuple[ContainerAsk | None, ...]
    app_names: tuple[str, ...]
    init_names: tuple[str, ...]
    #: Annotations accepted but not read (`podschema.annotation_warnings`): warned about.
    unread: tuple[Problem, ...] = ()

    @property
    def gpu_inits(self) -> list[ContainerAsk]:
        """The init containers that ask for a GPU, in order: the ones checked on a node."""
        return [ask for ask in self.inits if ask is not None]

    def warnings(self) -> dict[str, list[str]]:
        """What reads but is ignored or changed, per field: the policy's (unknown chain
        names, node policy), the annotations not read (`hami.io/` ones it does not know), then
        each container's (`gpucores` above 100), app containers first."""
        found = self.policy.warnings()
        changed = [pair for ask in (*self.apps, *self.inits) for pair in (ask.warnings if ask else ())]
        for where, message in (*self.unread, *changed):
            found.setdefault(where, []).append(message)
        return found

    @property
    def shape(self) -> tuple:
        """What decides a node verdict: the asks (without names) and how cards are filtered and ranked."""
        p = self.policy
        return (
            tuple(_ask_key(a) for a in self.gpu_inits),
            tuple(_ask_key(a) for a in self.apps),
            p.filters,
            p.sort_keys,
            p.weights,
            p.use_uuids,
            p.nouse_uuids,
            p.use_types,
            p.nouse_types,
            p.use_modes,
            p.numa_bind,
            p.gang,
        )

    @property
    def fit_shape(self) -> tuple:
        """The shape without what only ranks or chooses cards (sort keys, weights, filters that
        only choose, such as topology): enough when which cards the chain picks cannot change
        the node's verdict (see `Scheduler`)."""
        p = self.policy
        return (
            "fit",
            tuple(_ask_key(a) for a in self.gpu_inits),
            tuple(_ask_key(a) for a in self.apps),
            tuple(f.name for f in p.active_filters if f.decides_fit),
            p.use_uuids,
            p.nouse_uuids,
            p.use_types,
            p.nouse_types,
            p.use_modes,
        )


def parse_pod(pod: PodSpec, config: ClusterConfig) -> ParsedPod:
    """Validate a pod (SPEC 2, 3, 5). Raises PodInvalid naming the field; also for a pod asking no GPU."""
    if not isinstance(pod.containers, list) or not pod.containers:
        raise PodInvalid("containers", "a pod needs at least one container")
    policy = parse_policy(pod.annotations, config)
    if any(f.needs_gang for f in policy.active_filters):
        policy = replace(policy, gang=_gang_of(pod))
    mode = pod.annotations.get(VNPU_MODE, "") if isinstance(pod.annotations, dict) else ""
    apps = parse_containers(pod.containers, "containers", config.resources, mode)
    inits = parse_containers(pod.init_containers, "initContainers", config.resources, mode)
    if not any(inits) and not any(apps):
        raise PodInvalid(
            "containers",
            "asks for no GPU: none of its containers asks for nvidia.com resources",
            code=NO_GPU,
        )
    return ParsedPod(
        policy,
        tuple(inits),
        tuple(apps),
        _names(pod.containers),
        _names(pod.init_containers),
        tuple(annotation_warnings(pod.annotations)),
    )


def _names(containers) -> tuple[str, ...]:
    return tuple((c.get("name") or "") if isinstance(c, dict) else "" for c in containers or ())


def _gang_of(pod: PodSpec) -> str:
    """`namespace/name` of the pod's group, for `gang-spread`; "" when it names none (a bad
    group annotation is the cycle's to report, not the chain's)."""
    try:
        ref = group_ref(pod.annotations)
    except PodInvalid:
        return ""
    return f"{pod.namespace}/{ref.name}" if ref is not None else ""


def describe_policy(annotations: object, config: ClusterConfig) -> dict:
    """The policy view of a pod whose annotations do not parse: as much as can be read."""
    annotations = annotations if isinstance(annotations, dict) else {}
    node_value = annotations.get(NODE_POLICY)
    node = node_value.strip().lower() if isinstance(node_value, str) else None
    chain_value = annotations.get(GPU_POLICY, config.gpu_scheduler_policy)
    chain, filters, sort_keys, ignored = parse_chain(chain_value if isinstance(chain_value, str) else "")
    try:
        weights = parse_weights(annotations[WEIGHTS]).as_dict() if WEIGHTS in annotations else None
    except PodInvalid:
        weights = None
    return {
        "node": node if node in NODE_POLICIES else config.node_scheduler_policy,
        "gpu": list(chain),
        "filters": list(filters),
        "sort_keys": list(sort_keys),
        "ignored": list(ignored),
        "weights": weights,
        "node_ignored": None if node in NODE_POLICIES or node_value is None else node_value,
        "numa_bind": False,
    }
