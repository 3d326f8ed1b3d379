"""The consistency check finds drift, and `--repair` fixes it through the write path.

Drift is made by hand here (a counter written behind the services' back, a pod marked
finished while its allocation stays active): what a bug, a restore from backup or a
manual SQL fix leaves behind, and what the check exists to find.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from prometheus_client import REGISTRY

from scheduling import services, tasks
from scheduling.models import Allocation, Card, Event, Pod
from scheduling.pipeline import consistency, run_cycle
from scheduling.pipeline.housekeeping import housekeeping
from tests.pipeline.conftest import assert_consistent, card, reload, submit

from .conftest import AFTER_COMMIT

pytestmark = AFTER_COMMIT


def sample(name: str, kind: str) -> float:
    return REGISTRY.get_sample_value(name, {"kind": kind}) or 0.0


def command(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("check_consistency", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code), out.getvalue()
    return 0, out.getvalue()


@pytest.fixture
def placed():
    """Two pods on node1's two cards, each placed by a real cycle."""
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    pods = [submit("a", gpu=1, mem=3000, cores=30), submit("b", gpu=1, mem=2000, cores=20)]
    assert len(run_cycle().placed) == 2
    assert_consistent()
    return pods


def test_a_clean_cluster_passes_and_records_nothing(placed):
    assert consistency.check().clean
    code, out = command()
    assert code == 0 and "consistent" in out
    assert not Event.objects.filter(kind=consistency.EVENT_KIND).exists()


def test_a_counter_written_behind_the_services_back_is_found_and_repaired(placed):
    gpu0 = Card.objects.get(uuid="GPU-0")
    truth = (gpu0.used_slots, gpu0.used_memory, gpu0.used_cores)
    Card.objects.filter(pk=gpu0.pk).update(used_slots=5, used_memory=7000)
    before = sample("hamiadmin_consistency_findings_total", "counter_drift")

    code, out = command()
    assert code == 1
    assert "card/GPU-0: counters say 5 slots, 7000 MiB" in out and "--repair" in out
    assert sample("hamiadmin_consistency_findings_total", "counter_drift") == before + 1
    event = Event.objects.get(kind=consistency.EVENT_KIND, subject="card/GPU-0")
    assert event.reason == "CounterDrift"

    repaired_before = sample("hamiadmin_consistency_repairs_total", "counter_drift")
    code, out = command("--repair")
    assert code == 0, out
    assert "repaired card/GPU-0" in out and "consistent after repair" in out
    gpu0.refresh_from_db()
    assert (gpu0.used_slots, gpu0.used_memory, gpu0.used_cores) == truth
    assert sample("hamiadmin_consistency_repairs_total", "counter_drift") == repaired_before + 1
    assert Event.objects.filter(subject="card/GPU-0", reason="CountersRepaired").exists()
    assert_consistent()


def test_a_ghost_allocation_is_released_and_its_card_serves_the_next_pod(placed):
    """HAMi #2923: a pod gone, its allocation still active, the card held by nobody."""
    a = placed[0]
    Pod.objects.filter(pk=a.pk).update(status=Pod.DELETED)  # the release's allocation half lost
    held_card = Allocation.objects.get(pod=a, active=True).card
    services.cordon_card("GPU-1" if held_card.uuid == "GPU-0" else "GPU-0", True)
    waiting = submit("c", gpu=1, mem=8000)
    run_cycle()
    assert reload(waiting).status == Pod.PENDING  # the ghost holds 3000 MiB of the only card

    found = consistency.check()
    assert [ghost["pod"] for ghost in found.ghost_allocations] == ["default/a"]
    assert found.counter_drift == []  # counters agree with the (ghost) rows: only the ghost check sees it
    assert housekeeping()["drift_ghost_allocation"] == 1
    assert Event.objects.filter(subject="pod/default/a", reason="GhostAllocation").exists()

    code, out = command("--repair")
    assert code == 0, out
    assert f"repaired pod/default/a: released {held_card.uuid}" in out
    assert not Allocation.objects.filter(pod=a, active=True).exists()
    assert Card.objects.get(pk=held_card.pk).used_memory == 0
    Pod.objects.filter(pk=waiting.pk).update(next_attempt_at=None)
    run_cycle()
    assert reload(waiting).status == Pod.SCHEDULED
    assert consistency.check().clean


def test_a_placed_pod_holding_no_card_goes_back_to_the_queue_a_running_one_is_reported(placed):
    a, b = placed
    services.mark_bound(b, "node1")
    Allocation.objects.filter(pod__in=[a, b]).update(active=False)
    Card.objects.update(used_slots=0, used_memory=0, used_cores=0)
    found = consistency.check()
    assert sorted(pod["pod"] for pod in found.unbacked_placements) == ["default/a", "default/b"]

    code, out = command("--repair")
    assert code == 1  # the running pod stays: only an operator can say what it holds
    assert "repaired pod/default/a: back in the queue" in out
    assert "left pod/default/b: running with no card" in out
    assert reload(a).status == Pod.PENDING and reload(b).status == Pod.RUNNING


def test_the_repair_holds_the_lock_order_and_changes_nothing_when_clean(placed):
    repair = services.repair_consistency()
    assert not repair.changed and repair.left_alone == []
    assert_consistent()


def test_the_beat_housekeeping_task_repairs_the_drift_it_finds(placed):
    gpu0 = Card.objects.get(uuid="GPU-0")
    truth = (gpu0.used_slots, gpu0.used_memory, gpu0.used_cores)
    Card.objects.filter(pk=gpu0.pk).update(used_slots=5, used_memory=7000)
    done = tasks.housekeeping()
    assert done["drift_counter_drift"] == 1 and done["repaired"]["counters_fixed"] == ["GPU-0"]
    gpu0.refresh_from_db()
    assert (gpu0.used_slots, gpu0.used_memory, gpu0.used_cores) == truth
    assert "repaired" not in tasks.housekeeping()
