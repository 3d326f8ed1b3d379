"""Wake benchmark (issue 29): a release among many backed-off pods.

    python -m bench.wake [--nodes 2000] [--pending 20000] [--rounds 10] [--rebuild-every K]
                         [--sqlite] [--profile PATH]

`--nodes` nodes x 8 cards (40,960 MiB), all full but for the card one tenant holds; then
`--pending` pods of 20 shapes wait, backed off: 80% can never fit (they ask more than a card),
20% would fit a freed card. Each round releases the tenant and measures, on PostgreSQL (or
SQLite when the server cannot be reached):

- the release itself (`services.release_pod`: what the releasing request pays);
- the wake at the start of the next cycle (`pipeline.wake.wake_movable`: one pod per spec
  decided on the standing snapshot, then the fitting specs made due) and how many pods it woke;
- the cycle that follows (the woken pods decided, one placed on the freed card);
- release to placement: from the release's call to the end of that cycle's commit;

then the placed pod is the next round's tenant and the other woken pods go back to backing off.
Before the rounds every shape is decided once on the standing snapshot and the waiting pods
are dated a minute back, as in a worker running for a while. With `--rebuild-every K`, every K-th round starts with the standing snapshot due
for its periodic whole read (SNAPSHOT_REBUILD_SECONDS run out), so that read's cost is in the
figures.
Then, while the tenant is released every 100 ms (each release done between two cycles, as a
request lands between the worker's cycles, its time counted), `--rounds` new pods that fit
(2,000 MiB, on cards of the last nodes left with 3,000 MiB free: too little for any waiting
shape) are submitted one at a time and the cycles run back to back until each is placed:
submission to placement, the call to the end of the placing cycle's commit.
Prints the medians, 99th percentiles (nearest rank: with fewer than 100 rounds, the
worst) and the worst, in ms, and beside them what a release paid before: waking
every backed-off pod inside the request (`services.wake_pending_pods`); and the full garbage
collections that ran during the rounds (HAMI_GC_FREEZE keeps the standing snapshot out of them).
"""

from __future__ import annotations

import argparse
import gc
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
    from django.db import connection
    from django.db.models import F
    from django.utils import timezone

    from scheduling import services
    from scheduling.models import Card, Pod
    from scheduling.pipeline import run_cycle
    from scheduling.pipeline.standing import STANDING
    from scheduling.pipeline.wake import SEEN, wake_movable
    from scheduling.services.pods import spec_hash

    call_command("migrate", verbosity=0)
    build_cluster(args.nodes)
    free = Card.objects.order_by("pk").first()
    Card.objects.exclude(pk=free.pk).update(
        used_slots=F("slots"), used_memory=F("memory"), used_cores=F("cores")
    )
    # room for the newcomers only: a slot and 3,000 MiB on each card of the last nodes
    last = [f"node{n:04d}" for n in range(max(1, args.nodes - -(-args.rounds // 8)), args.nodes)]
    Card.objects.filter(node__name__in=last).update(
        used_slots=F("slots") - 1, used_memory=F("memory") - 3000, used_cores=0
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
    del rows  # 100,000 model objects the worker never holds, swept by every full collection
    # written a while ago, as pods that have waited: a look re-reads the pods written in the
    # last WAKE_OVERLAP (5 s), and all of them would be for the first 25 rounds
    Pod.objects.filter(namespace="bench", name__startswith="wait").update(
        updated_at=now - timedelta(minutes=1)
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # the statistics autovacuum keeps on a live server
            cursor.execute("ANALYZE")
    SEEN.version = None  # the pods came after the last look: look at every spec once
    wake_movable()  # warm: every shape decided once on the standing snapshot (none fits now)
    run_cycle()
    collections = full_collections()
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    release, wake, cycle, placed, woken = [], [], [], [], []
    for round_ in range(args.rounds):
        if args.rebuild_every and round_ and round_ % args.rebuild_every == 0:
            STANDING.built_at = float("-inf")  # as SNAPSHOT_REBUILD_SECONDS running out does
        started = time.perf_counter()
        services.release_pod(tenant, Pod.SUCCEEDED)
        release.append((time.perf_counter() - started) * 1000)
        begun = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        woken.append(wake_movable())
        wake.append((time.perf_counter() - begun) * 1000)
        begun = time.perf_counter()
        report = run_cycle()
        if profiler is not None:
            profiler.disable()
        cycle.append((time.perf_counter() - begun) * 1000)
        placed.append((time.perf_counter() - started) * 1000)
        assert report.placed, f"round {round_}: nothing placed"
        tenant = Pod.objects.get(namespace="bench", name=report.placed[0][0].split("/", 1)[1])
        Pod.objects.filter(status=Pod.PENDING, next_attempt_at__isnull=True).update(next_attempt_at=later)
    newcomer, releases = newcomers(args.rounds, tenant, profiler)
    gc.callbacks.remove(collections.record)
    if profiler is not None:
        profiler.dump_stats(args.profile)
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
        "placed_ms": summary(placed),
        "woken": statistics.median(woken),
        "newcomer_ms": summary(newcomer),
        "releases": releases,
        "full_collections": len(collections.pauses),
        "full_collection_ms": round(max(collections.pauses, default=0.0), 1),
        "own_collections": len(collections.own),
        "own_collection_ms": round(max(collections.own, default=0.0), 1),
        "rebuilds": STANDING.rebuilds,
        "carried": getattr(STANDING, "carried", 0),  # 0 before whole reads were carried over
    }


class full_collections:  # noqa: N801 - read as a call: the collections from now on
    """The full (generation 2) garbage collections from now on, their pauses in ms: those the
    collector ran by itself (`pauses`) and the sweeps before a freeze (`own`: `pipeline.collector`'s
    `sweep_young`, after each refresh, and `sweep_whole`, after a whole read)."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self.own: list[float] = []
        self.began = 0.0
        gc.callbacks.append(self.record)

    def record(self, phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self.began = time.perf_counter()
            return
        frame = sys._getframe(1) if sys._getframe().f_back is not None else None
        own = frame is not None and frame.f_code.co_name in ("sweep_young", "sweep_whole")
        (self.own if own else self.pauses).append((time.perf_counter() - self.began) * 1000)


def newcomers(count: int, tenant, profiler) -> tuple[list[float], int]:
    """Submission to placement (ms) of `count` new pods that fit, one at a time, while the
    pod on the freed card is released every 100 ms; and how many releases were made."""
    from scheduling import services
    from scheduling.models import Pod
    from scheduling.pipeline import run_cycle

    period = 0.1
    waited: list[float] = []
    releases = 0
    next_release = time.perf_counter() + period

    def cycle():
        nonlocal tenant, releases, next_release
        if tenant is not None and time.perf_counter() >= next_release:
            services.release_pod(tenant, Pod.SUCCEEDED)
            tenant, releases = None, releases + 1
            next_release = max(next_release + period, time.perf_counter() - period)
        if profiler is not None:
            profiler.enable()
        report = run_cycle()
        if profiler is not None:
            profiler.disable()
        placed = [key.split("/", 1)[1] for key, *_ in report.placed]
        waiting = [name for name in placed if name.startswith("wait")]
        if waiting:
            tenant = Pod.objects.get(namespace="bench", name=waiting[0])
        return placed

    for n in range(count):
        gap = time.perf_counter() + (n * 0.037) % period  # land at another point between releases
        while time.perf_counter() < gap:
            cycle()
        name = f"new{n:04d}"
        started = time.perf_counter()
        services.submit_pod("bench", name, {}, containers(2000))
        while name not in cycle():
            assert time.perf_counter() - started < 60, f"{name} not placed in 60 s"
        waited.append((time.perf_counter() - started) * 1000)
    return waited, releases


def containers(mem: int) -> list[dict]:
    return [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem}}}]


def summary(values: list[float]) -> tuple[float, float, float]:
    """Median, 99th percentile (nearest rank) and worst, in ms."""
    ranked = sorted(values)
    p99 = ranked[min(len(ranked) - 1, max(0, -(-99 * len(ranked) // 100) - 1))]
    return round(statistics.median(values), 1), round(p99, 1), round(max(values), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pending", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--rebuild-every",
        type=int,
        default=0,
        metavar="K",
        help="the periodic whole read before every K-th round",
    )
    parser.add_argument("--sqlite", action="store_true", help="SQLite even when PostgreSQL answers")
    parser.add_argument("--profile", metavar="PATH", help="cProfile the wakes and cycles into PATH")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    with tempfile.TemporaryDirectory() as scratch:
        server = postgres_server_url()
        drop = f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"
        error = "--sqlite" if args.sqlite else admin_sql(server, drop, f"CREATE DATABASE {DATABASE}")
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
        command += ["--rebuild-every", str(args.rebuild_every)]
        if args.profile:
            command += ["--profile", str(Path(args.profile).resolve())]
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
    print("                        median ms   p99 ms   max ms")
    for key, label in (
        ("release_ms", "release"),
        ("wake_ms", "wake"),
        ("cycle_ms", "cycle"),
        ("placed_ms", "release to placement"),
        ("newcomer_ms", "new pod to placement"),
    ):
        median, p99, worst = row[key]
        print(f"  {label:<20} {median:>10} {p99:>8} {worst:>8}")
    print(f"  new pods placed while the tenant was released every 100 ms ({row['releases']} releases)")
    print(f"  woken per release (median): {row['woken']:.0f} of {row['pending']}")
    print(f"  whole reads of the standing snapshot: {row['rebuilds']} ({row['carried']} carried over)")
    print(
        f"  full collections in the rounds: the collector's {row['full_collections']} (longest"
        f" {row['full_collection_ms']} ms), the standing snapshot's {row['own_collections']}"
        f" (longest {row['own_collection_ms']} ms)"
    )
    print(
        f"  before: waking every backed-off pod in the request: {row['wake_all_ms']} ms ({row['woken_all']} pods)"
    )


if __name__ == "__main__":
    main()
