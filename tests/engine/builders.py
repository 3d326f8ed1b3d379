"""Small builders for inline scenarios (SPEC 9 input) and readers of the SPEC 9 output.

Builders emit only the keys a test names, so the scenario defaults of SPEC 9 (slots 10,
cores 100, numa 0, healthy, type NVIDIA, index = position) are exercised, not restated.
"""

from __future__ import annotations

from scheduling.engine.scenario import run_scenario

GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
GPUCORES = "nvidia.com/gpucores"

NODE_POLICY = "hami.io/node-scheduler-policy"
GPU_POLICY = "hami.io/gpu-scheduler-policy"
WEIGHTS = "hami.io/device-scoring-weights"
USE_UUID = "nvidia.com/use-gpuuuid"
NOUSE_UUID = "nvidia.com/nouse-gpuuuid"
USE_TYPE = "nvidia.com/use-gputype"
NOUSE_TYPE = "nvidia.com/nouse-gputype"
NUMA_BIND = "nvidia.com/numa-bind"
CORDON = "hami.io/device-cordon"

T4 = "NVIDIA-Tesla T4"


def card(uuid: str, memory: int = 15360, *, used: tuple[int, int, int] | None = None, **fields) -> dict:
    """One card. `used=(slots, MiB, cores)` held by its tenants; other fields as SPEC 9 names them
    (index, type, slots, cores, numa, health, links)."""
    entry = {"uuid": uuid, "memory": memory, **fields}
    if used is not None:
        slots, mem, cores = used
        entry["used"] = {"slots": slots, "memory": mem, "cores": cores}
    return entry


def node(name: str, *cards: dict, cordon: str | None = None, annotations: dict | None = None) -> dict:
    """A node with its cards; `cordon` is the `hami.io/device-cordon` list."""
    entry: dict = {"name": name, "devices": list(cards)}
    annotations = dict(annotations or {})
    if cordon is not None:
        annotations[CORDON] = cordon
    if annotations:
        entry["annotations"] = annotations
    return entry


def ask(gpu=None, mem=None, pct=None, cores=None) -> dict:
    """A resources section (limits or requests) naming only the given resources."""
    named = {GPU: gpu, GPUMEM: mem, GPUMEM_PERCENTAGE: pct, GPUCORES: cores}
    return {key: value for key, value in named.items() if value is not None}


def container(name: str = "main", limits: dict | None = None, requests: dict | None = None) -> dict:
    resources = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "resources": resources}


def pod(
    name: str,
    annotations: dict | None = None,
    limits: dict | None = None,
    *,
    containers: list[dict] | None = None,
    init: list[dict] | None = None,
    namespace: str | None = None,
) -> dict:
    """A pod: one container `main` with `limits`, or the given `containers` (and init containers)."""
    entry: dict = {"name": name}
    if namespace is not None:
        entry["namespace"] = namespace
    if annotations:
        entry["annotations"] = annotations
    entry["containers"] = containers if containers is not None else [container("main", limits)]
    if init is not None:
        entry["initContainers"] = init
    return entry


def scenario(nodes: list[dict], pods: list[dict], **config) -> dict:
    """A SPEC 9 input; `config` keys are node_scheduler_policy, gpu_scheduler_policy, resources."""
    raw: dict = {"nodes": nodes, "pods": pods}
    if config:
        raw["config"] = config
    return raw


def run(nodes: list[dict], pods: list[dict], top: int | None = None, **config) -> list[dict]:
    """The SPEC 9 output pods, in input order."""
    return run_scenario(scenario(nodes, pods, **config), top=top)["pods"]


def run_one(nodes: list[dict], one_pod: dict, **config) -> dict:
    """The SPEC 9 output for a single pod."""
    return run(nodes, [one_pod], **config)[0]


def picked(out: dict, container: int = 0) -> list[str]:
    """UUIDs granted to one app container, in grant order."""
    return [device["uuid"] for device in out["containers"][container]["devices"]]


def card_row(out: dict, uuid: str, container: int = 0) -> dict:
    """The row of `uuid` in a container's card table."""
    rows = [row for row in out["containers"][container]["cards"] if row["uuid"] == uuid]
    assert len(rows) == 1, f"{uuid} appears {len(rows)} times in the card table"
    return rows[0]


def table_order(out: dict, container: int = 0) -> list[str]:
    """The card table's UUIDs in the order the chain ranked them."""
    return [row["uuid"] for row in out["containers"][container]["cards"]]


def failure(out: dict, node_name: str) -> str:
    """A pending pod's failure text on one node."""
    return out["failed_nodes"][node_name]
