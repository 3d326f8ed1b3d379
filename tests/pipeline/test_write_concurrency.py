"""Cycles commit while every ordinary write path runs: releases, submissions, replaced
incarnations, agent reports and cordons, each in its own process against one database.

This is the case the lock order exists for (docs/architecture.md, "Lock order"): a write
that freed capacity used to wake the queue while it still held card locks, and the
commit's pod update took a key-share lock on a node that a report held while it waited for
cards. On PostgreSQL both were lock cycles; the database killed one side with "deadlock
detected". Now no process may fail, and on PostgreSQL no transaction may even need a retry:
the retry on 40P01 is the second line, the order is the first.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from scheduling import services
from scheduling.models import Pod

from .conftest import assert_consistent, limits, start_worker, stop
from .test_concurrency import (
    assert_every_pod_is_accounted_for,
    assert_no_card_holds_more_than_it_has,
    report_t4_nodes,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

NODES, CARDS, PODS, WORKERS, SECONDS = 20, 4, 400, 3, 15


def start_churn(seed: int):
    return start_worker_module(
        "tests.pipeline.churn_worker",
        "--seed",
        str(seed),
        "--deadline",
        str(SECONDS),
        "--nodes",
        str(NODES),
        "--cards",
        str(CARDS),
    )


def start_worker_module(module: str, *args: str):
    import subprocess
    import sys

    from .conftest import REPO, worker_env

    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=worker_env(HAMI_SINGLE_FLIGHT=0),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_cycles_and_every_write_path_at_once_neither_deadlock_nor_fail():
    report_t4_nodes(NODES, CARDS)
    for n in range(PODS):
        services.submit_pod(
            "load", f"pod{n:04d}", {}, [{"name": "main", "resources": limits(gpu=1, mem=3000)}]
        )

    workers = [
        start_worker(
            "--seed",
            str(seed),
            "--deadline",
            str(SECONDS + 5),
            "--shuffle",
            "--until-deadline",
            "--limits",
            "5,20,60",
            HAMI_SINGLE_FLIGHT=0,
        )
        for seed in range(WORKERS)
    ]
    churners = [start_churn(seed) for seed in range(2)]
    results, churned = [], []
    try:
        for process in workers + churners:
            out, err = process.communicate(timeout=SECONDS + 60)
            assert process.returncode == 0, err[-3000:]
            summary = json.loads(out.strip().splitlines()[-1])
            (churned if process in churners else results).append(summary)
    finally:
        for process in workers + churners:
            stop(process)

    for summary in churned:
        assert summary["failed"] == 0, summary["failures"]
        assert all(count > 0 for count in summary["done"].values()), summary["done"]
    assert sum(result["placed"] for result in results) > 0
    assert_no_card_holds_more_than_it_has()
    assert_consistent()
    assert_every_pod_is_accounted_for_by_kind()
    if connection.vendor == "postgresql":
        deadlocks = sum(s["retries"].get("deadlock", 0) for s in results + churned)
        assert deadlocks == 0, f"{deadlocks} transactions were deadlock victims: the lock order has a cycle"
    print(f"workers {results}; churn {churned}")


def assert_every_pod_is_accounted_for_by_kind() -> None:
    """Pods placed as their allocation string says, pending with a reason, or finished."""
    Pod.objects.filter(status__in=Pod.FINISHED).delete()
    Pod.objects.filter(status=Pod.PENDING, attempts=0).delete()  # submitted after the last cycle
    assert_every_pod_is_accounted_for()
