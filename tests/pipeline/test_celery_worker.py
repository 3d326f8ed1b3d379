"""A real Celery worker against Redis places what is submitted, and what a release frees.

The worker runs in its own process on the test database; only the broker and the trigger
path (Redis flag, debounced task) connect it to this test.
"""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from scheduling import services
from scheduling.models import Cycle, Pod

from .conftest import assert_consistent, card, celery_worker_process, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


def wait_for(predicate, timeout: float, worker: subprocess.Popen) -> float:
    started = time.monotonic()
    while not predicate():
        if worker.poll() is not None:
            pytest.fail(f"the worker exited with {worker.returncode}")
        if time.monotonic() - started > timeout:
            pytest.fail(f"not within {timeout}s")
        time.sleep(0.02)
    return time.monotonic() - started


@pytest.fixture
def worker(redis_url, settings):
    settings.REDIS_URL = redis_url
    with celery_worker_process(redis_url, loglevel="INFO") as process:
        yield process


def test_the_worker_places_submitted_pods_and_a_release_wakes_it(worker):
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, slots=2), card("GPU-1", 1, slots=2)])
    for n in range(4):
        submit(f"p{n}", gpu=1, mem=1000)
    wait_for(lambda: Pod.objects.filter(status=Pod.SCHEDULED).count() == 4, 60, worker)
    submit("waiting", gpu=1, mem=1000)
    wait_for(lambda: Pod.objects.get(name="waiting").attempts >= 1, 10, worker)
    assert Pod.objects.get(name="waiting").status == Pod.PENDING

    released = time.monotonic()
    services.release_pod("default/p0", Pod.SUCCEEDED)
    wait_for(lambda: Pod.objects.get(name="waiting").status == Pod.SCHEDULED, 5, worker)
    latency = time.monotonic() - released
    assert latency < 1.0, f"release to placement took {latency:.2f}s"
    print(f"release to placement: {latency * 1000:.0f} ms")
    assert set(Cycle.objects.values_list("worker", flat=True)) == {f"{socket.gethostname()}:{worker.pid}"}
    assert_consistent()


def test_the_worker_preempts_a_lower_priority_pod_and_places_the_preemptor(worker):
    """The worker's cycle chooses the victim, evicts it (a pod hamiadmin runs itself: requeued)
    right after its commit, and the follow-up cycle places the preemptor on the freed card."""
    from scheduling.models import Eviction

    services.report_inventory("node1", {}, {}, [card("GPU-0", 0, memory=8000, slots=2)])
    submit("low", gpu=1, mem=6000)
    wait_for(lambda: Pod.objects.get(name="low").status == Pod.SCHEDULED, 60, worker)
    submit("urgent", gpu=1, mem=6000, priority=100)
    wait_for(lambda: Pod.objects.get(name="urgent").status == Pod.SCHEDULED, 30, worker)
    eviction = Eviction.objects.get()
    assert (eviction.victim.name, eviction.preemptor.name, eviction.state) == ("low", "urgent", Eviction.DONE)
    assert Pod.objects.get(name="low").status == Pod.PENDING  # requeued; no room while urgent runs
    assert eviction.reason == "priority 0 < 100" and eviction.cards == ["GPU-0"]
    assert_consistent()


def test_a_pool_worker_plans_its_pools_pods_from_its_own_queue(redis_url, settings):
    """A worker started for node pool `a` (`HAMI_NODE_POOL`, `-Q hamiadmin-pool-a`) places the
    pod that selects `a` on `a`'s node from the request sent to its queue, and leaves the pod
    of no pool to the planner without one (not running here)."""
    from scheduling.pipeline import locks, triggers

    settings.REDIS_URL = redis_url
    settings.HAMIADMIN = {**settings.HAMIADMIN, "NODE_POOLS": ["a"]}
    locks.redis_client().delete(
        triggers.requested_key("a"), triggers.queued_key("a"), f"{locks.REDIS_LOCK_KEY}:a"
    )
    label = "hami.io/node-pool"
    services.report_inventory("a1", {label: "a"}, {}, [card("GPU-a", 0, slots=2)])
    services.report_inventory("plain1", {}, {}, [card("GPU-plain", 0, slots=2)])
    with celery_worker_process(
        redis_url, loglevel="INFO", queues="hamiadmin-pool-a", HAMI_NODE_POOLS="a", HAMI_NODE_POOL="a"
    ) as worker:
        submit("pa", gpu=1, mem=1000, scheduling={"nodeSelector": {label: "a"}})
        submit("plain", gpu=1, mem=1000)
        wait_for(lambda: Pod.objects.get(name="pa").status == Pod.SCHEDULED, 30, worker)
        time.sleep(0.5)  # a cycle of the pool-less planner would have tried `plain` by now
    assert Pod.objects.get(name="pa").node.name == "a1"
    plain = Pod.objects.get(name="plain")
    assert plain.status == Pod.PENDING and plain.attempts == 0
    assert set(Cycle.objects.values_list("worker", flat=True)) == {f"{socket.gethostname()}:{worker.pid}"}
    locks.redis_client().delete("celery")  # the pool-less planner's requests: nobody took them
