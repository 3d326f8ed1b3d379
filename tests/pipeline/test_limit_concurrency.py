"""Queue limits and namespace quotas hold under overlapping cycles (docs/queues.md, "Limits
under overlap"): four workers, single-flight off, race pods into a capped queue tree and a
namespace with a quota. Planning alone checks the usage it read, so overlapping cycles used to
take a queue past its limit together (23 of 20 vGPUs); the commit re-checks under lock."""

from __future__ import annotations

import pytest
from django.db.models import Count, Sum

from scheduling import services
from scheduling.models import Allocation, Cycle, Pod, Queue

from .conftest import assert_consistent, limits, start_worker, stop, summaries
from .test_concurrency import report_t4_nodes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WORKERS = 4


def held(**where) -> dict:
    """vGPUs and MiB the active allocations of these pods hold."""
    row = Allocation.objects.filter(active=True, **where).aggregate(vgpus=Count("id"), gpumem=Sum("memory"))
    return {"vgpus": row["vgpus"], "gpumem": row["gpumem"] or 0}


def test_four_overlapping_workers_never_take_a_queue_or_namespace_past_its_limit(require_postgres):
    report_t4_nodes(10, 4)  # 40 cards of 16,000 MiB: room for every pod, so only the limits bind
    Queue.default()
    services.create_queue("team", limit_vgpus=20, limit_gpumem=40000)
    services.create_queue("team-a", parent="team", limit_vgpus=12)
    services.create_queue("team-b", parent="team")
    services.store_namespace_quota("capped", "gpu", {"vgpus": 6})
    pods = [("load", f"a{n:03d}", "team-a") for n in range(50)]
    pods += [("load", f"b{n:03d}", "team-b") for n in range(50)]
    pods += [("capped", f"c{n:03d}", None) for n in range(30)]
    services.submit_pods(
        {
            "namespace": namespace,
            "name": name,
            "annotations": {"hami.io/queue": queue} if queue else {},
            "containers": [{"name": "main", "resources": limits(gpu=1, mem=2000)}],
        }
        for namespace, name, queue in pods
    )

    workers = [
        start_worker(
            "--seed", str(seed), "--deadline", "60", "--shuffle", "--limits", "3,5,10", HAMI_SINGLE_FLIGHT=0
        )
        for seed in range(WORKERS)
    ]
    try:
        results = summaries(workers, 90)
    finally:
        for process in workers:
            stop(process)

    team = held(pod__queue__name__in=["team-a", "team-b"])
    assert team["vgpus"] <= 20 and team["gpumem"] <= 40000, team
    assert held(pod__queue__name="team-a")["vgpus"] <= 12
    assert held(pod__namespace="capped")["vgpus"] <= 6
    assert_consistent()
    assert team["vgpus"] > 12 and held(pod__namespace="capped")["vgpus"] > 0, team  # they did run
    waiting = Pod.objects.filter(status=Pod.PENDING, namespace__in=["load", "capped"])
    reasons = set(waiting.values_list("reason", flat=True))
    assert all(
        r.startswith(("QueueLimitExceeded", "NamespaceQuotaExceeded", "placement on")) for r in reasons
    ), reasons
    cycles = list(Cycle.objects.exclude(finished_at=None).values_list("worker", "started_at", "finished_at"))
    overlapping = any(
        a[0] != b[0] and a[1] < b[2] and b[1] < a[2] for i, a in enumerate(cycles) for b in cycles[i + 1 :]
    )
    assert overlapping, "the workers' cycles never overlapped; the test proved nothing"
    print(f"team {team}; per worker {results}")
