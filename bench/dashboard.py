"""Dashboard and API at cluster scale: server time and bytes of every page and list endpoint.

    python -m bench.dashboard [--nodes 1000] [--pods 5000] [--database-url URL] [--repeat 3]

Loads `--nodes` nodes of 8 cards (A100 40 GB, 10 slots) through `services.report_inventory`
and `--pods` pods through `services.submit_pod` (four shapes in five fit; the fifth asks for
more than any card has, a card type nobody has, or more cards than a node holds, so about a
fifth of them stay pending with their reasons), runs cycles until the queue settles, then
fetches every dashboard page and API list endpoint with Django's test client as a signed-in
admin and prints the best of `--repeat` server times and the body size. The targets (issue
15): pages under 1 s and 1 MB, API pages of 100 under 300 ms.

The database is a throwaway SQLite file unless `--database-url` names another one (it must
be empty: the bench migrates it and fills it). `--json FILE` writes the figures too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

PAGE_TARGET_S, PAGE_TARGET_BYTES, API_TARGET_S = 1.0, 1_000_000, 0.3

FITTING = [
    ({}, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000, "nvidia.com/gpucores": 10}),
    ({"hami.io/gpu-scheduler-policy": "binpack"}, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000}),
    ({"hami.io/node-scheduler-policy": "spread"}, {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 10}),
    ({"hami.io/gpu-scheduler-policy": "binpack,numa"}, {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 3000}),
]
WAITING = [
    ({}, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 60000}),
    ({"nvidia.com/use-gputype": "H100"}, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}),
    ({}, {"nvidia.com/gpu": 9, "nvidia.com/gpumem": 1000}),
]


def pod_shape(n: int) -> tuple[dict, dict]:
    if n % 5 == 4:
        return WAITING[(n // 5) % len(WAITING)]
    return FITTING[n % 4]


def load(nodes: int, pods: int) -> dict:
    from scheduling import services
    from scheduling.pipeline.flight import run_requested_cycles

    started = time.perf_counter()
    for n in range(nodes):
        services.report_inventory(
            f"node{n:04d}",
            labels={"zone": f"z{n % 4}"},
            devices=[
                {
                    "uuid": f"GPU-{n:04d}-{i}",
                    "index": i,
                    "type": "NVIDIA-A100-SXM4-40GB",
                    "memory": 40960,
                    "slots": 10,
                    "numa": i // 4,
                }
                for i in range(8)
            ],
        )
    inventory_s = time.perf_counter() - started
    started = time.perf_counter()
    for n in range(pods):
        annotations, limits = pod_shape(n)
        services.submit_pod(
            f"team{n % 7}", f"pod{n:05d}", annotations, [{"name": "main", "resources": {"limits": limits}}]
        )
    submit_s = time.perf_counter() - started
    started = time.perf_counter()
    cycles = 0
    while True:
        batch = run_requested_cycles("bench", max_cycles=20)
        cycles += len(batch)
        if not batch or not batch[-1].placed:
            break
    return {
        "inventory_s": inventory_s,
        "submit_s": submit_s,
        "cycles": cycles,
        "cycles_s": time.perf_counter() - started,
    }


def targets(nodes: int) -> list[tuple[str, str]]:
    """(kind, url) of every page and list endpoint measured."""
    from scheduling.models import Pod

    pending = Pod.objects.filter(status=Pod.PENDING).order_by("id").first()
    placed = Pod.objects.filter(status=Pod.SCHEDULED).order_by("id").first()
    pages = [
        "/",
        "/?page=5&sort=-used_memory",
        "/?q=node09",
        "/pending/",
        "/pending/?reason=CardInsufficientMemory",
        "/pods/",
        "/pods/?status=scheduled&sort=-attempts&page=20",
        "/pods/?q=pod012&namespace=team3",
        f"/nodes/node{nodes // 2:04d}/",
        "/cycles/",
        "/events/",
        "/live/",
    ]
    for pod in (pending, placed):
        if pod is not None:
            pages.append(f"/pods/{pod.namespace}/{pod.name}/")
    api = [
        "/api/v1/",
        "/api/v1/nodes/?limit=100",
        "/api/v1/nodes/?limit=100&cards=0",
        "/api/v1/nodes/?limit=100&offset=900&ordering=-name",
        "/api/v1/cards/?limit=100",
        "/api/v1/pods/?limit=100",
        "/api/v1/pending/?limit=100",
        "/api/v1/decisions/?limit=100",
        "/api/v1/allocations/?limit=100",
        "/api/v1/cycles/?limit=100",
        "/api/v1/events/?limit=100",
    ]
    return [("page", url) for url in pages] + [("api", url) for url in api]


def measure(repeat: int, nodes: int) -> list[dict]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user = get_user_model().objects.create_superuser("bench", "bench@example.invalid", "bench-password")
    client = Client()
    client.force_login(user)
    rows = []
    for kind, url in targets(nodes):
        best, size, status = None, 0, 0
        for _ in range(repeat):
            started = time.perf_counter()
            response = client.get(url)
            body = response.content
            took = time.perf_counter() - started
            best = took if best is None else min(best, took)
            size, status = len(body), response.status_code
        limit = API_TARGET_S if kind == "api" else PAGE_TARGET_S
        ok = status == 200 and best < limit and (kind == "api" or size < PAGE_TARGET_BYTES)
        rows.append({"kind": kind, "url": url, "status": status, "seconds": best, "bytes": size, "ok": ok})
    return rows


def print_table(setup: dict, rows: list[dict], nodes: int, pods: int) -> None:
    from scheduling.models import Card, Pod

    counts = dict(
        (status, Pod.objects.filter(status=status).count()) for status in (Pod.PENDING, Pod.SCHEDULED)
    )
    print(
        f"{nodes} nodes, {Card.objects.count()} cards, {pods} pods "
        f"({counts[Pod.SCHEDULED]} placed, {counts[Pod.PENDING]} pending); "
        f"load: inventory {setup['inventory_s']:.1f} s, submit {setup['submit_s']:.1f} s, "
        f"{setup['cycles']} cycles {setup['cycles_s']:.1f} s"
    )
    print(f"{'kind':<5} {'status':>6} {'ms':>8} {'bytes':>10}  {'target':<6} url")
    for row in rows:
        print(
            f"{row['kind']:<5} {row['status']:>6} {row['seconds'] * 1000:>8.0f} {row['bytes']:>10}  "
            f"{'ok' if row['ok'] else 'MISSED':<6} {row['url']}"
        )
    print(
        f"targets: pages < {PAGE_TARGET_S:.0f} s and < {PAGE_TARGET_BYTES // 1000} kB; API < {API_TARGET_S * 1000:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--database-url", default="", help="an empty database (default: a temporary SQLite file)"
    )
    parser.add_argument("--json", default="", help="also write the figures to this file")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="hamiadmin-dashboard-bench-")
    os.environ["DATABASE_URL"] = args.database_url or f"sqlite:///{Path(scratch) / 'bench.sqlite3'}"
    os.environ.setdefault("HAMIADMIN_VAR_DIR", scratch)
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hamiadmin.settings")
    os.environ.pop("REDIS_URL", None)

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    print(f"loading {args.nodes} nodes x 8 cards and {args.pods} pods ...", file=sys.stderr, flush=True)
    setup = load(args.nodes, args.pods)
    rows = measure(args.repeat, args.nodes)
    print_table(setup, rows, args.nodes, args.pods)
    if args.json:
        Path(args.json).write_text(json.dumps({"setup": setup, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
