"""`report_waiting`: a pending pod's FailedScheduling event says the summary, the closest
node's card reasons and what would make it fit (naming the tenants), within MAX_MESSAGE."""

from __future__ import annotations

import pytest

from kube.agent import KubeAgent
from kube.events import MAX_MESSAGE
from scheduling.models import Card, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, t4_register, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def events_for(apiserver, name: str) -> list[dict]:
    return [
        e
        for e in apiserver.all("events")
        if e["involvedObject"]["name"] == name and e["reason"] == "FailedScheduling"
    ]


def test_the_event_names_the_closest_cards_and_their_tenants(kube, apiserver):
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 1)))
    apiserver.put("pods", pod_object("tenant", gpu=1, mem=12000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Pod.objects.filter(name="tenant").exists() and Card.objects.exists())
        run_cycle()
        apiserver.put("pods", pod_object("second", gpu=1, mem=8000))
        wait_until(lambda: Pod.objects.filter(name="second").exists())
        run_cycle()
        wait_until(lambda: events_for(apiserver, "second"), what="the event")
    (event,) = events_for(apiserver, "second")
    message = event["message"]
    assert len(message) <= MAX_MESSAGE
    assert message.startswith("0/1 nodes are available: 1 CardInsufficientMemory. closest gpu-1: ")
    assert "GPU-a-0 CardInsufficientMemory" in message
    assert "gpu-1: fits if GPU-a-0 had 4,640 MiB more free (tenants: default/tenant 12,000 MiB)" in message


def test_the_condition_says_a_pod_never_fits_with_the_deciding_fact(kube, apiserver):
    """A pod asking more than the node's T4s hold: its `PodScheduled=False` condition says the
    one line, then `Never fits here` and the fact; the event says the fact as well."""
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 2)))
    apiserver.put("pods", pod_object("huge", gpu=1, mem=60000, annotations={"nvidia.com/use-gputype": "T4"}))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Pod.objects.filter(name="huge").exists() and Card.objects.exists())
        run_cycle()

        def condition() -> dict | None:
            conditions = (apiserver.get("pods", "default", "huge").get("status") or {}).get(
                "conditions"
            ) or []
            return next((c for c in conditions if c.get("type") == "PodScheduled"), None)

        wait_until(condition, what="the condition")
        wait_until(lambda: events_for(apiserver, "huge"), what="the event")
    found = condition()
    assert found["reason"] == "Unschedulable"
    fact = "60,000 MiB > the largest NVIDIA-Tesla T4 (15,360 MiB)"
    assert found["message"].startswith("0/1 nodes are available: ")
    assert found["message"].endswith(f" Never fits here: {fact}.")
    (event,) = events_for(apiserver, "huge")
    assert f"{fact}: never fits here" in event["message"]
