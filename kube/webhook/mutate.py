"""What the mutating webhook changes on a pod, as HAMi's webhook does, as a JSON Patch.

For a pod being created that hamiadmin will schedule (`review.takes`) and that does not
carry `hami.io/webhook: ignore`, in this order:

0. a container whose count is 0 (`nvidia.com/gpu: 0`) loses its GPU resources: HAMi gives
   it no device, and the scheduler reads the stored pod, so it must see no ask either;
1. namespace default policies (`HAMI_WEBHOOK_NAMESPACE_POLICIES`): each policy annotation
   the pod does not carry itself;
2. per container asking a GPU, what the engine would assume, written down so that HAMi's
   device plugin, quotas and `kubectl describe` see the same numbers: the count
   (`defaultGPUNum`, when only memory or cores are named), 100 cores (the cluster's
   exclusive default) when the container wants whole cards, HAMi's `defaultMem` and
   `defaultCores` when its configuration names them;
3. `NVIDIA_VISIBLE_DEVICES=none` on the containers that ask for no GPU, in GPU pods and
   CPU-only pods alike, when HAMi's `overwriteEnv` is on (off by default, as in HAMi's
   chart), so the NVIDIA runtime does not hand them every card of the node;
4. `runtimeClassName`, when configured and the pod names none;
5. `schedulerName`: hamiadmin's (mode `all`), for pods naming none, `default-scheduler` or
   `hami-scheduler`; a pod naming another scheduler is not touched at all. A pod asking only
   device families hamiadmin does not schedule (families.py: Ascend, Hygon...) gets
   `HAMI_OTHER_FAMILIES_SCHEDULER` instead (HAMi's scheduler kept running for them), and
   one asking one of ours beside one of those is left to the validating webhook to refuse.

Steps 1, 2, 4 and 5 are for GPU pods only. A GPU pod the engine refuses is not changed: the
validating webhook refuses it, with the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from hamiadmin.hamiconfig import HamiConfig
from scheduling.engine.annotations import parse_policy
from scheduling.engine.errors import PodInvalid
from scheduling.engine.model import ClusterConfig

from .. import pods as pod_objects
from . import families
from .review import (
    CONTAINER_KEYS,
    Answer,
    Review,
    check,
    is_pod_create,
    opted_out,
    takes,
    without_zero_counts,
    zero_count_containers,
)

HIDE_VARIABLE = "NVIDIA_VISIBLE_DEVICES"
#: Annotations a namespace default may set: the policy ones of SPEC 3 and the card mode.
POLICY_ANNOTATIONS = (
    "hami.io/node-scheduler-policy",
    "hami.io/gpu-scheduler-policy",
    "hami.io/device-scoring-weights",
    "nvidia.com/use-gputype",
    "nvidia.com/nouse-gputype",
    "nvidia.com/numa-bind",
    "nvidia.com/vgpu-mode",
)


@dataclass(frozen=True)
class Mutation:
    """What the mutating webhook is set to do (settings.HAMIADMIN, HAMi's configuration)."""

    scheduler_name: str = "hami-scheduler"
    #: Every name served (`HAMI_SCHEDULER_NAMES`): pods naming any of them are ours too.
    scheduler_names: tuple[str, ...] = ()
    mode: str = "all"
    #: HAMi's `overwriteEnv`; its chart's default is off.
    hide_gpus: bool = False
    runtime_class: str = ""
    namespace_policies: dict[str, dict[str, str]] = field(default_factory=dict)
    #: `HAMI_OTHER_FAMILIES_SCHEDULER`: where pods of families hamiadmin does not schedule go
    #: (HAMi's scheduler kept running for them); empty: they are not routed.
    other_scheduler: str = ""

    @property
    def served(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.scheduler_name, *self.scheduler_names)))

    @property
    def routes(self) -> bool:
        return families.routes(self.other_scheduler, self.served, self.mode)


def pointer(*parts) -> str:
    """An RFC 6901 JSON Pointer: `~` and `/` inside a part escaped (`nvidia.com~1gpu`)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def read_namespace_policies(text: str) -> tuple[dict[str, dict[str, str]], list[str]]:
    """`HAMI_WEBHOOK_NAMESPACE_POLICIES`, and what of it was left out and why: anything but
    the policy annotations, and a value the engine refuses (one bad default must not stop
    every pod of the namespace from being mutated)."""
    problems: list[str] = []
    if not text.strip():
        return {}, problems
    try:
        raw = json.loads(text)
    except ValueError as exc:
        return {}, [f"not JSON ({exc}); no namespace defaults"]
    if not isinstance(raw, dict):
        return {}, ["must be a JSON object {namespace: {annotation: value}}; no namespace defaults"]
    kept: dict[str, dict[str, str]] = {}
    for namespace, policies in raw.items():
        if not isinstance(policies, dict):
            problems.append(f"{namespace}: must be an object of annotations; left out")
            continue
        for key, value in policies.items():
            if key not in POLICY_ANNOTATIONS:
                problems.append(f"{namespace}: {key} is not a policy annotation; left out")
            elif not isinstance(value, str):
                problems.append(f"{namespace}: {key} must be a string; left out")
            else:
                kept.setdefault(namespace, {})[key] = value
    for namespace, policies in kept.items():
        while policies:
            try:
                parse_policy(policies, ClusterConfig())
                break
            except PodInvalid as exc:
                key = exc.field.removeprefix("annotations.")
                problems.append(f"{namespace}: {exc.message}; left out")
                if key in policies:
                    del policies[key]
                else:
                    policies.clear()
    return {namespace: policies for namespace, policies in kept.items() if policies}, problems


def _named(container: dict, resource: str) -> object | None:
    """The value of `resource` in limits, else requests, else None (as the engine reads it)."""
    found = container.get("resources")
    resources: dict = found if isinstance(found, dict) else {}
    for section in ("limits", "requests"):
        values = resources.get(section)
        if isinstance(values, dict) and resource in values:
            return values[resource]
    return None


def _wants_whole_cards(container: dict, hami: HamiConfig) -> bool:
    """The engine's rule (SPEC 2): no memory named, and no percentage or 100 (a percentage of
    0 is memory left to the defaults, and cores too: HAMi books it 0 cores, not 100)."""
    names = hami.resources
    if _named(container, names.memory) is not None:
        return False
    percentage = _named(container, names.percentage)
    if percentage is None:
        return True
    value = pod_objects.resource_quantity(percentage) if isinstance(percentage, str) else percentage
    return value == 100


def _resource_additions(container: dict, cluster: ClusterConfig, hami: HamiConfig) -> dict[str, str]:
    """The limits to add to one container that asks a GPU (step 2)."""
    names = hami.resources
    added: dict[str, str] = {}
    has_count = _named(container, names.count) is not None
    if not has_count and hami.default_gpu_num > 0:
        added[names.count] = str(hami.default_gpu_num)
        has_count = True
    no_memory = _named(container, names.memory) is None and _named(container, names.percentage) is None
    if _named(container, names.cores) is None:
        if has_count and _wants_whole_cards(container, hami):
            added[names.cores] = str(cluster.resources.exclusive_cores)
        elif hami.default_cores > 0:
            added[names.cores] = str(hami.default_cores)
    if no_memory and hami.default_memory > 0 and hami.default_memory % hami.memory_factor == 0:
        added[names.memory] = str(hami.default_memory // hami.memory_factor)
    return added


def _env_change(container: dict, base: str) -> list[dict]:
    """`NVIDIA_VISIBLE_DEVICES=none` on one container that asks no GPU (step 3)."""
    env = container.get("env")
    wanted = {"name": HIDE_VARIABLE, "value": "none"}
    if not isinstance(env, list):
        return [{"op": "add", "path": f"{base}/env", "value": [wanted]}]
    for position, entry in enumerate(env):
        if isinstance(entry, dict) and entry.get("name") == HIDE_VARIABLE:
            if entry == wanted:
                return []
            return [{"op": "replace", "path": f"{base}/env/{position}", "value": wanted}]
    return [{"op": "add", "path": f"{base}/env/-", "value": wanted}]


def _limits_change(container: dict, base: str, added: dict[str, str]) -> list[dict]:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return [{"op": "add", "path": f"{base}/resources", "value": {"limits": added}}]
    if not isinstance(resources.get("limits"), dict):
        return [{"op": "add", "path": f"{base}/resources/limits", "value": added}]
    return [
        {"op": "add", "path": f"{base}{pointer('resources', 'limits', name)}", "value": value}
        for name, value in added.items()
    ]


def _annotation_changes(pod: dict, namespace: str, setup: Mutation) -> list[dict]:
    defaults = setup.namespace_policies.get(namespace) or {}
    annotations = pod_objects.meta(pod).get("annotations")
    missing = {
        key: value
        for key, value in defaults.items()
        if not (isinstance(annotations, dict) and key in annotations)
    }
    if not missing:
        return []
    if not isinstance(annotations, dict):
        return [{"op": "add", "path": "/metadata/annotations", "value": missing}]
    return [
        {"op": "add", "path": pointer("metadata", "annotations", key), "value": value}
        for key, value in missing.items()
    ]


def _zero_count_removals(pod: dict, hami: HamiConfig) -> list[dict]:
    """Step 0: the GPU resources of the containers whose count is 0, removed."""
    names = hami.resources.canonical()
    ops = []
    for key, position in zero_count_containers(pod, hami):
        resources = pod_objects.spec(pod)[key][position]["resources"]
        for section in ("limits", "requests"):
            values = resources.get(section)
            if isinstance(values, dict):
                ops += [
                    {"op": "remove", "path": pointer("spec", key, position, "resources", section, name)}
                    for name in values
                    if name in names
                ]
    return ops


def _hiding_changes(pod: dict, hami: HamiConfig, visible: set[tuple[str, int]]) -> list[dict]:
    """Step 3 on every container that asks no GPU and is not in `visible`."""
    ops = []
    for key in CONTAINER_KEYS:
        containers = pod_objects.spec(pod).get(key)
        for position, container in enumerate(containers if isinstance(containers, list) else []):
            if isinstance(container, dict) and (key, position) not in visible:
                if not pod_objects.container_asks_gpu(container, hami, others=False):
                    ops += _env_change(container, pointer("spec", key, position))
    return ops


def patch_for(
    pod: dict, namespace: str, cluster: ClusterConfig, hami: HamiConfig, setup: Mutation
) -> list[dict]:
    """The JSON Patch of steps 0-5 for a valid GPU pod hamiadmin takes (module docstring)."""
    zeroed = set(zero_count_containers(pod, hami))
    ops = _zero_count_removals(pod, hami) + _annotation_changes(pod, namespace, setup)
    pod = without_zero_counts(pod, hami)
    spec = pod_objects.spec(pod)
    for key in CONTAINER_KEYS:
        containers = spec.get(key)
        for position, container in enumerate(containers if isinstance(containers, list) else []):
            if isinstance(container, dict) and pod_objects.container_asks_gpu(container, hami, others=False):
                added = _resource_additions(container, cluster, hami)
                if added:
                    ops += _limits_change(container, pointer("spec", key, position), added)
    if setup.hide_gpus:
        # A container counting 0 cards is a GPU container to HAMi: it is not hidden.
        ops += _hiding_changes(pod, hami, zeroed)
    if setup.runtime_class and not spec.get("runtimeClassName"):
        ops.append({"op": "add", "path": "/spec/runtimeClassName", "value": setup.runtime_class})
    if setup.mode == "all" and (spec.get("schedulerName") or "") != setup.scheduler_name:
        ops.append({"op": "add", "path": "/spec/schedulerName", "value": setup.scheduler_name})
    return ops


def _namespace(review: Review) -> str:
    return review.namespace or pod_objects.meta(review.pod or {}).get("namespace") or "default"


def _with_defaults(review: Review, setup: Mutation) -> Review:
    """The review as the validating webhook will see it after step 1: the namespace's
    defaults apply, so they are checked too before anything is written."""
    defaults = setup.namespace_policies.get(_namespace(review))
    if not defaults or review.pod is None:
        return review
    pod = dict(review.pod)
    metadata = dict(pod_objects.meta(pod))
    annotations = metadata.get("annotations")
    metadata["annotations"] = {**defaults, **(annotations if isinstance(annotations, dict) else {})}
    pod["metadata"] = metadata
    return Review(**{**review.__dict__, "pod": pod})


def mutate(review: Review, cluster: ClusterConfig, hami: HamiConfig, setup: Mutation) -> Answer:
    """The mutating webhook's answer: a patch for a valid GPU pod hamiadmin takes, the hiding
    of cards (step 3) for a CPU-only one; nothing for anything else, nor for an invalid pod
    (the validating webhook refuses it)."""
    pod = review.pod or {}
    if not is_pod_create(review) or opted_out(pod) or not takes(pod, setup.served, setup.mode):
        return Answer(True, "skipped")
    as_read = without_zero_counts(pod, hami)
    routed = setup.routes and families.unscheduled(families.asks(as_read, hami))
    if routed and pod_objects.asks_gpu(as_read, hami):
        return Answer(True, "unchanged")  # two families: the validating webhook refuses it
    if not pod_objects.asks_gpu(as_read, hami):
        zeroed = set(zero_count_containers(pod, hami))
        ops = _zero_count_removals(pod, hami)
        if setup.hide_gpus:
            ops += _hiding_changes(as_read, hami, zeroed)
        if routed and (pod_objects.spec(pod).get("schedulerName") or "") != setup.other_scheduler:
            ops.append({"op": "add", "path": "/spec/schedulerName", "value": setup.other_scheduler})
        return Answer(True, "patched" if ops else "skipped", patch=ops or None)
    parsed, _ = check(_with_defaults(replace(review, pod=as_read), setup), cluster, hami)
    if parsed is None:
        return Answer(True, "unchanged")
    ops = patch_for(pod, _namespace(review), cluster, hami, setup)
    # The warnings are the validating webhook's to give: given twice, kubectl prints them twice.
    return Answer(True, "patched" if ops else "unchanged", patch=ops or None)
