"""Pods others bound hold cards the counters do not show (a DRA pass's, one HAMi placed), so
a cycle and the DRA pass each check, under the cards' locks, what landed since they read:
- a cycle's commit finds such a pod written after its snapshot read the bound pods
  (`StandingSnapshot.bound_since`: the standing snapshot's marks on PostgreSQL, else the
  snapshot's `bound_mark`) and leaves the placements on its node to the next cycle;
- the pass stores a pod it placed only if no allocation landed on its cards since it read
  them (`services.assume_bound_pod`), else it takes its claims back.
Before, the commit re-checked the counters alone and the pass stored without a check: either
side could give one card twice."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
from django.db import connection

from scheduling import services
from scheduling.engine import PodInvalid
from scheduling.engine.encoding import encode_allocation
from scheduling.models import Allocation, BoundPod, Pod
from scheduling.pipeline import plan_cycle, run_cycle
from scheduling.pipeline.commit import commit_plan
from scheduling.pipeline.standing import STANDING
from tests.conftest import held_elsewhere

from .conftest import assert_consistent, card, limits

pytestmark = pytest.mark.django_db(transaction=True)  # committed writes: their marks differ


def bind_elsewhere(name: str, node: str, uuid: str, memory: int) -> None:
    """A pod another scheduler bound, holding `memory` MiB of card `uuid` (HAMi's annotation)."""
    container = {"name": "main", "resources": {"requests": {"cpu": "100m"}}}
    item = {"namespace": "other", "name": name, "node": node, "containers": [container]}
    done = services.upsert_bound_pods(
        [{**item, "allocated": encode_allocation([[(uuid, memory, 0)]]), "phase": "Running"}]
    )
    assert done[0].outcome != "refused", done


def test_a_card_taken_by_a_pod_others_bound_since_planning_is_not_given_again(require_postgres):
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0, memory=8000), card("GPU-1", 1, memory=8000)])
    services.submit_pod("default", "whole", {}, [{"name": "main", "resources": limits(gpu=1, mem=8000)}])
    STANDING.clear()
    plan = plan_cycle()
    [attempt] = plan.attempts
    [planned] = [device.uuid for container in attempt.decision.containers for device in container.devices]
    bind_elsewhere("taken", "n1", planned, 8000)  # after planning, before the commit
    report = commit_plan(plan)
    assert [key for key, _ in report.conflicts] == ["default/whole"], report
    assert not Allocation.objects.filter(active=True).exists()
    run_cycle()  # counts the bound pod: the other card
    placed = Allocation.objects.get(active=True, pod__name="whole")
    assert placed.card.uuid != planned
    assert_consistent()


@pytest.mark.parametrize("kept", [True, False], ids=["standing snapshot", "fresh snapshot"])
def test_on_any_database_and_snapshot_a_card_taken_since_planning_is_not_given_again(settings, kept):
    """A fresh snapshot (SNAPSHOT_KEEP off, or the standing one busy) and SQLite's standing
    one have no marks seen: their commit looks for pods others bound since their
    `bound_mark` (PostgreSQL: the oldest transaction running; SQLite: the time)."""
    settings.HAMIADMIN = {**settings.HAMIADMIN, "SNAPSHOT_KEEP": kept}
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0, memory=8000), card("GPU-1", 1, memory=8000)])
    services.submit_pod("default", "whole", {}, [{"name": "main", "resources": limits(gpu=1, mem=8000)}])
    services.submit_pod("default", "small", {}, [{"name": "main", "resources": limits(gpu=1, mem=1000)}])
    STANDING.clear()
    plan = plan_cycle()
    assert (plan.snapshot is STANDING.snapshot) == kept
    planned = {
        attempt.key: device.uuid
        for attempt in plan.attempts
        for container in attempt.decision.containers
        for device in container.devices
    }
    bind_elsewhere("taken", "n1", planned["default/whole"], 8000)  # after planning, before the commit
    report = commit_plan(plan)
    # both placements were on n1, where the bound pod landed: both wait for the next cycle
    assert sorted(key for key, _ in report.conflicts) == ["default/small", "default/whole"], report
    assert not Allocation.objects.filter(active=True).exists()
    run_cycle()  # counts the bound pod
    placed = Allocation.objects.get(active=True, pod__name="whole")
    assert placed.card.uuid != planned["default/whole"]
    assert_consistent()


def an_old_transaction():
    """Another session's transaction, open (with a transaction id) from the block's start to
    its end: on PostgreSQL it holds the oldest running transaction, a fresh snapshot's bound
    mark, back before whatever is written in the block."""
    if connection.vendor != "postgresql":
        return nullcontext()

    def assign_xid() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT txid_current()")

    return held_elsewhere(assign_xid, what="an open transaction")


def test_a_pod_others_bound_before_the_read_is_counted_and_stops_nothing(settings):
    """Written after the mark (another session's open transaction holds it back) but read by
    the snapshot as it is: counted, and no placement waits for it."""
    settings.HAMIADMIN = {**settings.HAMIADMIN, "SNAPSHOT_KEEP": False}
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0, memory=8000), card("GPU-1", 1, memory=8000)])
    with an_old_transaction():
        bind_elsewhere("early", "n1", "GPU-0", 8000)
        services.submit_pod("default", "whole", {}, [{"name": "main", "resources": limits(gpu=1, mem=8000)}])
        report = run_cycle()
    assert report.placed and not report.conflicts, report
    assert Allocation.objects.get(active=True, pod__name="whole").card.uuid == "GPU-1"


def test_a_pod_of_its_own_bound_since_planning_holds_nothing_more(require_postgres):
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0, memory=8000), card("GPU-1", 1, memory=8000)])
    services.submit_pod("default", "first", {}, [{"name": "main", "resources": limits(gpu=1, mem=1000)}])
    STANDING.clear()
    run_cycle()
    first = Allocation.objects.get(active=True, pod__name="first")
    services.submit_pod("default", "second", {}, [{"name": "main", "resources": limits(gpu=1, mem=1000)}])
    plan = plan_cycle()
    # the watcher sees hamiadmin's own pod bound, with the annotation hamiadmin wrote
    container = {"name": "main", "resources": {"requests": {"cpu": "100m"}}}
    item = {"namespace": "default", "name": "first", "node": "n1", "containers": [container]}
    allocated = encode_allocation([[(first.card.uuid, 1000, 0)]])
    services.upsert_bound_pods([{**item, "allocated": allocated, "phase": "Running"}])
    report = commit_plan(plan)
    assert report.placed and not report.conflicts, "its own pod counts once, by its cards"
    assert Pod.objects.get(name="second").status == Pod.SCHEDULED
    assert_consistent()


def test_a_pass_pod_is_stored_only_if_no_allocation_landed_on_its_cards_since_its_read(require_postgres):
    """`services.assume_bound_pod`: the DRA pass's store of a pod it placed, checked under the
    cards' locks against the allocation ids it counted (`seen`)."""
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0, memory=8000), card("GPU-1", 1, memory=8000)])
    services.submit_pod("default", "cycle", {}, [{"name": "main", "resources": limits(gpu=1, mem=1000)}])
    seen = frozenset(Allocation.objects.filter(active=True).values_list("pk", flat=True))  # none yet
    run_cycle()  # lands after the read
    landed = Allocation.objects.get(active=True).card.uuid
    other = "GPU-1" if landed == "GPU-0" else "GPU-0"
    container = {"name": "main", "resources": {"requests": {"cpu": "100m"}}}

    def item(name: str, uuid: str) -> dict:
        return {
            "namespace": "dra",
            "name": name,
            "node": "n1",
            "containers": [container],
            "allocated": encode_allocation([[(uuid, 4000, 0)]]),
            "phase": "Pending",
        }

    assert services.assume_bound_pod(item("late", landed), seen) is None, "an allocation landed there since"
    assert services.assume_bound_pod(item("clear", other), seen) is not None
    now = frozenset(Allocation.objects.filter(active=True).values_list("pk", flat=True))
    assert services.assume_bound_pod(item("counted", landed), now) is not None, "counted by the read"
    assert services.assume_bound_pod(item("unchecked", landed), None) is not None
    assert sorted(BoundPod.objects.values_list("name", flat=True)) == ["clear", "counted", "unchecked"]
    with pytest.raises(PodInvalid) as refused:
        services.assume_bound_pod({**item("bad", landed), "allocated": "GPU-0,NVIDIA"}, seen)
    assert refused.value.field == "allocated"
