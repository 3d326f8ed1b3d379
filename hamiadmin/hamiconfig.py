"""HAMi's scheduler configuration, read where its keys mean something here. Pure: no Django.

A HAMi install carries its settings in Helm values and in the scheduler's device ConfigMap
(`device-config.yaml`, an `nvidia:` section). Mount that file and name it in
`HAMI_CONFIG_FILE`, or put the same YAML or JSON in `HAMI_CONFIG` (its keys win over the
file's, key by key). Three shapes are read, and may be mixed: flat keys, HAMi's `nvidia:`
section, and Helm's `scheduler.defaultSchedulerPolicy`.

| key | here |
| --- | --- |
| `nodeSchedulerPolicy`, `gpuSchedulerPolicy` | the cluster defaults until someone changes them (`config/`); they win over `HAMI_NODE_SCHEDULER_POLICY` / `HAMI_GPU_SCHEDULER_POLICY` |
| `resourceCountName`, `resourceMemoryName`, `resourceMemoryPercentageName`, `resourceCoreName` | the names the Kubernetes reader and the webhook read (`hami.io/gpu` for `nvidia.com/gpu`...) |
| `memoryFactor` | `gpumem` counts units of that many MiB (the Kubernetes reader multiplies) |
| `defaultGPUNum`, `defaultMem` (or `defaultMemory`), `defaultCores` | written into pods by the mutating webhook |
| `overwriteEnv`, `runtimeClassName` | the webhook's `NVIDIA_VISIBLE_DEVICES=none` and `runtimeClassName` |

Any other key, or a value that does not read, is reported (`HamiConfig.problems`, logged
once by `current()`) and left out; it is never fatal: a scheduler that will not start over
a stray Helm value would be worse than one that says what it ignored.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml

from scheduling.engine.requests import GPU, GPUCORES, GPUMEM, GPUMEM_PERCENTAGE

log = logging.getLogger("hamiadmin.hamiadmin.hamiconfig")

FILE_ENV = "HAMI_CONFIG_FILE"
INLINE_ENV = "HAMI_CONFIG"
NODE_POLICIES = ("binpack", "spread")
#: A Kubernetes extended resource name: `domain/name`.
_RESOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
#: The largest `memoryFactor` that keeps a MiB count of a real card in range.
MAX_MEMORY_FACTOR = 1 << 20


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """The SPEC 2 resources as this cluster names them."""

    count: str = GPU
    memory: str = GPUMEM
    percentage: str = GPUMEM_PERCENTAGE
    cores: str = GPUCORES

    def canonical(self) -> dict[str, str]:
        """{name in the pod: the SPEC 2 name the engine reads}."""
        return {
            self.count: GPU,
            self.memory: GPUMEM,
            self.percentage: GPUMEM_PERCENTAGE,
            self.cores: GPUCORES,
        }

    def as_written(self) -> dict[str, str]:
        """{SPEC 2 name: name in the pod}."""
        return {canonical: written for written, canonical in self.canonical().items()}


@dataclass(frozen=True, slots=True)
class HamiConfig:
    """What of HAMi's configuration applies; None where a key was not given."""

    node_scheduler_policy: str | None = None
    gpu_scheduler_policy: str | None = None
    resources: ResourceNames = ResourceNames()
    memory_factor: int = 1
    default_gpu_num: int = 1
    default_memory: int = 0
    default_cores: int = 0
    overwrite_env: bool | None = None
    runtime_class_name: str | None = None
    problems: tuple[str, ...] = field(default=(), compare=False)
    sources: tuple[str, ...] = field(default=(), compare=False)


DEFAULT = HamiConfig()

#: HAMi's key -> (our field, reader). Aliases: HAMi's device ConfigMap says `defaultMemory`,
#: Helm's values say `resourceName`/`resourceMem`/...
_POLICY_KEYS = {"nodeSchedulerPolicy": "node_scheduler_policy", "gpuSchedulerPolicy": "gpu_scheduler_policy"}
_RESOURCE_KEYS = {
    "resourceCountName": "count",
    "resourceName": "count",
    "resourceMemoryName": "memory",
    "resourceMem": "memory",
    "resourceMemoryPercentageName": "percentage",
    "resourceMemPercentage": "percentage",
    "resourceCoreName": "cores",
    "resourceCores": "cores",
}
_INT_KEYS = {
    "memoryFactor": ("memory_factor", 1, MAX_MEMORY_FACTOR),
    "defaultGPUNum": ("default_gpu_num", 0, 1 << 16),
    "defaultMem": ("default_memory", 0, 1 << 31),
    "defaultMemory": ("default_memory", 0, 1 << 31),
    "defaultCores": ("default_cores", 0, 100),
}


def _integer(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
        return int(value)
    return None


def _boolean(value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _flatten(raw: Mapping, problems: list[str], where: str) -> dict:
    """Flat keys, with `nvidia:` and `scheduler.defaultSchedulerPolicy` lifted up; other
    sections (`cambricon:`, `hygon:`...) are reported as not read."""
    flat: dict = {}
    for key, value in raw.items():
        if key == "nvidia" and isinstance(value, Mapping):
            flat.update(value)
        elif key == "scheduler" and isinstance(value, Mapping):
            policy = value.get("defaultSchedulerPolicy")
            if isinstance(policy, Mapping):
                flat.update(policy)
            for other in value:
                if other != "defaultSchedulerPolicy":
                    problems.append(f"{where}: scheduler.{other}: not read by hamiadmin")
        else:
            flat[key] = value
    return flat


def _read_text(text: str, where: str, problems: list[str]) -> dict:
    try:
        raw = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        problems.append(f"{where}: not YAML or JSON ({str(exc).splitlines()[0]}); nothing read from it")
        return {}
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: must be a mapping of HAMi's keys; nothing read from it")
        return {}
    return _flatten(raw, problems, where)


def parse(raw: Mapping, where: str = "config") -> HamiConfig:
    """A HamiConfig from HAMi's keys (any of the three shapes)."""
    problems: list[str] = []
    return _build(_flatten(raw, problems, where), problems, (where,))


def _build(flat: Mapping, problems: list[str], sources: tuple[str, ...]) -> HamiConfig:
    values: dict = {}
    names = dict(count=GPU, memory=GPUMEM, percentage=GPUMEM_PERCENTAGE, cores=GPUCORES)
    for key, value in flat.items():
        if key in _POLICY_KEYS:
            text = value.strip() if isinstance(value, str) else None
            if not text:
                problems.append(f"{key}: must be a non-empty string, got {value!r}; ignored")
            elif key == "nodeSchedulerPolicy" and text.lower() not in NODE_POLICIES:
                problems.append(f"{key}: {value!r} is not binpack or spread; ignored")
            else:
                values[_POLICY_KEYS[key]] = text.lower() if key == "nodeSchedulerPolicy" else text
        elif key in _RESOURCE_KEYS:
            if not isinstance(value, str) or not _RESOURCE_NAME.fullmatch(value.strip()):
                problems.append(f"{key}: {value!r} is not a resource name such as hami.io/gpu; ignored")
            else:
                names[_RESOURCE_KEYS[key]] = value.strip()
        elif key in _INT_KEYS:
            name, low, high = _INT_KEYS[key]
            number = _integer(value)
            if number is None or not low <= number <= high:
                problems.append(f"{key}: must be an integer from {low} to {high}, got {value!r}; ignored")
            else:
                values[name] = number
        elif key == "overwriteEnv":
            flag = _boolean(value)
            if flag is None:
                problems.append(f"{key}: must be true or false, got {value!r}; ignored")
            else:
                values["overwrite_env"] = flag
        elif key == "runtimeClassName":
            if not isinstance(value, str):
                problems.append(f"{key}: must be a string, got {value!r}; ignored")
            else:
                values["runtime_class_name"] = value.strip()
        else:
            problems.append(f"{key}: not read by hamiadmin; ignored")
    if len(set(names.values())) < len(names):
        problems.append(f"resource names must differ, got {sorted(names.values())}; the defaults are used")
        names = dict(count=GPU, memory=GPUMEM, percentage=GPUMEM_PERCENTAGE, cores=GPUCORES)
    return HamiConfig(resources=ResourceNames(**names), problems=tuple(problems), sources=sources, **values)


def load(environ: Mapping[str, str]) -> HamiConfig:
    """HAMi's configuration from `HAMI_CONFIG_FILE` then `HAMI_CONFIG` (later keys win).
    A file that cannot be read is a problem reported, never an exception."""
    problems: list[str] = []
    flat: dict = {}
    sources: list[str] = []
    path = (environ.get(FILE_ENV) or "").strip()
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                flat.update(_read_text(handle.read(), path, problems))
            sources.append(path)
        except OSError as exc:
            problems.append(
                f"{FILE_ENV}={path}: cannot be read ({exc.strerror or exc}); nothing read from it"
            )
    inline = environ.get(INLINE_ENV) or ""
    if inline.strip():
        flat.update(_read_text(inline, INLINE_ENV, problems))
        sources.append(INLINE_ENV)
    if not flat and not problems:
        return DEFAULT
    return _build(flat, problems, tuple(sources))


_reported: set[tuple[str, ...]] = set()


def current() -> HamiConfig:
    """The configuration in force: `settings.HAMIADMIN["HAMI_CONFIG"]` when Django is set up,
    else the defaults. Its problems are logged once per process."""
    config = DEFAULT
    try:
        from django.conf import settings

        found = settings.HAMIADMIN.get("HAMI_CONFIG") if settings.configured else None
        if isinstance(found, HamiConfig):
            config = found
    except Exception:  # noqa: BLE001 - no settings module: the defaults
        config = DEFAULT
    if config.problems and config.problems not in _reported:
        _reported.add(config.problems)
        for problem in config.problems:
            log.warning("HAMi configuration (%s): %s", ", ".join(config.sources) or "-", problem)
    return config
