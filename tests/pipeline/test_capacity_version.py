"""A release that lands while a cycle plans must not be lost: the wake it sends finds the
pods that cycle could not place not yet backed off, and the commit would then back them
off for up to BACKOFF_MAX_SECONDS. The capacity version (`CapacityVersion`) tells the commit."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.models import CapacityVersion, Pod
from scheduling.pipeline import plan_cycle, run_cycle
from scheduling.pipeline.commit import commit_plan
from scheduling.pipeline.snapshot import due_pods
from scheduling.pipeline.wake import wake_movable

from .conftest import card, reload, submit

pytestmark = pytest.mark.django_db(transaction=True)  # the wake runs after the release commits


@pytest.fixture
def long_backoff(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "BACKOFF_BASE_SECONDS": 60.0, "BACKOFF_MAX_SECONDS": 60.0}


def full_card_and_a_waiting_pod():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=8000, slots=1)])
    tenant = submit("tenant", gpu=1, mem=8000)
    assert run_cycle().placed
    return reload(tenant), submit("waiting", gpu=1, mem=8000)


def test_a_release_while_the_cycle_plans_leaves_the_waiting_pod_due(long_backoff):
    tenant, waiting = full_card_and_a_waiting_pod()
    plan = plan_cycle()  # the card is full: the waiting pod stays pending
    services.release_pod(tenant, Pod.SUCCEEDED)  # its wake runs now, before the commit below
    report = commit_plan(plan)
    assert report.pending and report.more
    assert reload(waiting).next_attempt_at is None  # not backed off for 60 s
    assert [row[0] for row in due_pods(10)] == [waiting.pk]
    assert run_cycle().placed[0][0] == "default/waiting"


def test_without_a_change_the_waiting_pod_backs_off(long_backoff):
    tenant, waiting = full_card_and_a_waiting_pod()
    report = commit_plan(plan_cycle())
    assert report.pending and not report.more
    assert reload(waiting).next_attempt_at is not None
    assert due_pods(10) == []
    services.release_pod(tenant, Pod.SUCCEEDED)  # the ordinary wake: backed off, now due
    assert wake_movable() == 1 and reload(waiting).next_attempt_at is None


def test_every_wake_moves_the_version():
    before = CapacityVersion.read()
    services.wake_pending_pods()
    services.wake_pending_pods()
    assert CapacityVersion.read() == before + 2
