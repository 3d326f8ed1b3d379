"""Preemption through real cycles: the commit writes evictions and nominations, hamiadmin's
own victims are requeued at once, Kubernetes victims are waited for with their cards held for
the preemptor, and the commit's re-check counts nominations so nothing is placed twice.

SQLite by default, PostgreSQL in CI (DATABASE_URL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Count
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling import services
from scheduling.models import Allocation, Card, Decision, Eviction, Node, Nomination, Pod
from scheduling.pipeline import plan_cycle, run_cycle
from scheduling.pipeline.commit import commit_plan
from scheduling.pipeline.standing import STANDING
from scheduling.services.evictions import refuse_eviction, settle_evictions

from .conftest import assert_consistent, card, nominate, reload, submit

pytestmark = pytest.mark.django_db(transaction=True)  # real commits: wakes run on_commit

PIN = "nvidia.com/use-gpuuuid"


def two_cards(memory: int = 10000) -> None:
    services.report_inventory(
        "node1", {}, {}, [card("GPU-0", 0, memory, slots=4), card("GPU-1", 1, memory, slots=4)]
    )


def tenants(origin: str = Pod.API) -> dict[str, Pod]:
    """GPU-0 holds two 3000 MiB tenants (4000 free), GPU-1 one 5000 MiB tenant (5000 free):
    an 8000 MiB pod fits nowhere; evicting `b` alone frees enough, on GPU-0 it takes both."""
    pods = {
        "a1": submit("a1", gpu=1, mem=3000, annotations={PIN: "GPU-0"}, origin=origin, validate=False),
        "a2": submit("a2", gpu=1, mem=3000, annotations={PIN: "GPU-0"}, origin=origin, validate=False),
        "b": submit("b", gpu=1, mem=5000, annotations={PIN: "GPU-1"}, origin=origin, validate=False),
    }
    report = run_cycle()
    assert len(report.placed) == 3, report
    return pods


def last_decision(pod: Pod) -> Decision:
    return Decision.objects.filter(pod=pod).order_by("-id").first()


def hami(**overrides):
    from scheduling.pipeline.options import DEFAULTS

    return {**DEFAULTS, **overrides}


def test_only_the_tenant_on_gpu1_is_evicted_and_the_preemptor_lands_on_gpu1():
    two_cards()
    pods = tenants()
    high = submit("high", gpu=1, mem=8000, priority=1000)
    report = run_cycle()
    assert len(report.evictions) == 1
    (eviction,) = Eviction.objects.all()
    assert (eviction.victim_id, eviction.preemptor_id, eviction.kind) == (pods["b"].pk, high.pk, "preempt")
    assert (eviction.node, eviction.cards, eviction.state) == ("node1", ["GPU-1"], Eviction.DONE)
    assert eviction.reason == "priority 0 < 1000"
    # hamiadmin's own victim goes back to the queue at once, saying why
    victim = reload(pods["b"])
    assert victim.status == Pod.PENDING and victim.node is None
    assert victim.reason.startswith("preempted by default/high: priority 0 < 1000")
    assert not Allocation.objects.filter(pod=victim, active=True).exists()
    # the preemptor waits on its nominated card with the whole story in its decision
    high = reload(high)
    assert high.status == Pod.PENDING
    assert high.reason == "Preempting: evicting 1 pod on node1 (GPU-1): default/b"
    preemption = last_decision(high).payload["preemption"]
    assert [v["pod"] for v in preemption["victims"]] == ["default/b"]
    assert preemption["grants"] == [["GPU-1", 8000, 0]]
    assert list(Nomination.objects.values_list("pod_id", "card__uuid", "memory")) == [
        (high.pk, "GPU-1", 8000)
    ]
    assert eviction.decision_id == last_decision(high).pk
    for untouched in ("a1", "a2"):
        assert reload(pods[untouched]).status == Pod.SCHEDULED

    report = run_cycle()
    high = reload(high)
    assert high.status == Pod.SCHEDULED and high.allocated.startswith("GPU-1,")
    assert not Nomination.objects.exists()
    victim = reload(pods["b"])
    assert victim.status == Pod.PENDING  # no room left, and it may not preempt back
    assert "preempt" not in (last_decision(victim).payload.get("batch") or {}).get("reason", "").lower()
    assert Eviction.objects.count() == 1
    assert_consistent()


def test_a_kubernetes_victim_is_waited_for_and_its_freed_card_is_kept_for_the_preemptor():
    two_cards()
    pods = tenants(origin=Pod.KUBERNETES)
    high = submit("high", gpu=1, mem=8000, priority=1000)
    run_cycle()
    (eviction,) = Eviction.objects.all()
    assert eviction.state == Eviction.REQUESTED  # the kube agent carries it out
    assert reload(pods["b"]).status == Pod.SCHEDULED

    other = submit("other", gpu=1, mem=6000)  # priority 0: it cannot preempt anybody
    Pod.objects.filter(pk=high.pk).update(next_attempt_at=None)  # tried again before b is gone
    run_cycle()
    high = reload(high)
    assert high.status == Pod.PENDING
    assert high.reason.startswith("Nominated: nominated to node1 (GPU-1); waiting for 1 victim to release")
    assert Eviction.objects.count() == 1  # no second eviction for the same pod

    services.release_pod(pods["b"], Pod.DELETED)  # Kubernetes deleted the victim
    run_cycle()
    assert reload(high).status == Pod.SCHEDULED and reload(high).allocated.startswith("GPU-1,")
    assert reload(other).status == Pod.PENDING  # 10000 free on GPU-1 after b, but 8000 were nominated
    assert Eviction.objects.get().state == Eviction.DONE
    assert not Nomination.objects.exists()
    assert_consistent()


def test_the_commit_refuses_a_placement_on_cards_nominated_to_another_pod():
    two_cards()
    waiting = submit("waiting", gpu=1, mem=1000, annotations={PIN: "GPU-9"})  # never placed
    late = submit("late", gpu=1, mem=4000, annotations={PIN: "GPU-1"})
    plan = plan_cycle()  # planned before the nomination below exists
    assert [a.decision.node for a in plan.attempts if a.key == "default/late"] == ["node1"]
    Nomination.objects.create(
        pod=waiting,
        card=Card.objects.get(uuid="GPU-1"),
        memory=8000,
        cores=0,
        expires_at=timezone.now() + timedelta(minutes=2),
    )
    report = commit_plan(plan)
    assert report.placed == []
    assert [key for key, _ in report.conflicts] == ["default/late"]
    assert "GPU-1" in dict(report.conflicts)["default/late"]
    assert reload(late).status == Pod.PENDING
    assert_consistent()


def test_dry_run_explains_the_victims_and_evicts_nothing(settings):
    settings.HAMIADMIN = hami(PREEMPT_DRY_RUN=True)
    two_cards()
    pods = tenants()
    high = submit("high", gpu=1, mem=8000, priority=1000)
    report = run_cycle()
    assert report.evictions == [] and not Eviction.objects.exists() and not Nomination.objects.exists()
    assert reload(pods["b"]).status == Pod.SCHEDULED
    preemption = last_decision(reload(high)).payload["preemption"]
    assert preemption["dry_run"] is True
    assert preemption["message"] == "would evict 1 pod on node1 (GPU-1): default/b"
    assert_consistent()


@pytest.mark.parametrize(
    ("overrides", "annotations", "why"),
    [
        ({"PREEMPT_MIN_RUNTIME_SECONDS": 3600.0}, {}, "victims protected by min runtime"),
        ({}, {"hami.io/preemptible": "false"}, "victims non-preemptible"),
    ],
)
def test_protected_tenants_are_not_evicted_and_the_pending_pod_says_why(
    settings, overrides, annotations, why
):
    settings.HAMIADMIN = hami(**overrides)
    two_cards()
    for name, mem, uuid in (("a1", 3000, "GPU-0"), ("a2", 3000, "GPU-0"), ("b", 5000, "GPU-1")):
        submit(name, gpu=1, mem=mem, annotations={PIN: uuid, **annotations})
    run_cycle()
    high = submit("high", gpu=1, mem=8000, priority=1000)
    run_cycle()
    assert not Eviction.objects.exists()
    high = reload(high)
    assert high.status == Pod.PENDING
    assert f"preemption did not help: {why} (" in high.reason
    assert last_decision(high).payload["preemption"]["tried"] is True


def test_preemption_off_evicts_nothing(settings):
    settings.HAMIADMIN = hami(PREEMPTION=False)
    two_cards()
    tenants()
    high = submit("high", gpu=1, mem=8000, priority=1000)
    run_cycle()
    assert not Eviction.objects.exists()
    assert "preemption" not in last_decision(reload(high)).payload


def test_a_refused_eviction_makes_the_preemptor_take_the_next_victim_set():
    two_cards()
    pods = tenants(origin=Pod.KUBERNETES)
    high = submit("high", gpu=1, mem=8000, priority=1000)
    run_cycle()
    first = Eviction.objects.get()
    assert refuse_eviction(first.pk, "Cannot evict pod as it would violate the pod's disruption budget.")
    assert not Nomination.objects.exists()
    run_cycle()
    second = sorted(Eviction.objects.filter(state=Eviction.REQUESTED).values_list("victim_id", flat=True))
    assert second == sorted([pods["a1"].pk, pods["a2"].pk])  # b is left out while its refusal is fresh
    assert Eviction.objects.get(pk=first.pk).state == Eviction.REFUSED
    assert set(Nomination.objects.values_list("card__uuid", flat=True)) == {"GPU-0"}
    assert reload(high).status == Pod.PENDING


def test_a_victim_that_outlives_the_grace_period_releases_the_nomination():
    two_cards()
    pods = tenants(origin=Pod.KUBERNETES)
    submit("high", gpu=1, mem=8000, priority=1000)
    run_cycle()
    assert Nomination.objects.exists()
    later = timezone.now() + timedelta(seconds=121)
    counts = settle_evictions(later)
    assert counts["timed_out"] == 1
    assert Eviction.objects.get().state == Eviction.TIMED_OUT
    assert not Nomination.objects.exists()
    assert reload(pods["b"]).status == Pod.SCHEDULED


def test_a_victim_released_on_its_own_settles_the_eviction_as_done():
    two_cards()
    pods = tenants(origin=Pod.KUBERNETES)
    submit("high", gpu=1, mem=8000, priority=1000)
    run_cycle()
    services.release_pod(pods["b"], Pod.SUCCEEDED)
    assert settle_evictions()["done"] == 1
    assert Eviction.objects.get().state == Eviction.DONE


def test_an_expired_nomination_alone_is_settled_and_nothing_to_settle_costs_one_statement():
    two_cards()
    tenants(origin=Pod.KUBERNETES)
    submit("high", gpu=1, mem=8000, priority=1000)
    run_cycle()
    Eviction.objects.update(state=Eviction.DONE)  # no eviction active: only the nomination is left
    assert Nomination.objects.exists()
    later = timezone.now() + timedelta(days=1)  # past every nomination's expiry
    assert settle_evictions(later)["nominations_expired"] >= 1
    assert not Nomination.objects.exists()
    with CaptureQueriesContext(connection) as queries:
        assert settle_evictions(later) == {"done": 0, "timed_out": 0, "nominations_expired": 0}
    assert len(queries) == 1, [q["sql"] for q in queries]


def test_reclaim_through_real_cycles_settles_at_the_weighted_fair_share():
    """Queue a (weight 1) holds all 20 single-slot cards; b (weight 3) asks for 20. Cycles
    evict a's pods (requeued, still asking) until the split is 5/15, and then evict nothing."""
    services.create_queue("a", weight=1)
    services.create_queue("b", weight=3)
    for n in range(4):
        services.report_inventory(f"n{n}", {}, {}, [card(f"GPU-{n}-{i}", i, 8000, slots=1) for i in range(5)])
    for k in range(20):
        submit(f"a{k}", gpu=1, mem=1000, annotations={"hami.io/queue": "a"})
    run_cycle()
    for k in range(20):
        submit(f"b{k}", gpu=1, mem=1000, annotations={"hami.io/queue": "b"})
    history = []
    for _ in range(8):
        Pod.objects.filter(status=Pod.PENDING).update(next_attempt_at=None)
        run_cycle()
        placed = dict(
            Pod.objects.filter(status=Pod.SCHEDULED).values_list("queue__name").annotate(n=Count("id"))
        )
        history.append((placed.get("a", 0), placed.get("b", 0), Eviction.objects.count()))
    assert history[-1][:2] == (5, 15), history
    settled = next(i for i, h in enumerate(history) if h[:2] == (5, 15))
    assert all(h == history[settled] for h in history[settled:]), history  # no flapping, no more evictions
    assert set(Eviction.objects.values_list("kind", flat=True)) == {"reclaim"}
    reason = Eviction.objects.first().reason
    assert reason.startswith("queue a above its fair share: vgpus "), reason
    assert_consistent()


def test_consolidation_moves_a_tenant_to_its_held_new_home_and_the_pod_takes_its_place(settings):
    settings.HAMIADMIN = hami(CONSOLIDATION=True)
    for n in (1, 2):
        services.report_inventory(f"n{n}", {}, {}, [card(f"GPU-n{n}", 0, 16000, slots=4)])
    t = submit("t", gpu=1, mem=6000, annotations={PIN: "GPU-n1,GPU-n2"})
    run_cycle()
    u = submit("u", gpu=1, mem=6000, annotations={PIN: "GPU-n2"})
    run_cycle()
    assert (reload(t).node.name, reload(u).node.name) == ("n1", "n2")
    p = submit("p", gpu=1, mem=12000)  # 10000 MiB free on each node: fits nowhere
    run_cycle()
    (eviction,) = Eviction.objects.all()
    assert (eviction.kind, eviction.victim_id, eviction.state) == ("consolidate", t.pk, Eviction.DONE)
    assert eviction.reason == "moved to n2 (GPU-n2) so default/p fits n1"
    held = set(Nomination.objects.values_list("pod__name", "card__uuid", "memory"))
    assert held == {("t", "GPU-n2", 6000), ("p", "GPU-n1", 12000)}  # t's new home is held first
    assert reload(t).reason.startswith("moved for default/p: ")
    assert reload(p).reason.startswith("Consolidating: moving 1 pod to make room on n1: default/t n1 -> n2")
    Pod.objects.filter(status=Pod.PENDING).update(next_attempt_at=None)
    run_cycle()
    assert (reload(t).status, reload(t).node.name) == (Pod.SCHEDULED, "n2")
    assert (reload(p).status, reload(p).node.name) == (Pod.SCHEDULED, "n1")
    assert not Nomination.objects.exists()
    assert_consistent()


def test_consolidation_is_off_by_default():
    for n in (1, 2):
        services.report_inventory(f"n{n}", {}, {}, [card(f"GPU-n{n}", 0, 16000, slots=4)])
    submit("t", gpu=1, mem=6000, annotations={PIN: "GPU-n1"})
    submit("u", gpu=1, mem=6000, annotations={PIN: "GPU-n2"})
    run_cycle()
    submit("p", gpu=1, mem=12000)
    run_cycle()
    assert not Eviction.objects.exists()


def test_gang_members_landing_on_the_cards_they_were_nominated_to_count_once():
    """A gang that preempted earlier lands on its nominated cards: each member's nomination
    stops holding anything once that member is placed in the commit, so two members on one
    card are not counted twice (placement plus nomination) and the gang is kept whole. It
    used to be refused as a conflict every cycle and never placed."""
    services.report_inventory("node1", {}, {}, [card("GPU-1", 0, memory=16000)])
    gang = {"hami.io/group-name": "pair", "hami.io/group-min-member": "2", PIN: "GPU-1"}
    members = [submit(f"m{n}", gpu=1, mem=7000, annotations=gang) for n in range(2)]
    for member in members:
        Nomination.objects.create(
            pod=member,
            card=Card.objects.get(uuid="GPU-1"),
            memory=7000,
            cores=0,
            expires_at=timezone.now() + timedelta(minutes=2),
        )
    report = run_cycle()
    assert report.conflicts == []
    assert sorted(key for key, *_ in report.placed) == ["default/m0", "default/m1"]
    assert_consistent()


def test_two_commits_evicting_members_of_one_gang_never_leave_it_below_its_minimum():
    """Each of two plans evicts one member of a gang that keeps its minimum in that plan's
    view; together they would leave it one member short. The second commit, taking turns
    with the first on the gang's placed members, finds the first's eviction and refuses its
    preemption (a conflict: planned again at once), so no gang is left partly placed."""
    for n in range(3):
        services.report_inventory(f"node{n}", {"slot": str(n)}, {}, [card(f"GPU-{n}", 0, 10000)])
    gang = {"hami.io/group-name": "g", "hami.io/group-min-member": "2"}
    for i in range(3):
        submit(f"g-{i}", gpu=1, mem=10000, annotations=gang)
    assert len(run_cycle().placed) == 3
    on = dict(Pod.objects.filter(name__startswith="g-").values_list("node__name", "pk"))
    report = two_planners_evict_on(["node0", "node1"], on)
    assert "gang default/g would keep 1 of the 2 members it needs placed" in report.conflicts[0][1]


def two_planners_evict_on(nodes: list[str], on: dict[str, int]):
    """Preemptors p1 and p2 (priority 1000, 10000 MiB), each selecting one of `nodes`
    (labelled `slot`), planned by two planners on the same database, then committed in turn:
    each plan evicts the tenant of its node (`on`: node -> pod pk); the second commit, its
    report returned, must refuse p2's preemption as a conflict."""
    slots = [Node.objects.get(name=name).labels["slot"] for name in nodes]
    p1 = submit("p1", gpu=1, mem=10000, priority=1000, scheduling={"nodeSelector": {"slot": slots[0]}})
    p2 = submit("p2", gpu=1, mem=10000, priority=1000, scheduling={"nodeSelector": {"slot": slots[1]}})
    Pod.objects.filter(pk=p2.pk).update(gated=True)
    first = plan_cycle()  # p1 alone: it evicts the tenant of its node
    STANDING.clear()  # the second planner reads the database as it is, the first uncommitted
    Pod.objects.filter(pk=p2.pk).update(gated=False)
    Pod.objects.filter(pk=p1.pk).update(gated=True)
    second = plan_cycle()  # p2 alone: it evicts the tenant of the other node
    assert [v[0] for a in first.attempts for v in a.victims] == [on[nodes[0]]]
    assert [v[0] for a in second.attempts for v in a.victims] == [on[nodes[1]]]
    Pod.objects.filter(pk=p1.pk).update(gated=False)
    assert commit_plan(first).conflicts == []
    report = commit_plan(second)
    assert [key for key, _ in report.conflicts] == ["default/p2"]
    assert list(Eviction.objects.values_list("victim_id", flat=True)) == [on[nodes[0]]]
    assert reload(p2).status == Pod.PENDING and "lost a race" in reload(p2).reason
    assert_consistent()
    return report


def test_two_commits_never_leave_a_gang_part_below_its_own_minimum():
    """A gang well above `min_member` whose part `a` has one member above its own minimum:
    each of two plans evicts one member of `a`; together they would leave `a` short while the
    gang as a whole still counts enough members."""
    for n in range(5):
        services.report_inventory(f"node{n}", {"slot": str(n)}, {}, [card(f"GPU-{n}", 0, 10000)])
    services.store_pod_group(
        "default",
        "tf",
        "volcano",
        None,
        min_member=3,
        subgroups=[{"name": "a", "min_member": 2}, {"name": "b", "min_member": 1}],
    )
    for name, task in [("a-0", "a"), ("a-1", "a"), ("a-2", "a"), ("b-0", "b"), ("b-1", "b")]:
        annotations = {"scheduling.k8s.io/group-name": "tf", "volcano.sh/task-spec": task}
        submit(name, gpu=1, mem=10000, annotations=annotations)
    assert len(run_cycle().placed) == 5
    on = dict(Pod.objects.filter(status=Pod.SCHEDULED).values_list("node__name", "pk"))
    by_name = dict(Pod.objects.values_list("name", "node__name"))
    report = two_planners_evict_on([by_name["a-0"], by_name["a-1"]], on)
    assert (
        "gang default/tf subgroup a would keep 1 of the 2 members it needs placed" in report.conflicts[0][1]
    )


def test_a_nomination_spent_by_a_gang_member_the_gang_rolls_back_still_holds_its_card():
    """A nominated gang member is placed on its card in planning, then its gang falls short of
    its minimum and is taken back: its nomination holds the card again for the rest of the
    cycle. Dropped, a later pod was planned onto the card and refused by the commit (which
    counts the nomination) every cycle until the nomination expired."""
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, 10000, slots=4)])
    gang = {"hami.io/group-name": "g", "hami.io/group-min-member": "2"}
    nominated = submit("g-0", gpu=1, mem=8000, annotations=gang, priority=10)
    submit("g-1", gpu=1, mem=20000, annotations=gang, priority=10, validate=False)  # fits nowhere
    later = submit("later", gpu=1, mem=8000)
    nominate(nominated, "GPU-0", 8000)
    report = run_cycle()
    assert report.placed == [] and report.conflicts == [], report
    later = reload(later)
    assert later.status == Pod.PENDING and "lost a race" not in later.reason, later.reason
    assert reload(nominated).status == Pod.PENDING
    assert_consistent()
