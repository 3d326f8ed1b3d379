"""Batch benchmark (issue 11): gangs and queues beside the same pods as single pods.

    python -m bench.batch [--nodes 1000] [--pods 2000] [--gang 8] [--backend postgresql]

2,000 pods in 250 gangs of 8 (min_member 8) spread over 4 queues, on 1,000 nodes x 8 cards,
scheduled by back-to-back cycles until nothing more is placed; then the same pods without
groups (queues kept). Prints pods/s committed and the p99 cycle time of each, and their
ratio (the issue's target: gangs cost at most 2x single pods). Each run is a child process
on a throwaway database (bench.pipeline's helpers: PostgreSQL when reachable, else SQLite).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.pipeline import (
    REPO,
    admin_sql,
    bench_database_name,
    build_cluster,
    drain_queue,
    postgres_server_url,
    with_database,
)

DATABASE = bench_database_name("batch")
QUEUES = ("research", "prod", "batch", "dev")


def run_child(database_url: str, args, gangs: bool, scratch: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env.update(
        {
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "hamiadmin.settings",
            "LOG_LEVEL": "WARNING",
            "HAMIADMIN_VAR_DIR": scratch,
        }
    )
    command = [sys.executable, "-m", "bench.batch", "--child", "--nodes", str(args.nodes)]
    command += ["--pods", str(args.pods), "--gang", str(args.gang if gangs else 0)]
    out = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"gangs": gangs, "error": (out.stderr or out.stdout).strip()[-800:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(args, gangs: bool, scratch: str) -> dict:
    if args.backend == "postgresql":
        server = postgres_server_url()
        drop = f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"
        error = admin_sql(server, drop, f"CREATE DATABASE {DATABASE}")
        if error is None:
            try:
                return run_child(with_database(server, DATABASE), args, gangs, scratch)
            finally:
                admin_sql(server, drop)
        print(f"PostgreSQL not reachable ({error}); SQLite instead", file=sys.stderr)
    database = Path(scratch) / f"batch-{int(gangs)}.sqlite3"
    return run_child(f"sqlite:///{database}", args, gangs, scratch)


def queue_pods(count: int, gang: int) -> None:
    """`count` pods, `gang` to a group (0: no groups), round-robin over the queues."""
    from django.utils import timezone

    from scheduling.models import Pod, PodGroup, Queue

    now = timezone.now()
    queues = {name: Queue.objects.create(name=name, weight=1 + i) for i, name in enumerate(QUEUES)}
    groups = {}
    if gang:
        PodGroup.objects.bulk_create(
            [
                PodGroup(namespace="bench", name=f"job{g:04d}", min_member=gang, queue=queues[QUEUES[g % 4]])
                for g in range(count // gang)
            ]
        )
        groups = {group.name: group for group in PodGroup.objects.all()}
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000, "nvidia.com/gpucores": 10}
    rows = []
    for n in range(count):
        job = n // gang if gang else n // 8
        group = groups.get(f"job{job:04d}")
        annotations = {"hami.io/group-name": f"job{job:04d}"} if group else {}
        rows.append(
            Pod(
                namespace="bench",
                name=f"pod{n:05d}",
                annotations=annotations,
                containers=[{"name": "main", "resources": {"limits": limits}}],
                submitted_at=now,
                group=group,
                queue=queues[QUEUES[job % 4]],
            )
        )
    Pod.objects.bulk_create(rows, batch_size=1000)


def main_child(args) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    build_cluster(args.nodes)
    queue_pods(args.pods, args.gang)
    reports, seconds = drain_queue()
    placed = sum(len(report.placed) for report in reports)
    cycles = sorted(report.duration_ms for report in reports) or [0.0]
    print(
        json.dumps(
            {
                "gangs": bool(args.gang),
                "placed": placed,
                "cycles": len(reports),
                "seconds": seconds,
                "pods_per_second": placed / seconds if seconds else 0.0,
                "cycle_ms_p99": cycles[min(len(cycles) - 1, int(len(cycles) * 0.99))],
                "cycle_ms_median": statistics.median(cycles),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--gang", type=int, default=8)
    parser.add_argument("--backend", default="postgresql", choices=("postgresql", "sqlite"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        main_child(args)
        return
    with tempfile.TemporaryDirectory(prefix="hamiadmin-bench-batch-") as scratch:
        rows = [run(args, True, scratch), run(args, False, scratch)]
    print(f"batch bench: {args.pods} pods, {args.nodes} nodes x 8 cards, 4 queues ({args.backend})")
    print(f"{'':14} {'placed':>7} {'cycles':>7} {'pods/s':>9} {'cycle p99 ms':>13}")
    for row in rows:
        label = f"gangs of {args.gang}" if row.get("gangs") else "single pods"
        if "error" in row:
            print(f"{label:14} error: {row['error']}")
            continue
        print(
            f"{label:14} {row['placed']:>7} {row['cycles']:>7} {row['pods_per_second']:>9.0f}"
            f" {row['cycle_ms_p99']:>13.0f}"
        )
    if all("error" not in row for row in rows) and rows[0]["pods_per_second"]:
        ratio = rows[1]["pods_per_second"] / rows[0]["pods_per_second"]
        print(f"cost of gangs: {ratio:.2f}x single pods (target: at most 2x)")


if __name__ == "__main__":
    main()
