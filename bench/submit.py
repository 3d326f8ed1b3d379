"""Submission benchmark: pods per second through `submit_pod` (one transaction per pod)
and `submit_pods` (one transaction per batch), for new pods, unchanged resubmissions (a
relist of a quiet cluster) and new specs (every pod re-queued).

    python -m bench.submit [--pods 5000] [--batch 500] [--backends postgresql,sqlite]

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


def main_child(args) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
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
    print(json.dumps({"backend": args.child, "pods": args.pods, "batch": args.batch, "rates": rates}))


def run_child(database_url: str, backend: str, args, scratch: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
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
