"""A leader killed between the Binding and its last patch left the pod bound with
`hami.io/bind-phase: allocating`: the next leader finishes the bind when hamiadmin holds the
placement on that node, and marks it failed when it does not; each repair is an Event."""

from __future__ import annotations

import pytest

from kube.agent import KubeAgent
from kube.api import api_for_host
from kube.binder import Binder, BindOutcome
from kube.leader import LeaderElector
from scheduling import services
from scheduling.models import Event, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, pod_object, running, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

PHASE = "hami.io/bind-phase"


def placed(apiserver, name: str = "train") -> Pod:
    """A Kubernetes pod queued and placed on gpu-1 by a cycle (status `scheduled`)."""
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
        origin=Pod.KUBERNETES,
    )
    assert run_cycle().placed
    return Pod.objects.select_related("node").get(name=name)


def killed_after_the_binding(kube, row: Pod) -> None:
    """What the old leader's `Binder.bind` did before it died: annotations, then the Binding."""
    binder = Binder(kube)
    binder.annotate(row, binder.annotations(row, "allocating"))
    kube.bind_pod(row.namespace, row.name, row.uid, row.node.name)


def annotations(apiserver, name: str = "train") -> dict:
    return apiserver.get("pods", "default", name)["metadata"]["annotations"]


def repaired(name: str = "train") -> Event | None:
    return Event.objects.filter(kind=Event.BIND_REPAIRED, subject=f"pod/default/{name}").first()


def successor(kube, apiserver, **options) -> KubeAgent:
    """A new agent whose predecessor, `killed-leader`, holds the Lease and renews it no more."""
    dead = LeaderElector(
        api_for_host(apiserver.url),
        "hamiadmin",
        "kube-agent",
        "killed-leader",
        lease_duration=1,
        renew_deadline=0.5,
        retry_period=0.1,
    )
    dead.step()
    elector = LeaderElector(
        kube, "hamiadmin", "kube-agent", "successor", lease_duration=1, renew_deadline=0.5, retry_period=0.1
    )
    return KubeAgent(kube, fast_options(**options), elector=elector)


def test_the_new_leader_finishes_a_bind_its_predecessor_was_killed_in(kube, apiserver):
    row = placed(apiserver)
    killed_after_the_binding(kube, row)
    apiserver.put("pods", pod_object("settled", node="gpu-1", annotations={PHASE: "success"}))
    assert annotations(apiserver)[PHASE] == "allocating"
    assert Pod.objects.get(name="train").status == Pod.SCHEDULED, "killed before mark_bound"
    agent = successor(kube, apiserver)
    with running(agent):
        wait_until(lambda: annotations(apiserver)[PHASE] == "success", timeout=15, what="bind-phase success")
        wait_until(
            lambda: [e for e in apiserver.all("events") if e["reason"] == "Scheduled"], what="Scheduled"
        )
    assert agent.elector.identity == "successor"
    bound = Pod.objects.select_related("node").get(name="train")
    assert (bound.status, bound.node.name) == (Pod.RUNNING, "gpu-1")
    written = annotations(apiserver)
    assert written["hami.io/vgpu-node"] == "gpu-1"
    assert (
        written["hami.io/vgpu-devices-allocated"]
        == written["hami.io/vgpu-devices-to-allocate"]
        == bound.allocated
    )
    event = repaired()
    assert (event.reason, event.severity, event.actor) == ("BindCompleted", Event.NORMAL, "kube-agent")
    assert "gpu-1" in event.message and "allocating" in event.message
    assert len(apiserver.calls("POST", "/pods/train/binding")) == 1, "bound once, by the old leader"
    assert apiserver.calls("PATCH", "/pods/settled") == [], "a settled bind is not touched"
    (scheduled,) = [e for e in apiserver.all("events") if e["reason"] == "Scheduled"]
    assert scheduled["message"] == "Successfully assigned default/train to gpu-1 with cards GPU-a-0"


def test_a_last_patch_that_failed_after_mark_bound_is_written_by_the_next_leader(kube, apiserver):
    row = placed(apiserver)
    apiserver.before(
        "POST", "/pods/train/binding", lambda: apiserver.fail("PATCH", r"/pods/train$", 500, times=10)
    )
    result = Binder(kube).bind(row)
    assert result.outcome == BindOutcome.BOUND and "bind-phase not updated" in result.detail
    apiserver.injected.clear()
    assert (annotations(apiserver)[PHASE], Pod.objects.get(name="train").status) == (
        "allocating",
        Pod.RUNNING,
    )
    with running(successor(kube, apiserver)):
        wait_until(lambda: annotations(apiserver)[PHASE] == "success", timeout=15, what="bind-phase success")
        wait_until(repaired, what="the repair recorded")
    assert repaired().reason == "BindCompleted"


@pytest.mark.parametrize("row", ["none", "placed elsewhere", "pending"])
def test_a_half_done_bind_hamiadmin_holds_no_placement_for_is_marked_failed(kube, apiserver, row):
    """Bound to gpu-2 by whoever, `allocating`: HAMi's device plugin must not allocate cards
    hamiadmin does not account for, so the phase becomes failed, as for a refused Binding."""
    if row == "placed elsewhere":
        placed(apiserver)  # on gpu-1
    elif row == "pending":
        created = apiserver.put("pods", pod_object("train", gpu=1))
        services.submit_pod(
            "default",
            "train",
            {},
            [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            uid=created["metadata"]["uid"],
            origin=Pod.KUBERNETES,
        )
    else:
        apiserver.put("pods", pod_object("train", gpu=1))
    apiserver.update(
        "pods",
        "default",
        "train",
        lambda pod: (
            pod["spec"].update(nodeName="gpu-2"),
            pod["metadata"]["annotations"].update({PHASE: "allocating", "hami.io/vgpu-node": "gpu-2"}),
        ),
    )
    with running(successor(kube, apiserver)):
        wait_until(lambda: annotations(apiserver)[PHASE] == "failed", timeout=15, what="bind-phase failed")
        wait_until(
            lambda: [e for e in apiserver.all("events") if e["reason"] == "BindFailed"], what="a Warning"
        )
    event = repaired()
    assert (event.reason, event.severity) == ("BindFailed", Event.WARNING)
    assert "gpu-2" in event.message and "bind-phase failed" in event.message
    assert {"none": "no row", "placed elsewhere": "placed it on gpu-1", "pending": "no placement"}[
        row
    ] in event.message
    assert annotations(apiserver)["hami.io/bind-time"].isdigit()


def test_with_hamis_device_plugin_completing_the_phase_allocating_is_left_for_it(kube, apiserver):
    """`HAMI_BIND_PHASE_SUCCESS=false`: `allocating` is the binder's last word; the device plugin
    sets success. The new leader only marks the pod bound, and writes nothing on the pod."""
    row = placed(apiserver)
    killed_after_the_binding(kube, row)
    patches = len(apiserver.calls("PATCH", "/pods/train"))
    with running(successor(kube, apiserver, complete_bind_phase=False)) as _:
        wait_until(
            lambda: Pod.objects.get(name="train").status == Pod.RUNNING, timeout=15, what="marked bound"
        )
        wait_until(lambda: len(apiserver.calls("GET", "/leases/kube-agent")) > 30, what="a while of leading")
    assert annotations(apiserver)[PHASE] == "allocating"
    assert len(apiserver.calls("PATCH", "/pods/train")) == patches
    assert repaired() is None
