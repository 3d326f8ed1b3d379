"""Huawei Ascend NPUs, as HAMi v2.10's `pkg/device/ascend` reads and writes them.

HAMi treats each Ascend chip model as its own device (`vnpus.configs` of the device
ConfigMap, one entry per chip): its `commonWord` (`Ascend910B3`) names everything. For a
commonWord W:

- resources `huawei.com/W` (how many NPUs), `huawei.com/W-memory` (MiB per NPU, times
  `memoryFactor` when above 1), `huawei.com/W-core` (hami-core soft split only);
- the cards in `hami.io/node-register-W` (HAMi's common JSON register), the device plugin's
  heartbeat in `hami.io/node-handshake-W`, the bind under `hami.io/mutex.lock`;
- a placement in `hami.io/W-devices-to-allocate` and `hami.io/W-devices-allocated` (the
  common `UUID,W,MEM,CORES:` per NPU, `;` per container), and in `huawei.com/W`, the JSON
  list the Ascend device plugin creates the vNPUs from: per NPU `{"UUID", "temp", "memory",
  "core"}`, Go's `omitempty` leaving out an empty template, 0 MiB and 0 cores.

vNPUs are hard splits from fixed templates (name, MiB, AI cores): a memory ask is rounded up
to the smallest template that holds it (`VnpuConfig.trim`), an ask above every template but
within the chip's `memoryCapacity` takes the whole NPU (`memoryAllocatable`), and no memory
asked is the whole NPU too. A split only counts MiB on the card (the template's AI cores are
the device plugin's business), so no partition geometry is needed: the shared SPEC 4 checks
decide. Two NPUs or more must be whole ones. HAMi's hami-core soft split
(`huawei.com/vnpu-mode: hami-core`) is not scheduled here: such a pod is refused, naming the
annotation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..encoding import RegisteredCard, decode_node_register, encode_allocation
from ..errors import PodInvalid, ScenarioError
from .base import Family, ResourceNames

if TYPE_CHECKING:
    from ..grants import DeviceGrant

#: The pod annotation that picks HAMi's soft split, and its value (HAMi `VNPUModeAnnotation`).
VNPU_MODE = "huawei.com/vnpu-mode"
HAMI_CORE = "hami-core"
#: The node lock HAMi's Ascend devices take around a bind (the same as NVIDIA's).
NODE_LOCK = "hami.io/mutex.lock"


@dataclass(frozen=True, slots=True)
class Template:
    """One vNPU template (`templates[]` of a chip's config): `name`, MiB, AI cores, AI CPUs."""

    name: str
    memory: int
    ai_core: int = 0
    ai_cpu: int = 0


@dataclass(frozen=True, slots=True)
class VnpuConfig:
    """One entry of the device ConfigMap's `vnpus.configs` (HAMi's `VNPUConfig`)."""

    common_word: str
    chip_name: str
    memory_allocatable: int
    memory_capacity: int
    templates: tuple[Template, ...]
    ai_core: int = 0
    ai_cpu: int = 0
    memory_factor: int = 1

    def __post_init__(self) -> None:
        # HAMi sorts the templates by MiB once, when it loads the config
        object.__setattr__(self, "templates", tuple(sorted(self.templates, key=lambda t: t.memory)))

    def trim(self, memory: int) -> tuple[int, str]:
        """HAMi's `trimMemory`: the MiB a vNPU of `memory` MiB gets and its template's name;
        ("" for a whole NPU); (0, "") when the ask is above the chip's capacity."""
        for template in self.templates:
            if memory <= template.memory:
                return template.memory, template.name
        if memory <= self.memory_capacity:
            return self.memory_allocatable, ""
        return 0, ""


def _t(name: str, memory: int, ai_core: int, ai_cpu: int = 0) -> Template:
    return Template(name, memory, ai_core, ai_cpu)


_910B_16 = (_t("vir05_1c_16g", 16384, 5, 1), _t("vir10_3c_32g", 32768, 10, 3))

#: The chips of HAMi v2.10's chart (`charts/hami/templates/scheduler/device-configmap.yaml`),
#: all but the 910C super pod (its NPUs pair by module, a rule not modelled here).
CHART_CONFIGS = (
    VnpuConfig(
        "Ascend910A",
        "910A",
        32768,
        32768,
        (_t("vir02", 2184, 2), _t("vir04", 4369, 4), _t("vir08", 8738, 8), _t("vir16", 17476, 16)),
        ai_core=30,
    ),
    VnpuConfig(
        "Ascend910B2",
        "910B2",
        65536,
        65536,
        (_t("vir03_1c_8g", 8192, 3, 1), _t("vir06_1c_16g", 16384, 6, 1), _t("vir12_3c_32g", 32768, 12, 3)),
        ai_core=24,
        ai_cpu=6,
    ),
    VnpuConfig("Ascend910B3", "910B3", 65536, 65536, _910B_16, ai_core=20, ai_cpu=7),
    VnpuConfig("Ascend910B4-1", "910B4-1", 65536, 65536, _910B_16, ai_core=20, ai_cpu=7),
    VnpuConfig(
        "Ascend910B4",
        "910B4",
        32768,
        32768,
        (_t("vir05_1c_8g", 8192, 5, 1), _t("vir10_3c_16g", 16384, 10, 3)),
        ai_core=20,
        ai_cpu=7,
    ),
    VnpuConfig(
        "Ascend310P",
        "310P3",
        21527,
        24576,
        (_t("vir01", 3072, 1, 1), _t("vir02", 6144, 2, 2), _t("vir04", 12288, 4, 4)),
        ai_core=8,
        ai_cpu=7,
    ),
)


def _number(raw: dict, key: str, where: str, default: int | None = None) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ScenarioError(f"{where}.{key}", f"must be a non-negative integer, got {value!r}")
    return value


def read_vnpus(raw: object, where: str = "vnpus") -> tuple[VnpuConfig, ...]:
    """The `vnpus:` section of HAMi's device ConfigMap (`{configs: [...]}` or the list itself)
    as configs; raises ScenarioError naming the entry and field (`vnpus.configs[1].templates[0].memory`)."""
    if isinstance(raw, dict):
        raw, where = raw.get("configs"), f"{where}.configs"
    if not isinstance(raw, list):
        raise ScenarioError(where, "expected a list of chip configs")
    found = []
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(entry, dict):
            raise ScenarioError(at, "expected an object (one chip config)")
        word = entry.get("commonWord")
        if not isinstance(word, str) or not word.strip():
            raise ScenarioError(f"{at}.commonWord", "required: the chip's word, like Ascend910B3")
        templates = entry.get("templates") or []
        if not isinstance(templates, list):
            raise ScenarioError(f"{at}.templates", "expected a list of templates")
        read = []
        for k, template in enumerate(templates):
            t_at = f"{at}.templates[{k}]"
            if not isinstance(template, dict) or not isinstance(template.get("name"), str):
                raise ScenarioError(f"{t_at}.name", "required: the template's name, like vir05_1c_16g")
            read.append(
                Template(
                    template["name"],
                    _number(template, "memory", t_at),
                    _number(template, "aiCore", t_at, 0),
                    _number(template, "aiCPU", t_at, 0),
                )
            )
        found.append(
            VnpuConfig(
                common_word=word,
                chip_name=str(entry.get("chipName") or ""),
                memory_allocatable=_number(entry, "memoryAllocatable", at, 0),
                memory_capacity=_number(entry, "memoryCapacity", at, 0),
                templates=tuple(read),
                ai_core=_number(entry, "aiCore", at, 0),
                ai_cpu=_number(entry, "aiCPU", at, 0),
                memory_factor=_number(entry, "memoryFactor", at, 1),
            )
        )
    return tuple(found)


def _go_json(value: object) -> str:
    """`json.Marshal`'s text: no blanks, `<`, `>` and `&` escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class Ascend(Family):
    """One Ascend chip model (`VnpuConfig`): its names all derive from its commonWord."""

    mode_annotation = VNPU_MODE
    node_lock = NODE_LOCK

    def __init__(self, config: VnpuConfig):
        word = config.common_word
        self.config = config
        self.name = word.lower()
        self.vendor = word
        self.resources = ResourceNames(
            count=f"huawei.com/{word}",
            memory=f"huawei.com/{word}-memory",
            memory_percentage="",
            cores=f"huawei.com/{word}-core",
        )
        self.register = f"hami.io/node-register-{word}"
        self.handshake = f"hami.io/node-handshake-{word}"
        self.to_allocate = f"hami.io/{word}-devices-to-allocate"
        self.allocated = f"hami.io/{word}-devices-allocated"
        self.runtime = f"huawei.com/{word}"
        self.use_uuid = f"hami.io/use-{word}-uuid"
        self.nouse_uuid = f"hami.io/no-use-{word}-uuid"
        self.writes = (self.to_allocate, self.allocated, self.runtime)

    def decode_register(self, value: str) -> list[RegisteredCard]:
        """HAMi's register; its field names read as Go reads them, whatever their case
        (`"ID"`, `"Devmem"` as well as `"id"`, `"devmem"`)."""
        try:
            raw = json.loads(value)
        except (ValueError, RecursionError):
            raw = None
        if isinstance(raw, list) and all(isinstance(entry, dict) for entry in raw):
            value = json.dumps([{str(k).lower(): v for k, v in entry.items()} for entry in raw])
        return decode_node_register(value, self.register)

    def ask_memory(self, memory: int | None, count: int, mode: str, where: str, label: str) -> int:
        """The MiB each NPU of a container's ask takes, as HAMi's webhook writes it back into
        the limits: no memory asked is a whole NPU (`memoryAllocatable`), else the ask rounded
        up to a template (`VnpuConfig.trim`); times `memoryFactor` when above 1. Raises PodInvalid for an
        ask above the chip, more than one NPU split into vNPUs, or the hami-core soft split."""
        config = self.config
        if mode == HAMI_CORE:
            raise PodInvalid(
                f"annotations.{VNPU_MODE}",
                f"{label}: the hami-core soft split of {self.vendor} is not scheduled by hamiadmin; "
                "leave the annotation out for template vNPUs",
            )
        if memory is None:
            trimmed = config.memory_allocatable
        else:
            trimmed, _ = config.trim(memory)
            if trimmed <= 0:
                raise PodInvalid(
                    where, f"{label}: {self.resources.memory} {memory} is invalid (above the chip's memory)"
                )
            if count > 1 and trimmed != config.memory_allocatable:
                raise PodInvalid(where, f"{label}: vNPU not supported for multiple devices (ask whole NPUs)")
        # the scheduler reads the limit the webhook wrote, times the factor (GenerateResourceRequests)
        return trimmed * config.memory_factor if config.memory_factor > 1 else trimmed

    def encode_allocation(self, containers: Sequence[Sequence[tuple[str, int, int]]]) -> str:
        return encode_allocation(containers, self.vendor)

    def runtime_info(self, grants: Sequence[DeviceGrant]) -> str:
        """`huawei.com/W` as HAMi writes it: per NPU its UUID, template (`temp`), MiB and cores."""
        entries = []
        for grant in grants:
            _, template = self.config.trim(grant.memory)
            entry: dict[str, object] = {"UUID": grant.uuid}
            if template:
                entry["temp"] = template
            if grant.memory:
                entry["memory"] = grant.memory
            if grant.cores:
                entry["core"] = grant.cores
            entries.append(entry)
        return _go_json(entries)

    def extra_annotations(self, containers: Sequence[Sequence[DeviceGrant]]) -> dict[str, str]:
        """The placement's three annotations when it holds any of this chip's NPUs: the
        allocation in both `-devices-` keys (every container's place kept) and `huawei.com/W`."""
        if not any(containers):
            return {}
        allocation = self.encode_allocation(
            [[(g.uuid, g.memory, g.cores) for g in grants] for grants in containers]
        )
        return {
            self.to_allocate: allocation,
            self.allocated: allocation,
            self.runtime: self.runtime_info([grant for grants in containers for grant in grants]),
        }

    def __repr__(self) -> str:
        return f"<family {self.name}>"
