"""A lower bound for `simulate`: the same scenario decided with numpy, with nothing to spare.

    python -m bench.limit SCENARIO.json [--top 10]

For each pod in order, every card of the cluster is checked at once (SPEC 4 checks 1-10 in
order, the first failure per card counted per node), cards are scored (SPEC 5), each node
that holds the pod gets its cards chosen by the first sort key and its node score (SPEC 7),
the best `--top` nodes are kept, and the placement is applied so later pods see it; the
answers are written as JSON, as `simulate` does. What it leaves out only makes it cheaper
than the real engine (type and UUID pinning, NUMA and topology choices, explanations,
tie-breaking by name within 1e-9), so its time is a floor for the real work on the same
input: `make bench` prints the two side by side and their ratio (issue 18 targets at most 5x
for `simulate --top 10` of 10,000 pods on 5,000 nodes). Needs numpy (a dev dependency).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

# SPEC 4 reason codes in check order (checks 1-10), then the node-level ones.
CODES = (
    "CardNotHealth",
    "CardCordoned",
    "CardTimeSlicingExhausted",
    "ExclusiveDeviceAllocateConflict",
    "CardInsufficientMemory",
    "CardInsufficientCore",
    "ExclusiveDeviceAllocateConflict",
    "CardComputeUnitsExhausted",
)


def load(path: str) -> tuple[dict, list[dict]]:
    with open(path, encoding="utf-8") as handle:
        raw = json.load(handle)
    return raw, raw["pods"]


def columns(nodes: list[dict]) -> dict[str, np.ndarray]:
    """The cluster as (nodes x cards) arrays, padded with unhealthy zero-size cards."""
    width = max((len(node["devices"]) for node in nodes), default=0)
    shape = (len(nodes), width)
    out = {
        name: np.zeros(shape, dtype=np.int64)
        for name in ("slots", "memory", "cores", "used_slots", "used_memory", "used_cores")
    }
    out["health"] = np.zeros(shape, dtype=bool)
    out["real"] = np.zeros(shape, dtype=bool)
    for n, node in enumerate(nodes):
        for c, card in enumerate(node["devices"]):
            used = card.get("used") or {}
            out["slots"][n, c] = card.get("slots", 10)
            out["memory"][n, c] = card["memory"]
            out["cores"][n, c] = card.get("cores", 100)
            out["used_slots"][n, c] = used.get("slots", 0)
            out["used_memory"][n, c] = used.get("memory", 0)
            out["used_cores"][n, c] = used.get("cores", 0)
            out["health"][n, c] = card.get("health", True)
            out["real"][n, c] = True
    return out


def ask_of(pod: dict) -> tuple[int, int | None, int, int, list[str]] | None:
    """(count, MiB or None, percentage, cores, chain) of the pod's one GPU container (SPEC 2)."""
    for container in pod.get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        if not any(key.startswith("nvidia.com/") for key in limits):
            continue
        memory = limits.get("nvidia.com/gpumem")
        percentage = limits.get("nvidia.com/gpumem-percentage")
        cores = limits.get("nvidia.com/gpucores")
        if cores is None:
            cores = 100 if memory is None and percentage in (None, 100) else 0
        chain = (pod.get("annotations") or {}).get("hami.io/gpu-scheduler-policy", "spread")
        names = [name.strip() for name in chain.split(",")]
        return int(limits.get("nvidia.com/gpu", 1)), memory, int(percentage or 100), int(cores), names
    return None


def decide_all(raw: dict, pods: list[dict], top: int) -> list[dict]:
    names = [node["name"] for node in raw["nodes"]]
    cols = columns(raw["nodes"])
    slots, memory, cores = cols["slots"], cols["memory"], cols["cores"]
    used_slots, used_memory, used_cores = cols["used_slots"], cols["used_memory"], cols["used_cores"]
    healthy = cols["health"] & cols["real"]
    cards_per_node = cols["real"].sum(axis=1)
    total_slots, total_memory, total_cores = slots.sum(1), memory.sum(1), cores.sum(1)
    binpack_nodes = (raw.get("config") or {}).get("node_scheduler_policy", "binpack") == "binpack"
    answers = []
    for pod in pods:
        ask = ask_of(pod)
        if ask is None:
            answers.append({"name": pod["name"], "status": "rejected"})
            continue
        count, fixed, percentage, ask_cores, chain = ask
        mem = np.full(slots.shape, fixed) if fixed is not None else memory * percentage // 100
        mutex = "mutex" in chain
        # The first failing check per card, in SPEC 4 order (len(CODES) = fits).
        failed = np.select(
            [
                ~healthy,
                np.zeros(slots.shape, dtype=bool),  # cordon: none in the bench scenarios
                used_slots >= slots,
                (used_slots > 0) if mutex else np.zeros(slots.shape, dtype=bool),
                used_memory + mem > memory,
                used_cores + ask_cores > cores,
                (used_slots > 0) & (ask_cores == 100),
                used_cores >= cores,
            ],
            np.arange(len(CODES)),
            default=len(CODES),
        )
        fits = failed == len(CODES)
        failed = np.where(cols["real"], failed, len(CODES) + 1)  # padding counts under no reason
        fitting = fits.sum(axis=1)
        holds = (fitting >= count) & (cards_per_node >= count)
        score = 10 * (
            (1 + used_slots) / np.maximum(slots, 1)
            + (ask_cores + used_cores) / np.maximum(cores, 1)
            + (mem + used_memory) / np.maximum(memory, 1)
        )
        binpack_cards = next((key for key in chain if key in ("binpack", "spread")), "spread") == "binpack"
        ranked = np.where(fits, -score if binpack_cards else score, np.inf)
        candidates = np.flatnonzero(holds)
        answer: dict = {"name": pod["name"], "status": "pending", "node": None}
        if candidates.size:
            order = np.argsort(ranked[candidates], axis=1)[:, :count]
            chosen_mem = np.take_along_axis(mem[candidates], order, axis=1).sum(1)
            node_score = 10 * (
                (used_slots[candidates].sum(1) + count) / np.maximum(total_slots[candidates], 1)
                + (used_cores[candidates].sum(1) + count * ask_cores) / np.maximum(total_cores[candidates], 1)
                + (used_memory[candidates].sum(1) + chosen_mem) / np.maximum(total_memory[candidates], 1)
            )
            keyed = -node_score if binpack_nodes else node_score
            best = np.argpartition(keyed, min(top, keyed.size) - 1)[:top]
            best = best[np.argsort(keyed[best], kind="stable")]
            winner, cards = candidates[best[0]], order[best[0]]
            used_slots[winner, cards] += 1
            used_memory[winner, cards] += mem[winner, cards]
            used_cores[winner, cards] += ask_cores
            answer.update(
                status="scheduled",
                node=names[winner],
                cards=[int(card) for card in cards],
                node_scores={names[candidates[i]]: round(float(node_score[i]), 6) for i in best},
            )
        failing = np.flatnonzero(~holds)
        reasons = np.bincount(failed[failing].ravel(), minlength=len(CODES) + 2)
        answer["nodes_fit"], answer["nodes_failed"] = int(candidates.size), int(failing.size)
        answer["reasons"] = {}
        for i, n in enumerate(reasons[: len(CODES)]):
            if n:
                answer["reasons"][CODES[i]] = answer["reasons"].get(CODES[i], 0) + int(n)
        answers.append(answer)
    return answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.limit", description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)
    raw, pods = load(args.scenario)
    json.dump({"pods": decide_all(raw, pods, max(1, args.top))}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
