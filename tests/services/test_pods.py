"""Pods (`services.pods`): a submission is validated first (errors name the field, nothing
written); releases, requeues and binding marks act on one incarnation and give cards back once."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.engine import PodInvalid
from scheduling.models import Allocation, Card, Pod
from scheduling.pipeline import run_cycle
from scheduling.pipeline.wake import wake_movable
from tests.pipeline.conftest import assert_consistent, card, reload, submit

from .conftest import AFTER_COMMIT

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("annotations", "resources", "field"),
    [
        (
            {"hami.io/device-scoring-weights": "slot=1,core=1"},
            {"nvidia.com/gpu": 1},
            "annotations.hami.io/device-scoring-weights",
        ),
        (
            {},
            {"nvidia.com/gpu": 1, "nvidia.com/gpucores": -1},
            "containers[0].resources.limits.nvidia.com/gpucores",
        ),
        ({}, {"nvidia.com/gpu": 0}, "containers[0].resources.limits.nvidia.com/gpu"),
        ({}, {}, "containers"),
    ],
)
def test_an_invalid_pod_is_refused_naming_the_field_and_nothing_is_written(annotations, resources, field):
    with pytest.raises(PodInvalid) as error:
        services.submit_pod(
            "default", "p", annotations, [{"name": "main", "resources": {"limits": resources}}]
        )
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


@AFTER_COMMIT
def test_a_new_uid_on_a_placed_pod_releases_the_earlier_incarnations_cards():
    """Deleted and created again under the same name, unseen: the new pod must not inherit
    the old one's allocations, and the freed card wakes the pods waiting for it."""
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    old = submit("p", gpu=1, mem=5000, uid="uid-1", origin=Pod.KUBERNETES)
    waiting = submit("w", gpu=1, mem=5000)
    run_cycle()
    services.mark_bound(old, "node1")
    assert reload(waiting).status == Pod.PENDING and waiting.next_attempt_at is not None
    new = submit("p", gpu=1, mem=5000, uid="uid-2", origin=Pod.KUBERNETES)
    assert new.pk == old.pk
    assert (new.status, new.uid, new.node, new.allocated, new.bound_at, new.attempts) == (
        Pod.PENDING,
        "uid-2",
        None,
        "",
        None,
        0,
    )
    assert Card.objects.get(uuid="GPU-0").used_memory == 0
    (released,) = Allocation.objects.filter(pod=new)
    assert not released.active and released.released_at is not None
    assert wake_movable() == 1 and reload(waiting).next_attempt_at is None, (
        "the freed card wakes the waiting pod"
    )
    assert_consistent()
    run_cycle()
    assert reload(waiting).status == Pod.SCHEDULED
    assert_consistent()


def test_a_release_for_another_incarnation_writes_nothing():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    pod = submit("p", gpu=1, mem=1000, uid="uid-new")
    run_cycle()
    revision = reload(pod).revision
    assert services.release_pod(pod, Pod.DELETED, expected_uid="uid-old") is None
    assert (reload(pod).status, pod.revision) == (Pod.SCHEDULED, revision)
    assert Card.objects.get(uuid="GPU-0").used_memory == 1000
    assert services.release_pod(pod, Pod.DELETED, expected_uid="uid-new").status == Pod.DELETED
    assert Card.objects.get(uuid="GPU-0").used_memory == 0
    assert_consistent()


@AFTER_COMMIT
def test_a_placement_requeued_with_a_delay_keeps_its_attempts_and_place_in_the_queue():
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.pipeline.snapshot import due_pods

    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    pod = submit("p", gpu=1, mem=6000, uid="u", origin=Pod.KUBERNETES)
    waiting = submit("w", gpu=1, mem=6000)
    run_cycle()
    placed = reload(pod)
    assert placed.status == Pod.SCHEDULED and reload(waiting).next_attempt_at is not None
    before = timezone.now()
    row = services.requeue_placed_pod(pod, 30, "binding to node1 failed: 500", expected_uid="u")
    assert (row.status, row.node, row.allocated, row.scheduled_at, row.finished_at) == (
        Pod.PENDING,
        None,
        "",
        None,
        None,
    )
    assert (row.attempts, row.submitted_at, row.origin) == (
        placed.attempts,
        placed.submitted_at,
        Pod.KUBERNETES,
    )
    assert row.reason == "binding to node1 failed: 500"
    assert before + timedelta(seconds=29) < row.next_attempt_at <= timezone.now() + timedelta(seconds=30)
    assert Card.objects.get(uuid="GPU-0").used_memory == 0
    assert wake_movable() == 1, "the freed card wakes the others, not this pod (held 30 s)"
    assert reload(waiting).next_attempt_at is None and reload(pod).next_attempt_at is not None
    assert_consistent()
    assert [name for _, _, name, *_ in due_pods(10)] == ["w"]
    later = timezone.now() + timedelta(seconds=31)
    assert [name for _, _, name, *_ in due_pods(10, later)] == ["p", "w"], (
        "first again once its delay is over"
    )


def test_requeue_placed_pod_leaves_bound_waiting_and_other_incarnations_alone():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    bound, other = submit("bound", gpu=1, mem=1000, uid="b"), submit("other", gpu=1, mem=1000, uid="o")
    run_cycle()
    services.mark_bound(bound, "node1")
    assert services.requeue_placed_pod(bound, 5).status == Pod.RUNNING
    assert services.requeue_placed_pod(other, 5, expected_uid="not-o") is None
    assert reload(other).status == Pod.SCHEDULED
    huge = submit("huge", gpu=1, mem=99999)
    run_cycle()
    waiting = reload(huge)
    assert waiting.status == Pod.PENDING
    assert services.requeue_placed_pod(huge, 5).revision == waiting.revision, "a waiting pod is not touched"
    assert Card.objects.get(uuid="GPU-0").used_memory == 2000
    assert_consistent()


def test_mark_bound_moves_a_scheduled_pod_on_that_node_to_running_once():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    pod = submit("p", gpu=1, mem=1000, uid="u")
    run_cycle()
    assert services.mark_bound(pod, "node2").status == Pod.SCHEDULED, "not the node it was placed on"
    assert services.mark_bound(pod, "node1", expected_uid="v") is None
    assert reload(pod).status == Pod.SCHEDULED and pod.bound_at is None
    bound = services.mark_bound(pod, "node1", expected_uid="u")
    assert bound.status == Pod.RUNNING and bound.bound_at is not None
    assert services.mark_bound(pod, "node1").bound_at == bound.bound_at
    assert Card.objects.get(uuid="GPU-0").used_memory == 1000, "bound pods keep their cards"


def test_origin_is_recorded_per_incarnation_and_checked():
    api_pod = submit("a", gpu=1, mem=1000)
    assert api_pod.origin == Pod.API
    kube_pod = submit("k", gpu=1, mem=1000, uid="k1", origin=Pod.KUBERNETES)
    assert submit("k", gpu=1, mem=2000, uid="k1", origin=Pod.EXTENDER).origin == Pod.KUBERNETES, "same pod"
    assert submit("k", gpu=1, mem=2000, uid="k2", origin=Pod.EXTENDER).origin == Pod.EXTENDER, (
        "new incarnation"
    )
    assert reload(kube_pod).origin == Pod.EXTENDER
    with pytest.raises(ValueError, match="origin"):
        submit("x", gpu=1, mem=1000, origin="kubelet")
    assert not Pod.objects.filter(name="x").exists()
