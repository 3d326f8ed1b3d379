"""Wake benchmark (issue 29): a release among many backed-off pods.

    python -m bench.wake [--nodes 2000] [--pending 20000] [--rounds 10]

`--nodes` nodes x 8 cards (40,960 MiB), all full but for the card one tenant holds; then
`--pending` pods of 20 shapes wait, backed off: 80% can never fit (they ask more than a card),
20% would fit a freed card. Each round releases the tenant and measures, on PostgreSQL (or
SQLite when the server cannot be reached):

- the release itself (`services.release_pod`: what the releasing request pays);
- the wake at the start of the next cycle (`pipeline.wake.wake_movable`: one pod per spec
  decided on the standing snapshot, then the fitting specs made due) and how many pods it woke;
- the cycle that follows (the woken pods decided, one placed on the freed card);

then the placed pod is the next round's tenant and the other woken pods go back to backing off.
Prints the medians and the worst, in ms, and beside them what a release paid before: waking
every backed-off pod inside the request (`services.wake_pending_pods`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench.pipeline import (
    REPO,
    admin_sql,
    bench_database_name,
    build_cluster,
    postgres_server_url,
    with_database,
)

DATABASE = bench_database_name("wake")
#: (MiB per vGPU) of the 20 shapes: 4 fit a free card, 16 never fit (over 40,960 MiB).
FITTING = (4000, 10000, 20000, 40960)
NEVER = tuple(41000 + 500 * k for k in range(16))


def child(args) -> dict:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db.models import F
    from django.utils import timezone

    from scheduling import services
    from scheduling.models import Card, Pod
    from scheduling.pipeline import run_cycle
    from scheduling.pipeline.wake import wake_movable
    from scheduling.services.pods import spec_hash

    call_command("migrate", verbosity=0)
    build_cluster(args.nodes)
    free = Card.objects.order_by("pk").first()
    Card.objects.exclude(pk=free.pk).update(
        used_slots=F("slots"), used_memory=F("memory"), used_cores=F("cores")
    )
    tenant = services.submit_pod("bench", "tenant-0", {}, containers(40960))
    run_cycle()
    now = timezone.now()
    later = now + timedelta(hours=1)
    rows = []
    for n in range(args.pending):
        mem = FITTING[n % len(FITTING)] if n % 5 == 0 else NEVER[n % len(NEVER)]
        limits = containers(mem)
        rows.append(
            Pod(
                namespace="bench",
                name=f"wait{n:06d}",
                containers=limits,
                submitted_at=now,
                next_attempt_at=later,
                attempts=1,
                spec_hash=spec_hash({}, limits, [], 0),
            )
        )
    Pod.objects.bulk_create(rows, batch_size=2000)
    wake_movable()  # warm: the standing snapshot read, every shape decided once
    release, wake, cycle, woken = [], [], [], []
    for round_ in range(args.rounds):
        started = time.perf_counter()
        services.release_pod(tenant, Pod.SUCCEEDED)
        release.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        woken.append(wake_movable())
        wake.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        report = run_cycle()
        cycle.append((time.perf_counter() - started) * 1000)
        assert report.placed, f"round {round_}: nothing placed"
        tenant = Pod.objects.get(namespace="bench", name=report.placed[0][0].split("/", 1)[1])
        Pod.objects.filter(status=Pod.PENDING, next_attempt_at__isnull=True).update(next_attempt_at=later)
    Pod.objects.filter(status=Pod.PENDING).update(next_attempt_at=later)
    started = time.perf_counter()
    everyone = services.wake_pending_pods()  # what every release did before, inside its request
    wake_all = (time.perf_counter() - started) * 1000
    return {
        "wake_all_ms": round(wake_all, 1),
        "woken_all": everyone,
        "nodes": args.nodes,
        "pending": args.pending,
        "release_ms": summary(release),
        "wake_ms": summary(wake),
        "cycle_ms": summary(cycle),
        "woken": statistics.median(woken),
    }


def containers(mem: int) -> list[dict]:
    return [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem}}}]


def summary(values: list[float]) -> tuple[float, float]:
    return round(statistics.median(values), 1), round(max(values), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pending", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    with tempfile.TemporaryDirectory() as scratch:
        server = postgres_server_url()
        drop = f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"
        error = admin_sql(server, drop, f"CREATE DATABASE {DATABASE}")
        url = (
            with_database(server, DATABASE)
            if error is None
            else f"sqlite:///{Path(scratch) / 'wake.sqlite3'}"
        )
        env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
        env.update(
            {
                "DATABASE_URL": url,
                "DJANGO_SETTINGS_MODULE": "hamiadmin.settings",
                "HAMIADMIN_VAR_DIR": scratch,
            }
        )
        command = [sys.executable, "-m", "bench.wake", "--child", "--nodes", str(args.nodes)]
        command += ["--pending", str(args.pending), "--rounds", str(args.rounds)]
        try:
            out = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
        finally:
            if error is None:
                admin_sql(server, drop)
    if out.returncode != 0:
        sys.exit((out.stderr or out.stdout).strip()[-2000:])
    row = json.loads(out.stdout.strip().splitlines()[-1])
    backend = "postgresql" if error is None else "sqlite"
    print(
        f"wake bench: {row['pending']} backed-off pods (20 shapes, 80% never fit), {row['nodes']} nodes x 8 cards ({backend})"
    )
    print("                median ms   max ms")
    for key, label in (("release_ms", "release"), ("wake_ms", "wake"), ("cycle_ms", "cycle")):
        median, worst = row[key]
        print(f"  {label:<12} {median:>10} {worst:>8}")
    print(f"  woken per release (median): {row['woken']:.0f} of {row['pending']}")
    print(
        f"  before: waking every backed-off pod in the request: {row['wake_all_ms']} ms ({row['woken_all']} pods)"
    )


if __name__ == "__main__":
    main()
