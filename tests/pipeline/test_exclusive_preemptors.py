"""Exclusive preemptors through real cycles (docs/preemption.md, "Exclusive preemptors"): a
`mutex` preemptor's nomination holds its whole card, so pods submitted while its victims
leave do not refill the card, and it lands after one round of evictions.

SQLite by default, PostgreSQL in CI (DATABASE_URL)."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.models import Eviction, Nomination, Pod
from scheduling.pipeline import plan_cycle, run_cycle
from scheduling.pipeline.commit import commit_plan

from .conftest import assert_consistent, card, nominate, reload, submit
from .test_preemption import last_decision

pytestmark = pytest.mark.django_db(transaction=True)  # real commits: wakes run on_commit

MUTEX = {"hami.io/gpu-scheduler-policy": "mutex"}


def due(pod: Pod) -> None:
    """Try `pod` in the next cycle, whatever its back-off."""
    Pod.objects.filter(pk=pod.pk).update(next_attempt_at=None)


def test_a_mutex_preemptor_lands_after_one_eviction_round_and_a_small_pod_does_not_refill_its_card():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, 16000, slots=4)])
    a = submit("a", gpu=1, mem=6000, origin=Pod.KUBERNETES, validate=False)
    b = submit("b", gpu=1, mem=6000, origin=Pod.KUBERNETES, validate=False)
    assert len(run_cycle().placed) == 2

    p = submit("p", gpu=1, mem=4000, annotations=MUTEX, priority=1000)
    run_cycle()
    assert sorted(Eviction.objects.values_list("victim_id", flat=True)) == sorted([a.pk, b.pk])
    assert list(Nomination.objects.values_list("pod_id", "card__uuid", "memory", "whole")) == [
        (p.pk, "GPU-0", 4000, True)
    ]
    assert reload(p).reason.endswith("card GPU-0 held whole for preemptor default/p (mutex)")
    assert last_decision(p).payload["preemption"]["whole"] == ["GPU-0"]

    services.release_pod(a, Pod.DELETED)  # one victim gone: 6000 MiB in use, 4000 nominated
    small = submit("small", gpu=1, mem=2000)  # 6000 MiB free beside them: it would fit
    due(p)
    run_cycle()
    assert reload(small).status == Pod.PENDING and reload(small).node is None
    assert (
        "nomination: cards held whole: node1 (GPU-0) for preemptor default/p"
        in (last_decision(small).payload["warnings"])
    )
    assert reload(p).reason.startswith(
        "Nominated: nominated to node1 (GPU-0); card GPU-0 held whole for preemptor default/p (mutex); "
        "waiting for"
    )

    services.release_pod(b, Pod.DELETED)  # the last victim gone
    due(p)
    run_cycle()
    p = reload(p)
    assert p.status == Pod.SCHEDULED and p.allocated.startswith("GPU-0,")
    assert Eviction.objects.count() == 2  # evicted once: the small pod was never a victim
    assert not Eviction.objects.filter(victim=small).exists()
    assert not Nomination.objects.exists()
    assert_consistent()


def test_the_commit_refuses_a_placement_on_a_card_held_whole_for_another_pod():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, 16000, slots=4)])
    waiting = submit("waiting", gpu=1, mem=1000, annotations={"nvidia.com/use-gpuuuid": "GPU-9"})
    late = submit("late", gpu=1, mem=0, cores=0)  # asks nothing a 1000 MiB nomination would refuse
    plan = plan_cycle()  # planned before the nomination below exists
    assert [a.decision.node for a in plan.attempts if a.key == "default/late"] == ["node1"]
    nominate(waiting, "GPU-0", 1000, whole=True, minutes=2)
    report = commit_plan(plan)
    assert report.placed == []
    assert dict(report.conflicts)["default/late"] == "GPU-0 held whole for preemptor default/waiting"
    assert reload(late).status == Pod.PENDING
