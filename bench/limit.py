"""A lower bound for `simulate`: the same scenario decided with numpy, with nothing to spare.

    python -m bench.limit SCENARIO.json [--top 10]

Pods are decided in order, each seeing the placements before it, with the policies the
scenario names (node policy from the pod or the config, the chain's mutex filter and
binpack/spread card order, use/nouse-gputype). Per pod shape (the ask, mutex, the types let
in, and the card order where a percentage makes the MiB depend on the cards taken: all that
fit and node score depend on) it keeps a fit flag and a node score per node; a new shape
is one vectorized pass over every card (SPEC 4 checks 1-10 as one mask, per-node
aggregation, SPEC 7 node score), a shape seen before re-checks only the nodes placed on
since it last looked, as `simulate`'s engine does with its per-shape verdict cache. The
best `--top` nodes are kept, the winner's cards are chosen (SPEC 5 score, chain order) and
assumed. Nothing is explained: no reasons, no failed nodes, no closest nodes, no NUMA or
topology choice. So its time is a floor for the real work on the same input, computed the
same incremental way: `make bench` (`bench.engine`) prints the two side by side and their
ratio (issue 18 targets at most 5x for `simulate --top 10` of 10,000 pods on 5,000 nodes).

It refuses (exit 2, naming the field) what it does not model and what would change what fits
or which cards are taken: not-ready nodes, cordoned cards, UUID pinning, card modes,
numa-bind, scoring weights, several GPU containers or GPU init containers. Where the chain
has no `numa` or `topology-aware` key it decides as the engine does, pod for pod (same node,
cards, fitting-node count and best nodes: tests/bench/test_limit.py); with them it takes other
cards, which on a cluster that fills up changes a few later answers. Needs numpy.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys

import numpy as np

from scheduling.engine.requests import ContainerAsk

GPU_POLICY = "hami.io/gpu-scheduler-policy"
NODE_POLICY = "hami.io/node-scheduler-policy"
USE_TYPE, NOUSE_TYPE = "nvidia.com/use-gputype", "nvidia.com/nouse-gputype"
#: Annotations that change what fits, or which cards are taken, in ways the bound does not model.
UNMODELLED = (
    "hami.io/device-cordon",
    "hami.io/device-scoring-weights",
    "nvidia.com/use-gpuuuid",
    "nvidia.com/nouse-gpuuuid",
    "nvidia.com/vgpu-mode",
    "nvidia.com/numa-bind",
)


class Unmodelled(ValueError):
    """The scenario uses something the bound leaves out; comparing with it would be unfair."""


class Cards:
    """The cluster as (nodes x cards) arrays, nodes by name (the engine's order), padded with
    unusable zero-size cards; per node the totals and the usage sums SPEC 7 scores on."""

    def __init__(self, nodes: list[dict]):
        nodes = sorted(nodes, key=lambda node: node["name"])
        self.names = [node["name"] for node in nodes]
        width = max((len(node["devices"]) for node in nodes), default=0)
        rows: dict[str, list] = {key: [] for key in ("slots", "memory", "cores", "us", "um", "uc")}
        usable, types, type_ids = [], [], {}
        for n, node in enumerate(nodes):
            if node.get("ready", True) is not True:
                raise Unmodelled(f"nodes[{n}].ready: a not-ready node is not modelled")
            for key in UNMODELLED:
                if key in (node.get("annotations") or {}):
                    raise Unmodelled(f"nodes[{n}].annotations.{key}: not modelled")
            pad = width - len(node["devices"])
            for card in node["devices"]:
                used = card.get("used") or {}
                rows["slots"].append(card.get("slots", 10))
                rows["memory"].append(card["memory"])
                rows["cores"].append(card.get("cores", 100))
                rows["us"].append(used.get("slots", 0))
                rows["um"].append(used.get("memory", 0))
                rows["uc"].append(used.get("cores", 0))
                usable.append(card.get("health", True) is True)
                types.append(type_ids.setdefault(card.get("type", "NVIDIA").lower(), len(type_ids)))
            for values in rows.values():
                values.extend([0] * pad)
            usable.extend([False] * pad)
            types.extend([-1] * pad)
        shape = (len(nodes), width)
        self.slots, self.memory, self.cores, self.used_slots, self.used_memory, self.used_cores = (
            np.array(rows[key], dtype=np.int64).reshape(shape)
            for key in ("slots", "memory", "cores", "us", "um", "uc")
        )
        self.usable = np.array(usable, dtype=bool).reshape(shape)
        self.type_id = np.array(types, dtype=np.int64).reshape(shape)
        self.types = list(type_ids)  # lowered type names by id
        # a dimension whose total is 0 adds nothing (its usage is 0 too): divide by 1
        self.total_slots, self.total_memory, self.total_cores = (
            np.maximum(a.sum(1), 1) for a in (self.slots, self.memory, self.cores)
        )
        self.sum_slots, self.sum_memory, self.sum_cores = (
            a.sum(1) for a in (self.used_slots, self.used_memory, self.used_cores)
        )
        #: nodes placed on, in order: what a shape re-checks since it last looked
        self.touched: list[int] = []


class Shape:
    """What a pod asks and how its cards rank, as far as fit and node score depend on it."""

    __slots__ = (
        "count",
        "fixed",
        "percentage",
        "ask",
        "cores",
        "mutex",
        "card_binpack",
        "types",
        "holds",
        "score",
        "seen",
    )

    def __init__(self, count, fixed, percentage, cores, mutex, card_binpack, types):
        self.count, self.fixed, self.percentage, self.cores = count, fixed, percentage, cores
        self.mutex, self.card_binpack, self.types = mutex, card_binpack, types
        self.ask = ContainerAsk("", count, fixed, percentage or 0, cores)  # SPEC 2's MiB per card
        self.holds: np.ndarray | None = None  # per node: at least `count` cards fit
        self.score: np.ndarray | None = None  # per node: SPEC 7 score after placing the pod
        self.seen = 0  # how much of `Cards.touched` its arrays include

    def memory(self, cards: Cards, rows) -> np.ndarray | int:
        return self.ask.memory_on(cards.memory[rows])

    def fits(self, cards: Cards, rows) -> np.ndarray:
        """SPEC 4 checks 1-10 as one mask over the cards of `rows` (cordons: refused on load)."""
        used_slots, used_cores = cards.used_slots[rows], cards.used_cores[rows]
        card_cores = cards.cores[rows]
        fits = cards.usable[rows] & (used_slots < cards.slots[rows])
        fits &= cards.used_memory[rows] + self.memory(cards, rows) <= cards.memory[rows]
        fits &= used_cores + self.cores <= card_cores
        if self.mutex or self.cores == 100:  # mutex; a whole card wants it without tenants
            fits &= used_slots == 0
        if self.cores == 0:
            fits &= used_cores < card_cores
        if self.types is not None:
            fits &= self.types[cards.type_id[rows]]
        return fits

    def choose(self, cards: Cards, rows, fits: np.ndarray, binpack: bool) -> np.ndarray:
        """Per row the `count` cards the chain takes (`binpack`: highest SPEC 5 score first,
        else lowest), then by index."""
        memory = self.memory(cards, rows)
        score = (
            (1 + cards.used_slots[rows]) / np.maximum(cards.slots[rows], 1)
            + (self.cores + cards.used_cores[rows]) / np.maximum(cards.cores[rows], 1)
            + (memory + cards.used_memory[rows]) / np.maximum(cards.memory[rows], 1)
        )
        score = np.round(score, 9)  # ties within 1e-9 go by index, as in the engine
        ranked = np.where(fits, -score if binpack else score, np.inf)
        return np.argsort(ranked, axis=-1, kind="stable")[..., : self.count]

    def refresh(self, cards: Cards) -> None:
        """Bring fit and node score up to date: every node when new, else those placed on since."""
        if self.holds is None:
            rows = slice(None)
        elif self.seen == len(cards.touched):
            return
        else:
            rows = np.unique(cards.touched[self.seen :])
        self.seen = len(cards.touched)
        fits = self.fits(cards, rows)
        holds = np.count_nonzero(fits, axis=1) >= self.count
        if self.fixed is not None:  # the same MiB whichever cards are taken
            chosen_memory = self.count * self.fixed
        else:
            memory = self.memory(cards, rows)
            chosen_memory = np.take_along_axis(
                memory, self.choose(cards, rows, fits, self.card_binpack), axis=1
            ).sum(1)
        score = 10 * (
            (cards.sum_slots[rows] + self.count) / cards.total_slots[rows]
            + (cards.sum_cores[rows] + self.count * self.cores) / cards.total_cores[rows]
            + (cards.sum_memory[rows] + chosen_memory) / cards.total_memory[rows]
        )
        score = np.round(score, 9)  # the engine's ties: scores within 1e-9, then the name
        if self.holds is None:
            self.holds, self.score = holds, score
        else:
            self.holds[rows], self.score[rows] = holds, score


def ask_of(pod: dict, p: int, config: dict) -> tuple | None:
    """(shape key, node binpack, card binpack) of the pod's one GPU container (SPEC 2), or
    None without one."""
    for key in ("initContainers", "init_containers"):
        for container in pod.get(key) or []:
            if any(
                k.startswith("nvidia.com/") for k in ((container.get("resources") or {}).get("limits") or {})
            ):
                raise Unmodelled(f"pods[{p}].{key}: GPU init containers are not modelled")
    gpu = [
        limits
        for container in pod.get("containers") or []
        for limits in [(container.get("resources") or {}).get("limits") or {}]
        if any(k.startswith("nvidia.com/") for k in limits)
    ]
    if not gpu:
        return None
    if len(gpu) > 1:
        raise Unmodelled(f"pods[{p}].containers: several GPU containers are not modelled")
    annotations = pod.get("annotations") or {}
    for key in UNMODELLED:
        if key in annotations:
            raise Unmodelled(f"pods[{p}].annotations.{key}: not modelled")
    limits = gpu[0]
    defaults = config.get("resources") or {}
    fixed = limits.get("nvidia.com/gpumem")
    percentage = limits.get("nvidia.com/gpumem-percentage")
    cores = limits.get("nvidia.com/gpucores")
    if cores is None:
        whole = fixed is None and percentage in (None, 100)
        cores = defaults.get("exclusive_cores", 100) if whole else defaults.get("cores", 0)
    if fixed is None:
        percentage = int(percentage if percentage is not None else defaults.get("memory_percentage", 100))
    chain = [
        name.strip().lower()
        for name in annotations.get(GPU_POLICY, config.get("gpu_scheduler_policy", "spread")).split(",")
    ]
    card_binpack = next((name for name in chain if name in ("binpack", "spread")), "spread") == "binpack"
    node = str(annotations.get(NODE_POLICY, "")).strip().lower()
    if node not in ("binpack", "spread"):
        node = config.get("node_scheduler_policy", "binpack")
    types = tuple(
        tuple(t.strip().lower() for t in str(annotations[key]).split(",") if t.strip())
        if key in annotations
        else ()
        for key in (USE_TYPE, NOUSE_TYPE)
    )
    shape = (
        int(limits.get("nvidia.com/gpu", 1)),
        None if fixed is None else int(fixed),
        None if fixed is not None else percentage,
        int(cores),
        "mutex" in chain,
        card_binpack if fixed is None else None,  # ranks cards only: same fit and node score
        types if any(types) else None,
    )
    return shape, node == "binpack", card_binpack


def type_mask(cards: Cards, use: tuple, nouse: tuple) -> np.ndarray:
    """Per type id (the last entry: padding) whether use/nouse-gputype lets it in (check 3)."""
    allowed = [
        (not use or any(t in name for t in use)) and not any(t in name for t in nouse) for name in cards.types
    ]
    return np.array([*allowed, False], dtype=bool)


def decide_all(raw: dict, pods: list[dict], top: int, cache: bool = True) -> list[dict]:
    """Every pod decided in order; `cache=False` evaluates every node for every pod (the same
    answers, slower: what the tests compare the incremental path with)."""
    cards = Cards(raw["nodes"])
    config = raw.get("config") or {}
    names = cards.names
    shapes: dict[tuple, Shape] = {}
    answers = []
    for p, pod in enumerate(pods):
        ask = ask_of(pod, p, config)
        if ask is None:
            answers.append({"name": pod["name"], "status": "rejected"})
            continue
        key, node_binpack, card_binpack = ask
        shape = shapes.get(key) if cache else None
        if shape is None:
            types = None if key[6] is None else type_mask(cards, *key[6])
            shape = Shape(*key[:6], types)
            if cache:
                shapes[key] = shape
        shape.refresh(cards)
        fitting = int(np.count_nonzero(shape.holds))
        answer: dict = {"name": pod["name"], "status": "pending", "node": None, "nodes_fit": fitting}
        if fitting:
            keyed = np.where(shape.holds, -shape.score if node_binpack else shape.score, np.inf)
            kept = min(top, fitting)
            # the kept-th best value, then every node up to it in (value, name) order: nodes
            # are sorted by name, so ties at the edge go to the first names, as in the engine
            edge = keyed[np.argpartition(keyed, kept - 1)[kept - 1]]
            near = np.flatnonzero(keyed <= edge)
            best = near[np.argsort(keyed[near], kind="stable")[:kept]]
            winner = int(best[0])
            chosen = shape.choose(cards, winner, shape.fits(cards, winner), card_binpack)
            memory = shape.memory(cards, winner)
            memory = memory[chosen] if shape.fixed is None else np.full(chosen.size, memory)
            cards.used_slots[winner, chosen] += 1
            cards.used_memory[winner, chosen] += memory
            cards.used_cores[winner, chosen] += shape.cores
            cards.sum_slots[winner] += shape.count
            cards.sum_memory[winner] += int(memory.sum())
            cards.sum_cores[winner] += shape.count * shape.cores
            cards.touched.append(winner)
            answer.update(
                status="scheduled",
                node=names[winner],
                cards=chosen.tolist(),
                node_scores={names[i]: round(float(shape.score[i]), 6) for i in best.tolist()},
            )
        answers.append(answer)
    return answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.limit", description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)
    gc.disable()  # as `simulate` runs: a one-shot process whose objects live to the end
    with open(args.scenario, encoding="utf-8") as handle:
        raw = json.load(handle)
    try:
        answers = decide_all(raw, raw["pods"], max(1, args.top))
    except Unmodelled as exc:
        sys.stderr.write(f"bench.limit: {args.scenario}: {exc}\n")
        return 2
    json.dump({"pods": answers}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
