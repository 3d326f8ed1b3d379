"""`POST pods/` and `POST pods/bulk/` take the Kubernetes scheduling fields (SPEC 10) by their
API names, keep them with the containers' cpu/memory requests and host ports, and refuse a
malformed value naming the field; a gated pod is listed pending with `SchedulingGated`."""

from __future__ import annotations

import pytest

from scheduling.models import Pod

from .conftest import gpu_pod

pytestmark = pytest.mark.django_db

FIELDS = {
    "labels": {"app": "train"},
    "nodeName": "node2",
    "nodeSelector": {"pool": "training"},
    "affinity": {"podAntiAffinity": {}},
    "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
    ],
    "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
}


def with_requests(body: dict) -> dict:
    main = body["containers"][0]
    main["resources"]["requests"] = {"cpu": "500m", "memory": "1Gi"}
    main["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    return body


def test_the_fields_are_kept_with_requests_and_host_ports(operator, viewer):
    answer = operator.post(
        "/api/v1/pods/", with_requests({**gpu_pod("p", mem=1000), **FIELDS}), format="json"
    )
    assert answer.status_code == 201, answer.content
    pod = Pod.objects.get()
    assert pod.labels == FIELDS["labels"]
    assert pod.scheduling == {key: value for key, value in FIELDS.items() if key != "labels"}
    assert pod.containers[0]["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    assert pod.containers[0]["ports"] == [{"containerPort": 80, "hostPort": 8080}]
    pending = viewer.get("/api/v1/pending/").json()["results"]
    assert [(p["name"], p["reasons"], p["reason"]) for p in pending] == [
        ("p", {"SchedulingGated": 1}, "waiting for scheduling gates: kueue.x-k8s.io/admission")
    ]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"tolerations": [{"key": "a", "effect": "NoRun"}]}, "tolerations[0].effect"),
        ({"topologySpreadConstraints": [{"maxSkew": 1}]}, "topologySpreadConstraints[0].topologyKey"),
        ({"schedulingGates": [{}]}, "schedulingGates[0].name"),
        ({"affinity": ["nodeAffinity"]}, "affinity"),
        ({"nodeSelector": {"pool": 1}}, "nodeSelector"),
    ],
)
def test_a_malformed_field_is_refused_naming_it(operator, extra, field):
    answer = operator.post("/api/v1/pods/", {**gpu_pod("p", mem=1000), **extra}, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json(), answer.json()
    assert not Pod.objects.exists()


def test_a_malformed_cpu_request_is_refused_naming_it(operator):
    body = gpu_pod("p", mem=1000)
    body["containers"][0]["resources"]["requests"] = {"cpu": "4 cores"}
    answer = operator.post("/api/v1/pods/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert "containers[0].resources.requests.cpu" in answer.json()


def test_bulk_items_take_the_fields_and_are_refused_one_by_one(operator):
    good = {**gpu_pod("good", mem=1000), "nodeSelector": {"pool": "a"}}
    bad = {**gpu_pod("bad", mem=1000), "tolerations": [{"key": "a", "operator": "Maybe"}]}
    answer = operator.post("/api/v1/pods/bulk/", {"pods": [good, bad]}, format="json")
    assert answer.status_code == 200, answer.content
    results = answer.json()["pods"]
    assert [r["outcome"] for r in results] == ["created", "refused"]
    assert results[1]["error"]["field"] == "tolerations[0].operator"
    assert Pod.objects.get().scheduling == {"nodeSelector": {"pool": "a"}}
