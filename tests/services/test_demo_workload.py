"""The demo's workload through real cycles: its queue and gangs show batch scheduling."""

from __future__ import annotations

import pytest

from scheduling.management.commands.demo import NAMESPACE, DemoInventory, DemoWorkload
from scheduling.models import Pod, PodGroup
from scheduling.pipeline import run_cycle

pytestmark = pytest.mark.django_db


def test_the_demo_places_its_small_gang_whole_and_explains_the_big_one():
    DemoInventory().report()  # the demo nodes, as its agents report them
    workload = DemoWorkload()
    workload.start_fresh()
    run_cycle()
    train = PodGroup.objects.get(name__startswith="train-")
    assert train.phase == PodGroup.RUNNING
    assert Pod.objects.filter(group=train, status=Pod.SCHEDULED).count() == 2
    assert all(p.queue.name == "research" for p in Pod.objects.filter(group=train))
    allreduce = PodGroup.objects.get(name__startswith="allreduce-")
    statuses = set(Pod.objects.filter(group=allreduce).values_list("status", flat=True))
    assert statuses in ({Pod.SCHEDULED}, {Pod.PENDING})  # whole or nothing
    if statuses == {Pod.PENDING}:
        reasons = set(Pod.objects.filter(group=allreduce).values_list("reason", flat=True))
        assert all(r.startswith("GangUnschedulable: gang demo/allreduce-") for r in reasons), reasons
    assert Pod.objects.filter(namespace=NAMESPACE).count() >= 11
