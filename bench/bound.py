"""Memory of the kube agent's all-pods cache (`kube.bound`): every bound pod of a large
cluster projected to a `BoundView`, kept as the informer keeps them.

    python -m bench.bound [--nodes 10000] [--pods-per-node 110]

Pods are built as the API server sends them: a Deployment's pods share their labels and
requests (20 distinct workloads per node pool), each has its own name and uid, one in ten a
host port, one in twenty required anti-affinity, one in fifty HAMi's allocation annotation.
Each raw pod is dropped once projected, as a watch event is. The figure is what the cache
holds after the last pod (tracemalloc, so Python's own allocations only), and per pod.
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc
import uuid

import django


def raw_pod(node: int, slot: int) -> dict:
    workload = (node * 7 + slot) % 20
    pod = {
        "metadata": {
            "name": f"web-{workload}-7d9c8b6f5d-{node:05d}{slot:03d}",
            "namespace": f"team-{workload % 8}",
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(node * 1000 + slot),
            "labels": {"app": f"web-{workload}", "pod-template-hash": "7d9c8b6f5d", "tier": "backend"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-12-01T00:00:00Z"},
        },
        "spec": {
            "nodeName": f"node-{node:05d}",
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/web:1.2.3",
                    "resources": {
                        "requests": {
                            "cpu": f"{100 * (1 + workload % 5)}m",
                            "memory": f"{128 * (1 + workload % 4)}Mi",
                        },
                        "limits": {"cpu": "2", "memory": "2Gi"},
                    },
                    "ports": [{"containerPort": 8080, **({"hostPort": 9100} if slot % 10 == 0 else {})}],
                },
                {
                    "name": "sidecar",
                    "image": "envoy",
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                },
            ],
        },
        "status": {"phase": "Running"},
    }
    if slot % 20 == 0:
        pod["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": f"web-{workload}"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    if slot % 50 == 0:
        pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = f"GPU-{node}-0,NVIDIA,4000,30:;"
    return pod


def measure(nodes: int, per_node: int) -> tuple[float, float, float]:
    """(MiB held, bytes per pod, seconds) for `nodes` x `per_node` projected pods."""
    from kube.bound import BoundPodSync
    from kube.informer import cache_key

    sync = BoundPodSync(lambda: True, gpu_resources=lambda: {"nvidia.com/gpu"})
    tracemalloc.start()
    started = time.perf_counter()
    cache = {}
    for node in range(nodes):
        for slot in range(per_node):
            obj = raw_pod(node, slot)
            cache[cache_key(obj)] = sync.project(obj)
    seconds = time.perf_counter() - started
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    count = nodes * per_node
    assert len(cache) == count
    return held / 2**20, held / count, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods-per-node", type=int, default=110)
    options = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hamiadmin.settings")
    django.setup()
    mib, per_pod, seconds = measure(options.nodes, options.pods_per_node)
    print(
        f"{options.nodes} nodes x {options.pods_per_node} pods: {mib:.0f} MiB held by the all-pods cache "
        f"({per_pod:.0f} bytes per pod), projected in {seconds:.1f} s"
    )


if __name__ == "__main__":
    main()
