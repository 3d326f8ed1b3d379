"""The write paths: validate first (errors name the field, nothing written), then write."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.engine import PodInvalid, ScenarioError
from scheduling.models import Allocation, Card, Node, Pod, SchedulerConfig
from scheduling.pipeline import run_cycle

from .conftest import assert_consistent, card, reload, submit, t4

pytestmark = pytest.mark.django_db


def test_report_upserts_node_and_cards_with_pair_scores_on_both_sides():
    services.report_inventory("node1", {"zone": "a"}, {}, [t4("GPU-0", 0, links={"GPU-1": 200}), t4("GPU-1", 1)])
    node = Node.objects.get(name="node1")
    assert node.ready and node.last_heartbeat is not None and node.labels == {"zone": "a"}
    cards = {c.uuid: c for c in node.cards.all()}
    assert cards["GPU-0"].links == {"GPU-1": 200} and cards["GPU-1"].links == {"GPU-0": 200}
    assert cards["GPU-1"].memory == 15360 and cards["GPU-1"].slots == 10 and cards["GPU-1"].cores == 100


def test_a_card_missing_from_the_report_is_kept_absent_with_its_tenant_and_takes_no_new_pod():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    submit("tenant", gpu=1, mem=1000, annotations={"nvidia.com/use-gpuuuid": "GPU-1"})
    run_cycle()
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    gone = Card.objects.get(uuid="GPU-1")
    assert not gone.present and gone.used_slots == 1
    assert Allocation.objects.get(card=gone).active
    late = submit("late", gpu=1, mem=1000, annotations={"nvidia.com/use-gpuuuid": "GPU-1"})
    run_cycle()
    assert reload(late).status == Pod.PENDING and "CardUuidMismatch" in late.reason
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    assert Card.objects.get(uuid="GPU-1").present
    run_cycle()
    assert reload(late).status == Pod.SCHEDULED
    assert_consistent()


@pytest.mark.parametrize(
    ("devices", "where"),
    [
        ([card("GPU-0", 0), {"uuid": "GPU-1", "index": 1}], "devices[1].memory"),
        ([card("GPU-0", 0, slots=-1)], "devices[0].slots"),
        ([card("GPU-0", 0), card("GPU-0", 1)], "devices[1].uuid"),
        ([card("GPU-0", 0, used={"slots": 1})], "devices[0].used"),
        ([card("GPU-0", 0, links={"GPU-9": 10})], "devices"),
        ([{"index": 0, "memory": 10}], "devices[0].uuid"),
    ],
)
def test_a_bad_report_names_the_field_and_writes_nothing(devices, where):
    with pytest.raises(ScenarioError) as error:
        services.report_inventory("node1", {}, {}, devices)
    assert error.value.where == where
    assert not Node.objects.exists() and not Card.objects.exists()


def test_a_node_cannot_claim_a_card_of_another_ready_node():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    with pytest.raises(ScenarioError) as error:
        services.report_inventory("node2", {}, {}, [card("GPU-1", 0), card("GPU-0", 1)])
    assert error.value.where == "devices[1].uuid" and "node1" in error.value.message
    assert not Node.objects.filter(name="node2").exists()
    assert Card.objects.get(uuid="GPU-0").node.name == "node1"


@pytest.mark.parametrize(
    ("annotations", "resources", "field"),
    [
        ({"hami.io/device-scoring-weights": "slot=1,core=1"}, {"nvidia.com/gpu": 1},
         "annotations.hami.io/device-scoring-weights"),
        ({}, {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 101}, "containers[0].resources.limits.nvidia.com/gpucores"),
        ({}, {"nvidia.com/gpu": 0}, "containers[0].resources.limits.nvidia.com/gpu"),
        ({}, {}, "containers"),
    ],
)  # fmt: skip
def test_an_invalid_pod_is_refused_naming_the_field_and_nothing_is_written(annotations, resources, field):
    with pytest.raises(PodInvalid) as error:
        services.submit_pod("default", "p", annotations, [{"name": "main", "resources": {"limits": resources}}])
    assert error.value.field == field
    assert not Pod.objects.exists()


def test_resubmitting_the_same_spec_changes_nothing_and_a_new_spec_requeues():
    first = submit("p", gpu=1, mem=1000)
    again = submit("p", gpu=1, mem=1000)
    assert again.pk == first.pk and again.revision == first.revision
    changed = submit("p", gpu=1, mem=2000)
    assert changed.pk == first.pk and changed.revision == first.revision + 1
    assert changed.containers[0]["resources"]["limits"]["nvidia.com/gpumem"] == 2000


def test_a_placed_pod_keeps_its_placement_and_refuses_new_containers():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    submit("p", gpu=1, mem=1000)
    run_cycle()
    with pytest.raises(PodInvalid) as error:
        submit("p", gpu=1, mem=2000)
    assert error.value.field == "containers"
    placed = submit("p", gpu=1, mem=1000, annotations={"team": "a"})
    assert placed.status == Pod.SCHEDULED and placed.annotations == {"team": "a"}


def test_release_gives_back_the_cards_once_and_a_finished_pod_can_come_back():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    pod = submit("p", gpu=1, mem=3000, cores=30)
    run_cycle()
    assert Card.objects.get().used_memory == 3000
    services.release_pod(pod, Pod.SUCCEEDED)
    services.release_pod("default/p", Pod.DELETED)  # again: nothing more to give back
    gpu = Card.objects.get()
    assert (gpu.used_slots, gpu.used_memory, gpu.used_cores) == (0, 0, 0)
    assert reload(pod).status == Pod.SUCCEEDED and reload(pod).finished_at is not None
    assert not Allocation.objects.filter(active=True).exists()
    assert Allocation.objects.get().released_at is not None
    again = submit("p", gpu=1, mem=3000, cores=30)
    assert again.status == Pod.PENDING and again.attempts == 0
    run_cycle()
    assert reload(again).status == Pod.SCHEDULED
    assert_consistent()


def test_release_refuses_a_status_that_is_not_final():
    pod = submit("p", gpu=1)
    with pytest.raises(ValueError):
        services.release_pod(pod, Pod.RUNNING)


def test_set_config_validates_naming_the_field_and_appends_a_row():
    with pytest.raises(ScenarioError) as error:
        services.set_config(node_scheduler_policy="tightest")
    assert error.value.where == "config.node_scheduler_policy"
    assert not SchedulerConfig.objects.exists()
    services.set_config(gpu_scheduler_policy="binpack", changed_by="ops")
    services.set_config(node_scheduler_policy="spread")
    current = SchedulerConfig.current()
    assert (current.node_scheduler_policy, current.gpu_scheduler_policy) == ("spread", "binpack")
    assert SchedulerConfig.objects.count() == 2


def test_node_spread_from_the_config_is_used_by_the_next_cycle():
    services.report_inventory("node1", {}, {}, [card("GPU-1a", 0), card("GPU-1b", 1)])
    services.report_inventory("node2", {}, {}, [card("GPU-2a", 0), card("GPU-2b", 1)])
    services.set_config(node_scheduler_policy="spread")
    submit("pod1", gpu=1, mem=1000)
    submit("pod2", gpu=1, mem=1000)
    run_cycle()
    assert sorted(Pod.objects.values_list("node__name", flat=True)) == ["node1", "node2"]
