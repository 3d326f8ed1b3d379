"""The one module of Kubernetes calls, over HTTP to the stand-in: results, errors, RBAC."""

from __future__ import annotations

from functools import partial

import pytest

from kube.api import RBAC_RULES, ApiError, ApiUnavailable, Gone, KubeApi

from .apiserver import (
    COSCHEDULING_PODGROUPS,
    KAI_PODGROUPS,
    OWNERS,
    RESOURCE_CLAIMS,
    VOLCANO_PODGROUPS,
    WORKLOAD_PODGROUPS,
    WORKLOADS,
)
from .conftest import node_object, pod_object


def every_call(kube, apiserver):
    """Each method of KubeApi with a call the way the agent makes it, in an order that works."""
    apiserver.put("pods", pod_object("p1"))
    apiserver.proxied[("default", "p1", 9394)] = b"hami_host_gpu_utilization_ratio 1\n"
    apiserver.put("nodes", node_object("n1"))
    for kind in (VOLCANO_PODGROUPS, COSCHEDULING_PODGROUPS, KAI_PODGROUPS):
        apiserver.serve(kind)
        apiserver.put(kind, {"metadata": {"name": "g1", "namespace": "default"}, "spec": {"minMember": 2}})
    for kind in (WORKLOAD_PODGROUPS, WORKLOADS):
        apiserver.serve(kind)
        apiserver.put(kind, {"metadata": {"name": "g1", "namespace": "default"}, "spec": {}})
    apiserver.put("persistentvolumeclaims", {"metadata": {"name": "c1", "namespace": "default"}, "spec": {}})
    apiserver.put("persistentvolumes", {"metadata": {"name": "v1"}, "spec": {}})
    found = {}
    condition = {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable"}
    return [
        (
            KubeApi.list_pods,
            lambda: found.update(pods=kube.list_pods("spec.schedulerName=hami-scheduler")[1]),
        ),
        (
            KubeApi.watch_pods,
            lambda: list(
                kube.watch_pods(found["pods"], "spec.schedulerName=hami-scheduler", timeout_seconds=1)
            ),
        ),
        (KubeApi.list_nodes, lambda: found.update(nodes=kube.list_nodes()[1])),
        (KubeApi.watch_nodes, lambda: list(kube.watch_nodes(found["nodes"], timeout_seconds=1))),
        (KubeApi.get_node, lambda: found.update(node=kube.get_node("n1"))),
        (
            KubeApi.patch_node,
            lambda: kube.patch_node(
                "n1",
                {
                    "metadata": {
                        "resourceVersion": found["node"]["metadata"]["resourceVersion"],
                        "annotations": {"hami.io/mutex.lock": "2026-01-02T03:04:05Z,default,p1"},
                    }
                },
            ),
        ),
        (KubeApi.get_pod, lambda: found.update(pod=kube.get_pod("default", "p1"))),
        (KubeApi.get_pod_proxy, lambda: kube.get_pod_proxy("default", "p1", 9394, "metrics")),
        (
            KubeApi.patch_pod,
            lambda: kube.patch_pod("default", "p1", {"metadata": {"annotations": {"x": "y"}}}),
        ),
        (
            KubeApi.patch_pod_status,
            lambda: kube.patch_pod_status(
                "default", "p1", {"status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}}
            ),
        ),
        (KubeApi.bind_pod, lambda: kube.bind_pod("default", "p1", found["pod"]["metadata"]["uid"], "n1")),
        (KubeApi.evict_pod, lambda: kube.evict_pod("default", "p1", found["pod"]["metadata"]["uid"], 30)),
        (
            KubeApi.create_event,
            lambda: kube.create_event(
                "default", {"metadata": {"name": "p1.e"}, "involvedObject": {"kind": "Pod", "name": "p1"}}
            ),
        ),
        (KubeApi.patch_event, lambda: kube.patch_event("default", "p1.e", {"count": 2})),
        (KubeApi.get_lease, lambda: kube.get_lease("ns", "lease")),
        (
            KubeApi.create_lease,
            lambda: found.update(
                lease=kube.create_lease(
                    "ns", {"metadata": {"name": "lease"}, "spec": {"holderIdentity": "a"}}
                )
            ),
        ),
        (KubeApi.replace_lease, lambda: kube.replace_lease("ns", "lease", found["lease"])),
        (KubeApi.list_resource_quotas, lambda: found.update(quotas=kube.list_resource_quotas()[1])),
        (
            KubeApi.watch_resource_quotas,
            lambda: list(kube.watch_resource_quotas(found["quotas"], timeout_seconds=1)),
        ),
        (KubeApi.served_resources, lambda: kube.served_resources("scheduling.volcano.sh", "v1beta1")),
        (KubeApi.list_volcano_podgroups, lambda: found.update(volcano=kube.list_volcano_podgroups()[1])),
        (
            KubeApi.watch_volcano_podgroups,
            lambda: list(kube.watch_volcano_podgroups(found["volcano"], timeout_seconds=1)),
        ),
        (
            KubeApi.patch_volcano_podgroup,
            lambda: kube.patch_volcano_podgroup("default", "g1", {"status": {"phase": "Pending"}}),
        ),
        (
            KubeApi.list_coscheduling_podgroups,
            lambda: found.update(coscheduling=kube.list_coscheduling_podgroups()[1]),
        ),
        (
            KubeApi.watch_coscheduling_podgroups,
            lambda: list(kube.watch_coscheduling_podgroups(found["coscheduling"], timeout_seconds=1)),
        ),
        (
            KubeApi.patch_coscheduling_podgroup_status,
            lambda: kube.patch_coscheduling_podgroup_status(
                "default", "g1", {"status": {"phase": "Pending"}}
            ),
        ),
        (KubeApi.list_kai_podgroups, lambda: found.update(kai=kube.list_kai_podgroups()[1])),
        (
            KubeApi.watch_kai_podgroups,
            lambda: list(kube.watch_kai_podgroups(found["kai"], timeout_seconds=1)),
        ),
        (
            KubeApi.patch_kai_podgroup_status,
            lambda: kube.patch_kai_podgroup_status("default", "g1", {"status": {"schedulingConditions": []}}),
        ),
        (KubeApi.list_workload_podgroups, lambda: found.update(workload=kube.list_workload_podgroups()[1])),
        (
            KubeApi.watch_workload_podgroups,
            lambda: list(kube.watch_workload_podgroups(found["workload"], timeout_seconds=1)),
        ),
        (
            KubeApi.patch_workload_podgroup_status,
            lambda: kube.patch_workload_podgroup_status(
                "default",
                "g1",
                {
                    "status": {
                        "conditions": [
                            {**condition, "message": "", "lastTransitionTime": "2026-01-02T03:04:05Z"}
                        ]
                    }
                },
            ),
        ),
        (KubeApi.list_workloads, lambda: found.update(workloads=kube.list_workloads()[1])),
        (KubeApi.watch_workloads, lambda: list(kube.watch_workloads(found["workloads"], timeout_seconds=1))),
        (
            KubeApi.list_persistent_volume_claims,
            lambda: found.update(claims=kube.list_persistent_volume_claims()[1]),
        ),
        (
            KubeApi.watch_persistent_volume_claims,
            lambda: list(kube.watch_persistent_volume_claims(found["claims"], timeout_seconds=1)),
        ),
        (KubeApi.get_persistent_volume_claim, lambda: kube.get_persistent_volume_claim("default", "c1")),
        (
            KubeApi.patch_persistent_volume_claim,
            lambda: kube.patch_persistent_volume_claim(
                "default", "c1", {"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n1"}}}
            ),
        ),
        (KubeApi.list_persistent_volumes, lambda: found.update(volumes=kube.list_persistent_volumes()[1])),
        (
            KubeApi.watch_persistent_volumes,
            lambda: list(kube.watch_persistent_volumes(found["volumes"], timeout_seconds=1)),
        ),
        (KubeApi.get_persistent_volume, lambda: kube.get_persistent_volume("v1")),
        (
            KubeApi.patch_persistent_volume,
            lambda: kube.patch_persistent_volume(
                "v1", {"spec": {"claimRef": {"namespace": "default", "name": "c1"}}}
            ),
        ),
        (KubeApi.list_storage_classes, lambda: found.update(classes=kube.list_storage_classes()[1])),
        (
            KubeApi.watch_storage_classes,
            lambda: list(kube.watch_storage_classes(found["classes"], timeout_seconds=1)),
        ),
        *owner_calls(kube, apiserver),
        *dra_calls(kube, apiserver),
    ]


def dra_calls(kube, apiserver):
    """Dynamic Resource Allocation (kube/dra.py, kube/drastate.py): the lists and watches, and a
    claim's allocation written
    (authorized against `resourceclaims/binding` too, as from 1.36); KEP-5004's special claim
    created (by `generateName`) and deleted (kube/draclaims.py)."""
    apiserver.put(RESOURCE_CLAIMS, {"metadata": {"name": "rc1", "namespace": "default"}, "spec": {}})
    listed: dict[str, str] = {}
    created: dict = {}
    calls = []
    for kind in ("resource_slices", "resource_claims", "device_classes", "device_taint_rules"):
        listing, watching = getattr(KubeApi, f"list_{kind}"), getattr(KubeApi, f"watch_{kind}")
        calls += [
            (listing, lambda kind=kind: listed.update({kind: getattr(kube, f"list_{kind}")()[1]})),
            (
                watching,
                lambda kind=kind: list(getattr(kube, f"watch_{kind}")(listed[kind], timeout_seconds=1)),
            ),
        ]
    return [
        *calls,
        (
            KubeApi.patch_resource_claim_status,
            lambda: kube.patch_resource_claim_status(
                "default", "rc1", {"status": {"allocation": {"devices": {"results": []}}}}
            ),
        ),
        (
            KubeApi.create_resource_claim,
            lambda: created.update(
                kube.create_resource_claim(
                    "default", {"metadata": {"generateName": "p-extended-resources-"}, "spec": {}}
                )["metadata"]
            ),
        ),
        (
            KubeApi.delete_resource_claim,
            lambda: kube.delete_resource_claim("default", created["name"], created["uid"]),
        ),
    ]


def owner_calls(kube, apiserver):
    """The owners of pods (kube/owners.py): each kind served and one object of it; a namespace."""
    calls = [(KubeApi.get_namespace, lambda: kube.get_namespace("default"))]
    for plural, (group, version, _) in OWNERS.items():
        apiserver.serve(plural)
        apiserver.put(plural, {"metadata": {"name": "o1", "namespace": "default"}, "spec": {}})
        method = getattr(KubeApi, f"get_{plural}")
        calls.append((method, partial(getattr(kube, method.__name__), group, version, "default", "o1")))
    return calls


def test_each_call_sends_exactly_the_request_its_declared_grant_allows(kube, apiserver):
    """The grant on each KubeApi method is what the API server authorizes its request by
    (none for discovery, which the stand-in keeps apart as a non-resource request)."""
    apiserver.watch_seconds_cap = 0.05
    calls = every_call(kube, apiserver)
    public = {name for name, value in vars(KubeApi).items() if callable(value) and not name.startswith("_")}
    assert {method.__name__ for method, _ in calls} == public, "every public call is exercised"
    for method, call in calls:
        before, discovered = len(apiserver.requests), len(apiserver.nonresource)
        call()
        sent = {(group, resource, verb) for _, _, group, resource, verb in apiserver.requests[before:]}
        wanted = {method.grant} if method.grant is not None else set()
        assert sent == wanted, f"{method.__name__} declares {method.grant} but sent {sent}"
        assert (len(apiserver.nonresource) > discovered) == (method.grant is None)


def test_discovery_says_whether_a_crd_is_served(kube, apiserver):
    assert kube.served_resources("scheduling.volcano.sh", "v1beta1") is None
    apiserver.serve(VOLCANO_PODGROUPS)
    apiserver.serve(COSCHEDULING_PODGROUPS)
    assert kube.served_resources("scheduling.volcano.sh", "v1beta1") == {"podgroups"}
    assert kube.served_resources("scheduling.x-k8s.io", "v1alpha1") == {"podgroups", "podgroups/status"}
    assert kube.served_resources("scheduling.k8s.io", "v1beta1") is None, "the Workload API is not enabled"
    apiserver.serve(WORKLOAD_PODGROUPS)
    apiserver.serve(WORKLOADS)
    assert kube.served_resources("scheduling.k8s.io", "v1beta1") == {
        "podgroups",
        "podgroups/status",
        "workloads",
    }


def test_a_workload_podgroups_condition_the_server_refuses_is_an_api_error(kube, apiserver):
    """The stand-in validates conditions as metav1.Condition is: a reason with a space is 422."""
    apiserver.serve(WORKLOAD_PODGROUPS)
    apiserver.put(WORKLOAD_PODGROUPS, {"metadata": {"name": "g1", "namespace": "default"}, "spec": {}})
    bad = {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "not valid", "message": ""}
    with pytest.raises(ApiError) as caught:
        kube.patch_workload_podgroup_status(
            "default",
            "g1",
            {"status": {"conditions": [{**bad, "lastTransitionTime": "2026-01-02T03:04:05Z"}]}},
        )
    assert caught.value.status == 422
    with pytest.raises(ApiError) as caught:
        kube.patch_workload_podgroup_status("default", "gone", {"status": {}})
    assert caught.value.status == 404


def test_every_call_is_covered_by_the_rbac_rules_and_every_rule_is_used(kube, apiserver):
    apiserver.watch_seconds_cap = 0.05
    for _, call in every_call(kube, apiserver):
        call()
    used = apiserver.grants_used()
    assert used <= set(RBAC_RULES), f"calls without an RBAC rule: {used - set(RBAC_RULES)}"
    assert set(RBAC_RULES) <= used, f"rules no call needs: {set(RBAC_RULES) - used}"


def test_the_binding_answer_is_a_status_and_does_not_break_the_client(kube, apiserver):
    """The API server answers a Binding with a Status; the generated model used to raise ValueError."""
    created = apiserver.put("pods", pod_object("p1"))
    kube.bind_pod("default", "p1", created["metadata"]["uid"], "node-a")
    assert apiserver.get("pods", "default", "p1")["spec"]["nodeName"] == "node-a"
    with pytest.raises(ApiError) as caught:
        kube.bind_pod("default", "p1", created["metadata"]["uid"], "node-b")
    assert caught.value.status == 409


def test_a_watch_streams_changes_after_the_listed_version(kube, apiserver):
    apiserver.put("pods", pod_object("before"))
    items, version = kube.list_pods()
    apiserver.put("pods", pod_object("after"))
    apiserver.delete("pods", "default", "before")
    events = [(kind, obj["metadata"]["name"]) for kind, obj in kube.watch_pods(version, timeout_seconds=1)]
    assert [obj["metadata"]["name"] for obj in items] == ["before"]
    assert events == [("ADDED", "after"), ("DELETED", "before")]


def test_a_watch_from_expired_history_raises_gone(kube, apiserver):
    apiserver.put("pods", pod_object("p"))
    _, version = kube.list_pods()
    apiserver.put("pods", pod_object("q"))
    apiserver.expire_history()
    with pytest.raises(Gone) as caught:
        list(kube.watch_pods(version, timeout_seconds=1))
    assert caught.value.status == 410


def test_merge_patch_with_a_stale_version_is_a_conflict(kube, apiserver):
    apiserver.put("pods", pod_object("p"))
    stale = kube.get_pod("default", "p")["metadata"]["resourceVersion"]
    kube.patch_pod("default", "p", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(ApiError) as caught:
        kube.patch_pod("default", "p", {"metadata": {"resourceVersion": stale, "annotations": {"k": "v"}}})
    assert caught.value.status == 409
    assert "modified" in caught.value.message


def test_no_server_is_unavailable_not_a_crash(kube, apiserver):
    apiserver.stop()
    with pytest.raises(ApiUnavailable):
        kube.list_nodes()
    apiserver.start()
    assert kube.list_nodes() == ([], str(apiserver.version))
