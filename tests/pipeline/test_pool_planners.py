"""Node-pool shards under load (pipeline.pools, docs/architecture.md): five planner processes
at once on PostgreSQL, single-flight on, one for each of pools `a`, `b` and `c`, a second for
`a`, and the planner without a pool. Pool nodes are labelled and tainted, as dedicated node
pools are in Kubernetes; pool pods select and tolerate theirs.

What they share is kept at the commit, not by the split: a queue capped below what its pods
in every pool ask, and gangs placed whole or not at all. Afterwards no card holds more than it
has, every pod landed in its pool, the cap held, no gang is partial, the planners of different
pools planned at the same time, and the two of pool `a` never did.
"""

from __future__ import annotations

import random
import re

import pytest
from django.db.models import Count

from scheduling import services
from scheduling.models import Allocation, Cycle, Node, Pod, Queue

from .conftest import assert_consistent, limits, start_workers_together, stop, summaries
from .test_concurrency import assert_no_card_holds_more_than_it_has

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LABEL = "hami.io/node-pool"
POOLS = ["a", "b", "c"]
#: The planners: a pool each ("" plans the pods of no pool), pool `a` twice.
PLANNERS = ["a", "a", "b", "c", ""]
NODES, CARDS, CAP = 5, 4, 24


def build() -> dict[str, int]:
    """Nodes of each pool and of none, and pods of each: single pods (some in the capped
    queue) and gangs of 4 needing 3. Returns each gang's minimum."""
    rng = random.Random(29)
    for pool in [*POOLS, ""]:
        for n in range(NODES):
            name = f"{pool or 'plain'}{n}"
            devices = [
                {"uuid": f"GPU-{name}-{i}", "index": i, "memory": 16000, "type": "NVIDIA-Tesla T4"}
                for i in range(CARDS)
            ]
            labels = {LABEL: pool} if pool else {}
            taints = [{"key": LABEL, "value": pool, "effect": "NoSchedule"}] if pool else []
            services.report_inventory(name, labels, {}, devices, taints=taints)
    Queue.default()
    services.create_queue("shared", limit_vgpus=CAP)
    gangs: dict[str, int] = {}
    items = []
    for pool in [*POOLS, ""]:
        scheduling = (
            {
                "nodeSelector": {LABEL: pool},
                "tolerations": [{"key": LABEL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}],
            }
            if pool
            else None
        )
        tag = pool or "plain"

        def item(name, annotations, gpu=1, scheduling=scheduling):
            mem = rng.choice([3000, 5000, 7000])
            return {
                "namespace": "pools",
                "name": name,
                "annotations": annotations,
                "containers": [{"name": "main", "resources": limits(gpu=gpu, mem=mem)}],
                "scheduling": scheduling,
                "priority": rng.choice([0, 0, 1]),
            }

        items += [item(f"{tag}-single{n}", {}) for n in range(30)]
        items += [item(f"{tag}-queued{n}", {"hami.io/queue": "shared"}) for n in range(12)]
        for g in range(3):
            gang = f"{tag}-gang{g}"
            gangs[gang] = 3
            members = {"hami.io/group-name": gang, "hami.io/group-min-member": "3"}
            items += [item(f"{gang}-{i}", members, gpu=2) for i in range(4)]
    submitted = services.submit_pods(items)
    assert all(result.error is None for result in submitted), [r.error for r in submitted if r.error][:3]
    return gangs


def test_pool_planners_plan_at_once_and_keep_cards_queues_and_gangs_whole(require_postgres):
    gangs = build()
    workers, _ = start_workers_together(
        *(("--seed", str(seed), "--deadline", "90", "--limits", "5,10,20") for seed in range(len(PLANNERS))),
        envs=[{"HAMI_NODE_POOL": pool} for pool in PLANNERS],
        HAMI_NODE_POOLS=",".join(POOLS),
    )
    try:
        results = summaries(workers, 120)
    finally:
        for process in workers:
            stop(process)

    assert_no_card_holds_more_than_it_has()
    assert_consistent()
    pool_of_node = {
        name: (labels or {}).get(LABEL, "") for name, labels in Node.objects.values_list("name", "labels")
    }
    placed = list(Pod.objects.filter(status=Pod.SCHEDULED).values_list("name", "node__name"))
    strays = [
        (pod, node) for pod, node in placed if pool_of_node[node] != re.sub("^plain$", "", pod.split("-")[0])
    ]
    assert strays == []
    assert {pool_of_node[node] for _, node in placed} == {*POOLS, ""}  # every planner placed pods
    capped = Allocation.objects.filter(active=True, pod__queue__name="shared").count()
    assert 0 < capped <= CAP
    per_gang = dict(
        Pod.objects.filter(status=Pod.SCHEDULED, group__isnull=False)
        .values("group__name")
        .annotate(n=Count("id"))
        .values_list("group__name", "n")
    )
    assert {gang: n for gang, n in per_gang.items() if n < gangs[gang]} == {}
    assert per_gang, "no gang was placed: the test proved nothing about gangs"
    assert Pod.objects.filter(status=Pod.PENDING, name__contains="-queued").exists()  # the cap did bind

    pool_of_pid = {str(process.pid): pool for process, pool in zip(workers, PLANNERS, strict=True)}
    cycles = [
        (pool_of_pid[worker.rsplit(":", 1)[1]], worker, start, end)
        for worker, start, end in Cycle.objects.exclude(finished_at=None).values_list(
            "worker", "started_at", "finished_at"
        )
    ]
    overlapping = [
        (a[0], b[0])
        for i, a in enumerate(cycles)
        for b in cycles[i + 1 :]
        if a[1] != b[1] and a[2] < b[3] and b[2] < a[3]
    ]
    assert ("a", "a") not in overlapping, "the two planners of pool a planned at the same time"
    assert any(a != b for a, b in overlapping), f"no two pools planned at the same time: {results}"
    print(f"placed {len(placed)}, queue shared {capped}/{CAP}, gangs {per_gang}; per planner {results}")
