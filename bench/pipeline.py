"""Pipeline benchmark: pods per second from pending to committed allocation, and the
latency from a release to the placement of a pod waiting for that capacity.

    python -m bench.pipeline [--nodes 100,1000] [--pods 5000] [--backends sqlite,postgresql] [--workers 1]

Each run gets a throwaway database: a temporary SQLite file, and a PostgreSQL database
`hamiadmin_bench_<pid>_<random>` (prefix: BENCH_DATABASE_PREFIX) created for that run and dropped after it on the server of
DATABASE_URL (or
postgres://postgres@127.0.0.1:5432 when DATABASE_URL is not PostgreSQL); PostgreSQL is
skipped when that server cannot be reached. The name is new for every run and nothing is
dropped before it is created, so benches at once (even from machines sharing the server,
whose process ids may coincide) never drop each other's database. Each run is a child process (a fresh Django
on its own database); the parent prints the table.

Measured per run: 8 cards per node (A100 40 GB, 10 slots), `--pods` pods queued at once
(24 shapes by default, `--mix realistic`: 1-8 card asks, MiB and percentage memory,
cores, binpack/spread/topology-aware/numa chains, numa-bind; `--mix simple` keeps the 5
shapes measured before issue 29, for comparison; as a burst of submissions leaves them), then cycles back to back until
the queue is empty: throughput = placed / time. `submit_pod/s` is the write path alone,
one transaction per pod. Release latency: a pod pinned to a full card waits, the in-process
scheduler loop runs, and the time from the release's commit to the waiting pod's commit
is taken, several times. `--workers 2` drains the queue with two processes at once
(single-flight off: with it on, the second would only wait on the cycle lock).
`--pools N` splits the nodes into N node pools (`hami.io/node-pool`, round robin), each pod
selecting one, and drains them with one planner per pool (`HAMI_NODE_POOL`, single-flight on,
each pool under its own lock); the release latency and the write path are not measured then
(their pods select no pool, and no planner runs for those).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

REPO = Path(__file__).resolve().parent.parent


# --- the parent: databases, children, table ----------------------------------------------


def bench_database_name(kind: str = "") -> str:
    """A PostgreSQL database name no other run uses: `BENCH_DATABASE_PREFIX` (default
    `hamiadmin_bench`), the bench's `kind`, the process id and 32 random bits."""
    prefix = os.environ.get("BENCH_DATABASE_PREFIX", "hamiadmin_bench") + (f"_{kind}" if kind else "")
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"


def postgres_server_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if urlparse(url).scheme in ("postgres", "postgresql", "pgsql"):
        return url
    return "postgres://postgres@127.0.0.1:5432/postgres"


def with_database(url: str, name: str) -> str:
    return urlunparse(urlparse(url)._replace(path=f"/{name}"))


def admin_sql(url: str, *statements: str) -> str | None:
    """Run statements on the server's `postgres` database; the error text, or None."""
    try:
        import psycopg

        with psycopg.connect(with_database(url, "postgres"), autocommit=True, connect_timeout=3) as conn:
            for statement in statements:
                conn.execute(statement)
    except Exception as exc:  # noqa: BLE001 - reported as "skipped"
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def run_child(database_url: str, backend: str, nodes: int, pods: int, scratch: str, flags=()) -> dict:
    """One child run; `flags` are the child's own options (`child_flags`)."""
    env = {key: value for key, value in os.environ.items() if key not in ("REDIS_URL",)}
    env.update(
        {
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "hamiadmin.settings",
            "LOG_LEVEL": "WARNING",
            "HAMIADMIN_VAR_DIR": scratch,
        }
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.pipeline",
            "--child",
            backend,
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            *(flag.format(nodes=nodes) for flag in flags),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        return {"backend": backend, "nodes": nodes, "error": (out.stderr or out.stdout).strip()[-800:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'backend':<11} {'nodes':>5} {'cards':>6} {'pods':>5} {'placed':>6} {'cycles':>6} {'seconds':>8} "
        f"{'pods/s':>7} {'submit_pod/s':>12} {'release->placed ms (median/max)':>32}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        if "skipped" in row or "error" in row:
            why = row.get("skipped") or "error: " + row["error"].replace("\n", " | ")
            print(f"{row['backend']:<11} {row['nodes']:>5}  {why}")
            continue
        # neither is measured with pools (`main_child`)
        latency = (
            "-"
            if row["release_ms_median"] is None
            else f"{row['release_ms_median']:.0f} / {row['release_ms_max']:.0f}"
        )
        submit = "-" if row["submit_per_second"] is None else f"{row['submit_per_second']:.0f}"
        print(
            f"{row['backend']:<11} {row['nodes']:>5} {row['cards']:>6} {row['pods']:>5} {row['placed']:>6} "
            f"{row['cycles']:>6} {row['seconds']:>8.2f} {row['pods_per_second']:>7.0f} "
            f"{submit:>12} {latency:>32}"
        )
    print()
    print(
        "pods/s: pending -> committed allocation, cycles back to back (snapshot, engine, one commit each),"
        " by a worker that read the cluster before the burst (--cold: the first cycle reads it)."
    )
    print(
        "Per-cycle phases (ms, mean): "
        + "; ".join(
            f"{row['backend']}/{row['nodes']}: snapshot {row['snapshot_ms']:.0f}, decide {row['decide_ms']:.0f}, "
            f"commit {row['commit_ms']:.0f}"
            + (f" (whole read before the burst {row['warm_read_ms']:.0f})" if row.get("warm_read_ms") else "")
            + (
                f"; worker CPU {row['worker_cpu_ms_per_pod']:.3f} ms/pod"
                if row.get("worker_cpu_ms_per_pod") is not None
                else ""
            )
            for row in rows
            if "pods_per_second" in row
        ),
        flush=True,
    )


def main_parent(args) -> None:
    rows = []
    scratch = tempfile.mkdtemp(prefix="hamiadmin-bench-")
    try:
        for backend in args.backends.split(","):
            for nodes in (int(n) for n in args.nodes.split(",")):
                print(
                    f"running {backend} with {nodes} nodes x 8 cards, {args.pods} pods, "
                    f"{args.workers} worker{'s' if args.workers != 1 else ''}, {args.mix} mix ...",
                    file=sys.stderr,
                    flush=True,
                )
                rows.append(run_backend(backend, nodes, args.pods, scratch, child_flags(args)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    sys.stderr.flush()
    print_table(rows)


def child_flags(args) -> list[str]:
    """The options a child run takes from the parent's (`{nodes}` filled in per size)."""
    flags = ["--workers", str(args.workers), "--mix", args.mix, "--pools", str(args.pools)]
    if args.profile:
        flags += ["--profile", args.profile + ".{nodes}"]
    return flags + (["--cold"] if args.cold else [])


def run_backend(backend: str, nodes: int, pods: int, scratch: str, flags=()) -> dict:
    if backend == "sqlite":
        database = Path(scratch) / f"bench-{nodes}.sqlite3"
        try:
            return run_child(f"sqlite:///{database}", backend, nodes, pods, scratch, flags)
        finally:
            for leftover in Path(scratch).glob(f"{database.name}*"):
                leftover.unlink()
    if backend == "postgresql":
        server = postgres_server_url()
        name = bench_database_name()
        error = admin_sql(server, f"CREATE DATABASE {name}")
        if error:
            return {
                "backend": backend,
                "nodes": nodes,
                "skipped": f"skipped: PostgreSQL not reachable ({error})",
            }
        try:
            return run_child(with_database(server, name), backend, nodes, pods, scratch, flags)
        finally:
            admin_sql(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    raise SystemExit(f"unknown backend {backend!r}: sqlite or postgresql")


# --- the child: one database, one cluster size ---------------------------------------------


POD_SHAPES = [
    ({}, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000, "nvidia.com/gpucores": 10}),
    ({}, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 0}),
    (
        {"hami.io/gpu-scheduler-policy": "binpack"},
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000, "nvidia.com/gpucores": 5},
    ),
    ({"hami.io/node-scheduler-policy": "spread"}, {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 10}),
    (
        {"hami.io/gpu-scheduler-policy": "binpack,numa"},
        {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 5},
    ),
]


_BINPACK = {"hami.io/gpu-scheduler-policy": "binpack"}
_SPREAD = {"hami.io/gpu-scheduler-policy": "spread"}
_TOPOLOGY = {"hami.io/gpu-scheduler-policy": "binpack,topology-aware"}
_NUMA = {"hami.io/gpu-scheduler-policy": "binpack,numa"}
_NUMA_BIND = {"nvidia.com/numa-bind": "true"}
_NODE_SPREAD = {"hami.io/node-scheduler-policy": "spread"}
_NODE_BINPACK = {"hami.io/node-scheduler-policy": "binpack"}


def _limits(
    cards: int, memory: int | None = None, percent: int | None = None, cores: int | None = None
) -> dict:
    limits = {"nvidia.com/gpu": cards}
    if memory is not None:
        limits["nvidia.com/gpumem"] = memory
    if percent is not None:
        limits["nvidia.com/gpumem-percentage"] = percent
    if cores is not None:
        limits["nvidia.com/gpucores"] = cores
    return limits


#: Issue 29's realistic mix (the default, `--mix realistic`): 24 shapes, 1-8 card asks, MiB
#: and percentage memory, with and without cores, under binpack, spread, topology-aware and
#: numa chains, numa-bind and both node policies; whole cards (100 % memory) among them.
#: Sized so that 5,000 pods fit 1,000 nodes x 8 cards.
REALISTIC_SHAPES = [
    ({}, _limits(1, memory=2000, cores=10)),
    ({}, _limits(1, memory=4000)),
    ({}, _limits(1, percent=10)),
    ({}, _limits(1, percent=25, cores=20)),
    (_BINPACK, _limits(1, memory=8000, cores=5)),
    (_BINPACK, _limits(1, memory=1000)),
    (_BINPACK, _limits(1, percent=20)),
    (_SPREAD, _limits(1, memory=3000, cores=15)),
    (_SPREAD, _limits(1, percent=5)),
    (_NODE_SPREAD, _limits(1, percent=10)),
    ({**_NODE_BINPACK, **_BINPACK}, _limits(1, memory=6000, cores=10)),
    (_NUMA, _limits(2, memory=3000, cores=5)),
    (_NUMA, _limits(2, percent=15)),
    (_TOPOLOGY, _limits(2, memory=4000)),
    (_TOPOLOGY, _limits(4, memory=2000, cores=10)),
    (_TOPOLOGY, _limits(8, percent=5)),
    ({**_NUMA_BIND, **_BINPACK}, _limits(2, memory=2000)),
    ({**_NUMA_BIND, **_SPREAD}, _limits(4, percent=10, cores=5)),
    ({**_NUMA_BIND, **_TOPOLOGY}, _limits(4, memory=1000)),
    (_SPREAD, _limits(2, memory=5000, cores=20)),
    ({**_NODE_SPREAD, **_SPREAD}, _limits(3, percent=10)),
    ({}, _limits(1, percent=100, cores=100)),
    (_BINPACK, _limits(1, memory=20000, cores=50)),
    (_NUMA, _limits(8, memory=500, cores=2)),
]
#: The mixes `--mix` picks from; `simple` is the five shapes measured before issue 29's mix.
MIXES = {"realistic": REALISTIC_SHAPES, "simple": POD_SHAPES}


#: The node label of `--pools` (pipeline.pools' default).
POOL_LABEL = "hami.io/node-pool"


def pool_names(pools: int) -> list[str]:
    """`--pools`' pool names; none for one pool (no pools)."""
    return [f"pool{i}" for i in range(pools)] if pools > 1 else []


def build_cluster(nodes: int, pools: int = 1) -> None:
    from django.utils import timezone

    from scheduling.models import Card, Node

    now = timezone.now()
    names = pool_names(pools)
    Node.objects.bulk_create(
        [
            Node(
                name=f"node{n:04d}",
                ready=True,
                last_heartbeat=now,
                labels={POOL_LABEL: names[n % pools]} if names else {},
            )
            for n in range(nodes)
        ],
        batch_size=1000,
    )
    ids = dict(Node.objects.values_list("name", "id"))
    Card.objects.bulk_create(
        [
            Card(
                uuid=f"GPU-{n:04d}-{i}",
                node_id=ids[f"node{n:04d}"],
                index=i,
                type="NVIDIA-A100-SXM4-40GB",
                memory=40960,
                numa=i // 4,
            )
            for n in range(nodes)
            for i in range(8)
        ],
        batch_size=2000,
    )


def queue_pods(count: int, shapes: list = POD_SHAPES, pools: int = 1) -> None:
    """A burst of submissions, as the queue holds it (the write path is measured apart); with
    pools, pod n selects pool n mod pools."""
    from django.utils import timezone

    from scheduling.models import Pod

    now = timezone.now()
    names = pool_names(pools)
    Pod.objects.bulk_create(
        [
            Pod(
                namespace="bench",
                name=f"pod{n:05d}",
                annotations=shapes[n % len(shapes)][0],
                containers=[{"name": "main", "resources": {"limits": shapes[n % len(shapes)][1]}}],
                scheduling={"nodeSelector": {POOL_LABEL: names[n % pools]}} if names else {},
                submitted_at=now,
            )
            for n in range(count)
        ],
        batch_size=1000,
    )


def measure_submit(count: int = 300, shapes: list = POD_SHAPES) -> float:
    from scheduling import services

    started = time.perf_counter()
    for n in range(count):
        annotations, limits = shapes[n % len(shapes)]
        services.submit_pod(
            "submit", f"s{n:04d}", annotations, [{"name": "main", "resources": {"limits": limits}}]
        )
    return count / (time.perf_counter() - started)


def measure_release_latency(rounds: int = 5) -> list[float]:
    """A pod pinned to a full card waits; releasing one tenant of that card must place it."""
    from scheduling import services
    from scheduling.models import Allocation, Pod
    from scheduling.pipeline.loop import SchedulerLoop

    placed_at: dict[str, float] = {}
    placed = threading.Event()

    def on_cycle(report):
        for key, _, _ in report.placed:
            placed_at[key] = time.perf_counter()
        placed.set()

    loop = SchedulerLoop(on_cycle=on_cycle)
    loop.start()
    latencies = []
    try:
        for round_ in range(rounds):
            allocation = (
                Allocation.objects.filter(active=True, pod__status=Pod.SCHEDULED, pod__namespace="bench")
                .select_related("card", "pod")
                .order_by("card__used_memory")
                .last()
            )
            gpu, tenant = allocation.card, allocation.pod
            ask = gpu.memory - gpu.used_memory + allocation.memory
            name = f"waiting{round_}"
            services.submit_pod(
                "latency",
                name,
                {"nvidia.com/use-gpuuuid": gpu.uuid},
                [
                    {
                        "name": "main",
                        "resources": {"limits": {"nvidia.com/gpumem": ask, "nvidia.com/gpucores": 0}},
                    }
                ],
            )
            deadline = time.monotonic() + 30
            while Pod.objects.get(namespace="latency", name=name).attempts == 0:
                if time.monotonic() > deadline:
                    raise RuntimeError("the waiting pod was never tried")
                time.sleep(0.02)
            released = time.perf_counter()
            services.release_pod(tenant, Pod.SUCCEEDED)
            key = f"latency/{name}"
            while key not in placed_at:
                if time.perf_counter() - released > 30:
                    raise RuntimeError("the waiting pod was not placed within 30 s of the release")
                placed.wait(0.05)
                placed.clear()
            latencies.append((placed_at[key] - released) * 1000)
    finally:
        loop.stop()
    return latencies


def drain_queue() -> tuple[list, float]:
    """Cycles back to back until one places nothing: the reports that considered pods, and
    the seconds it took."""
    from scheduling.pipeline.flight import run_requested_cycles

    started = time.perf_counter()
    reports = []
    while True:
        batch = run_requested_cycles("bench")
        reports.extend(report for report in batch if report.considered)
        if not batch or not batch[-1].considered or not batch[-1].placed:
            break
    return reports, time.perf_counter() - started


def warm_worker() -> float:
    """Read the cluster into this process's standing snapshot before the burst, as a worker
    that has been running has: the drain then times the cycles, not the first whole read
    (which `--cold` keeps in). The milliseconds the read took."""
    from scheduling.pipeline.standing import STANDING

    started = time.perf_counter()
    with STANDING.use():
        pass
    return (time.perf_counter() - started) * 1000


def start_drainer(cold: bool = False, pool: str = "") -> subprocess.Popen:
    """Another worker process on the same database (`--drain`): it reads the cluster (unless
    `cold`), says `ready`, and drains the queue once told `go` (`release_drainers`); `pool`:
    the node pool it plans."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.pipeline", "--drain", *(["--cold"] if cold else [])],
        cwd=REPO,
        env={**os.environ, **({"HAMI_NODE_POOL": pool} if pool else {})},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        raise RuntimeError("a drainer did not start")
    return process


def release_drainers(drainers: list[subprocess.Popen]) -> None:
    """Tell the drainers to start, as the main worker starts its own drain."""
    for drainer in drainers:
        assert drainer.stdin is not None
        drainer.stdin.write("go\n")
        drainer.stdin.flush()


def finished_after(process: subprocess.Popen) -> float:
    """Seconds from the drainer's `go` until it found the queue empty (what it printed)."""
    out = (process.stdout.read() if process.stdout else "").strip().splitlines()
    return float(json.loads(out[-1])["seconds"]) if out else 0.0


def main_drain(cold: bool = False) -> None:
    import django

    django.setup()
    if not cold:
        warm_worker()  # as the main worker: a running worker has read the cluster
    print("ready", flush=True)
    sys.stdin.readline()
    _, seconds = drain_queue()
    print(json.dumps({"seconds": seconds}))


def main_child(args) -> None:
    if args.workers > 1:  # single flight would keep all but one waiting on the cycle lock
        os.environ["HAMI_SINGLE_FLIGHT"] = "0"
    pools = pool_names(args.pools)
    if pools:  # this process plans the first pool, a drainer each of the others
        os.environ["HAMI_NODE_POOLS"] = ",".join(pools)
        os.environ["HAMI_NODE_POOL"] = pools[0]
    import django

    django.setup()
    from django.core.management import call_command

    from scheduling.models import Cycle, Pod

    call_command("migrate", verbosity=0, interactive=False)
    build_cluster(args.nodes, args.pools)
    read_ms = 0.0 if args.cold else warm_worker()
    others = [start_drainer(args.cold) for _ in range(args.workers - 1)]  # each reads the cluster first
    others += [start_drainer(args.cold, pool) for pool in pools[1:]]
    queue_pods(args.pods, MIXES[args.mix], args.pools)
    release_drainers(others)
    if args.profile:  # cProfile of the drain alone (the cluster and queue are built already)
        import cProfile

        profiler = cProfile.Profile()
        reports, seconds = profiler.runcall(drain_queue)
        profiler.dump_stats(args.profile)
    else:
        cpu = time.process_time()
        reports, seconds = drain_queue()
        cpu = time.process_time() - cpu
    for other in others:
        other.wait(600)
    seconds = max(seconds, *(finished_after(other) for other in others)) if others else seconds
    placed = (
        Pod.objects.filter(status=Pod.SCHEDULED).count() if others else sum(len(r.placed) for r in reports)
    )
    cycles = Cycle.objects.exclude(finished_at=None).count() if others else len(reports)
    # with pools, nobody plans the pods these two submit (they select no pool)
    submit_rate = None if pools else measure_submit(shapes=MIXES[args.mix])
    latencies = [] if pools else measure_release_latency()
    print(
        json.dumps(
            {
                "backend": args.child,
                "nodes": args.nodes,
                "cards": args.nodes * 8,
                "pods": args.pods,
                "mix": args.mix,
                "placed": placed,
                "cycles": cycles,
                "pools": args.pools,
                "seconds": seconds,
                "pods_per_second": placed / seconds,
                "submit_per_second": submit_rate,
                "release_ms_median": statistics.median(latencies) if latencies else None,
                "release_ms_max": max(latencies, default=None),
                "snapshot_ms": statistics.mean(r.snapshot_ms for r in reports),
                "decide_ms": statistics.mean(r.decide_ms for r in reports),
                "commit_ms": statistics.mean(r.commit_ms for r in reports),
                "warm_read_ms": read_ms,
                # this worker's CPU (every thread) over the drain, per pod it placed: steadier
                # than pods/s on a shared machine (PostgreSQL's share is not in it)
                "worker_cpu_ms_per_pod": None
                if args.profile or others
                else cpu * 1000 / max(1, sum(len(r.placed) for r in reports)),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="100,1000", help="comma list of cluster sizes (8 cards each)")
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes draining the queue at once (more than one: single-flight off)",
    )
    parser.add_argument(
        "--mix",
        choices=sorted(MIXES),
        default="realistic",
        help="pod shapes: realistic (24, issue 29) or simple (the 5 measured before)",
    )
    parser.add_argument(
        "--profile",
        default="",
        help="write a cProfile of the drain (one worker) to this file, per cluster size: FILE.<nodes>",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="start the drain with the worker's first whole read of the cluster (default: read before the burst)",
    )
    parser.add_argument(
        "--pools",
        type=int,
        default=1,
        help="node pools, each drained by its own planner process (pipeline.pools); 1: none",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--drain", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drain:
        main_drain(args.cold)
    elif args.child:
        args.nodes = int(args.nodes)
        main_child(args)
    else:
        main_parent(args)


if __name__ == "__main__":
    main()
