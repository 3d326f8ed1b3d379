"""`make bench` (engine part): decision latency over synthetic clusters.

Prints, for clusters of 100, 1,000 and 5,000 nodes x 8 cards, the median, mean and p99
milliseconds per pod decision and pods per second over a mixed stream (single and
multi-card, mixed chains and node policies, some unschedulable) and, as BENCH_MIX (default
`gpu,k8s,k8s-apart`) names them, the same over nodes with labels, taints, cordons and
allocatable where half the pods carry a nodeSelector, tolerations and cpu/memory requests and
a tenth a hard zone spread or a hostname anti-affinity (`with_pod_fields`: `k8s` draws them
per GPU template, `k8s-apart` apart from it; issue 27), then times
`manage.py simulate --top 10` beside the numpy lower bound `bench.limit` on the same file,
each a fresh process (start included), and prints both, their ratio and the placed/pending
counts of each from that one run (issue 18: 5,000 nodes x 8 cards, 10,000 pods, at most 5x).
BENCH_SIM_NODES (a comma list, default 5000), BENCH_SIM_PODS (10000), BENCH_SIM_RUNS (1: the
best of that many, alternating); BENCH_SIMULATE=0 skips it. BENCH_NODES (default
100,1000,5000) are the decision-latency sizes; empty, that part is skipped. Decisions keep
BENCH_KEEP (20) nodes of their ranking, as the pipeline keeps `HAMI_DECISION_TOP`; 0 keeps
them all (what `simulate` without `--top` prints). Then the engine's resident size at
BENCH_MEMORY_NODES (10000; empty skips it) x 8 cards with 100 shapes cached.
"""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scheduling.engine.scenario import parse_scenario
from scheduling.engine.scheduler import Scheduler

MODELS = [("NVIDIA-Tesla T4", 15360), ("NVIDIA-A100-SXM4-40GB", 40960), ("NVIDIA-H100 80GB HBM3", 81559)]
CHAINS = [
    "binpack",
    "spread",
    "mutex,binpack",
    "numa,binpack",
    "spread,numa",
    "topology-aware,binpack",
    "mutex",
]


def synthetic_nodes(count: int, cards_per_node: int = 8, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    nodes = []
    for n in range(count):
        model, memory = MODELS[n % len(MODELS)]
        devices = []
        for i in range(cards_per_node):
            uuid = f"GPU-{n:05d}-{i}"
            links = {
                f"GPU-{n:05d}-{j}": (200 if (i // 4) == (j // 4) else 20)
                for j in range(i + 1, cards_per_node)
            }
            used_slots = rng.choice([0, 0, 0, 1, 2])
            devices.append(
                {
                    "uuid": uuid,
                    "index": i,
                    "type": model,
                    "memory": memory,
                    "numa": i // 4,
                    "health": rng.random() > 0.01,
                    "used": {"slots": used_slots, "memory": used_slots * 2000, "cores": used_slots * 10},
                    "links": links,
                }
            )
        nodes.append({"name": f"node-{n:05d}", "devices": devices})
    return nodes


def synthetic_pods(count: int, seed: int = 11, cold: bool = False) -> list[dict]:
    """The mixed stream; with `cold`, every pod asks a gpumem drawn afresh (a new shape each)."""
    rng = random.Random(seed)
    pods = []
    for p in range(count):
        kind = rng.random()
        if kind < 0.55:
            limits = {
                "nvidia.com/gpu": 1,
                "nvidia.com/gpumem": rng.randint(500, 20000) if cold else rng.choice([1000, 2000, 4000]),
                "nvidia.com/gpucores": rng.choice([0, 10, 20]),
            }
        elif kind < 0.75:
            limits = {"nvidia.com/gpu": rng.choice([2, 4])}
            if cold:
                limits["nvidia.com/gpumem"] = rng.randint(500, 20000)
            else:
                limits["nvidia.com/gpumem-percentage"] = rng.choice([25, 50])
        elif kind < 0.85:
            limits = {"nvidia.com/gpu": 1}  # whole card, exclusive
            if cold:
                limits["nvidia.com/gpumem"] = rng.randint(500, 15000)
        elif kind < 0.95:
            # fits only on H100 nodes with room
            limits = {"nvidia.com/gpu": 8, "nvidia.com/gpumem": rng.randint(55000, 65000) if cold else 60000}
        else:
            limits = {"nvidia.com/gpu": 16}  # never fits: NodeInsufficientDevice everywhere
            if cold:
                limits["nvidia.com/gpumem"] = rng.randint(500, 20000)
        annotations = {"hami.io/gpu-scheduler-policy": rng.choice(CHAINS)}
        if rng.random() < 0.3:
            annotations["hami.io/node-scheduler-policy"] = rng.choice(["binpack", "spread"])
        if rng.random() < 0.1:
            annotations["nvidia.com/use-gputype"] = "A100"
        pods.append(
            {
                "name": f"pod-{p:05d}",
                "namespace": "bench",
                "annotations": annotations,
                "containers": [{"name": "main", "resources": {"limits": limits}}],
            }
        )
    return pods


POOLS = ("training", "inference", "batch", "dev")
ZONES = tuple(f"zone-{z}" for z in "abcdefgh")
APPS = tuple(f"app-{a}" for a in range(20))


def with_node_fields(nodes: list[dict], seed: int = 17) -> list[dict]:
    """The nodes of `synthetic_nodes` as a Kubernetes cluster has them (SPEC 10): labels (a
    pool, a zone, the hostname), a tenth tainted for a team, one in fifty cordoned, and
    allocatable cpu, memory and a pod count."""
    rng = random.Random(seed)
    for n, node in enumerate(nodes):
        node["labels"] = {
            "pool": POOLS[n % len(POOLS)],
            "topology.kubernetes.io/zone": ZONES[(n // 7) % len(ZONES)],
            "kubernetes.io/hostname": node["name"],
        }
        if rng.random() < 0.1:
            node["taints"] = [{"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}]
        if rng.random() < 0.02:
            node["unschedulable"] = True
        node["allocatable"] = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    return nodes


def with_pod_fields(pods: list[dict], seed: int = 19, templates: bool = True) -> list[dict]:
    """The node-constraint mix of issue 27: half the pods carry a nodeSelector, tolerations
    and cpu/memory requests (one set per pool); a tenth carry a hard zone spread or a
    required anti-affinity by hostname (half each), over twenty apps. With `templates`, which
    of these a pod carries follows its GPU ask, as the pods of one Deployment are alike;
    without, it is drawn apart from it, so every GPU shape meets every node-constraint set
    (about four times the shapes, each cached and kept up to date on its own)."""
    rng = random.Random(seed)
    for pod in pods:
        if templates:
            rng = random.Random(json.dumps(pod["containers"][0]["resources"], sort_keys=True) + str(seed))
        kind = rng.random()
        app = rng.choice(APPS)
        pod["labels"] = {"app": app}
        if kind < 0.5:  # each pool's pods from one template, as a team's deployments are
            pool = rng.randrange(len(POOLS))
            pod["nodeSelector"] = {"pool": POOLS[pool]}
            pod["tolerations"] = [
                {"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"}
            ]
            requests = {"cpu": ("4", "1", "2", "500m")[pool], "memory": ("16Gi", "4Gi", "8Gi", "1Gi")[pool]}
            pod["containers"][0]["resources"]["requests"] = requests
        elif kind < 0.55:
            pod["topologySpreadConstraints"] = [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": app}},
                }
            ]
        elif kind < 0.6:
            pod["affinity"] = {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app": app}},
                        }
                    ]
                }
            }
    return pods


def measure(nodes: int, pods: int, cold_pods: int = 200, mix: str = "gpu") -> dict:
    node_list, pod_list = synthetic_nodes(nodes), synthetic_pods(pods)
    if mix != "gpu":
        node_list = with_node_fields(node_list)
        pod_list = with_pod_fields(pod_list, templates=mix == "k8s")
    cluster, config, pod_specs = parse_scenario({"nodes": node_list, "pods": pod_list})
    keep = int(os.environ.get("BENCH_KEEP", "20")) or None
    scheduler = Scheduler(cluster, config, keep=keep)
    latencies = []
    placed = 0
    started = time.perf_counter()
    cpus = []
    for pod in pod_specs:
        t0, c0 = time.perf_counter(), time.process_time()
        decision = scheduler.schedule(pod)
        latencies.append((time.perf_counter() - t0) * 1000)
        cpus.append((time.process_time() - c0) * 1000)
        placed += decision.status == "scheduled"
    elapsed = time.perf_counter() - started
    latencies.sort()
    cold = []
    for pod in pod_specs[:20]:
        scheduler._verdicts.clear()
        t0 = time.perf_counter()
        scheduler.decide(pod)
        cold.append((time.perf_counter() - t0) * 1000)
    # every pod a new shape, placed as it goes, on the cluster the mixed stream left
    fresh, fresh_cpu = [], []
    fresh_pods = synthetic_pods(cold_pods, seed=13, cold=True)
    if mix != "gpu":
        fresh_pods = with_pod_fields(fresh_pods, seed=23, templates=mix == "k8s")
    for pod in parse_scenario({"nodes": [], "pods": fresh_pods})[2]:
        t0, c0 = time.perf_counter(), time.process_time()
        scheduler.schedule(pod)
        fresh.append((time.perf_counter() - t0) * 1000)
        fresh_cpu.append((time.process_time() - c0) * 1000)
    fresh.sort()
    return {
        "nodes": nodes,
        "cards": nodes * 8,
        "pods": pods,
        "placed": placed,
        "median_ms": statistics.median(latencies),
        "mean_ms": statistics.fmean(latencies),
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1],
        "max_ms": latencies[-1],
        "pods_per_s": pods / elapsed,
        "cold_ms": statistics.median(cold),
        "new_shape_ms": statistics.median(fresh),
        "new_shape_p90_ms": fresh[int(len(fresh) * 0.9)],
        # CPU time: what a shared, loaded machine changes least
        "new_shape_cpu_ms": statistics.median(fresh_cpu),
        "cpu_ms": statistics.median(cpus),
    }


#: `manage.py simulate` and the numpy lower bound, run on the same scenario file
SIMULATE = ("manage.py", "simulate", "{path}", "--top", "10", "--indent", "0")
LOWER_BOUND = ("-m", "bench.limit", "{path}", "--top", "10")


def statuses(path: Path) -> dict[str, int]:
    """How many pods of an answer file (`{"pods": [...]}`) came out with each status."""
    with open(path, encoding="utf-8") as handle:
        pods = json.load(handle)["pods"]
    counts = {"scheduled": 0, "pending": 0, "rejected": 0}
    for pod in pods:
        counts[pod["status"]] += 1
    return counts


def time_simulate(nodes: int = 5000, pods: int = 10000, runs: int = 1) -> dict:
    """Wall seconds of `manage.py simulate --top 10` and of the numpy lower bound
    (`bench.limit`) on the same scenario file, each a fresh process (start included) writing
    its answer to a file; the best of `runs`, the two alternating so that load on a shared
    machine falls on both. With the status counts of each answer: both must decide every pod,
    and alike, or the ratio compares different work."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "hamiadmin.settings"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.json"
        path.write_text(json.dumps({"nodes": synthetic_nodes(nodes), "pods": synthetic_pods(pods)}))
        commands = {
            "simulate": [sys.executable, *(arg.format(path=path) for arg in SIMULATE)],
            "bound": [sys.executable, *(arg.format(path=path) for arg in LOWER_BOUND)],
        }
        walls: dict[str, float] = {}
        cpus: dict[str, float] = {}
        for _ in range(max(1, runs)):
            for name, command in commands.items():
                with open(Path(tmp) / f"{name}.json", "wb") as out:
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    started = time.perf_counter()
                    subprocess.run(command, check=True, stdout=out, cwd=root, env=env)
                    wall = time.perf_counter() - started
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                walls[name] = min(wall, walls.get(name, wall))
                cpus[name] = min(cpu, cpus.get(name, cpu))
        counts = {name: statuses(Path(tmp) / f"{name}.json") for name in commands}
    for name, count in counts.items():
        if sum(count.values()) != pods:
            raise SystemExit(f"bench: {name} answered {sum(count.values())} of {pods} pods")
    return {"nodes": nodes, "pods": pods, "walls": walls, "cpus": cpus, "counts": counts}


def simulate_line(result: dict) -> str:
    """Both times, their ratio and what each decided, on one line; the CPU seconds of each
    process too, which other load on a shared machine moves less than the wall time."""
    walls, cpus, counts = result["walls"], result["cpus"], result["counts"]
    sim, bound = counts["simulate"], counts["bound"]
    line = (
        f"simulate --top 10, {result['nodes']} nodes x 8 cards, {result['pods']} pods, process start included:"
        f" simulate {walls['simulate']:.2f} s, numpy lower bound (bench.limit) {walls['bound']:.2f} s,"
        f" ratio {walls['simulate'] / walls['bound']:.1f}x (issue 18: at most 5x);"
        f" CPU {cpus['simulate']:.2f} s vs {cpus['bound']:.2f} s, ratio {cpus['simulate'] / cpus['bound']:.1f}x;"
        f" placed/pending {sim['scheduled']}/{sim['pending']} vs {bound['scheduled']}/{bound['pending']}"
    )
    # the bound leaves out NUMA and topology card choices: on a cluster that fills up, other
    # cards taken can change what fits later (a few pods in 10,000 at 1,000 nodes)
    return line + ("" if sim == bound else " (counts differ: see bench.limit, what it leaves out)")


def print_latencies(sizes: list[int], pods: int, mix: str = "gpu") -> None:
    """The decision-latency table: one row per cluster size."""
    keep = os.environ.get("BENCH_KEEP", "20")
    what = {
        "gpu": "mixed stream",
        "k8s": "node-constraint mix (SPEC 10), constraints per GPU template",
        "k8s-apart": "node-constraint mix (SPEC 10), constraints drawn apart from the GPU ask",
    }[mix]
    print(
        f"engine: one decision per pod, {what} of {pods} pods, 8 cards per node, keeping {keep} nodes (0: all)"
    )
    print("(cold ms: median of one decision with the node-verdict cache emptied first;")
    print(" new shape ms: median and p90 of BENCH_COLD_PODS pods, each asking a gpumem drawn afresh;")
    print(" cpu ms / new cpu: the medians in process CPU time, less moved by other load)")
    print(
        f"{'nodes':>6} {'cards':>6} {'placed':>7} {'median ms':>10} {'mean ms':>8} {'p99 ms':>8} {'max ms':>8}"
        f" {'pods/s':>8}"
        f" {'cold ms':>8} {'new shape ms':>12} {'p90':>6} {'cpu ms':>7} {'new cpu':>7}"
    )
    cold_pods = int(os.environ.get("BENCH_COLD_PODS", "200"))
    for size in sizes:
        r = measure(size, pods, cold_pods, mix)
        print(
            f"{r['nodes']:>6} {r['cards']:>6} {r['placed']:>7} {r['median_ms']:>10.3f} {r['mean_ms']:>8.3f}"
            f" {r['p99_ms']:>8.2f} {r['max_ms']:>8.1f} {r['pods_per_s']:>8.0f} {r['cold_ms']:>8.1f} {r['new_shape_ms']:>12.2f}"
            f" {r['new_shape_p90_ms']:>6.1f} {r['cpu_ms']:>7.3f} {r['new_shape_cpu_ms']:>7.2f}"
        )


def resident_mib() -> float:
    """This process's resident memory now (Linux), in MiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def memory_line(nodes: int, shapes: int = 100) -> str:
    """The engine's resident size at `nodes` x 8 cards with `shapes` pod shapes cached
    (issue 18: under 1 GiB at 10,000 nodes with 100 shapes): the process before the cluster
    is read, with the cluster, and with every shape decided once (and a few placed)."""
    start = resident_mib()
    cluster, config, _ = parse_scenario({"nodes": synthetic_nodes(nodes), "pods": []})
    keep = int(os.environ.get("BENCH_KEEP", "20")) or None
    scheduler = Scheduler(cluster, config, keep=keep, cached_shapes=shapes)
    loaded = resident_mib()
    asks = [{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000 + 100 * n} for n in range(shapes)]
    pods = parse_scenario(
        {
            "nodes": [],
            "pods": [
                {"name": f"shape{n}", "containers": [{"name": "main", "resources": {"limits": limits}}]}
                for n, limits in enumerate(asks)
            ],
        }
    )[2]
    for n, pod in enumerate(pods):
        if n % 10 == 0:
            scheduler.schedule(pod)
        else:
            scheduler.decide(pod)
    cached = resident_mib()
    return (
        f"memory, {nodes} nodes x 8 cards: process {start:.0f} MiB, with the cluster {loaded:.0f} MiB, "
        f"with {shapes} shapes cached {cached:.0f} MiB (engine: {cached - start:.0f} MiB; issue 18: under 1 GiB)"
    )


def main() -> None:
    sizes = [int(s) for s in os.environ.get("BENCH_NODES", "100,1000,5000").split(",") if s.strip()]
    pods = int(os.environ.get("BENCH_PODS", "2000"))
    if sizes:
        for mix in os.environ.get("BENCH_MIX", "gpu,k8s,k8s-apart").split(","):
            print_latencies(sizes, pods, mix.strip())
    memory = os.environ.get("BENCH_MEMORY_NODES", "10000")
    if memory:  # in a process of its own: the latency table's clusters would count here
        code = f"from bench.engine import memory_line; print(memory_line({int(memory)}))"
        root = Path(__file__).resolve().parent.parent
        print(
            subprocess.run(
                [sys.executable, "-c", code], cwd=root, check=True, capture_output=True, text=True
            ).stdout.strip(),
            flush=True,
        )
    if os.environ.get("BENCH_SIMULATE", "1") == "1":
        sim_pods = int(os.environ.get("BENCH_SIM_PODS", "10000"))
        runs = int(os.environ.get("BENCH_SIM_RUNS", "1"))
        for sim_nodes in os.environ.get("BENCH_SIM_NODES", "5000").split(","):
            print(simulate_line(time_simulate(int(sim_nodes), sim_pods, runs)), flush=True)


if __name__ == "__main__":
    main()
