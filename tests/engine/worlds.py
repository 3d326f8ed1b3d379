"""Random clusters, pods and event streams for the property tests, read from one byte tape.

Hypothesis draws one `bytes` value per example and `Tape` reads every choice of a SPEC 9
scenario from it. One draw instead of some 400 (one per card field): an example costs
about 1 ms to make instead of 16, so the reference tests afford 10,000 of them in CI.
Shrinking still works: Hypothesis shrinks a tape towards zero bytes, a zero byte reads as
the first option of a choice (the usual one, an optional feature left out), and a tape read
past its end reads zeros. A failing example is printed as its tape, which the same reader
reads into the same scenario again (the stream tests also print the scenario as JSON).
"""

from __future__ import annotations

import os

from hypothesis import strategies as st

from .builders import (
    CORDON,
    GPU,
    GPU_POLICY,
    GPUCORES,
    GPUMEM,
    GPUMEM_PERCENTAGE,
    NODE_POLICY,
    NOUSE_TYPE,
    NOUSE_UUID,
    NUMA_BIND,
    USE_TYPE,
    USE_UUID,
    WEIGHTS,
)

TYPES = ["NVIDIA-Tesla T4", "NVIDIA-A100-SXM4-40GB", "NVIDIA-H100"]
TYPE_FRAGMENTS = ["t4", "A100", "nvidia", "h1", "v100"]
CHAIN_ITEMS = ["binpack", "spread", "numa", "mutex", "topology-aware", " Binpack", "fastest"]
WEIGHT_VALUES = ["slot=1,core=1,memory=1", "slot=0,core=2,memory=1", " memory = 3 , slot=1,core=0"]
NODE_POLICIES = ["binpack", "spread"]
GPU_POLICIES = ["spread", "binpack", "mutex,binpack", "numa,spread"]
#: What a stream does at each step (`test_reference.apply_step`): placements are the most common.
STEP_KINDS = ["place", "place", "place", "decide", "unassume", "report", "cordon", "card"]


#: How many random clusters with a stream the reference tests run (`test_reference`); the other
#: property tests scale with it. CI runs the default; set it higher for a long run by hand.
EXAMPLES_VARIABLE = "HAMI_PROPERTY_EXAMPLES"
DEFAULT_EXAMPLES = 10_000


def property_examples() -> int:
    """`HAMI_PROPERTY_EXAMPLES` as a whole number of at least 100 (empty: the default)."""
    value = os.environ.get(EXAMPLES_VARIABLE, "").strip()
    if not value:
        return DEFAULT_EXAMPLES
    try:
        examples = int(value)
    except ValueError:
        raise ValueError(f"{EXAMPLES_VARIABLE} must be a whole number, got {value!r}") from None
    if examples < 100:
        raise ValueError(f"{EXAMPLES_VARIABLE} must be at least 100, got {examples}")
    return examples


class Tape:
    """Choices read one byte each from `data`; zeros (and the bytes past the end) read as the
    first option. A `mostly` choice takes one of `odd` for one byte value in eight."""

    __slots__ = ("data", "at")

    def __init__(self, data: bytes):
        self.data = data
        self.at = 0

    def byte(self) -> int:
        at = self.at
        self.at = at + 1
        return self.data[at] if at < len(self.data) else 0

    def below(self, n: int) -> int:
        """0 to n - 1 (n at most 256)."""
        return self.byte() % n

    def integer(self, low: int, high: int) -> int:
        return low + self.below(high - low + 1)

    def pick(self, options: list):
        return options[self.below(len(options))]

    def one_in(self, n: int) -> bool:
        """True for one byte value in n; a zero byte is False (the feature is left out)."""
        return self.below(n) == n - 1

    def mostly(self, usual: list, odd: list):
        """One of `usual`, or now and then one of `odd`: edge cases without starving the placements."""
        value = self.byte()
        return odd[value % len(odd)] if value >= 224 else usual[value % len(usual)]

    def distinct(self, options: list, low: int, high: int) -> list:
        """`low` to `high` distinct items of `options`, in a random order (zeros: the first ones)."""
        pool = list(options)
        count = min(len(pool), self.integer(low, high))
        for i in range(count):
            j = i + self.below(len(pool) - i)
            pool[i], pool[j] = pool[j], pool[i]
        return pool[:count]


def from_tape(size: int, reader, *args) -> st.SearchStrategy:
    """What `reader(tape, *args)` reads from a random tape of `size` bytes. The size is fixed,
    so that Hypothesis draws every byte at random (a shorter tape would leave the tail of the
    scenario to the zeros); `size` should exceed what the reader takes from most tapes."""
    return st.binary(min_size=size, max_size=size).map(lambda data: reader(Tape(data), *args))


def read_node(tape: Tape, name: str) -> dict:
    """A SPEC 9 node: 0 to 4 cards with tenants, links, health, and now and then cordons."""
    count = tape.mostly([4, 2, 3], [1, 0])
    indices = tape.distinct(list(range(count)), count, count)
    cards = []
    for position in range(count):
        slots = tape.mostly([10, 4], [2, 1, 0])
        memory = tape.mostly([16000, 8000], [1000, 0])
        cores = tape.mostly([100], [50, 0])
        tenants = tape.mostly([0, 0, 1], [2, slots])
        entry = {
            "uuid": f"{name}-{position}",
            "index": indices[position],
            "memory": memory,
            "slots": slots,
            "cores": cores,
            "type": tape.pick(TYPES),
            "numa": tape.below(2),
            "health": tape.mostly([True], [False]),
            "used": {
                "slots": min(tenants, slots),
                "memory": tape.mostly([0, memory // 4], [memory // 2, memory]) if tenants else 0,
                "cores": tape.mostly([0, cores // 4], [cores // 2, cores]) if tenants else 0,
            },
        }
        links = {}
        for other in range(position + 1, count):
            score = tape.pick([0, 10, 40, 100, 200])
            if score:
                links[f"{name}-{other}"] = score
        if links:
            entry["links"] = links
        cards.append(entry)
    raw: dict = {"name": name, "devices": cards}
    if cards and tape.one_in(5):
        raw["annotations"] = {CORDON: ",".join(tape.distinct([c["uuid"] for c in cards], 0, 2))}
    return raw


def read_container(tape: Tape, name: str, gpu_required: bool) -> dict:
    """Valid asks only. `gpumem` and `gpumem-percentage` never together: SPEC 2 does not settle
    whether `gpumem-percentage: 100` beside a `gpumem` still makes the ask exclusive."""
    limits: dict = {}
    gpu = tape.mostly([1, 1, 2, None], [3, 4])
    memory_kind = tape.mostly(["mem", "mem", "pct"], ["none"])
    cores = tape.mostly([0, 20, None], [50, 100])
    if gpu is not None:
        limits[GPU] = gpu
    if memory_kind == "mem":
        limits[GPUMEM] = tape.mostly([500, 2000], [0, 8000])
    elif memory_kind == "pct":
        limits[GPUMEM_PERCENTAGE] = tape.mostly([10, 25], [50, 100])
    if cores is not None:
        limits[GPUCORES] = cores
    if not limits and (gpu_required or tape.one_in(2)):
        limits[GPU] = 1
    if not limits:
        return {"name": name, "resources": {"limits": {"cpu": "1"}}}
    return {"name": name, "resources": {tape.pick(["limits", "requests"]): limits}}


def read_pod(tape: Tape, name: str, uuids: list[str]) -> dict:
    """A pod with one or two containers, now and then an init container, and any of the
    SPEC 3 annotations (chains, node policy, weights, card filters, numa binding)."""
    annotations = {}
    if tape.one_in(2):
        annotations[GPU_POLICY] = ",".join(tape.pick(CHAIN_ITEMS) for _ in range(tape.below(4)))
    if tape.one_in(2):
        annotations[NODE_POLICY] = tape.pick(["binpack", "spread", "Spread", "roundrobin"])
    if tape.one_in(2):
        annotations[WEIGHTS] = tape.pick(WEIGHT_VALUES)
    for key, pool in (
        (USE_UUID, uuids),
        (NOUSE_UUID, uuids),
        (USE_TYPE, TYPE_FRAGMENTS),
        (NOUSE_TYPE, TYPE_FRAGMENTS),
    ):
        if pool and tape.one_in(8):
            annotations[key] = ",".join(tape.distinct(pool, 0, 2))
    if tape.one_in(4):
        annotations[NUMA_BIND] = "true"
    count = tape.integer(1, 2)
    containers = [read_container(tape, f"c{i}", gpu_required=i == 0) for i in range(count)]
    raw = {"name": name, "annotations": annotations, "containers": containers}
    if tape.one_in(5):
        raw["initContainers"] = [read_container(tape, "init", gpu_required=True)]
    return raw


def read_scenario(
    tape: Tape, names: list[str], nodes: tuple[int, int], pods: tuple[int, int], config: dict | None = None
) -> dict:
    """A SPEC 9 scenario: `nodes` (fewest, most) distinct nodes named from `names`, `pods`
    (fewest, most) pods, and the cluster policies (`config`, else read from the tape)."""
    chosen = tape.distinct(names, *nodes)
    raw_nodes = [read_node(tape, name) for name in chosen]
    uuids = [c["uuid"] for n in raw_nodes for c in n["devices"]]
    raw_pods = [read_pod(tape, f"pod-{i}", uuids) for i in range(tape.integer(*pods))]
    if config is None:
        config = {
            "node_scheduler_policy": tape.pick(NODE_POLICIES),
            "gpu_scheduler_policy": tape.pick(GPU_POLICIES),
        }
    return {"config": dict(config), "nodes": raw_nodes, "pods": raw_pods}


def read_steps(tape: Tape, fewest: int, most: int) -> list[tuple[str, int, int]]:
    """A stream's steps: (kind, a, b), `a` and `b` bytes that pick the node, pod, card or usage."""
    return [(tape.pick(STEP_KINDS), tape.byte(), tape.byte()) for _ in range(tape.integer(fewest, most))]
