"""The API path's ResourceQuota and PodDisruptionBudget through real cycles: a namespace quota
made through the API refuses a placement as a ResourceQuota's rows do, and a pod group's
`max_evicted` caps how many of its members are being evicted at once, counting the evictions
still active from earlier cycles.

SQLite by default, PostgreSQL in CI (DATABASE_URL)."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.engine.batch.preempt import BUDGET_USED
from scheduling.models import Eviction, Pod
from scheduling.pipeline import run_cycle

from .conftest import assert_consistent, card, limits, reload, submit

pytestmark = pytest.mark.django_db(transaction=True)  # real commits: wakes run on_commit

PIN = "nvidia.com/use-gpuuuid"


def test_an_api_namespace_quota_refuses_a_placement_like_a_resource_quota():
    services.report_inventory("node1", {}, {}, [card(f"GPU-{i}", i, 16000, slots=4) for i in range(4)])
    services.create_namespace_quota("ml", "gpus", {"gpumem": 10_000}, by="ops")
    first = services.submit_pod("ml", "a", {}, [{"name": "main", "resources": limits(gpu=2, mem=4000)}])
    second = services.submit_pod("ml", "b", {}, [{"name": "main", "resources": limits(gpu=1, mem=4000)}])
    run_cycle()
    assert reload(first).status == Pod.SCHEDULED
    assert (
        reload(second).reason == "NamespaceQuotaExceeded: namespace ml: gpumem 8000 + 4000 > hard 10000 MiB"
    )
    services.update_namespace_quota("ml", "gpus", {"gpumem": 12_000}, by="ops")
    run_cycle()
    assert reload(second).status == Pod.SCHEDULED
    assert_consistent()


def gang_on_two_cards(max_evicted: int | None, min_member: int = 1) -> list[Pod]:
    """Two single-card members of gang `g`, placed by Kubernetes so that their evictions stay
    active until the agent reports them gone; the group's budget set by the API."""
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, 10000), card("GPU-1", 1, 10000)])
    members = [
        submit(
            f"g-{i}",
            gpu=1,
            mem=10000,
            annotations={
                PIN: f"GPU-{i}",
                "hami.io/group-name": "g",
                "hami.io/group-min-member": str(min_member),
            },
            origin=Pod.KUBERNETES,
            validate=False,
        )
        for i in range(2)
    ]
    assert len(run_cycle().placed) == 2
    services.update_pod_group("default", "g", by="ops", max_evicted=max_evicted)
    return members


@pytest.mark.parametrize("budget", [1, 2])
def test_a_preemptor_needing_two_members_of_a_gang_takes_both_only_with_a_budget_of_two(budget):
    members = gang_on_two_cards(budget, min_member=2)  # losing one, the gang goes whole
    high = submit("high", gpu=2, mem=10000, priority=1000)
    run_cycle()
    victims = set(Eviction.objects.values_list("victim_id", flat=True))
    if budget == 2:
        assert victims == {m.pk for m in members}
    else:
        assert victims == set()
        assert BUDGET_USED in reload(high).reason


def test_a_budget_of_one_counts_the_eviction_still_active_from_an_earlier_cycle():
    members = gang_on_two_cards(1)
    first = submit("first", gpu=1, mem=10000, priority=1000)
    second = submit("second", gpu=1, mem=10000, priority=1000)
    run_cycle()
    (eviction,) = Eviction.objects.all()  # two preemptors, one member each: the budget lets one go
    assert eviction.state == Eviction.REQUESTED
    waiting = second if eviction.preemptor_id == first.pk else first
    Pod.objects.filter(pk=waiting.pk).update(next_attempt_at=None)
    run_cycle()
    assert Eviction.objects.count() == 1  # the first is still being evicted: none left
    assert BUDGET_USED in reload(waiting).reason
    victim = next(m for m in members if m.pk == eviction.victim_id)
    services.release_pod(victim, Pod.DELETED)  # Kubernetes deleted the victim
    Pod.objects.filter(pk=waiting.pk).update(next_attempt_at=None)
    run_cycle()
    assert Eviction.objects.count() == 2  # the budget is free again
    assert_consistent()
