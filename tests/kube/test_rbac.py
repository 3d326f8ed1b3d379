"""The RBAC rules in kube/api.py are what each identity's code really requests.

Each test runs one identity's real code (the agent's loop with leader election, or the web
app's /extender/ views) through a scenario that takes every path it has to Kubernetes, and
compares the (api group, resource, verb) of every request the stand-in API server received
with that identity's rules: a call the rules miss fails, and so does a rule nothing calls.
tests/deploy/test_rbac.py then holds the rendered manifests to the same rules.
"""

from __future__ import annotations

import json

import pytest

from kube import views
from kube.agent import KubeAgent
from kube.api import EXTENDER_AGENT_RBAC_RULES, EXTENDER_WEB_RBAC_RULES, RBAC_RULES
from kube.extender import filter_pod
from kube.leader import LeaderElector
from scheduling import services
from scheduling.models import BoundPod, Card, Eviction, Pod
from scheduling.pipeline import run_cycle
from tests.engine.dra_objects import CLASS, claim_pod, device_class, gpumem_claim, hami_slice

from .apiserver import (
    COSCHEDULING_PODGROUPS,
    DEVICE_CLASSES,
    KAI_PODGROUPS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    VOLCANO_PODGROUPS,
    WORKLOAD_PODGROUPS,
    WORKLOADS,
)
from .conftest import fast_options, node_object, pod_object, running, settled_cards, t4_register, wait_until
from .test_owners import every_owner_kind
from .test_vgpumonitor import SAMPLE, monitor_pod
from .test_volumes import claim_object, class_object, volume_object

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = ("coordination.k8s.io", "leases", "update")


def pod_row(name: str) -> Pod | None:
    return Pod.objects.filter(namespace="default", name=name).first()


def elector(kube) -> LeaderElector:
    return LeaderElector(
        kube, "hamiadmin", "kube-agent", "me", lease_duration=1, renew_deadline=0.5, retry_period=0.1
    )


def test_the_watcher_agent_requests_exactly_its_rules(kube, apiserver):
    """Lead, list and watch (pods, nodes, ResourceQuotas, both PodGroup CRDs, the Workload
    API's PodGroups and Workloads, KAI's PodGroups, claims, volumes, storage classes), bind one pod (get, patch,
    binding; its claim annotated and a volume claimed first), report one that waits (event
    created, then refreshed: patched), write the three PodGroups' status, renew the Lease,
    evict the bound pod for another (eviction); place a DRA pod (`HAMI_DRA`: the
    resource.k8s.io lists, its claim's status and 1.36's `resourceclaims/binding`), and a pod's
    extended resource backed by DRA (its special claim created, and deleted when its status
    write is refused); read each owner kind of a pod and its
    namespace (gangs from owners); read HAMi's vGPU monitor through the pod proxy."""
    for kind in (VOLCANO_PODGROUPS, COSCHEDULING_PODGROUPS):
        apiserver.serve(kind)
        apiserver.put(kind, {"metadata": {"name": "job", "namespace": "default"}, "spec": {"minMember": 2}})
    apiserver.serve(KAI_PODGROUPS)  # KAI's, with a member short: its scheduling condition written
    apiserver.put(
        KAI_PODGROUPS, {"metadata": {"name": "kai-job", "namespace": "default"}, "spec": {"minMember": 2}}
    )
    apiserver.put("pods", pod_object("kai-0", gpu=1, annotations={"pod-group-name": "kai-job"}))
    apiserver.serve(WORKLOAD_PODGROUPS)
    apiserver.serve(WORKLOADS)
    apiserver.put(
        WORKLOAD_PODGROUPS,
        {
            "metadata": {"name": "gang", "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        },
    )
    member = pod_object("gang-0", gpu=1)
    member["spec"]["schedulingGroup"] = {"podGroupName": "gang"}
    apiserver.put("pods", member)
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 1)))
    # its claims: one provisioned where it goes (the claim annotated), one a local volume (claimed)
    apiserver.put("storageclasses", class_object("ssd", "ebs.csi.aws.com"))
    apiserver.put("storageclasses", class_object("local", "kubernetes.io/no-provisioner"))
    apiserver.put("persistentvolumeclaims", claim_object("ckpt", cls="ssd"))
    apiserver.put("persistentvolumeclaims", claim_object("scratch", cls="local"))
    apiserver.put("persistentvolumes", volume_object("nvme-1", "gpu-1", cls="local"))
    fits = pod_object("fits", gpu=1, mem=1000)
    fits["spec"]["volumes"] = [
        {"name": name, "persistentVolumeClaim": {"claimName": name}} for name in ("ckpt", "scratch")
    ]
    apiserver.put("pods", fits)
    apiserver.put("pods", pod_object("waits", gpu=5))
    owned = every_owner_kind(apiserver)  # gangs from owners: each kind's owner read
    # the DRA pass: slices, classes, taint rules and claims listed, a claim's status written
    apiserver.put(DEVICE_CLASSES, device_class())
    # (three cards: the pair takes the two of one PCIe root, the extended resource, a whole card,
    # the third)
    apiserver.put(RESOURCE_SLICES, hami_slice("dra-1", cards=3))
    # (a matchAttribute pair: the pass places it, with what it lists; the cycle's DRA pods need
    # the same grants, through the informers)
    pair = [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    apiserver.put(RESOURCE_CLAIMS, gpumem_claim("dra-claim", count=2, constraints=pair))
    apiserver.put("pods", claim_pod("dra-pod", "dra-claim"))
    # KEP-5004: a pod asking the class's implicit extended resource gets a special claim
    # (created); its status write refused once, the claim is deleted again
    apiserver.put("nodes", node_object("dra-1"))
    extended = pod_object("ext-pod", gpu=None)
    extended["spec"]["containers"][0]["resources"]["limits"][
        f"deviceclass.resource.kubernetes.io/{CLASS}"
    ] = "1"
    apiserver.put("pods", extended)
    apiserver.fail("PATCH", r"/resourceclaims/ext-pod-extended-resources-\w{5}/status$", 500)
    # HAMi's vGPU monitor on gpu-1 (`HAMI_VGPU_MONITOR=proxy`): its pod found, read through the proxy
    apiserver.put("pods", monitor_pod("hami-device-plugin-m1", "gpu-1"))
    apiserver.proxied[("kube-system", "hami-device-plugin-m1", 9394)] = SAMPLE.encode()
    options = fast_options(
        event_refresh_seconds=0.1, dra=True, vgpu_monitor="proxy", vgpu_monitor_seconds=0.1
    )
    agent = KubeAgent(kube, options, elector=elector(kube))
    with running(agent):
        wait_until(lambda: apiserver.calls("GET", "/proxy/metrics"), what="the vGPU monitor read")
        wait_until(
            lambda: (apiserver.get(RESOURCE_CLAIMS, "default", "dra-claim").get("status") or {}).get(
                "allocation"
            ),
            what="the DRA pod's claim allocated",
        )
        wait_until(
            lambda: BoundPod.objects.filter(name="dra-pod").exclude(allocated="").exists(),
            what="the DRA pod's devices counted (it is bound: kube.bound)",
        )
        wait_until(
            lambda: pod_row("fits") and pod_row("waits") and pod_row("ext-pod") and Card.objects.exists(),
            what="queued",
        )
        wait_until(lambda: all(pod_row(name) for name in owned), what="the owners' pods queued")
        assert sorted(pod for pod, _, _ in run_cycle().placed) == ["default/ext-pod", "default/fits"]
        wait_until(lambda: pod_row("fits").status == Pod.RUNNING, what="bound")
        wait_until(lambda: apiserver.calls("DELETE", "/resourceclaims/"), what="the special claim deleted")
        wait_until(lambda: apiserver.calls("PATCH", "/events/"), what="the waiting pod's event refreshed")
        wait_until(lambda: len(apiserver.calls("PATCH", "/podgroups/job")) == 2, what="both statuses written")
        wait_until(
            lambda: apiserver.calls("PATCH", "/podgroups/gang/status"), what="the Workload API's condition"
        )
        wait_until(lambda: apiserver.calls("PATCH", "/podgroups/kai-job/status"), what="KAI's condition")
        wait_until(lambda: apiserver.calls("GET", "resourcequotas?"), what="the quotas listed and watched")
        wait_until(lambda: LEASE in apiserver.grants_used(), what="a Lease renewal")
        apiserver.put("pods", pod_object("urgent", gpu=1, mem=15000, priority=100))
        wait_until(lambda: pod_row("urgent"), what="the preemptor queued")
        Eviction.objects.create(
            victim=pod_row("fits"),
            preemptor=pod_row("urgent"),
            node="gpu-1",
            cards=["GPU-a-0"],
            reason="test",
        )
        wait_until(lambda: apiserver.get("pods", "default", "fits") is None, what="the victim evicted")
    assert apiserver.grants_used() == set(RBAC_RULES)


def test_the_extender_mode_agent_requests_exactly_its_rules(kube, apiserver):
    """Lead, list and watch every pod and the nodes; a reserved pod deleted unseen is found
    by the relist and checked with a GET before its cards are released."""
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 1)))
    created = apiserver.put("pods", pod_object("ext", gpu=1, mem=1000, scheduler="default-scheduler"))
    agent = KubeAgent(kube, fast_options(extender=True, watch_timeout=30), elector=elector(kube))
    with running(agent):
        wait_until(
            lambda: Card.objects.exists() and agent.pods is not None and agent.pods.has_synced.is_set()
        )
        assert filter_pod(created, ["gpu-1"]).chosen == "gpu-1"
        apiserver.delete("pods", "default", "ext", silent=True)
        apiserver.expire_history()
        wait_until(lambda: pod_row("ext").status == Pod.DELETED, what="released after the relist")
        wait_until(lambda: LEASE in apiserver.grants_used(), what="a Lease renewal")
    assert settled_cards().get(uuid="GPU-a-0").used_memory == 0
    assert apiserver.grants_used() == set(EXTENDER_AGENT_RBAC_RULES)


def test_the_extender_web_requests_exactly_its_rules(client, kube, apiserver):
    """kube-scheduler filters, then binds: the web app annotates the pod and creates the Binding."""
    views.use_api(kube)
    try:
        apiserver.put("nodes", node_object("gpu-1"))
        pod = apiserver.put("pods", pod_object("train", gpu=1, mem=1000, scheduler="default-scheduler"))
        services.report_inventory("gpu-1", {}, {}, [{"uuid": "GPU-a-0", "index": 0, "memory": 15360}])
        filtered = client.post(
            "/extender/filter",
            json.dumps({"Pod": pod, "NodeNames": ["gpu-1"]}),
            content_type="application/json",
        )
        assert filtered.json()["NodeNames"] == ["gpu-1"]
        bound = client.post(
            "/extender/bind",
            json.dumps(
                {
                    "PodName": "train",
                    "PodNamespace": "default",
                    "PodUID": pod["metadata"]["uid"],
                    "Node": "gpu-1",
                }
            ),
            content_type="application/json",
        )
        assert bound.json() == {"Error": ""}
    finally:
        views.use_api(None)
    assert apiserver.get("pods", "default", "train")["spec"]["nodeName"] == "gpu-1"
    assert apiserver.grants_used() == set(EXTENDER_WEB_RBAC_RULES)
