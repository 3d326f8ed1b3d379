"""Victims in Kubernetes are evicted through the Eviction API, and what Kubernetes answers
decides the Eviction row: accepted (evicting, then done once the deletion released the
cards), refused by a PodDisruptionBudget (refused, the preemptor's nominations gone), gone
(done), a server error (requested, tried again). Dry run evicts nothing.

The victim `default/batch` fills the one card GPU-a-0 of gpu-1 and runs; `default/urgent`
(priority 1000) waits, nominated to that card. The cycles here only place the victim: the
Eviction and Nomination rows are written by the tests, as the pipeline's commit writes them;
the last test lets a cycle choose the victim, end to end.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from kube.agent import KubeAgent
from kube.events import EventRecorder
from kube.evictor import Evictor
from scheduling import services
from scheduling.models import Card, Event, Eviction, Nomination, Pod
from scheduling.pipeline import run_cycle
from scheduling.services import evictions

from .conftest import fast_options, node_object, pod_object, running, settled_cards, t4_register, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CARD = "GPU-a-0"
PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.fixture(autouse=True)
def cycles_do_not_preempt(settings):
    """The rows under test are the tests' own."""
    settings.HAMIADMIN = {**settings.HAMIADMIN, "PREEMPTION": False, "RECLAIM": False}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def row(name: str) -> Pod | None:
    return Pod.objects.filter(namespace="default", name=name).first()


def victim_object(name: str = "batch", grace: int | None = None) -> dict:
    obj = pod_object(name, gpu=1, mem=15360, priority=0)
    obj["metadata"]["labels"] = {"app": "batch"}
    if grace is not None:
        obj["spec"]["terminationGracePeriodSeconds"] = grace
    return obj


def place_victim_and_queue_preemptor(apiserver, grace: int | None = None) -> None:
    """With the agent running: the victim queued, placed, bound and Running; the preemptor queued."""
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 1)))
    apiserver.put("pods", victim_object(grace=grace))
    wait_until(lambda: row("batch") and Card.objects.exists(), what="the victim queued")
    assert [pod for pod, _, _ in run_cycle().placed] == ["default/batch"]
    wait_until(lambda: row("batch").status == Pod.RUNNING, what="the victim bound")
    apiserver.update("pods", "default", "batch", lambda pod: pod["status"].update(phase="Running"))
    apiserver.put("pods", pod_object("urgent", gpu=1, mem=15360, priority=1000))
    wait_until(lambda: row("urgent"), what="the preemptor queued")


def request_eviction() -> Eviction:
    """What a cycle that preempts commits: the victim's Eviction, the preemptor's Nomination."""
    urgent = row("urgent")
    assert urgent.status == Pod.PENDING
    Nomination.objects.create(
        pod=urgent,
        card=Card.objects.get(uuid=CARD),
        memory=15360,
        cores=100,
        expires_at=timezone.now() + timedelta(seconds=120),
    )
    return Eviction.objects.create(
        victim=row("batch"),
        preemptor=urgent,
        node="gpu-1",
        cards=[CARD],
        reason="priority 0 < 1000 in queue default",
    )


def state(eviction: Eviction) -> str:
    return Eviction.objects.get(pk=eviction.pk).state


def kube_events(apiserver, reason: str) -> list[dict]:
    return [event for event in apiserver.all("events") if event["reason"] == reason]


def stopped_agent_setup(kube, apiserver, grace: int | None = None) -> None:
    with running(KubeAgent(kube, fast_options())):
        place_victim_and_queue_preemptor(apiserver, grace)


def evictor(kube, clock: Clock) -> Evictor:
    return Evictor(
        kube, EventRecorder(kube, "hami-scheduler"), backoff_base=1.0, backoff_cap=4.0, clock=clock
    )


def test_the_agent_evicts_the_victim_and_the_deletion_releases_its_card(kube, apiserver):
    with running(KubeAgent(kube, fast_options())):
        place_victim_and_queue_preemptor(apiserver, grace=600)
        victim_uid = row("batch").uid
        eviction = request_eviction()
        wait_until(lambda: apiserver.get("pods", "default", "batch") is None, what="the pod evicted")
        wait_until(lambda: state(eviction) == Eviction.EVICTING, what="the row evicting")
        wait_until(lambda: row("batch").status == Pod.DELETED, what="the deletion seen by the watch")
    assert settled_cards().get(uuid=CARD).used_memory == 0
    assert state(eviction) == Eviction.EVICTING, "done is settled, not assumed"
    assert evictions.settle_evictions()["done"] == 1
    assert state(eviction) == Eviction.DONE
    assert Nomination.objects.filter(pod=row("urgent")).count() == 1, "the preemptor keeps its card"

    ((namespace, name, body),) = apiserver.evictions
    assert (namespace, name, body["apiVersion"], body["kind"]) == (
        "default",
        "batch",
        "policy/v1",
        "Eviction",
    )
    assert body["deleteOptions"] == {"gracePeriodSeconds": 60, "preconditions": {"uid": victim_uid}}, (
        "600 s asked, cut to half of PREEMPT_GRACE_SECONDS"
    )
    (preempted,) = kube_events(apiserver, "Preempted")
    assert preempted["type"] == "Warning"
    assert preempted["involvedObject"]["name"] == "batch"
    assert preempted["message"] == (
        f"Preempted by default/urgent on card {CARD}: priority 0 < 1000 in queue default"
    )
    (preempting,) = kube_events(apiserver, "Preempting")
    assert preempting["type"] == "Normal"
    assert preempting["involvedObject"]["name"] == "urgent"
    assert preempting["message"] == f"Preempting default/batch on gpu-1 for cards {CARD}"
    assert Event.objects.filter(
        kind=Event.PREEMPTION, subject="pod/default/batch", reason="Preempted"
    ).exists()


def test_a_disruption_budget_refuses_and_the_preemptor_drops_its_nominations(kube, apiserver):
    stopped_agent_setup(kube, apiserver)
    apiserver.put(
        "poddisruptionbudgets",
        {
            "metadata": {"name": "batch", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "batch"}}, "minAvailable": 1},
        },
    )
    eviction = request_eviction()
    assert evictor(kube, Clock()).run_once() == {"refused": 1}

    refused = Eviction.objects.get(pk=eviction.pk)
    assert (refused.state, refused.message) == (Eviction.REFUSED, PDB_MESSAGE)
    assert not Nomination.objects.filter(pod=row("urgent")).exists()
    assert apiserver.get("pods", "default", "batch") is not None
    assert row("batch").status == Pod.RUNNING
    assert Card.objects.get(uuid=CARD).used_memory == 15360
    (event,) = kube_events(apiserver, "PreemptionRefused")
    assert (event["type"], event["involvedObject"]["name"]) == ("Warning", "urgent")
    assert event["message"] == f"evicting default/batch was refused: {PDB_MESSAGE}"
    assert not kube_events(apiserver, "Preempted")

    # A second healthy replica leaves the budget one disruption: the next victim set may go.
    replica = victim_object("batch-2")
    replica["spec"]["nodeName"], replica["status"]["phase"] = "gpu-2", "Running"
    apiserver.put("pods", replica)
    again = request_eviction()
    assert evictor(kube, Clock()).run_once() == {"accepted": 1}
    assert state(again) == Eviction.EVICTING
    assert apiserver.get("pods", "default", "batch") is None


def test_a_victim_already_gone_is_done_and_its_card_released(kube, apiserver):
    stopped_agent_setup(kube, apiserver)
    apiserver.delete("pods", "default", "batch", silent=True)
    eviction = request_eviction()
    assert evictor(kube, Clock()).run_once() == {"gone": 1}
    assert state(eviction) == Eviction.DONE
    assert row("batch").status == Pod.DELETED
    assert Card.objects.get(uuid=CARD).used_memory == 0


def test_another_pod_of_the_victims_name_is_not_evicted(kube, apiserver):
    """The uid precondition: the incarnation chosen is gone, its successor stays."""
    stopped_agent_setup(kube, apiserver)
    apiserver.delete("pods", "default", "batch", silent=True)
    successor = apiserver.put("pods", victim_object())
    eviction = request_eviction()
    assert evictor(kube, Clock()).run_once() == {"gone": 1}
    assert state(eviction) == Eviction.DONE
    assert apiserver.get("pods", "default", "batch")["metadata"]["uid"] == successor["metadata"]["uid"]


def test_a_server_error_leaves_it_requested_and_a_later_pass_evicts(kube, apiserver, caplog):
    stopped_agent_setup(kube, apiserver)
    eviction = request_eviction()
    apiserver.fail("POST", r"/pods/batch/eviction$", 500)
    clock = Clock()
    passes = evictor(kube, clock)
    with caplog.at_level(logging.WARNING, logger="hamiadmin.kube.evictor"):
        assert passes.run_once() == {"retry": 1}
    assert "eviction of default/batch failed, tried again in" in caplog.text
    assert state(eviction) == Eviction.REQUESTED
    assert passes.run_once() == {}, "held back by its back-off"
    clock.now += 1.0
    assert passes.run_once() == {"accepted": 1}
    assert state(eviction) == Eviction.EVICTING
    assert apiserver.get("pods", "default", "batch") is None
    assert "gracePeriodSeconds" not in apiserver.evictions[0][2]["deleteOptions"], "no cache: the pod's own"


def test_no_answer_leaves_it_requested(kube, apiserver):
    stopped_agent_setup(kube, apiserver)
    eviction = request_eviction()
    apiserver.stop()
    clock = Clock()
    passes = evictor(kube, clock)
    assert passes.run_once() == {"unavailable": 1}
    assert state(eviction) == Eviction.REQUESTED
    apiserver.start()
    clock.now += 1.0
    assert passes.run_once() == {"accepted": 1}


def test_dry_run_evicts_nothing(kube, apiserver, settings, caplog):
    stopped_agent_setup(kube, apiserver)
    eviction = request_eviction()
    settings.HAMIADMIN = {**settings.HAMIADMIN, "PREEMPT_DRY_RUN": True}
    with caplog.at_level(logging.INFO, logger="hamiadmin.kube.evictor"):
        assert evictor(kube, Clock()).run_once() == {}
    assert "dry run: would evict default/batch on gpu-1 (GPU-a-0) for default/urgent" in caplog.text
    assert not apiserver.calls("POST", "/eviction")
    assert state(eviction) == Eviction.REQUESTED
    assert apiserver.get("pods", "default", "batch") is not None


def test_a_preemptor_no_longer_waiting_evicts_nobody(kube, apiserver):
    stopped_agent_setup(kube, apiserver)
    eviction = request_eviction()
    services.release_pod(row("urgent"), Pod.DELETED)
    assert evictor(kube, Clock()).run_once() == {"cancelled": 1}
    cancelled = Eviction.objects.get(pk=eviction.pk)
    assert (cancelled.state, cancelled.message) == (Eviction.CANCELLED, "its preemptor is deleted")
    assert not apiserver.calls("POST", "/eviction")
    assert not Nomination.objects.exists()


def test_a_cycle_preempts_the_agent_evicts_and_the_preemptor_is_bound_in_its_place(kube, apiserver, settings):
    """End to end: the cycle chooses the victim, the agent evicts it, the next cycle gives
    its card to the preemptor and the agent binds it."""
    settings.HAMIADMIN = {**settings.HAMIADMIN, "PREEMPTION": True}
    with running(KubeAgent(kube, fast_options())):
        place_victim_and_queue_preemptor(apiserver)
        run_cycle()
        eviction = Eviction.objects.get(victim=row("batch"))
        assert eviction.preemptor == row("urgent") and eviction.cards == [CARD]
        wait_until(lambda: row("batch").status == Pod.DELETED, what="the victim evicted and released")

        def preemptor_bound():
            run_cycle()
            return row("urgent").status == Pod.RUNNING

        wait_until(preemptor_bound, timeout=15, what="the preemptor bound on the freed card")
    assert state(eviction) == Eviction.DONE
    assert apiserver.get("pods", "default", "urgent")["spec"]["nodeName"] == "gpu-1"
    assert Card.objects.get(uuid=CARD).used_memory == 15360
    assert [event["involvedObject"]["name"] for event in kube_events(apiserver, "Preempted")] == ["batch"]
