"""The commit admits placements against queue limits and namespace quotas as they stand under
lock (docs/queues.md, "Limits under overlap"): two cycles planned before either commits each
see room for one more pod; the second to commit finds the room taken, writes nothing for it,
and leaves it pending with the queue's verdict."""

from __future__ import annotations

import pytest
from django.db import models

from scheduling import services
from scheduling.models import Allocation, Decision, Pod, PodGroup, Queue
from scheduling.pipeline import plan_cycle
from scheduling.pipeline.commit import commit_plan

from .conftest import card, limits

pytestmark = pytest.mark.django_db


def pod(name: str, namespace: str = "default", priority: int = 0, **annotations) -> Pod:
    return services.submit_pod(
        namespace,
        name,
        annotations,
        [{"name": "main", "resources": limits(gpu=1, mem=2000)}],
        priority=priority,
    )


def two_plans(first: str, second: str, namespace: str = "default", **annotations):
    """`first` planned, then `second` (more urgent, so the next plan takes it alone) planned
    before the first commits: each plan saw the other's room free."""
    pod(first, namespace, **annotations)
    earlier = plan_cycle(trigger="test")
    pod(second, namespace, priority=10, **annotations)
    later = plan_cycle(limit=1, trigger="test")
    assert [a.key for a in earlier.attempts] == [f"{namespace}/{first}"]
    assert [a.key for a in later.attempts] == [f"{namespace}/{second}"]
    return earlier, later


@pytest.fixture
def node():
    services.report_inventory("node1", {}, {}, [card(f"GPU-{i}", i, memory=16000) for i in range(4)])
    Queue.default()


def test_a_placement_past_an_ancestors_limit_is_not_written_and_waits_with_the_queues_verdict(node):
    services.create_queue("team", limit_vgpus=1)
    services.create_queue("team-a", parent="team")
    earlier, later = two_plans("a", "b", **{"hami.io/queue": "team-a"})
    assert commit_plan(later).placed and not commit_plan(earlier).placed
    a = Pod.objects.get(name="a")
    assert (a.status, a.reason) == (Pod.PENDING, "QueueLimitExceeded: queue team: vgpus 1 + 1 > limit 1")
    assert a.next_attempt_at is not None  # backs off like a planned hold
    payload = Decision.objects.filter(pod=a).latest("id").payload
    assert payload["batch"] == {
        "reason": "QueueLimitExceeded",
        "message": "queue team: vgpus 1 + 1 > limit 1",
        "would_fit_on": "node1",
        "queue": "team-a",
    }
    assert Allocation.objects.filter(active=True).count() == 1


def test_a_placement_past_a_namespace_quota_waits_with_its_verdict(node):
    services.store_namespace_quota("capped", "gpu", {"vgpus": 1})
    earlier, later = two_plans("a", "b", "capped")
    assert commit_plan(later).placed and not commit_plan(earlier).placed
    a = Pod.objects.get(name="a")
    assert (a.status, a.reason) == (
        Pod.PENDING,
        "NamespaceQuotaExceeded: namespace capped: vgpus 1 + 1 > hard 1",
    )


def test_a_gang_short_of_its_minimum_within_the_limit_keeps_none(node):
    services.create_queue("team", limit_vgpus=2)
    gang = {"hami.io/group-name": "g", "hami.io/group-min-member": "2", "hami.io/queue": "team"}
    for n in range(2):
        pod(f"g-{n}", **gang)
    earlier = plan_cycle(trigger="test")
    pod("urgent", priority=10, **{"hami.io/queue": "team"})
    later = plan_cycle(limit=1, trigger="test")
    assert commit_plan(later).placed and not commit_plan(earlier).placed
    reasons = set(Pod.objects.filter(name__startswith="g-").values_list("status", "reason"))
    assert reasons == {
        (
            Pod.PENDING,
            "QueueLimitExceeded: gang: 1/2 placements within limits; default/g-1: queue team: vgpus 2 + 1 > limit 2",
        )
    }
    group = PodGroup.objects.get(name="g")
    assert group.phase == PodGroup.INQUEUE and "QueueLimitExceeded" in str(group.conditions[-1])


def test_a_queue_deleted_since_planning_leaves_its_pods_pending_with_queue_not_found(node):
    services.create_queue("gone")
    pod("a", **{"hami.io/queue": "gone"})
    plan = plan_cycle(trigger="test")
    Pod.objects.filter(name="a").update(queue=None)  # as if it never joined: the delete may go
    services.delete_queue("gone")
    assert not commit_plan(plan).placed
    a = Pod.objects.get(name="a")
    assert (a.status, a.reason, a.queue) == (
        Pod.PENDING,
        "QueueNotFound: its queue was deleted since the cycle planned; the next cycle looks again",
        None,
    )


def test_a_placement_into_capacity_an_idle_guarantee_keeps_is_not_written(node):
    services.create_queue("a")
    services.create_queue("b", guarantee_gpumem=62000)  # of 64000 MiB: a may use 2000 of it
    earlier, later = two_plans("a1", "a2", **{"hami.io/queue": "a"})
    assert commit_plan(later).placed and not commit_plan(earlier).placed
    first = Pod.objects.get(name="a1")
    assert (first.status, first.reason) == (
        Pod.PENDING,
        "QueueLimitExceeded: queue a: cluster gpumem 2000 + 2000 > 64000 - 62000 MiB kept for idle guarantees (b 62000 MiB)",
    )
    assert Allocation.objects.filter(active=True).count() == 1


def test_a_placement_in_the_commit_of_a_preemption_never_takes_its_victims_cards_before_they_go():
    """The planner's Statement takes the victims off at once, so a later pod of the cycle may
    be planned into what they hold; they keep their counters until they leave, so the commit
    refuses that placement (an over-commit otherwise), while the preemption is kept."""
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=16000, slots=10)])
    tenant = pod_of("tenant", mem=16000)
    assert commit_plan(plan_cycle(trigger="test")).placed
    pod_of("urgent", mem=8000, priority=100)
    pod_of("other", mem=8000, priority=50)
    plan = plan_cycle(trigger="test")
    planned = {a.key: a.decision.status for a in plan.attempts}
    assert planned["default/other"] == "scheduled"  # planned into the victim's freed card
    commit_plan(plan)
    other = Pod.objects.get(name="other")
    assert other.status == Pod.PENDING and "lost a race" in other.reason
    held = Allocation.objects.filter(active=True, card__uuid="GPU-0").aggregate(models.Sum("memory"))
    assert held["memory__sum"] <= 16000
    assert Pod.objects.get(name="tenant").pk == tenant.pk


def pod_of(name: str, mem: int, priority: int = 0) -> Pod:
    return services.submit_pod(
        "default", name, {}, [{"name": "main", "resources": limits(gpu=1, mem=mem)}], priority=priority
    )
