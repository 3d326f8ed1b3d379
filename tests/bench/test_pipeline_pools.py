"""`bench.pipeline --pools N` (pipeline.pools): the nodes split round robin into N labelled
pools, each pod selecting one, drained by a planner process per pool. Run small, end to end,
on PostgreSQL (the pools' planners take their advisory locks at once)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.pipeline import POOL_LABEL, REPO, build_cluster, pool_names, queue_pods
from scheduling.models import Node, Pod
from scheduling.pipeline import pools

pytestmark = pytest.mark.django_db


def test_the_pools_split_nodes_and_pods_round_robin(settings):
    build_cluster(6, pools=3)
    queue_pods(9, pools=3)
    assert pool_names(1) == [] and pool_names(3) == ["pool0", "pool1", "pool2"]
    by_pool = {}
    for name, labels in Node.objects.values_list("name", "labels"):
        by_pool.setdefault(labels[POOL_LABEL], []).append(name)
    assert by_pool == {
        "pool0": ["node0000", "node0003"],
        "pool1": ["node0001", "node0004"],
        "pool2": ["node0002", "node0005"],
    }
    settings.HAMIADMIN = {**settings.HAMIADMIN, "NODE_POOLS": pool_names(3), "NODE_POOL": "pool1"}
    assert POOL_LABEL == pools.label()
    assert list(Pod.objects.filter(pools.pods_q()).order_by("name").values_list("name", flat=True)) == [
        "pod00001",
        "pod00004",
        "pod00007",
    ]


@pytest.mark.slow
def test_two_pool_planners_drain_the_whole_queue(require_postgres):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.pipeline",
            "--nodes",
            "40",
            "--pods",
            "200",
            "--backends",
            "postgresql",
            "--pools",
            "2",
        ],
        cwd=REPO,
        env={**os.environ, "BENCH_DATABASE_PREFIX": "hamiadmin_bench_pools_test"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    row = next(line for line in out.stdout.splitlines() if line.startswith("postgresql"))
    backend, nodes, cards, asked, placed, *_ = row.split()
    assert (nodes, cards, asked, placed) == ("40", "320", "200", "200"), row
    assert row.split()[-1] == "-", row  # no release latency with pools
