"""Deserved quotas, kept guarantees and elastic gangs through real cycles (docs/queues.md,
"Fair share", "Guarantees", "Elastic gangs"): the cases of issue 28 as an operator meets them.

SQLite by default, PostgreSQL in CI (DATABASE_URL)."""

from __future__ import annotations

import pytest
from django.db.models import Count

from scheduling import services
from scheduling.models import Eviction, Pod, PodGroup, Queue
from scheduling.pipeline import run_cycle

from .conftest import assert_consistent, card, reload, submit

pytestmark = pytest.mark.django_db(transaction=True)  # real commits: evictions requeue on commit

GROUP = "hami.io/group-name"
MIN = "hami.io/group-min-member"


def four_cards(memory: int = 16000) -> None:
    services.report_inventory("node1", {}, {}, [card(f"GPU-{i}", i, memory, slots=1) for i in range(4)])


def scheduled_by(field: str) -> dict[str, int]:
    rows = Pod.objects.filter(status=Pod.SCHEDULED).values_list(field).annotate(n=Count("id"))
    return dict(rows)


def gang(name: str, size: int = 4, min_member: int = 2, mem: int = 16000) -> list[Pod]:
    annotations = {GROUP: name, MIN: str(min_member)}
    return [submit(f"{name}-{i}", gpu=1, mem=mem, annotations=annotations) for i in range(size)]


def test_quotas_of_48000_and_16000_mib_split_four_cards_three_to_one():
    Queue.objects.create(name="big", quota_gpumem=48000)
    Queue.objects.create(name="small", quota_gpumem=16000)
    four_cards()
    for k in range(4):
        for queue in ("big", "small"):
            submit(f"{queue}-{k}", gpu=1, mem=16000, annotations={"hami.io/queue": queue})
    run_cycle()
    assert scheduled_by("queue__name") == {"big": 3, "small": 1}
    assert_consistent()


def test_an_idle_guarantee_is_not_lent_and_its_queue_gets_it_without_evictions():
    Queue.objects.create(name="a")
    Queue.objects.create(name="b", guarantee_vgpus=2)
    four_cards()
    mine = [submit(f"a{k}", gpu=1, mem=8000, annotations={"hami.io/queue": "a"}) for k in range(4)]
    run_cycle()
    assert scheduled_by("queue__name") == {"a": 2}
    held = [reload(p) for p in mine if reload(p).status == Pod.PENDING]
    assert [p.reason for p in held] == [
        "QueueLimitExceeded: queue a: cluster vgpus 2 + 1 > 4 - 2 kept for idle guarantees (b 2)"
    ] * 2
    for k in range(2):
        submit(f"b{k}", gpu=1, mem=8000, annotations={"hami.io/queue": "b"})
    run_cycle()
    assert scheduled_by("queue__name") == {"a": 2, "b": 2}
    assert not Eviction.objects.exists()
    assert_consistent()


def test_a_lent_guarantee_is_used_and_taken_back_by_reclaim():
    Queue.objects.create(name="a")
    Queue.objects.create(name="b", guarantee_vgpus=2, lend_guarantee=True)
    four_cards()
    for k in range(4):
        submit(f"a{k}", gpu=1, mem=8000, annotations={"hami.io/queue": "a"})
    run_cycle()
    assert scheduled_by("queue__name") == {"a": 4}
    for k in range(2):
        submit(f"b{k}", gpu=1, mem=8000, annotations={"hami.io/queue": "b"})
    run_cycle()  # b reclaims its guarantee: a's two pods go back to the queue
    assert Eviction.objects.filter(kind="reclaim").count() == 2
    run_cycle()  # the nominated pods land
    assert scheduled_by("queue__name") == {"a": 2, "b": 2}
    assert_consistent()


def test_two_elastic_gangs_submitted_together_end_two_and_two():
    four_cards()
    gang("a")
    gang("b")
    run_cycle()
    assert scheduled_by("group__name") == {"a": 2, "b": 2}
    assert set(PodGroup.objects.values_list("phase", flat=True)) == {PodGroup.RUNNING}
    assert_consistent()


def test_a_gang_arriving_later_takes_back_the_first_gangs_extras_and_it_settles():
    four_cards()
    gang("a")
    run_cycle()
    assert scheduled_by("group__name") == {"a": 4}
    gang("b")
    history = []
    for _ in range(4):
        Pod.objects.filter(status=Pod.PENDING).update(next_attempt_at=None)
        run_cycle()
        history.append((scheduled_by("group__name"), Eviction.objects.count()))
    assert history[-1] == ({"a": 2, "b": 2}, 2), history
    assert history[-2] == history[-1], history  # settled: the extras do not evict back
    assert set(Eviction.objects.values_list("kind", flat=True)) == {"preempt"}
    assert sorted(Eviction.objects.values_list("reason", flat=True)) == [
        "extra of gang default/a (3 placed > min_member 2), priority 0 <= 0",
        "extra of gang default/a (4 placed > min_member 2), priority 0 <= 0",
    ]
    assert set(PodGroup.objects.values_list("phase", flat=True)) == {PodGroup.RUNNING}
    assert_consistent()


def test_a_queue_at_its_limit_on_a_full_cluster_says_so_first():
    Queue.objects.create(name="capped", limit_vgpus=2)
    Queue.objects.create(name="other")
    four_cards()
    for k in range(2):
        submit(f"c{k}", gpu=1, mem=16000, annotations={"hami.io/queue": "capped"})
        submit(f"o{k}", gpu=1, mem=16000, annotations={"hami.io/queue": "other"})
    run_cycle()
    assert scheduled_by("queue__name") == {"capped": 2, "other": 2}
    more = submit("c-more", gpu=1, mem=16000, annotations={"hami.io/queue": "capped"})
    run_cycle()
    assert reload(more).reason == "QueueLimitExceeded: queue capped: vgpus 2 + 1 > limit 2"
    assert not Eviction.objects.exists()
