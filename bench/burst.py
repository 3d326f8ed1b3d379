"""The pipeline bench's burst on the engine alone: CPU seconds to decide its pods.

    python -m bench.burst [--nodes 5000,20000] [--pods 5000] [--mix realistic] [--runs 3]

`bench.pipeline` times a burst through the database, and on a shared machine its pods/s
moves 20-30% between identical runs. This is the part of each cycle the engine costs, with
no database, no threads and no other process: the same cluster (8 A100 40 GB cards a node,
two NUMA nodes of four) and the same pod shapes, decided one after another by one scheduler
and each placed pod assumed, as a cycle's planner does (the scheduler keeps the pipeline's
20 nodes of each ranking). It prints, per size, the best and the median CPU seconds of
`--runs` runs (process time, which the machine's load moves less than the wall time) and
the pods placed. Comparing two trees: run each in turn, several times.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.pipeline import MIXES
from scheduling.engine.decision import SCHEDULED
from scheduling.engine.scenario import parse_scenario
from scheduling.engine.scheduler import Scheduler

#: Nodes of each ranking a decision keeps, as the pipeline keeps `HAMI_DECISION_TOP`.
KEEP = 20


def scenario(nodes: int, pods: int, mix: str) -> dict:
    """A SPEC 9 input: `nodes` nodes as `bench.pipeline` builds them and `pods` pods of the
    mix's shapes in turn, as it queues them."""
    shapes = MIXES[mix]
    return {
        "nodes": [
            {
                "name": f"node{n:05d}",
                "devices": [
                    {
                        "uuid": f"GPU-{n:05d}-{i}",
                        "index": i,
                        "type": "NVIDIA-A100-SXM4-40GB",
                        "memory": 40960,
                        "numa": i // 4,
                    }
                    for i in range(8)
                ],
            }
            for n in range(nodes)
        ],
        "pods": [
            {
                "name": f"pod{k:06d}",
                "annotations": shapes[k % len(shapes)][0],
                "containers": [{"name": "main", "resources": {"limits": shapes[k % len(shapes)][1]}}],
            }
            for k in range(pods)
        ],
    }


def run_once(raw: dict) -> tuple[float, int]:
    """(CPU seconds, pods placed) to decide every pod of `raw` in turn on a fresh, warm
    scheduler, assuming each placement."""
    cluster, config, pods = parse_scenario(raw)
    scheduler = Scheduler(cluster, config, keep=KEEP)
    scheduler.warm()  # the card columns, as a worker's whole read builds them
    placed = 0
    started = time.process_time()
    for pod in pods:
        decision = scheduler.decide(pod)
        if decision.status == SCHEDULED:
            scheduler.assume(decision)
            placed += 1
    return time.process_time() - started, placed


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m bench.burst", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="5000,20000", help="cluster sizes, comma-separated")
    parser.add_argument("--pods", type=int, default=5000, help="pods in the burst")
    parser.add_argument(
        "--mix", choices=sorted(MIXES), default="realistic", help="pod shapes, as bench.pipeline"
    )
    parser.add_argument("--runs", type=int, default=3, help="runs of each size (best and median printed)")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.nodes.split(",") if size.strip()]
    if not sizes or min(sizes) < 1 or args.pods < 1 or args.runs < 1:
        parser.error("--nodes, --pods and --runs take whole numbers from 1")
    print(
        f"{'nodes':>7} {'pods':>6} {'placed':>6} {'best CPU s':>10} {'median CPU s':>12} {'pods/CPU-s':>10}"
    )
    results = []
    for nodes in sizes:
        raw = scenario(nodes, args.pods, args.mix)
        times, placed = [], 0
        for _ in range(args.runs):
            seconds, placed = run_once(raw)
            times.append(seconds)
        best, median = min(times), statistics.median(times)
        print(f"{nodes:>7} {args.pods:>6} {placed:>6} {best:>10.3f} {median:>12.3f} {placed / median:>10.0f}")
        results.append({"nodes": nodes, "pods": args.pods, "placed": placed, "best": best, "median": median})
    print(
        f"CPU seconds of one process deciding the burst ({args.mix} mix, keep {KEEP}), snapshot "
        "and database left out: the engine's share of bench.pipeline's cycles."
    )
    return results


if __name__ == "__main__":
    main()
