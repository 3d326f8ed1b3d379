"""A mixed NVIDIA / Ascend / Hygon DCU cluster through the stand-in API server (issue 31, item 4):
each pod goes through hamiadmin's webhooks as the API server would send it, then hamiadmin's
agent (serving `hamiadmin`) runs beside a HAMi scheduler kept for the other families. Every
pod ends placed by hamiadmin, routed to `hami-scheduler`, or refused at creation with a
reason; none is left pending with no one to place it."""

from __future__ import annotations

import json

import pytest

from hamiadmin.hamiconfig import DEFAULT
from kube.agent import KubeAgent
from kube.webhook.mutate import Mutation, mutate
from kube.webhook.review import read_review, validate
from scheduling.engine import ClusterConfig
from scheduling.models import BoundPod, Card, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, wait_until
from .test_hami_wire import JSON_REGISTER
from .test_webhook import admission_review, apply_patch

pytestmark = pytest.mark.django_db(transaction=True)

OURS = "hamiadmin"
SETUP = Mutation(scheduler_name=OURS, other_scheduler="hami-scheduler")


def admitted(pod: dict) -> dict | None:
    """The pod as stored after the mutating then the validating webhook; None when refused."""
    review = read_review(json.dumps(admission_review(pod, namespace="default")).encode())
    answer = mutate(review, ClusterConfig(), DEFAULT, SETUP)
    pod = apply_patch(pod, answer.patch or [])
    review = read_review(json.dumps(admission_review(pod, namespace="default")).encode())
    verdict = validate(review, ClusterConfig(), DEFAULT, SETUP.served, SETUP.mode, SETUP.other_scheduler)
    return pod if verdict.allowed else None


def with_device(name: str, resource: str, scheduler: str | None = None) -> dict:
    pod = pod_object(name, gpu=None, scheduler=scheduler or "")
    pod["spec"]["containers"][0]["resources"]["limits"][resource] = "1"
    if scheduler is None:
        del pod["spec"]["schedulerName"]
    return pod


def test_every_pod_is_placed_routed_or_refused(kube, apiserver):
    apiserver.put("nodes", node_object("nv-1", JSON_REGISTER))
    for name, resource in (("npu-1", "huawei.com/Ascend910B3"), ("dcu-1", "hygon.com/dcunum")):
        node = node_object(name)
        if name == "npu-1":  # HAMi's Ascend device plugin registers the NPUs
            node["metadata"].setdefault("annotations", {})["hami.io/node-register-Ascend910B3"] = json.dumps(
                [
                    {
                        "id": "NPU-0",
                        "count": 4,
                        "devmem": 65536,
                        "devcore": 20,
                        "type": "Ascend910B3",
                        "health": True,
                    }
                ]
            )
        node["status"]["allocatable"] = {**node["status"].get("allocatable", {}), resource: "8"}
        apiserver.put("nodes", node)
    created = {
        "train": pod_object("train", gpu=1, mem=2000, scheduler="hami-scheduler"),
        "npu": with_device("npu", "huawei.com/Ascend910B3", scheduler="hami-scheduler"),
        "dcu": with_device("dcu", "hygon.com/dcunum"),
        "both": pod_object("both", gpu=1, mem=2000),
    }
    created["both"]["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910B3"] = "1"
    stored = {name: admitted(pod) for name, pod in created.items()}
    assert stored["both"] is None  # refused at creation, naming both families
    assert {name: pod["spec"]["schedulerName"] for name, pod in stored.items() if pod} == {
        "train": OURS,
        "npu": OURS,  # Ascend: scheduled by hamiadmin since the engine registers its chips
        "dcu": "hami-scheduler",
    }
    for pod in stored.values():
        if pod is not None:
            apiserver.put("pods", pod)
    with running(KubeAgent(kube, fast_options(scheduler_name=OURS))):
        wait_until(lambda: Pod.objects.filter(name__in=["train", "npu"]).count() == 2, what="both pods")
        wait_until(
            lambda: {"nv-1", "npu-1"} <= set(Card.objects.values_list("node__name", flat=True)),
            what="both nodes' cards reported",
        )
        placed = sorted(p[:2] for p in run_cycle().placed)
        assert placed == [("default/npu", "npu-1"), ("default/train", "nv-1")]
        wait_until(lambda: Pod.objects.get(name="npu").status == Pod.RUNNING, what="bound")
        wait_until(lambda: Pod.objects.get(name="train").status == Pod.RUNNING, what="bound")
    bound = apiserver.get("pods", "default", "npu")["metadata"]["annotations"]
    assert bound["hami.io/Ascend910B3-devices-allocated"] == "NPU-0,Ascend910B3,65536,0:;"
    assert bound["huawei.com/Ascend910B3"] == '[{"UUID":"NPU-0","memory":65536}]'
    assert "hami.io/vgpu-devices-allocated" not in bound
    # hamiadmin never took the routed pod: it waits for HAMi's scheduler, unbound and untouched
    assert not Pod.objects.filter(name__in=["dcu"]).exists()
    for name in ("dcu",):
        pod = apiserver.get("pods", "default", name)
        assert not pod["spec"].get("nodeName")
        assert "hami.io/vgpu-node" not in pod["metadata"].get("annotations", {})


def test_an_ascend_pod_hami_placed_before_the_switch_holds_its_npu(kube, apiserver):
    """HAMi's `hami.io/Ascend910B3-devices-allocated` on a pod it bound counts on the NPU: a
    whole-NPU pod of hamiadmin waits until that pod ends, then takes it."""
    node = node_object("npu-1")
    node["metadata"].setdefault("annotations", {})["hami.io/node-register-Ascend910B3"] = json.dumps(
        [{"id": "NPU-0", "count": 4, "devmem": 65536, "devcore": 20, "type": "Ascend910B3", "health": True}]
    )
    apiserver.put("nodes", node)
    old = pod_object("old", gpu=None, scheduler="hami-scheduler", node="npu-1", phase="Running")
    old["spec"]["containers"][0]["resources"] = {"limits": {"huawei.com/Ascend910B3": "1"}}
    old["metadata"]["annotations"]["hami.io/Ascend910B3-devices-allocated"] = "NPU-0,Ascend910B3,16384,0:;"
    apiserver.put("pods", old)
    apiserver.put("pods", with_device("new", "huawei.com/Ascend910B3", scheduler=OURS))
    with running(KubeAgent(kube, fast_options(scheduler_name=OURS))):
        wait_until(lambda: Pod.objects.filter(name="new").exists(), what="queued")
        held = wait_until(lambda: BoundPod.objects.filter(name="old").first(), what="the HAMi pod counted")
        assert held.allocated == "NPU-0,Ascend910B3,16384,0:;"
        assert run_cycle().placed == []
        apiserver.update("pods", "default", "old", lambda pod: pod["status"].update(phase="Succeeded"))
        wait_until(lambda: not BoundPod.objects.filter(name="old").exists(), what="forgotten when it ended")
        # woken once the capacity version moves, just after (a cycle between them waits)
        report = wait_until(lambda: (r := run_cycle()).placed and r, what="placed once woken")
        assert [p[:2] for p in report.placed] == [("default/new", "npu-1")]
