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


NEAR_FIELD = (
    "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    ".nodeSelectorTerms[0].matchExpressions[0].operator"
)
NEAR = {
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "Near", "values": ["a"]}]}
                ]
            }
        }
    }
}


def deep_case(name: str, case: str) -> dict:
    """A pod with one value the envelope takes and only the engine's rules refuse."""
    body = gpu_pod(name, mem=1000)
    main = body["containers"][0]
    if case == "near":
        body.update(NEAR)
    elif case == "no-run":
        body["tolerations"] = [{"key": "a", "effect": "NoRun"}]
    elif case == "exists-value":
        body["tolerations"] = [{"key": "a", "operator": "Exists", "value": "v"}]
    elif case == "cores":
        main["resources"]["requests"] = {"cpu": "4 cores"}
    elif case == "host-port":
        main["ports"] = [{"containerPort": 80, "hostPort": 70000}]
    elif case == "protocol":
        main["ports"] = [{"containerPort": 80, "protocol": "XTP"}]
    return body


DEEP_FIELDS = {
    "near": NEAR_FIELD,
    "no-run": "tolerations[0].effect",
    "exists-value": "tolerations[0].value",
    "cores": "containers[0].resources.requests.cpu",
    "host-port": "containers[0].ports[0].hostPort",
    "protocol": "containers[0].ports[0].protocol",
}


@pytest.mark.parametrize("case", DEEP_FIELDS)
def test_what_only_the_engine_rules_refuse_is_refused_naming_the_field(operator, case):
    answer = operator.post("/api/v1/pods/", deep_case("p", case), format="json")
    assert answer.status_code == 400, answer.content
    assert list(answer.json()) == [DEEP_FIELDS[case]]
    assert not Pod.objects.exists()


def test_every_bad_field_is_named_in_one_answer(operator):
    body = deep_case("p", "near")
    body["tolerations"] = [{"key": "a", "operator": "Exists", "value": "v", "effect": "NoRun"}]
    body["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 70000, "protocol": "XTP"}]
    answer = operator.post("/api/v1/pods/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert sorted(answer.json()) == sorted(
        [
            NEAR_FIELD,
            "tolerations[0].value",
            "tolerations[0].effect",
            "containers[0].ports[0].hostPort",
            "containers[0].ports[0].protocol",
        ]
    )
    assert "Near" in answer.json()[NEAR_FIELD][0]


def test_bulk_refuses_only_the_items_the_engine_rules_refuse(operator):
    pods = [gpu_pod("good", mem=1000)] + [deep_case(f"bad-{i}", case) for i, case in enumerate(DEEP_FIELDS)]
    answer = operator.post("/api/v1/pods/bulk/", {"pods": pods}, format="json")
    assert answer.status_code == 200, answer.content
    results = answer.json()["pods"]
    assert [r["outcome"] for r in results] == ["created"] + ["refused"] * len(DEEP_FIELDS)
    assert [r["error"]["field"] for r in results[1:]] == list(DEEP_FIELDS.values())
    assert list(Pod.objects.values_list("name", flat=True)) == ["good"]
