"""Over-commit and double placement under concurrency, with figures.

PostgreSQL: 4 real Celery workers on a private Redis, single-flight off (cycles overlap,
each taking a random sample of the due pods, so commits fight over cards) and on (the
advisory lock: no two cycles at once), while a churn process releases pods, submits new
ones and reports nodes again. SQLite: 2 cycle processes and the churn.

Afterwards, from the allocation rows: no card over its slots, memory or cores, counters
equal the rows, no pod holding cards it was not given, no ghost. The runs with overlap must
show overlapping cycles and refused commits, or they proved nothing.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from celery import Celery

from .conftest import (
    SIZES,
    UNDECIDED,
    celery_worker,
    driver,
    spawn,
    sql_value,
    stop_all,
    wait_until,
)

pytestmark = [pytest.mark.chaos]

WORKERS = 4
CHURN_SECONDS = SIZES["churn_seconds"]


def assert_whole(figures) -> None:
    for key in ("over_commits", "counter_drift", "double_placements", "ghosts", "unbacked"):
        figures.require(key, 0)
    figures.require("undecided", 0)
    figures.require("pending_without_reason", 0)
    figures.at_least("placed", 1)


@pytest.mark.parametrize("single_flight", [False, True], ids=["single-flight-off", "single-flight-on"])
def test_celery_workers_on_postgresql_never_over_commit(
    private_postgres, private_redis, figures, single_flight
):
    url = private_postgres.fresh_database(f"concurrency_{int(single_flight)}")
    seeded = driver(
        url,
        "seed",
        "--nodes",
        str(SIZES["nodes"]),
        "--cards",
        str(SIZES["cards"]),
        "--pods",
        str(SIZES["pods"]),
    )
    started = time.monotonic()
    workers = [
        # Small cycles (each a random sample of the due pods): many commits, on different pods,
        # meet on the same cards; one cycle of the whole queue per worker would mostly skip.
        celery_worker(
            url,
            private_redis.url,
            shuffle=True,
            HAMI_SINGLE_FLIGHT=int(single_flight),
            HAMI_CYCLE_MAX_PODS=40,
        )
        for _ in range(WORKERS)
    ]
    broker = Celery(broker=private_redis.url)
    churn = None
    try:
        for _ in range(WORKERS * 2):
            broker.send_task("scheduling.run_cycle", args=["chaos start"])
        # The churn begins once the workers run cycles, so that all of it overlaps them.
        wait_until(lambda: sql_value(url, "SELECT count(*) FROM scheduling_cycle") > 0, 60, "a cycle ran")
        churn = spawn(
            "tests.chaos.driver", url, "churn", "--seconds", str(CHURN_SECONDS), redis_url=private_redis.url
        )
        out, err = churn.communicate(timeout=CHURN_SECONDS + 60)
        assert churn.returncode == 0, err[-3000:]
        churned = json.loads(out.strip().splitlines()[-1])
        wait_until(lambda: sql_value(url, UNDECIDED) == 0, 120, "every pod decided")
        for worker in workers:
            assert worker.poll() is None, f"a Celery worker died: {worker.log.tail()}"
    finally:
        stop_all(workers + ([churn] if churn is not None else []))
        broker.close()
    seconds = time.monotonic() - started
    found = driver(url, "check")

    figures["workers"] = WORKERS
    figures["nodes"] = seeded["nodes"]
    figures["cards"] = seeded["cards"]
    figures["pods"] = found["pods"]
    figures["cycles"] = found["cycles"]
    figures["conflicts_retried"] = found["conflicts"]
    figures["over_commits"] = found["over_commits"]
    for key in ("counter_drift", "double_placements", "ghosts", "unbacked", "undecided", "placed"):
        figures[key] = found[key]
    figures["pending_without_reason"] = found["pending_without_reason"]
    figures["overlapping_cycles"] = found["overlapping_cycles"]
    figures["churn"] = "{releases}r/{submissions}s/{reports}a".format(**churned)
    figures["seconds"] = round(seconds, 1)
    assert_whole(figures)
    if single_flight:
        figures.require("overlapping_cycles", 0)
    else:
        figures.at_least("overlapping_cycles", 1)
        figures.at_least("conflicts_retried", 1)
    figures["advisory_locks_after"] = found["advisory_locks"]
    figures.require("advisory_locks_after", 0)


def test_two_processes_on_sqlite_never_over_commit(figures):
    folder = tempfile.mkdtemp(prefix="chaos-sqlite-")
    url = f"sqlite:///{Path(folder) / 'chaos.sqlite3'}"
    driver(url, "migrate")
    seeded = driver(
        url, "seed", "--nodes", str(SIZES["nodes"] // 2), "--cards", "4", "--pods", str(SIZES["sqlite_pods"])
    )
    started = time.monotonic()
    # Both workers start their first cycle together (`--control`): the one set up first would
    # otherwise drain the small queue before the other ran a cycle, and nothing overlapped.
    control = Path(folder) / "control"
    control.mkdir()
    workers = [
        spawn(
            "tests.pipeline.cycle_worker",
            url,
            "--seed",
            str(seed),
            "--deadline",
            "90",
            "--shuffle",
            "--control",
            str(control),
            HAMI_SINGLE_FLIGHT=0,
        )
        for seed in range(2)
    ]
    try:
        wait_until(lambda: len(list(control.glob("ready-*"))) == len(workers), 60, "both workers set up")
        (control / "go").touch()
        churn = spawn("tests.chaos.driver", url, "churn", "--seconds", str(CHURN_SECONDS / 2))
        out, err = churn.communicate(timeout=60)
        assert churn.returncode == 0, err[-3000:]
        churned = json.loads(out.strip().splitlines()[-1])
        results = []
        for worker in workers:
            out, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
        # the churn may have submitted after the workers went idle: one more pass
        last = spawn("tests.pipeline.cycle_worker", url, "--deadline", "30", HAMI_SINGLE_FLIGHT=0)
        out, err = last.communicate(timeout=60)
        assert last.returncode == 0, err[-3000:]
    finally:
        stop_all(workers)
    found = driver(url, "check")
    shutil.rmtree(folder, ignore_errors=True)
    figures["processes"] = 2
    figures["nodes"] = seeded["nodes"]
    figures["pods"] = found["pods"]
    figures["cycles"] = found["cycles"]
    figures["conflicts_retried"] = found["conflicts"]
    figures["over_commits"] = found["over_commits"]
    for key in ("counter_drift", "double_placements", "ghosts", "unbacked", "undecided", "placed"):
        figures[key] = found[key]
    figures["pending_without_reason"] = found["pending_without_reason"]
    figures["overlapping_cycles"] = found["overlapping_cycles"]
    figures["churn"] = "{releases}r/{submissions}s/{reports}a".format(**churned)
    figures["seconds"] = round(time.monotonic() - started, 1)
    assert_whole(figures)
    figures.at_least("overlapping_cycles", 1)
    assert all(result["cycles"] > 0 for result in results), results
