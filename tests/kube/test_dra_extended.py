"""KEP-5004 through the scheduling cycle: a pod asking `nvidia.com/gpu` that a DeviceClass of
HAMi's DRA driver maps (`spec.extendedResourceName`, or the implicit
`deviceclass.resource.kubernetes.io/<class>`) is placed on a DRA device, and the binder
creates the special ResourceClaim, allocates and reserves it, and names it in the pod's
`status.extendedResourceClaimStatus` before the Binding, as kube-scheduler does. The agent
watches the stand-in API server through the real `kubernetes` client."""

from __future__ import annotations

import re

import pytest

from kube.agent import KubeAgent
from scheduling.models import Card, Pod
from scheduling.pipeline import run_cycle
from tests.engine.dra_objects import CLASS, HAMI, device_class, hami_slice

from .apiserver import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from .conftest import fast_options, node_object, pod_object, running, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BINPACK = {"hami.io/gpu-scheduler-policy": "binpack"}
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT = f"deviceclass.resource.kubernetes.io/{CLASS}"


def gpu_class(extended: str | None = "nvidia.com/gpu") -> dict:
    found = device_class()
    if extended:
        found["spec"]["extendedResourceName"] = extended
    return found


def dra_cluster(apiserver, extended: str | None = "nvidia.com/gpu", cards: int = 2) -> None:
    apiserver.put(DEVICE_CLASSES, gpu_class(extended))
    apiserver.put("nodes", node_object("n1"))
    apiserver.put(RESOURCE_SLICES, hami_slice("n1", cards=cards, memory_gib=24))


def agent(kube, dra: bool = True) -> KubeAgent:
    return KubeAgent(kube, fast_options(dra=dra))


def row(name: str) -> Pod | None:
    return Pod.objects.select_related("node").filter(namespace="default", name=name).first()


def queued(*names: str, dra_cards: int = 1):
    """The pods stored and at least `dra_cards` DRA cards reported (the slices' node report
    and the pods come through different watches)."""
    return lambda: (
        Pod.objects.filter(namespace="default", name__in=names).count() == len(names)
        and Card.objects.filter(mode="dra").count() >= dra_cards
    )


def node_of(apiserver, name: str) -> str:
    return (apiserver.get("pods", "default", name).get("spec") or {}).get("nodeName") or ""


def special_claims(apiserver, pod: str) -> list[dict]:
    uid = apiserver.get("pods", "default", pod)["metadata"]["uid"]
    return [
        c
        for c in apiserver.all(RESOURCE_CLAIMS)
        if (c["metadata"].get("annotations") or {}).get(ANNOTATION) == "true"
        and any(o.get("uid") == uid for o in c["metadata"].get("ownerReferences") or [])
    ]


def test_a_gpu_pod_a_class_maps_gets_a_dra_device_and_its_special_claim_before_the_binding(kube, apiserver):
    dra_cluster(apiserver, cards=1)
    apiserver.put("pods", pod_object("train", gpu=1))
    with running(agent(kube)):
        wait_until(lambda: Card.objects.filter(mode="dra").count() == 1, what="the DRA card")
        wait_until(queued("train"), what="queued")
        stored = row("train")
        assert stored.scheduling["resourceClaims"]["extended"]["requestMappings"] == [
            {
                "containerName": "main",
                "resourceName": "nvidia.com/gpu",
                "requestName": "container-0-request-2",
            }
        ]
        assert "nvidia.com/gpu" not in stored.containers[0]["resources"].get("limits", {}), (
            "asked as a DRA device, not as a device-plugin GPU"
        )
        assert [node for _, node, _ in run_cycle().placed] == ["n1"]
        wait_until(lambda: node_of(apiserver, "train"), what="bound")
    pod = apiserver.get("pods", "default", "train")
    (claim,) = special_claims(apiserver, "train")
    meta = claim["metadata"]
    assert re.fullmatch(r"train-extended-resources-[bcdfghjklmnpqrstvwxz2456789]{5}", meta["name"]), meta[
        "name"
    ]
    assert meta["generateName"] == "train-extended-resources-"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "train",
            "uid": pod["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert claim["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-2",
            "exactly": {"deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 1},
        }
    ]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["request"], result["driver"], result["pool"], result["device"]) == (
        "container-0-request-2",
        HAMI,
        "n1",
        "hami-gpu-0",
    )
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "train", "uid": pod["metadata"]["uid"]}
    ]
    assert pod["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": meta["name"],
        "requestMappings": [
            {
                "containerName": "main",
                "resourceName": "nvidia.com/gpu",
                "requestName": "container-0-request-2",
            }
        ],
    }
    # created, allocated, named in the pod's status, then bound: kube-scheduler's PreBind order
    order = [
        apiserver.calls("POST", "/resourceclaims")[0],
        apiserver.calls("PATCH", f"/resourceclaims/{meta['name']}/status")[0],
        apiserver.calls("PATCH", "/pods/train/status")[-1],
        apiserver.calls("POST", "/pods/train/binding")[0],
    ]
    assert [apiserver.requests.index(call) for call in order] == sorted(
        apiserver.requests.index(call) for call in order
    )


def test_two_gpumem_pods_binpack_onto_one_shareable_device(kube, apiserver):
    dra_cluster(apiserver)
    for name in ("a", "b"):
        apiserver.put("pods", pod_object(name, gpu=1, mem=8000, annotations=BINPACK))
    with running(agent(kube)):
        wait_until(lambda: Card.objects.filter(mode="dra").count() == 2, what="two DRA cards")
        wait_until(queued("a", "b"), what="queued")
        assert sorted(node for _, node, _ in run_cycle().placed) == ["n1", "n1"]
        wait_until(lambda: node_of(apiserver, "a") and node_of(apiserver, "b"), what="both bound")
    results = [
        special_claims(apiserver, name)[0]["status"]["allocation"]["devices"]["results"][0] for name in "ab"
    ]
    assert results[0]["device"] == results[1]["device"], "binpack: both on one card"
    assert {r["consumedCapacity"]["memory"] for r in results} == {"8000Mi"}
    (request,) = special_claims(apiserver, "a")[0]["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"] == {"requests": {"memory": "8000Mi"}}


def test_the_implicit_class_name_maps_too_and_counts_init_containers_first(kube, apiserver):
    dra_cluster(apiserver, extended=None)
    pod = pod_object("implicit", gpu=None, init=[{"name": "setup", "image": "busybox"}])
    pod["spec"]["containers"][0]["resources"]["limits"][IMPLICIT] = "1"
    apiserver.put("pods", pod)
    with running(agent(kube)):
        wait_until(lambda: Card.objects.filter(mode="dra").exists(), what="DRA cards")
        wait_until(queued("implicit"), what="queued")
        assert [node for _, node, _ in run_cycle().placed] == ["n1"]
        wait_until(lambda: node_of(apiserver, "implicit"), what="bound")
    (claim,) = special_claims(apiserver, "implicit")
    # containers: setup (0), main (1); main's sorted requests: cpu, deviceclass..., memory
    assert [r["name"] for r in claim["spec"]["devices"]["requests"]] == ["container-1-request-1"]
    mappings = apiserver.get("pods", "default", "implicit")["status"]["extendedResourceClaimStatus"][
        "requestMappings"
    ]
    assert mappings == [
        {"containerName": "main", "resourceName": IMPLICIT, "requestName": "container-1-request-1"}
    ]


@pytest.mark.parametrize(
    "extended, dra", [(None, True), ("nvidia.com/gpu", False)], ids=["no-mapping", "dra-off"]
)
def test_without_a_mapping_or_with_dra_off_the_pod_stays_a_device_plugin_pod(kube, apiserver, extended, dra):
    dra_cluster(apiserver, extended=extended)
    apiserver.put("pods", pod_object("plugin", gpu=1, mem=1000))
    with running(agent(kube, dra=dra)):
        wait_until(queued("plugin", dra_cards=0), what="queued")
        stored = row("plugin")
        assert stored.containers[0]["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert "resourceClaims" not in (stored.scheduling or {})
        assert run_cycle().placed == [], "no device-plugin card anywhere"
    assert not node_of(apiserver, "plugin")
    assert not apiserver.calls("POST", "/resourceclaims")


def test_a_failed_claim_creation_leaves_the_pod_pending_and_nothing_bound(kube, apiserver):
    dra_cluster(apiserver)
    apiserver.fail("POST", r"/resourceclaims$", 500, times=100)
    apiserver.put("pods", pod_object("refused", gpu=1))
    with running(agent(kube)):
        wait_until(queued("refused"), what="queued")
        assert len(run_cycle().placed) == 1
        wait_until(lambda: row("refused").status == Pod.PENDING, what="given back and queued again")
        assert "extended resources not created" in row("refused").reason, row("refused").reason
    assert not node_of(apiserver, "refused")
    assert not apiserver.calls("POST", "/pods/refused/binding")
    assert not apiserver.all(RESOURCE_CLAIMS)


def test_a_refused_pod_status_deletes_the_claim_created_and_binds_nothing(kube, apiserver):
    dra_cluster(apiserver)
    apiserver.fail("PATCH", r"/pods/held/status$", 500, times=100)
    apiserver.put("pods", pod_object("held", gpu=1))
    with running(agent(kube)):
        wait_until(queued("held"), what="queued")
        assert len(run_cycle().placed) == 1
        wait_until(
            lambda: apiserver.calls("DELETE", "/resourceclaims/held-extended-resources-"), what="deleted"
        )
        wait_until(lambda: row("held").status == Pod.PENDING, what="queued again")
    assert not node_of(apiserver, "held")
    assert not apiserver.calls("POST", "/pods/held/binding")
    assert not apiserver.all(RESOURCE_CLAIMS), "the claim created is deleted again"


def test_an_ended_pods_special_claim_is_given_back(kube, apiserver):
    dra_cluster(apiserver)
    apiserver.put("pods", pod_object("done", gpu=1))
    with running(agent(kube)):
        wait_until(queued("done"), what="queued")
        assert len(run_cycle().placed) == 1
        wait_until(lambda: node_of(apiserver, "done"), what="bound")
        apiserver.update("pods", "default", "done", lambda pod: pod["status"].update(phase="Succeeded"))
        wait_until(
            lambda: not (special_claims(apiserver, "done")[0].get("status") or {}).get("reservedFor"),
            timeout=15,
            what="the claim given back",
        )
    assert not (special_claims(apiserver, "done")[0].get("status") or {}).get("allocation")


def test_a_memory_percentage_holds_the_pod_saying_to_ask_mib(kube, apiserver):
    dra_cluster(apiserver)
    pod = pod_object("share", gpu=1)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "50"
    apiserver.put("pods", pod)
    with running(agent(kube)):
        wait_until(queued("share"), what="queued")
        assert run_cycle().placed == []
        waiting = row("share")
        assert waiting.status == Pod.PENDING and "nvidia.com/gpumem" in waiting.reason, waiting.reason
    assert not apiserver.calls("POST", "/resourceclaims")


def test_a_refused_binding_deletes_the_special_claim_and_the_next_try_makes_a_new_one(kube, apiserver):
    dra_cluster(apiserver)
    apiserver.fail("POST", r"/pods/retry/binding$", 500)
    apiserver.put("pods", pod_object("retry", gpu=1))
    with running(agent(kube)):
        wait_until(queued("retry"), what="queued")
        assert len(run_cycle().placed) == 1
        wait_until(
            lambda: apiserver.calls("DELETE", "/resourceclaims/retry-extended-resources-"), what="deleted"
        )
        wait_until(lambda: row("retry").status == Pod.PENDING, what="queued again")
        assert not apiserver.all(RESOURCE_CLAIMS)
        wait_until(lambda: len(run_cycle().placed) == 1, what="placed again once its wait is over")
        wait_until(lambda: node_of(apiserver, "retry"), what="bound")
    (claim,) = special_claims(apiserver, "retry")
    status = apiserver.get("pods", "default", "retry")["status"]["extendedResourceClaimStatus"]
    assert status["resourceClaimName"] == claim["metadata"]["name"]
    assert len(apiserver.calls("POST", "/resourceclaims")) == 2
