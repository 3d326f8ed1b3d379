"""The in-process scheduler (embedded mode, `make run`): woken by writes, places within a second."""

from __future__ import annotations

import time

import pytest
from django.core.management import call_command

from scheduling import services
from scheduling.models import Pod
from scheduling.pipeline.loop import SchedulerLoop

from .conftest import assert_consistent, card, submit

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(predicate, timeout: float, step: float = 0.01) -> float:
    """Seconds until `predicate()` held; fails after `timeout`."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            pytest.fail(f"not within {timeout}s")
        time.sleep(step)
    return time.monotonic() - started


def status(name: str) -> str:
    return Pod.objects.get(name=name).status


@pytest.fixture
def loop():
    # A long poll: placement within the second below must come from the wake-up, not the poll.
    scheduler = SchedulerLoop(poll=5, housekeeping_every=3600)
    scheduler.start()
    yield scheduler
    scheduler.stop()


def test_a_release_places_the_waiting_pod_within_a_second(loop):
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, slots=1)])
    submit("first", gpu=1, mem=100)
    wait_for(lambda: status("first") == Pod.SCHEDULED, 5)
    submit("waiting", gpu=1, mem=100)
    wait_for(lambda: Pod.objects.get(name="waiting").attempts >= 1, 5)
    assert status("waiting") == Pod.PENDING
    released = time.monotonic()
    services.release_pod("default/first", Pod.SUCCEEDED)
    wait_for(lambda: status("waiting") == Pod.SCHEDULED, 1.0)
    assert time.monotonic() - released < 1.0
    assert_consistent()


def test_schedule_once_prints_what_it_placed_and_what_waits(capsys):
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=4000)])
    submit("fits", gpu=1, mem=1000)
    submit("too-big", gpu=1, mem=9000)
    call_command("schedule", "--once")
    out = capsys.readouterr().out
    assert "1 placed" in out and "placed    default/fits on node1: GPU-0,NVIDIA,1000,0:;" in out
    assert "pending   default/too-big: 0/1 nodes are available: 1 CardInsufficientMemory" in out
    call_command("schedule", "--once")
    assert "nothing to schedule" in capsys.readouterr().out
