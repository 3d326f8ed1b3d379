"""What the mutating webhook changes on a GPU pod, as HAMi's webhook does, as a JSON Patch.

For a pod being created that asks for SPEC 2 resources (as this cluster names them) and
that hamiadmin will schedule (`review.takes`), in this order:

1. namespace default policies (`HAMI_WEBHOOK_NAMESPACE_POLICIES`): each policy annotation
   the pod does not carry itself;
2. per container asking a GPU, what the engine would assume, written down so that HAMi's
   device plugin, quotas and `kubectl describe` see the same numbers: the count
   (`defaultGPUNum`, when only memory or cores are named), 100 cores (the cluster's
   exclusive default) when the container wants whole cards, HAMi's `defaultMem` and
   `defaultCores` when its configuration names them;
3. `NVIDIA_VISIBLE_DEVICES=none` on the containers that ask for no GPU (HAMi's
   `overwriteEnv`), so the NVIDIA runtime does not hand them every card of the node;
4. `runtimeClassName`, when configured and the pod names none;
5. `schedulerName`: hamiadmin's (mode `all`), for pods naming none, `default-scheduler` or
   `hami-scheduler`; a pod naming another scheduler is not touched at all.

A pod the engine refuses is not changed: the validating webhook refuses it, with the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from hamiadmin.hamiconfig import HamiConfig
from scheduling.engine.annotations import parse_policy
from scheduling.engine.errors import PodInvalid
from scheduling.engine.model import ClusterConfig

from .. import pods as pod_objects
from .review import Answer, Review, check, is_pod_create, takes

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
    hide_gpus: bool = True
    runtime_class: str = ""
    namespace_policies: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def served(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.scheduler_name, *self.scheduler_names)))


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
    """The engine's rule (SPEC 2): no memory named, and no percentage or 0 or 100."""
    names = hami.resources
    if _named(container, names.memory) is not None:
        return False
    percentage = _named(container, names.percentage)
    if percentage is None:
        return True
    value = pod_objects.resource_quantity(percentage) if isinstance(percentage, str) else percentage
    return value in (0, 100)


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


def patch_for(
    pod: dict, namespace: str, cluster: ClusterConfig, hami: HamiConfig, setup: Mutation
) -> list[dict]:
    """The JSON Patch of steps 1-5 for a valid GPU pod hamiadmin takes (module docstring)."""
    ops = _annotation_changes(pod, namespace, setup)
    spec = pod_objects.spec(pod)
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        for position, container in enumerate(containers if isinstance(containers, list) else []):
            if not isinstance(container, dict):
                continue
            base = pointer("spec", key, position)
            if pod_objects.container_asks_gpu(container, hami):
                added = _resource_additions(container, cluster, hami)
                if added:
                    ops += _limits_change(container, base, added)
            elif setup.hide_gpus:
                ops += _env_change(container, base)
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
    """The mutating webhook's answer: a patch for a valid GPU pod hamiadmin takes; nothing
    for anything else, nor for an invalid pod (the validating webhook refuses it)."""
    pod = review.pod or {}
    if not is_pod_create(review) or not pod_objects.asks_gpu(pod, hami):
        return Answer(True, "skipped")
    if not takes(pod, setup.served, setup.mode):
        return Answer(True, "skipped")
    parsed, _ = check(_with_defaults(review, setup), cluster, hami)
    if parsed is None:
        return Answer(True, "unchanged")
    ops = patch_for(pod, _namespace(review), cluster, hami, setup)
    # The warnings are the validating webhook's to give: given twice, kubectl prints them twice.
    return Answer(True, "patched" if ops else "unchanged", patch=ops or None)
