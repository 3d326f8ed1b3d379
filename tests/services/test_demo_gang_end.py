"""The demo ends a gang's members together, so its gangs never sit short of their minimum."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.management.commands.demo import DemoInventory, DemoWorkload
from scheduling.models import Pod, PodGroup
from scheduling.pipeline import run_cycle

pytestmark = pytest.mark.django_db


def test_a_gangs_members_end_at_the_same_tick_the_same_way():
    DemoInventory().report()
    workload = DemoWorkload(active=0)  # no trickle: only the first pods
    workload.start_fresh()
    run_cycle()
    train = PodGroup.objects.get(name__startswith="train-")
    placed = Pod.objects.filter(group=train, status__in=Pod.BOUND)
    assert placed.count() == 2
    # the members were placed a moment apart: the later one is still inside its own lifetime
    start = timezone.now() - timedelta(seconds=workload.lifetime(train.key))
    first, second = placed.order_by("name")
    Pod.objects.filter(pk=first.pk).update(scheduled_at=start)
    Pod.objects.filter(pk=second.pk).update(scheduled_at=start + timedelta(seconds=1))
    workload.tick(start + timedelta(seconds=workload.lifetime(train.key)))
    ended = set(Pod.objects.filter(group=train).values_list("status", flat=True))
    assert ended in ({Pod.SUCCEEDED}, {Pod.FAILED}), ended
