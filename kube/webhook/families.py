"""Device families: which one a pod's resources belong to, and which ones hamiadmin schedules.

HAMi v2.10 schedules thirteen families (`pkg/device/*`); hamiadmin schedules those in
`SCHEDULED`, derived from the engine's family registry (`scheduling.engine.families`): NVIDIA
and Ascend, whose chips the engine registers (910A, 910B2/B3/B4/B4-1, 310P). A resource under
a scheduled family's prefix whose chip the engine does not register (the 910C super pod) is
its own family, named by its chip, and routed like any other. A pod asking only families outside that list is routed by the webhook to the scheduler
kept running for them (`HAMI_OTHER_FAMILIES_SCHEDULER`, HAMi's `hami-scheduler` by default);
a pod asking one of ours and one of theirs is refused at admission, naming both, because no
one scheduler would place it whole (docs/migrating-from-hami.md, *Mixed clusters*).

The resource names are HAMi's defaults (its chart's `values.yaml` and device ConfigMap):
a family is recognised by the prefix all its resources share, so a renamed Ascend chip
(`huawei.com/Ascend910B4-1`) or a second Iluvatar model is still its family. NVIDIA's names
are the cluster's own (`HamiConfig.resources`), as everywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

from hamiadmin.hamiconfig import HamiConfig
from scheduling.engine.families import FAMILIES

from .. import pods as pod_objects

NVIDIA = "NVIDIA"

#: family -> the prefixes of its resource names, as HAMi v2.10's chart names them.
OTHER_FAMILY_PREFIXES: dict[str, tuple[str, ...]] = {
    # huawei.com/Ascend910A, Ascend910B2/B3/B4/B4-1, Ascend310P, Ascend910C, and their
    # `-memory` / `-core` companions.
    "Ascend": ("huawei.com/Ascend",),
    # hygon.com/dcunum, dcumem, dcucores
    "Hygon": ("hygon.com/",),
    # cambricon.com/vmlu, mlu.smlu.vmemory, mlu.smlu.vcore
    "Cambricon": ("cambricon.com/",),
    # iluvatar.ai/<chip>-vgpu, <chip>.vMem, <chip>.vCore
    "Iluvatar": ("iluvatar.ai/",),
    # metax-tech.com/gpu, sgpu, vcore, vmemory
    "MetaX": ("metax-tech.com/",),
    # enflame.com/gcu, drs-gcu, gcu-memory, gcu-core
    "Enflame": ("enflame.com/",),
    # mthreads.com/vgpu, sgpu-memory, sgpu-core
    "Moore Threads": ("mthreads.com/",),
    # kunlunxin.com/xpu, vxpu, vxpu-memory
    "Kunlunxin": ("kunlunxin.com/",),
    # amd.com/gpu, gpucores, gpumem
    "AMD": ("amd.com/gpu",),
    # aws.amazon.com/neuron, neuroncore
    "AWS Neuron": ("aws.amazon.com/neuron",),
    # vastaitech.com/va
    "Vastai": ("vastaitech.com/",),
    # birentech.com/gpu
    "Biren": ("birentech.com/",),
}


def _label(resource: str) -> str | None:
    for family, prefixes in OTHER_FAMILY_PREFIXES.items():
        if resource.startswith(prefixes):
            return family
    return None


#: resource name -> family, for every resource of a family the engine registers (not NVIDIA's,
#: which are the cluster's own names).
REGISTERED: dict[str, str] = {
    name: label
    for found in FAMILIES.values()
    if found.name != "nvidia"
    for name in found.resources.all()
    if name and (label := _label(name)) is not None
}

#: The families hamiadmin places itself: NVIDIA and each family the engine registers a chip of.
SCHEDULED: tuple[str, ...] = (NVIDIA, *dict.fromkeys(REGISTERED.values()))


def routes(other_scheduler: str, served: tuple[str, ...], mode: str) -> bool:
    """Whether pods of other families are routed: a scheduler is named for them that is not
    one of hamiadmin's own names (routing them to ourselves would place what we cannot), and
    the webhook writes scheduler names (mode `all`)."""
    return bool(other_scheduler) and other_scheduler not in served and mode == "all"


@dataclass(frozen=True)
class FamilyAsk:
    """One resource a container names, with its family: what a refusal or a route names."""

    family: str
    resource: str
    field: str


def family_of(resource: str, hami: HamiConfig) -> str | None:
    """The family of one resource name, None for anything that is not a device of HAMi's."""
    if resource in hami.resources.canonical():
        return NVIDIA
    if resource in REGISTERED:
        return REGISTERED[resource]
    family = _label(resource)
    if family in SCHEDULED:
        # a chip of a scheduled family the engine does not register: its own family
        chip = resource.rpartition("/")[2]
        for suffix in ("-memory", "-core"):
            chip = chip.removesuffix(suffix)
        return chip
    return family


def asks(pod: dict, hami: HamiConfig) -> list[FamilyAsk]:
    """Every device resource the pod's containers name (limits, then requests), in order."""
    found: list[FamilyAsk] = []
    for key in ("initContainers", "containers"):
        containers = pod_objects.spec(pod).get(key)
        for position, container in enumerate(containers if isinstance(containers, list) else []):
            resources = container.get("resources") if isinstance(container, dict) else None
            for section in ("limits", "requests"):
                values = resources.get(section) if isinstance(resources, dict) else None
                for name in values if isinstance(values, dict) else ():
                    family = family_of(name, hami) if isinstance(name, str) else None
                    if family is not None:
                        found.append(FamilyAsk(family, name, f"{key}[{position}].resources.{section}.{name}"))
    return found


def unscheduled(found: list[FamilyAsk], scheduled: tuple[str, ...] = SCHEDULED) -> list[FamilyAsk]:
    return [ask for ask in found if ask.family not in scheduled]


def scheduled_asks(found: list[FamilyAsk], scheduled: tuple[str, ...] = SCHEDULED) -> list[FamilyAsk]:
    return [ask for ask in found if ask.family in scheduled]
