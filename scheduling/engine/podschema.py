"""One schema for a pod as submitted, shared by every door: `POST pods/` and bulk (the API's
serializer), what-if, `simulate` and the Simulator (the scenario reader). A typo must not be
read as "not asked": `annotatons` would drop the policy, `nvidia.com/gpumemory` would give a
whole card. So every door refuses the same things with the same words, every problem at once,
each naming its field path (`pods[2].containers[0].resources.limits.nvidia.com/gpumemory`):

- a pod takes only the keys of its door (`POD_KEYS`, `API_POD_KEYS`, `RUNNING_POD_KEYS`);
- a container takes Kubernetes' container fields (`CONTAINER_KEYS`), its `resources` only
  `limits`, `requests` and `claims`;
- a resource name that looks like a GPU resource but is not one hamiadmin reads (SPEC 2,
  `requests.RESOURCES`) is refused with the closest one ("did you mean nvidia.com/gpumem"):
  any name under `nvidia.com/` or `hami.io/` but NVIDIA's MIG profiles (`nvidia.com/mig-1g.5gb`),
  and any name within two edits of a known one (`nvidia.con/gpu`). cpu, memory,
  ephemeral-storage, hugepages-* and other vendors' extended resources (`huawei.com/Ascend910`)
  stay accepted: the node rules judge them against `allocatable`;
- an annotation under `hami.io/` that hamiadmin does not know, or one under `nvidia.com/` close
  to one it reads (`nvidia.com/use-gputpye`), is a warning (`annotation_warnings`), not an
  error: HAMi and other tools keep annotations of their own there.

Unknown keys inside the Kubernetes fields (`affinity`, `tolerations`...) are `kubefields`'s;
values of the GPU resources are the engine's (`requests`, a bad one rejects the pod).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache

from .annotations import (
    FAMILY_NOUSE_UUID,
    FAMILY_USE_UUID,
    GPU_POLICY,
    GROUP_ANNOTATIONS,
    MIN_MEMBER_ANNOTATION,
    NODE_POLICY,
    NOUSE_TYPE,
    NOUSE_UUID,
    NUMA_BIND,
    QUEUE_ANNOTATIONS,
    TIMEOUT_ANNOTATION,
    USE_TYPE,
    USE_UUID,
    VGPU_MODE,
    WEIGHTS,
)
from .encoding import PLACEMENT_ANNOTATIONS
from .families import written_annotations
from .families.ascend import VNPU_MODE
from .requests import RESOURCES as GPU_RESOURCES

#: A problem: the field path and what is wrong with it.
Problem = tuple[str, str]

#: What a pod takes at every door: its name and metadata, its containers and the Kubernetes
#: scheduling fields of SPEC 10 (`engine.kubefields`), in the API's own names.
POD_KEYS = (
    "name",
    "namespace",
    "annotations",
    "labels",
    "containers",
    "initContainers",
    "priority",
    "nodeName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "schedulingGates",
    "volumes",
)
#: `POST pods/` and bulk also take the pod's `uid` and what its claims are judged against
#: (a scenario has those at its top level).
API_POD_KEYS = (*POD_KEYS, "uid", "persistentVolumeClaims", "persistentVolumes", "storageClasses")
#: A scenario's `running` pod: bound by someone else, on `node`; what it holds and, for a
#: tenant of hamiadmin's, how the batch rules see it (`engine.batch.scenario.TENANT_FIELDS`:
#: its priority, queue, group, whether it may be preempted or moved, how long it has run).
RUNNING_POD_KEYS = (
    "name",
    "namespace",
    "node",
    "annotations",
    "labels",
    "affinity",
    "containers",
    "initContainers",
    "priority",
    "queue",
    "group",
    "preemptible",
    "runtime_seconds",
    "movable",
)
#: A Kubernetes container's fields (core/v1 Container): those hamiadmin does not read are
#: accepted, so a manifest's container passes as written.
CONTAINER_KEYS = (
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "workingDir",
    "env",
    "envFrom",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "ports",
    "volumeMounts",
    "volumeDevices",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "securityContext",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "stdin",
    "stdinOnce",
    "tty",
)
RESOURCE_SECTIONS = ("limits", "requests", "claims")

#: The domains of HAMi's own names: a resource there is one hamiadmin reads or a typo.
GPU_DOMAINS = ("nvidia.com", "hami.io")
#: Resources NVIDIA's device plugin advertises beside HAMi's: MIG profiles, judged as any
#: extended resource.
_MIG = re.compile(r"nvidia\.com/mig-[0-9a-z.+-]+")
#: The longest resource name Kubernetes takes: a DNS subdomain, `/`, a 63-character name.
LONGEST_RESOURCE_NAME = 253 + 1 + 63
#: How many edits away a name may be to count as a typo of a known one.
_TYPO_EDITS = 2

#: `hami.io/preemptible`, as `engine.batch.preempt` reads it.
PREEMPTIBLE = "hami.io/preemptible"
#: The pod annotations hamiadmin reads (SPEC 3, 5, 6.1, groups, queues, preemption) or writes
#: (SPEC 8's placement).
KNOWN_ANNOTATIONS = (
    NODE_POLICY,
    GPU_POLICY,
    WEIGHTS,
    USE_UUID,
    NOUSE_UUID,
    *FAMILY_USE_UUID,
    *FAMILY_NOUSE_UUID,
    VNPU_MODE,
    USE_TYPE,
    NOUSE_TYPE,
    NUMA_BIND,
    VGPU_MODE,
    *GROUP_ANNOTATIONS,
    MIN_MEMBER_ANNOTATION,
    TIMEOUT_ANNOTATION,
    *QUEUE_ANNOTATIONS,
    PREEMPTIBLE,
    *PLACEMENT_ANNOTATIONS,
    *written_annotations(),
)


#: The known annotations by domain: what an annotation there may be a typo of.
_KNOWN_THERE = {
    domain: tuple(key for key in KNOWN_ANNOTATIONS if key.startswith(f"{domain}/")) for domain in GPU_DOMAINS
}


def edits(a: str, b: str) -> int:
    """The edit distance of two names (insert, delete, replace, swap two neighbours): `tpye`
    is one edit from `type`."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            cost = current[j - 1] + 1, previous[j] + 1, previous[j - 1] + (ca != cb)
            best = min(cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                best = min(best, previous2[j - 2] + 1)
            current.append(best)
        previous2, previous = previous, current
    return previous[-1]


def _at_least(a: str, b: str) -> int:
    """A cheap lower bound of `edits(a, b)`: each edit adds or removes at most one letter of
    each kind, so the letters one has and the other lacks are at least that many edits."""
    have, want = Counter(a), Counter(b)
    return max(sum((have - want).values()), sum((want - have).values()))


def closest(name: str, known: Iterable[str], most: int | None = None) -> str | None:
    """The known name fewest edits from `name` (the first of equals), or None when even that
    one is more than `most` edits away (default: a third of the name, at least 2)."""
    most = max(_TYPO_EDITS, len(name) // 3) if most is None else most
    lowered = name.lower()
    scored = [
        (edits(lowered, candidate.lower()), candidate)
        for candidate in known
        if _at_least(lowered, candidate.lower()) <= most  # farther for sure: not compared
    ]
    if not scored:
        return None
    distance, best = min(scored, key=lambda pair: pair[0])
    return best if distance <= most else None


def _at(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def unknown_field(key: str, known: tuple[str, ...]) -> str:
    """The words for a key no door takes: the closest known key when one is close."""
    guess = closest(key, known)
    hint = f"; did you mean {guess}?" if guess else ""
    return f"unknown field{hint} (known: {', '.join(known)})"


def unknown_fields(raw: Mapping, where: str, known: tuple[str, ...]) -> list[Problem]:
    """A problem for each key of `raw` that is not `known`, in the order given."""
    return [(_at(where, str(key)), unknown_field(str(key), known)) for key in raw if key not in known]


def resource_problem(name: str) -> str | None:
    """Why `name` is refused as a container's resource: it looks like a GPU resource but is not
    one hamiadmin reads; None for a known GPU resource or any other resource. A cluster's
    names are few and a bulk of 1,000 pods repeats them: each answer is kept, but never for a
    name longer than Kubernetes allows (a request must not fill the cache)."""
    if len(name) > LONGEST_RESOURCE_NAME:
        return _resource_problem.__wrapped__(name)
    return _resource_problem(name)


@lru_cache(maxsize=1024)
def _resource_problem(name: str) -> str | None:
    if name in GPU_RESOURCES:
        return None
    lowered = name.lower()
    domain, slash, local = lowered.partition("/")
    if slash and domain in GPU_DOMAINS:
        if _MIG.fullmatch(lowered):
            return None
        by_local = {known.partition("/")[2]: known for known in GPU_RESOURCES}
        near = closest(local, by_local, most=max(_TYPO_EDITS, len(local) // 2))
        guess = by_local.get(local) or (by_local[near] if near else None)
    else:
        guess = closest(name, GPU_RESOURCES, most=_TYPO_EDITS)
        if guess is None:
            return None
    hint = f"; did you mean {guess}?" if guess else ""
    return f"not a GPU resource hamiadmin reads{hint} (known: {', '.join(GPU_RESOURCES)})"


def _resources(resources, where: str) -> list[Problem]:
    if not isinstance(resources, Mapping):
        return []  # the engine names a resources value that is not an object
    problems = unknown_fields(resources, where, RESOURCE_SECTIONS)
    for section in ("limits", "requests"):
        values = resources.get(section)
        if not isinstance(values, Mapping):
            continue
        for name in values:
            problem = resource_problem(name) if isinstance(name, str) else None
            if problem:
                problems.append((_at(_at(where, section), name), problem))
    return problems


def container_problems(container, where: str) -> list[Problem]:
    """A container's unknown keys and GPU-like resource names; its values are the engine's
    and `kubefields`'s to judge (a container that is not an object is theirs to name)."""
    if not isinstance(container, Mapping):
        return []
    problems = unknown_fields(container, where, CONTAINER_KEYS)
    return problems + _resources(container.get("resources"), _at(where, "resources"))


def pod_problems(raw, where: str = "", keys: tuple[str, ...] = POD_KEYS) -> list[Problem]:
    """Every problem of a pod's shape at a door taking `keys`: unknown keys, then each
    container's (`containers`, then `initContainers`). [] for a pod that is not an object:
    its door says what it must be."""
    if not isinstance(raw, Mapping):
        return []
    problems = unknown_fields(raw, where, keys)
    for key in ("containers", "initContainers"):
        listed = raw.get(key)
        if isinstance(listed, list):
            for i, container in enumerate(listed):
                problems += container_problems(container, _at(_at(where, key), i))
    return problems


def annotation_warnings(annotations, where: str = "annotations") -> list[Problem]:
    """The annotations hamiadmin accepts but does not read, as warnings: any under `hami.io/`
    it does not know, and those under `nvidia.com/` a few edits from one it reads."""
    if not isinstance(annotations, Mapping):
        return []
    warnings = []
    for key in annotations:
        if not isinstance(key, str) or key in KNOWN_ANNOTATIONS:
            continue
        domain = key.partition("/")[0]
        if domain not in GPU_DOMAINS:
            continue  # another tool's: never compared, so a pod's many annotations cost nothing
        guess = closest(key, _KNOWN_THERE[domain], most=3)
        if domain == "hami.io" or guess:
            hint = f"; did you mean {guess}?" if guess else ""
            warnings.append((_at(where, key), f"not an annotation hamiadmin reads, ignored{hint}"))
    return warnings
