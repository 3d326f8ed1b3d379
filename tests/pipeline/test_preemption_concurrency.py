"""Four worker processes preempt at once (single-flight off) while victims take their time
to terminate, as Kubernetes pods do: nothing is ever double-allocated meanwhile.

The cluster is full of low-priority Kubernetes pods; high-priority pods arrive. This process
plays the kube agent and the kubelets: it marks requested evictions as evicting and deletes
each victim a random 0.1-1.5 s later. Throughout, every card's allocations of pods not being
evicted plus the nominations on it stay within the card (read in one snapshot), and at the
end every high-priority pod is placed, having evicted exactly as many tenants as it had to.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict

import pytest
from django.db import connection, transaction
from django.db.models import Count, Sum

from scheduling import services
from scheduling.models import Allocation, Card, Eviction, Nomination, Pod
from scheduling.pipeline import run_cycle
from scheduling.services.evictions import mark_evicting

from .conftest import assert_consistent, start_workers_together, stop, summaries

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

NODES, CARDS, MEMORY, WORKERS = 12, 4, 16000, 4
HIGH_SMALL, HIGH_WHOLE = 30, 10  # 8000 MiB asks (one tenant each), 16000 MiB asks (two each)


def held_beyond_capacity() -> list[str]:
    """Cards whose allocations of pods not being evicted, plus nominations, exceed them; read
    in one snapshot (REPEATABLE READ on PostgreSQL)."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        going = Eviction.objects.filter(state__in=Eviction.ACTIVE).values_list("victim_id", flat=True)
        used: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for row in (
            Allocation.objects.filter(active=True)
            .exclude(pod_id__in=list(going))
            .values("card")
            .annotate(slots=Count("id"), memory=Sum("memory"))
        ):
            used[row["card"]] = [row["slots"], row["memory"]]
        for row in Nomination.objects.values("card").annotate(slots=Count("id"), memory=Sum("memory")):
            used[row["card"]][0] += row["slots"]
            used[row["card"]][1] += row["memory"]
        return [
            card.uuid
            for card in Card.objects.all()
            if used[card.pk][0] > card.slots or used[card.pk][1] > card.memory
        ]


def test_four_workers_preempting_while_victims_terminate_never_double_allocate():
    rng = random.Random(5)
    for n in range(NODES):
        services.report_inventory(
            f"node{n:02d}",
            {},
            {},
            [{"uuid": f"GPU-{n}-{i}", "index": i, "memory": MEMORY} for i in range(CARDS)],
        )
    for n in range(NODES * CARDS * 2):  # two 8000 MiB tenants fill each card
        services.submit_pod(
            "low",
            f"t{n:03d}",
            {},
            [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000}}}],
            priority=0,
            origin=Pod.KUBERNETES,
            validate=False,
        )
    while run_cycle().considered:
        pass
    assert Pod.objects.filter(namespace="low", status=Pod.SCHEDULED).count() == NODES * CARDS * 2
    asks = [8000] * HIGH_SMALL + [16000] * HIGH_WHOLE
    rng.shuffle(asks)
    for n, memory in enumerate(asks):
        services.submit_pod(
            "high",
            f"h{n:03d}",
            {},
            [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": memory}}}],
            priority=1000,
        )

    workers, control = start_workers_together(
        *(
            ("--seed", str(seed), "--deadline", "30", "--until-deadline", "--shuffle", "--limits", "3,8,20")
            for seed in range(WORKERS)
        ),
        HAMI_SINGLE_FLIGHT=0,
    )
    terminating: dict[int, float] = {}
    samples, broken = 0, []
    try:
        deadline = time.monotonic() + 28
        while time.monotonic() < deadline:
            for eviction_id, victim in Eviction.objects.filter(state=Eviction.REQUESTED).values_list(
                "pk", "victim_id"
            ):
                if mark_evicting(eviction_id, "accepted by the stand-in"):
                    terminating[victim] = time.monotonic() + rng.uniform(0.1, 1.5)
            for victim, at in list(terminating.items()):
                if at <= time.monotonic():
                    services.release_pod(victim, Pod.DELETED)
                    del terminating[victim]
            broken += held_beyond_capacity()
            samples += 1
            if (
                not terminating
                and not Pod.objects.filter(namespace="high").exclude(status=Pod.SCHEDULED).exists()
            ):
                break
            time.sleep(0.05)
        (control / "stop").touch()  # every high pod placed: the workers need not wait out their deadline
        results = summaries(workers, 60)
    finally:
        for process in workers:
            stop(process)

    assert broken == [], broken[:10]
    # what the workers left (a slow machine): the last victims go, then cycles here finish it
    for eviction_id, victim in Eviction.objects.filter(state__in=Eviction.ACTIVE).values_list(
        "pk", "victim_id"
    ):
        mark_evicting(eviction_id, "accepted by the stand-in")
        services.release_pod(victim, Pod.DELETED)
    for _ in range(20):
        Pod.objects.filter(status=Pod.PENDING).update(next_attempt_at=None)
        report = run_cycle()
        for eviction_id, victim in Eviction.objects.filter(state__in=Eviction.ACTIVE).values_list(
            "pk", "victim_id"
        ):
            mark_evicting(eviction_id, "accepted by the stand-in")
            services.release_pod(victim, Pod.DELETED)
        if not report.considered:
            break
    assert held_beyond_capacity() == []
    assert_consistent()
    high = Pod.objects.filter(namespace="high")
    assert high.filter(status=Pod.SCHEDULED).count() == len(asks), list(
        high.exclude(status=Pod.SCHEDULED).values_list("name", "reason")[:5]
    )
    evicted = Eviction.objects.filter(state=Eviction.DONE).count()
    lower_bound = HIGH_SMALL + 2 * HIGH_WHOLE  # every card is full of 8000 MiB tenants
    assert evicted == lower_bound, (evicted, lower_bound)
    victims = list(Eviction.objects.exclude(state=Eviction.CANCELLED).values_list("victim_id", flat=True))
    assert len(victims) == len(set(victims))  # nobody evicted twice
    print(f"{samples} snapshots, {evicted} evicted for {len(asks)} placed; per worker {results}")
