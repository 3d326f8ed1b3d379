"""Placements reach Kubernetes: SPEC 8 annotations, the Binding, events; and what goes wrong
on the way (409 on the patch, a refused Binding, a pod deleted or bound elsewhere, no server)."""

from __future__ import annotations

import threading

import pytest

from kube.agent import KubeAgent
from kube.api import api_for_host
from kube.binder import Binder, BindOutcome
from kube.leader import LeaderElector
from scheduling import services
from scheduling.models import Card, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, settled_cards, t4_register, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

PLACEMENT = (
    "hami.io/vgpu-node",
    "hami.io/vgpu-time",
    "hami.io/vgpu-devices-to-allocate",
    "hami.io/vgpu-devices-allocated",
    "hami.io/bind-phase",
    "hami.io/bind-time",
)


def row(name: str) -> Pod:
    return Pod.objects.select_related("node").get(namespace="default", name=name)


def kube_pod(apiserver, name: str) -> dict:
    return apiserver.get("pods", "default", name)


def events_for(apiserver, name: str, reason: str) -> list[dict]:
    return [
        e for e in apiserver.all("events") if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


def one_card_node(apiserver, name="gpu-1", prefix="GPU-a", count=1):
    apiserver.put("nodes", node_object(name, t4_register(prefix, count)))


def queued(name: str):
    return lambda: Pod.objects.filter(name=name).exists() and Card.objects.exists()


def test_a_placed_pod_is_annotated_bound_and_reported(kube, apiserver):
    one_card_node(apiserver)
    apiserver.put("pods", pod_object("train", gpu=1, mem=3000, cores=30))
    with running(KubeAgent(kube, fast_options())):
        wait_until(queued("train"))
        (placed,) = run_cycle().placed
        assert placed == ("default/train", "gpu-1", "GPU-a-0,NVIDIA,3000,30:;")
        wait_until(lambda: kube_pod(apiserver, "train")["spec"].get("nodeName") == "gpu-1", what="bound")
        wait_until(lambda: row("train").status == Pod.RUNNING, what="running in the table")
        wait_until(lambda: events_for(apiserver, "train", "Scheduled"), what="the Scheduled event")
    annotations = kube_pod(apiserver, "train")["metadata"]["annotations"]
    placed_row = row("train")
    assert {key: annotations[key] for key in PLACEMENT} == {
        "hami.io/vgpu-node": "gpu-1",
        "hami.io/vgpu-time": str(int(placed_row.scheduled_at.timestamp())),
        "hami.io/vgpu-devices-to-allocate": "GPU-a-0,NVIDIA,3000,30:;",
        "hami.io/vgpu-devices-allocated": "GPU-a-0,NVIDIA,3000,30:;",
        "hami.io/bind-phase": "success",
        "hami.io/bind-time": annotations["hami.io/bind-time"],
    }
    assert annotations["hami.io/bind-time"].isdigit()
    (event,) = events_for(apiserver, "train", "Scheduled")
    assert event["type"] == "Normal"
    assert event["message"] == "Successfully assigned default/train to gpu-1 with cards GPU-a-0"
    assert len(apiserver.calls("POST", "/pods/train/binding")) == 1


def test_the_annotations_go_on_before_the_binding(kube, apiserver):
    """HAMi's device plugin reads them when the kubelet starts the pod: they must be there first."""
    one_card_node(apiserver)
    apiserver.put("pods", pod_object("train", gpu=1))
    seen_at_binding = {}
    apiserver.before(
        "POST",
        "/pods/train/binding",
        lambda: seen_at_binding.update(kube_pod(apiserver, "train")["metadata"]["annotations"]),
    )
    with running(KubeAgent(kube, fast_options())):
        wait_until(queued("train"))
        run_cycle()
        wait_until(lambda: row("train").status == Pod.RUNNING)
    assert seen_at_binding["hami.io/bind-phase"] == "allocating"
    assert seen_at_binding["hami.io/vgpu-devices-to-allocate"] == row("train").allocated


def test_a_conflict_on_the_patch_is_read_again_and_reapplied(kube, apiserver):
    one_card_node(apiserver)
    apiserver.put("pods", pod_object("train", gpu=1))
    # Someone else (a label controller) writes the pod between our read and our patch.
    apiserver.before(
        "PATCH",
        "/pods/train",
        lambda: apiserver.update(
            "pods", "default", "train", lambda pod: pod["metadata"].setdefault("labels", {}).update(team="a")
        ),
    )
    with running(KubeAgent(kube, fast_options())):
        wait_until(queued("train"))
        run_cycle()
        wait_until(lambda: row("train").status == Pod.RUNNING, what="bound despite the conflict")
    pod = kube_pod(apiserver, "train")
    assert pod["metadata"]["labels"] == {"team": "a"}, "the other writer's change is kept"
    assert pod["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    assert len(apiserver.calls("PATCH", "/pods/train")) == 3  # refused, re-applied, success
    assert len(apiserver.calls("GET", "/pods/train")) >= 3


def test_a_refused_binding_marks_failed_releases_and_is_retried(kube, apiserver):
    one_card_node(apiserver)
    apiserver.put("pods", pod_object("train", gpu=1, mem=2000))
    apiserver.fail("POST", r"/pods/train/binding$", 500, times=10_000)
    with running(KubeAgent(kube, fast_options())):
        wait_until(queued("train"))
        assert run_cycle().placed
        wait_until(
            lambda: (
                kube_pod(apiserver, "train")["metadata"]["annotations"].get("hami.io/bind-phase") == "failed"
            ),
            what="bind-phase failed",
        )
        wait_until(lambda: row("train").status == Pod.PENDING, what="queued again")
        assert settled_cards().get(uuid="GPU-a-0").used_memory == 0, "cards released"
        wait_until(lambda: events_for(apiserver, "train", "FailedScheduling"), what="a failure event")
        apiserver.injected.clear()  # the API server accepts bindings again
        wait_until(lambda: run_cycle().placed or row("train").status != Pod.PENDING, what="placed again")
        wait_until(lambda: row("train").status == Pod.RUNNING, what="bound on retry")
    assert kube_pod(apiserver, "train")["spec"]["nodeName"] == "gpu-1"
    assert kube_pod(apiserver, "train")["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    assert Card.objects.get(uuid="GPU-a-0").used_memory == 2000


def place(apiserver, name="train") -> Pod:
    """Queue and place a pod without the agent running (the binder is driven directly)."""
    created = apiserver.put("pods", pod_object(name, gpu=1, mem=1000))
    services.report_inventory("gpu-1", {}, {}, [{"uuid": "GPU-a-0", "index": 0, "memory": 15360}])
    services.submit_pod(
        "default",
        name,
        {},
        [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}],
        [],
        0,
        created["metadata"]["uid"],
    )
    assert run_cycle().placed
    return row(name)


def test_a_pod_deleted_before_binding_is_released(kube, apiserver):
    placed = place(apiserver)
    apiserver.delete("pods", "default", "train")
    assert Binder(kube).bind(placed).outcome == BindOutcome.GONE
    assert row("train").status == Pod.DELETED
    assert Card.objects.get(uuid="GPU-a-0").used_slots == 0


def test_a_pod_replaced_by_a_new_one_of_the_same_name_is_not_bound(kube, apiserver):
    placed = place(apiserver)
    apiserver.delete("pods", "default", "train")
    apiserver.put("pods", pod_object("train"))  # same name, new uid
    assert Binder(kube).bind(placed).outcome == BindOutcome.GONE
    assert "nodeName" not in kube_pod(apiserver, "train")["spec"]


def test_a_pod_bound_elsewhere_gives_its_cards_back(kube, apiserver):
    placed = place(apiserver)
    apiserver.update("pods", "default", "train", lambda pod: pod["spec"].update(nodeName="other-node"))
    result = Binder(kube).bind(placed)
    assert result.outcome == BindOutcome.FAILED and "other-node" in result.detail
    assert row("train").status == Pod.FAILED
    assert Card.objects.get(uuid="GPU-a-0").used_slots == 0


def test_no_server_changes_nothing_and_the_next_try_binds(kube, apiserver):
    placed = place(apiserver)
    apiserver.stop()
    assert Binder(kube).bind(placed).outcome == BindOutcome.UNAVAILABLE
    assert row("train").status == Pod.SCHEDULED
    apiserver.start()
    assert Binder(kube).bind(row("train")).outcome == BindOutcome.BOUND
    assert row("train").status == Pod.RUNNING


def test_a_lost_binding_answer_is_recognised_on_retry(kube, apiserver):
    """The Binding landed but its answer was lost: the retry sees the pod bound to our node."""
    placed = place(apiserver)
    binder = Binder(kube)
    apiserver.update("pods", "default", "train", lambda pod: pod["spec"].update(nodeName="gpu-1"))
    assert binder.bind(placed).outcome == BindOutcome.BOUND
    assert apiserver.calls("POST", "/binding") == []


def test_leaving_bind_phase_for_hamis_device_plugin(kube, apiserver):
    placed = place(apiserver)
    assert Binder(kube, complete_phase=False).bind(placed).outcome == BindOutcome.BOUND
    assert kube_pod(apiserver, "train")["metadata"]["annotations"]["hami.io/bind-phase"] == "allocating"


def test_a_waiting_pod_gets_one_failed_scheduling_event_not_one_per_cycle(kube, apiserver):
    one_card_node(apiserver, count=2)
    apiserver.put("pods", pod_object("huge", gpu=5))
    with running(KubeAgent(kube, fast_options())) as _:
        wait_until(queued("huge"))
        for _ in range(5):
            Pod.objects.filter(name="huge").update(next_attempt_at=None)
            run_cycle()
            wait_until(lambda: events_for(apiserver, "huge", "FailedScheduling"), what="the event")
    (event,) = events_for(apiserver, "huge", "FailedScheduling")
    assert event["type"] == "Warning"
    assert event["message"] == (
        "0/1 nodes are available: 1 NodeInsufficientDevice. asks 5 cards, no node has more than 2: never fits here."
    )
    assert event["count"] == 1
    assert len(apiserver.calls("POST", "/events")) == 1
    assert apiserver.calls("PATCH", "/events/") == []


def test_only_the_leader_writes(kube, apiserver):
    """A follower queues nothing while another replica holds the Lease; it takes over when
    that replica stops renewing."""
    other = LeaderElector(
        api_for_host(apiserver.url),
        "hamiadmin",
        "kube-agent",
        "other",
        lease_duration=1,
        renew_deadline=0.5,
        retry_period=0.1,
    )
    other.step()
    renewing = threading.Event()

    def keep_renewing():
        while not renewing.wait(0.1):
            other.step()

    renewer = threading.Thread(target=keep_renewing, daemon=True)
    renewer.start()
    apiserver.put("pods", pod_object("train", gpu=1))
    follower = LeaderElector(
        kube, "hamiadmin", "kube-agent", "follower", lease_duration=1, renew_deadline=0.5, retry_period=0.1
    )
    agent = KubeAgent(kube, fast_options(), elector=follower)
    with running(agent):
        try:
            wait_until(
                lambda: len(apiserver.calls("GET", "/leases/kube-agent")) > 20, what="a while of following"
            )
            assert not Pod.objects.exists(), "a follower wrote"
        finally:
            renewing.set()
            renewer.join()
        wait_until(lambda: follower.is_leader(), what="the takeover")
        wait_until(lambda: Pod.objects.filter(name="train").exists(), what="the new leader's sync")
    assert apiserver.get("leases", "hamiadmin", "kube-agent")["spec"]["holderIdentity"] == "", (
        "released on stop"
    )


def test_a_failure_after_the_binding_undoes_nothing(kube, apiserver):
    """The pod is on its node: a refused last patch must not release its cards."""
    placed = place(apiserver)
    apiserver.before(
        "POST", "/pods/train/binding", lambda: apiserver.fail("PATCH", r"/pods/train$", 500, times=10)
    )
    result = Binder(kube).bind(placed)
    assert result.outcome == BindOutcome.BOUND and "bind-phase not updated" in result.detail
    assert row("train").status == Pod.RUNNING
    assert Card.objects.get(uuid="GPU-a-0").used_slots == 1
    assert kube_pod(apiserver, "train")["spec"]["nodeName"] == "gpu-1"


def test_a_refused_binding_requeues_the_same_pod_after_the_delay_never_failed(kube, apiserver):
    from datetime import timedelta

    from django.utils import timezone

    placed = place(apiserver)
    apiserver.fail("POST", r"/pods/train/binding$", 422, reason="Invalid")
    before = timezone.now()
    assert Binder(kube).bind(placed, retry_after=60).outcome == BindOutcome.FAILED
    again = row("train")
    assert (again.status, again.uid, again.attempts, again.submitted_at, again.finished_at) == (
        Pod.PENDING,
        placed.uid,
        placed.attempts,
        placed.submitted_at,
        None,
    )
    assert before + timedelta(seconds=59) < again.next_attempt_at <= timezone.now() + timedelta(seconds=60)
    assert "binding to gpu-1 failed: 422" in again.reason
    assert Card.objects.get(uuid="GPU-a-0").used_slots == 0
    assert run_cycle().placed == [], "not before its delay"
    assert kube_pod(apiserver, "train")["metadata"]["annotations"]["hami.io/bind-phase"] == "failed"


def test_a_late_outcome_for_a_replaced_pod_leaves_the_new_one_alone(kube, apiserver):
    """The pod was deleted and created again while it was being bound, and the watch already
    queued the new one: the binder's release is meant for the old uid and writes nothing."""
    placed = place(apiserver)
    apiserver.delete("pods", "default", "train")
    fresh = apiserver.put("pods", pod_object("train", gpu=1, mem=1000))
    services.submit_pod(
        "default",
        "train",
        {},
        [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}],
        [],
        0,
        fresh["metadata"]["uid"],
        origin=Pod.KUBERNETES,
    )
    assert Card.objects.get(uuid="GPU-a-0").used_slots == 0, "the new uid released the old cards"
    assert Binder(kube).bind(placed).outcome == BindOutcome.GONE
    current = row("train")
    assert (current.uid, current.status) == (fresh["metadata"]["uid"], Pod.PENDING)
    assert run_cycle().placed, "the new pod is placed as usual"
