"""Submission benchmark: pods per second through `submit_pod` (one transaction per pod)
and `submit_pods` (one transaction per batch), for new pods, unchanged resubmissions (a
relist of a quiet cluster) and new specs (every pod re-queued).

    python -m bench.submit [--pods 5000] [--batch 500] [--backends postgresql,sqlite]

It also prints the server CPU of one `POST pods/` and one `POST pods/<ns>/<name>/complete/`
(the cost the one-request-per-pod load test pays per pod) and of one `POST agents/report/`
of 8 cards whose measurements moved (what every node sends every report period): the
median of up to 1,000 each, through Django's test client in the child (every middleware,
token authentication, the database; Redis too when REDIS_URL is set for it with
BENCH_REDIS_URL).

Each run gets a throwaway database as `bench.pipeline` makes them: a PostgreSQL database
`hamiadmin_bench_<pid>_<random>` created on the server of DATABASE_URL and dropped after
(skipped when that server cannot be reached), or a temporary SQLite file; the work runs in
a child process (a fresh Django on that database) and the parent prints the table.
Pods are validated as the REST API validates them (`validate=True`); no cycle runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from bench.pipeline import POD_SHAPES, admin_sql, bench_database_name, postgres_server_url, with_database

REPO = Path(__file__).resolve().parent.parent
#: (row label, what each phase measures), in the order the child runs them.
PHASES = [
    ("new", "new pods"),
    ("unchanged", "the same pods again"),
    ("requeued", "a new spec for every waiting pod"),
    ("new, REST", "new pods by POST pods/ and POST pods/bulk/ (in-process client, operator token)"),
]


def pod(namespace: str, n: int, memory_step: int = 0) -> dict:
    annotations, limits = POD_SHAPES[n % len(POD_SHAPES)]
    limits = dict(limits)
    if memory_step and "nvidia.com/gpumem" in limits:
        limits["nvidia.com/gpumem"] += memory_step
    return {
        "namespace": namespace,
        "name": f"p{n:05d}",
        "annotations": dict(annotations),
        "containers": [{"name": "main", "resources": {"limits": limits}}],
    }


def one_by_one(namespace: str, count: int, memory_step: int = 0) -> float:
    from scheduling import services

    pods = [pod(namespace, n, memory_step) for n in range(count)]
    started = time.perf_counter()
    for item in pods:
        services.submit_pod(**item)
    return count / (time.perf_counter() - started)


def in_batches(namespace: str, count: int, batch: int, memory_step: int = 0) -> float:
    from scheduling import services
    from scheduling.services.pods import WriteOutcome

    pods = [pod(namespace, n, memory_step) for n in range(count)]
    started = time.perf_counter()
    for start in range(0, count, batch):
        results = services.submit_pods(pods[start : start + batch])
        refused = [r for r in results if r.outcome == WriteOutcome.REFUSED]
        if refused:
            raise RuntimeError(f"{len(refused)} pods refused, e.g. {refused[0].error}")
    return count / (time.perf_counter() - started)


def over_rest(namespace: str, count: int, batch: int) -> float:
    """New pods through the REST API as an operator: `POST pods/` each, or `POST pods/bulk/`
    with `batch` pods a request (`batch` 0)."""
    from rest_framework.test import APIClient

    from scheduling.api.tokens import issue_role_token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_role_token('bench', 'operator')}")
    pods = [pod(namespace, n) for n in range(count)]
    started = time.perf_counter()
    if batch:
        for start in range(0, count, batch):
            answer = client.post("/api/v1/pods/bulk/", {"pods": pods[start : start + batch]}, format="json")
            if answer.status_code != 200 or answer.json()["created"] != len(pods[start : start + batch]):
                raise RuntimeError(f"POST pods/bulk/ answered {answer.status_code}: {answer.content[:300]!r}")
    else:
        for item in pods:
            answer = client.post("/api/v1/pods/", item, format="json")
            if answer.status_code != 201:
                raise RuntimeError(f"POST pods/ answered {answer.status_code}: {answer.content[:300]!r}")
    return count / (time.perf_counter() - started)


def request_cpu(namespace: str, count: int) -> dict[str, float]:
    """Server CPU per request, in ms (median of `count`): `POST pods/` of new pods, then
    `POST pods/<ns>/<name>/complete/` of the same pods once a cycle placed them. Through
    Django's test client in this process: every middleware, token authentication, the
    database and (with REDIS_URL) Redis, no HTTP server or client."""
    from rest_framework.test import APIClient

    from scheduling import services
    from scheduling.api.tokens import issue_agent_token, issue_role_token
    from scheduling.pipeline import run_cycle

    for n in range(max(1, count // 64 + 1)):  # 8 cards of 16,000 MiB a node: room for them all
        cards = [
            {"uuid": f"GPU-{namespace}-{n}-{i}", "index": i, "memory": 16000, "type": "NVIDIA-Tesla T4"}
            for i in range(8)
        ]
        services.report_inventory(f"{namespace}-{n}", {}, {}, cards)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_role_token('bench', 'operator')}")

    def pod_body(n: int) -> dict:
        limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}
        return {
            "namespace": namespace,
            "name": f"c{n:05d}",
            "containers": [{"name": "main", "resources": {"limits": limits}}],
        }

    def median_ms(calls, expected: int) -> float:
        spent = []
        for call in calls:
            started = time.process_time()
            answer = call()
            spent.append(time.process_time() - started)
            if answer.status_code != expected:
                raise RuntimeError(f"answered {answer.status_code}: {answer.content[:300]!r}")
        return round(sorted(spent)[len(spent) // 2] * 1000, 2)

    submit = median_ms(
        (partial(client.post, "/api/v1/pods/", pod_body(n), format="json") for n in range(count)), 201
    )
    while run_cycle(trigger="bench").placed:
        pass
    paths = (f"/api/v1/pods/{namespace}/c{n:05d}/complete/" for n in range(count))
    complete = median_ms((partial(client.post, path) for path in paths), 200)
    # an agent's report of a node that changed only in its measurements (the common case)
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Token {issue_agent_token(f'{namespace}-0')}")
    devices = [
        {"uuid": f"GPU-{namespace}-0-{i}", "index": i, "memory": 16000, "type": "NVIDIA-Tesla T4"}
        for i in range(8)
    ]

    def report(n: int):
        measured = [
            {**device, "observed": {"memory": n % 1000, "utilization": n % 100}} for device in devices
        ]
        body = {"node": f"{namespace}-0", "labels": {}, "annotations": {}, "devices": measured}
        return agent.post("/api/v1/agents/report/", body, format="json")

    reported = median_ms((partial(report, n) for n in range(count)), 200)
    return {"POST pods/": submit, "POST .../complete/": complete, "POST agents/report/": reported}


def main_child(args) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    cpu = request_cpu("rest-cpu", min(args.pods, 1000))  # first: the only pods its cycles see
    rates: dict[str, dict[str, float]] = {}
    for phase, step in (("new", 0), ("unchanged", 0), ("requeued", 500)):
        rates[phase] = {
            "submit_pod": one_by_one("single", args.pods, step),
            "submit_pods": in_batches("bulk", args.pods, args.batch, step),
        }
    rates["new, REST"] = {
        "submit_pod": over_rest("rest-single", args.pods, 0),
        "submit_pods": over_rest("rest-bulk", args.pods, args.batch),
    }
    print(
        json.dumps(
            {"backend": args.child, "pods": args.pods, "batch": args.batch, "rates": rates, "cpu": cpu}
        )
    )


def run_child(database_url: str, backend: str, args, scratch: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    if os.environ.get("BENCH_REDIS_URL"):  # a Redis of the bench's own: throttles, wake-ups
        env["REDIS_URL"] = os.environ["BENCH_REDIS_URL"]
    env.update(
        {
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "hamiadmin.settings",
            "LOG_LEVEL": "WARNING",
            "HAMIADMIN_VAR_DIR": scratch,
        }
    )
    command = [sys.executable, "-m", "bench.submit", "--child", backend]
    command += ["--pods", str(args.pods), "--batch", str(args.batch)]
    out = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"backend": backend, "error": (out.stderr or out.stdout).strip()[-800:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_backend(backend: str, args, scratch: str) -> dict:
    if backend == "sqlite":
        return run_child(f"sqlite:///{Path(scratch) / 'bench-submit.sqlite3'}", backend, args, scratch)
    if backend == "postgresql":
        server, name = postgres_server_url(), bench_database_name()
        error = admin_sql(server, f"CREATE DATABASE {name}")
        if error:
            return {"backend": backend, "skipped": f"skipped: PostgreSQL not reachable ({error})"}
        try:
            return run_child(with_database(server, name), backend, args, scratch)
        finally:
            admin_sql(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    raise SystemExit(f"unknown backend {backend!r}: sqlite or postgresql")


def print_table(rows: list[dict], args) -> None:
    header = f"{'backend':<11} {'phase':<11} {'submit_pod/s':>12} {f'submit_pods/s ({args.batch})':>20} {'speed-up':>8}"
    print(header)
    print("-" * len(header))
    for row in rows:
        if "skipped" in row or "error" in row:
            print(
                f"{row['backend']:<11} {row.get('skipped') or 'error: ' + row['error'].replace(chr(10), ' | ')}"
            )
            continue
        for phase, _ in PHASES:
            one, many = row["rates"][phase]["submit_pod"], row["rates"][phase]["submit_pods"]
            print(f"{row['backend']:<11} {phase:<11} {one:>12.0f} {many:>20.0f} {many / one:>7.1f}x")
    for row in rows:
        if "cpu" in row:
            spent = ", ".join(f"{request} {ms:.2f} ms" for request, ms in row["cpu"].items())
            print(f"{row['backend']:<11} server CPU per request (median): {spent}")
    print()
    print(f"{args.pods} pods per phase; " + "; ".join(f"{phase}: {what}" for phase, what in PHASES) + ".")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--backends", default="postgresql")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        main_child(args)
        return
    scratch = tempfile.mkdtemp(prefix="hamiadmin-bench-")
    try:
        rows = []
        for backend in args.backends.split(","):
            print(f"running {backend}: {args.pods} pods per phase ...", file=sys.stderr, flush=True)
            rows.append(run_backend(backend, args, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print_table(rows, args)


if __name__ == "__main__":
    main()
