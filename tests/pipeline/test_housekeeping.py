"""Bounded history and what a binder writes on the Kubernetes pod."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import services
from scheduling.models import Allocation, Cycle, Decision, Pod
from scheduling.pipeline import run_cycle
from scheduling.pipeline.housekeeping import housekeeping, prune_cycles, prune_finished_pods

from .conftest import card, submit

pytestmark = pytest.mark.django_db


def test_finished_pods_older_than_the_retention_go_with_their_history():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    old, recent = submit("old", gpu=1, mem=100), submit("recent", gpu=1, mem=100)
    run_cycle()
    services.release_pod(old, Pod.SUCCEEDED)
    services.release_pod(recent, Pod.SUCCEEDED)
    Pod.objects.filter(pk=old.pk).update(finished_at=timezone.now() - timedelta(days=30))
    assert prune_finished_pods(hours=24) == 3  # the pod, its allocation, its decision
    assert list(Pod.objects.values_list("name", flat=True)) == ["recent"]
    assert Allocation.objects.count() == 1 and Decision.objects.count() == 1


def test_only_the_last_cycles_are_kept_and_their_decisions_stay():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=10)])
    submit("p", gpu=1, mem=100)
    for _ in range(4):
        Pod.objects.update(next_attempt_at=None)
        run_cycle()
    assert prune_cycles(keep=2) == 2
    assert Cycle.objects.count() == 2 and Decision.objects.count() == 4
    assert Decision.objects.filter(cycle=None).count() == 2


def test_housekeeping_reports_what_it_did():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    assert housekeeping() == {
        "nodes_not_ready": 0,
        "decisions_pruned": 0,
        "cycles_pruned": 0,
        "pods_pruned": 0,
    }
