"""The one module of Kubernetes calls, over HTTP to the stand-in: results, errors, RBAC."""

from __future__ import annotations

import pytest

from kube.api import RBAC_RULES, ApiError, ApiUnavailable, Gone, KubeApi

from .conftest import node_object, pod_object


def every_call(kube, apiserver):
    """Each method of KubeApi with a call the way the agent makes it, in an order that works."""
    apiserver.put("pods", pod_object("p1"))
    apiserver.put("nodes", node_object("n1"))
    found = {}
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
        (
            KubeApi.patch_pod,
            lambda: kube.patch_pod("default", "p1", {"metadata": {"annotations": {"x": "y"}}}),
        ),
        (KubeApi.bind_pod, lambda: kube.bind_pod("default", "p1", found["pod"]["metadata"]["uid"], "n1")),
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
    ]


def test_each_call_sends_exactly_the_request_its_declared_grant_allows(kube, apiserver):
    """The grant on each KubeApi method is what the API server authorizes its request by."""
    calls = every_call(kube, apiserver)
    public = {name for name, value in vars(KubeApi).items() if callable(value) and not name.startswith("_")}
    assert {method.__name__ for method, _ in calls} == public, "every public call is exercised"
    for method, call in calls:
        before = len(apiserver.requests)
        call()
        sent = {(group, resource, verb) for _, _, group, resource, verb in apiserver.requests[before:]}
        assert sent == {method.grant}, f"{method.__name__} declares {method.grant} but sent {sent}"


def test_every_call_is_covered_by_the_rbac_rules_and_every_rule_is_used(kube, apiserver):
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
