"""Submitting, reading, deleting and completing pods; admission refuses bad input by field."""

from __future__ import annotations

import json

import pytest

from scheduling.models import Allocation, Card, Decision, Pod
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod

pytestmark = pytest.mark.django_db

WEIGHTS = "hami.io/device-scoring-weights"
LIMITS = "containers[0].resources.limits"


def submit(client, body):
    return client.post("/api/v1/pods/", body, format="json")


def written() -> tuple[int, int, int]:
    return Pod.objects.count(), Decision.objects.count(), Allocation.objects.count()


def test_submit_answers_201_pending_and_queues_the_pod(operator):
    answer = submit(operator, gpu_pod("train", "team-a", mem=2000, priority=5))
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["status"], body["node"], body["allocated"], body["decision"]) == (
        "pending",
        None,
        None,
        None,
    )
    assert body["warnings"] == {}
    pod = Pod.objects.get(namespace="team-a", name="train")
    assert pod.priority == 5 and pod.containers[0]["resources"]["limits"]["nvidia.com/gpumem"] == 2000


def test_unknown_chain_names_are_accepted_and_reported_as_warnings(operator):
    body = gpu_pod(
        "p",
        annotations={
            "hami.io/gpu-scheduler-policy": "Mutex, fastest ,binpack",
            "hami.io/node-scheduler-policy": "roundrobin",
        },
    )
    answer = submit(operator, body)
    assert answer.status_code == 201, answer.content
    warnings = answer.json()["warnings"]
    assert list(warnings) == [
        "annotations.hami.io/gpu-scheduler-policy",
        "annotations.hami.io/node-scheduler-policy",
    ]
    assert "'fastest'" in warnings["annotations.hami.io/gpu-scheduler-policy"][0]
    assert "'roundrobin'" in warnings["annotations.hami.io/node-scheduler-policy"][0]


def test_the_same_pod_again_changes_nothing_and_answers_200(operator):
    assert submit(operator, gpu_pod("p")).status_code == 201
    again = submit(operator, gpu_pod("p"))
    assert again.status_code == 200
    assert Pod.objects.filter(name="p").count() == 1


# (body change, the field the error must name)
INVALID = [
    # envelope
    (lambda b: b.pop("name"), "name"),
    (lambda b: b.update(name=42), "name"),
    (lambda b: b.update(name="Not_A_Name"), "name"),
    (lambda b: b.update(name="x" * 254), "name"),
    (lambda b: b.update(namespace="team.a"), "namespace"),
    (lambda b: b.update(priority="high"), "priority"),
    (lambda b: b.update(priority=2**31), "priority"),
    (lambda b: b.update(priority=True), "priority"),
    (lambda b: b.update(uid=7), "uid"),
    (lambda b: b.update(annotations=["a"]), "annotations"),
    (lambda b: b.pop("containers"), "containers"),
    (lambda b: b.update(containers=[]), "containers"),
    (lambda b: b.update(containers={"name": "main"}), "containers"),
    (lambda b: b.update(initContainers={"name": "init"}), "initContainers"),
    # resources (SPEC 2)
    (lambda b: b.update(containers=["main"]), "containers[0]"),
    (lambda b: b["containers"][0].update(resources=[1]), "containers[0].resources"),
    (lambda b: b["containers"][0]["resources"].update(limits="gpu"), f"{LIMITS}"),
    (
        lambda b: b["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": 0}),
        f"{LIMITS}.nvidia.com/gpu",
    ),
    (
        lambda b: b["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "two"}),
        f"{LIMITS}.nvidia.com/gpu",
    ),
    (
        lambda b: b["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": 1.5}),
        f"{LIMITS}.nvidia.com/gpu",
    ),
    (
        lambda b: b["containers"][0]["resources"]["limits"].update({"nvidia.com/gpumem": -1}),
        f"{LIMITS}.nvidia.com/gpumem",
    ),
    (
        lambda b: b["containers"][0]["resources"]["limits"].update({"nvidia.com/gpumem-percentage": 101}),
        f"{LIMITS}.nvidia.com/gpumem-percentage",
    ),
    (  # the DRA family's names are the watcher's own, made from ResourceClaims
        lambda b: b["containers"][0]["resources"]["limits"].update({"hamiadmin.io/dra-devices": 1}),
        f"{LIMITS}.hamiadmin.io/dra-devices",
    ),
    (
        lambda b: b["containers"][0]["resources"]["limits"].update({"nvidia.com/gpumem-percentage": -1}),
        f"{LIMITS}.nvidia.com/gpumem-percentage",
    ),
    (
        lambda b: b["containers"][0]["resources"]["limits"].update({"nvidia.com/gpucores": -1}),
        f"{LIMITS}.nvidia.com/gpucores",
    ),
    (
        lambda b: b["containers"][0]["resources"].update(requests={"nvidia.com/gpucores": -3}),
        "containers[0].resources.requests.nvidia.com/gpucores",
    ),
    (
        lambda b: b.update(
            initContainers=[{"name": "init", "resources": {"limits": {"nvidia.com/gpu": -1}}}]
        ),
        "initContainers[0].resources.limits.nvidia.com/gpu",
    ),
    (lambda b: b["containers"][0].update(resources={"limits": {"cpu": "1"}}), "containers"),
    # annotations (SPEC 3 and 5)
    (lambda b: b["annotations"].update({WEIGHTS: ""}), f"annotations.{WEIGHTS}"),
    (lambda b: b["annotations"].update({WEIGHTS: "slot=1,core=1"}), f"annotations.{WEIGHTS}"),
    (lambda b: b["annotations"].update({WEIGHTS: "slot=1,core=x,memory=1"}), f"annotations.{WEIGHTS}"),
    (lambda b: b["annotations"].update({WEIGHTS: "slot=0,core=0,memory=0"}), f"annotations.{WEIGHTS}"),
    (lambda b: b["annotations"].update({WEIGHTS: "slot=1,slot=2,core=1,memory=1"}), f"annotations.{WEIGHTS}"),
    (lambda b: b["annotations"].update({WEIGHTS: "slot=1,core=1,memory=1,disk=1"}), f"annotations.{WEIGHTS}"),
    (lambda b: b["annotations"].update({"nvidia.com/numa-bind": True}), "annotations.nvidia.com/numa-bind"),
    (
        lambda b: b["annotations"].update({"hami.io/gpu-scheduler-policy": ["binpack"]}),
        "annotations.hami.io/gpu-scheduler-policy",
    ),
]


@pytest.mark.parametrize(
    "change, field", INVALID, ids=[f"{i}-{field}" for i, (_, field) in enumerate(INVALID)]
)
def test_invalid_pod_is_refused_naming_the_field_and_nothing_is_written(operator, change, field):
    body = gpu_pod("bad", mem=1000)
    change(body)
    before = written()
    answer = submit(operator, body)
    assert answer.status_code == 400, answer.content
    errors = answer.json()
    assert field in errors, errors
    assert all(isinstance(message, str) and message for message in errors[field])
    assert written() == before


def test_weights_error_explains_what_is_expected(operator):
    answer = submit(operator, gpu_pod("bad", annotations={WEIGHTS: "slot=1,core=1"}))
    assert "missing memory" in answer.json()[f"annotations.{WEIGHTS}"][0]


def test_a_placed_pod_cannot_change_its_containers(cluster, operator):
    assert submit(operator, gpu_pod("p", mem=1000)).status_code == 201
    run_cycle(trigger="test")
    before = written()
    answer = submit(operator, gpu_pod("p", mem=2000))
    assert answer.status_code == 400 and "containers" in answer.json()
    assert written() == before
    assert Pod.objects.get(name="p").containers[0]["resources"]["limits"]["nvidia.com/gpumem"] == 1000


@pytest.mark.parametrize(
    "raw, content_type, status",
    [
        (b'{"name": "p", "containers": [', "application/json", 400),
        (b"[1, 2, 3]", "application/json", 400),
        (b'"just a string"', "application/json", 400),
        (b'{"name": "p", "priority": NaN}', "application/json", 400),
        (b"\xff\xfe\x00", "application/json", 400),
        (b"[" * 100_000 + b"]" * 100_000, "application/json", 400),
        (b"name=p", "application/x-www-form-urlencoded", 415),
        (b"{}", "text/plain", 415),
    ],
    ids=["truncated", "list", "string", "nan", "not-utf8", "deep", "form", "text"],
)
def test_malformed_bodies_are_4xx_with_a_message(operator, raw, content_type, status):
    before = written()
    answer = operator.generic("POST", "/api/v1/pods/", raw, content_type=content_type)
    assert answer.status_code == status, answer.content
    assert answer.json()
    assert written() == before


def test_oversized_body_is_413(operator, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2000
    body = gpu_pod("big", annotations={"note": "x" * 3000})
    answer = operator.generic("POST", "/api/v1/pods/", json.dumps(body), content_type="application/json")
    assert answer.status_code == 413
    assert "2000 bytes" in answer.json()["detail"]
    assert Pod.objects.count() == 0


def test_pod_detail_shows_devices_allocated_and_the_latest_decision(cluster, operator, viewer):
    body = gpu_pod("p", mem=1000, annotations={"hami.io/gpu-scheduler-policy": "binpack"})
    body["containers"].append({"name": "sidecar"})
    submit(operator, body)
    run_cycle(trigger="test")
    pod = viewer.get("/api/v1/pods/default/p/").json()
    assert pod["status"] == "scheduled"
    [main, sidecar] = pod["containers"]
    assert (main["name"], len(main["devices"]), sidecar["devices"]) == ("main", 1, [])
    device = main["devices"][0]
    assert pod["allocated"] == f"{device['uuid']},NVIDIA,1000,0:;;"
    decision = pod["decision"]
    assert decision["outcome"] == "scheduled" and decision["node"] == pod["node"]
    assert decision["policy"]["gpu"] == ["binpack"]
    assert [c["uuid"] for c in decision["containers"][0]["cards"] if c["chosen"]] == [device["uuid"]]
    assert set(decision["node_scores"]) == {"node1", "node2"}
    assert decision["failed_nodes"] == {} and decision["reasons"] == {} and decision["error"] is None


def test_pending_pod_detail_says_why(cluster, operator, viewer):
    submit(operator, gpu_pod("wide", gpu=4))
    run_cycle(trigger="test")
    pod = viewer.get("/api/v1/pods/default/wide/").json()
    assert pod["status"] == "pending" and pod["node"] is None and pod["allocated"] is None
    decision = pod["decision"]
    assert decision["failed_nodes"] == {
        "node1": "2/2 NodeInsufficientDevice",
        "node2": "3/3 NodeInsufficientDevice",
    }
    assert decision["reasons"] == {"NodeInsufficientDevice": 5}
    assert "0/2 nodes are available" in pod["reason"]


def test_list_filters_by_status(cluster, operator, viewer):
    submit(operator, gpu_pod("fits", mem=1000))
    submit(operator, gpu_pod("wide", gpu=4))
    run_cycle(trigger="test")
    pending = viewer.get("/api/v1/pods/?status=pending").json()["results"]
    scheduled = viewer.get("/api/v1/pods/?status=scheduled").json()["results"]
    assert [p["name"] for p in pending] == ["wide"] and [p["name"] for p in scheduled] == ["fits"]
    assert viewer.get("/api/v1/pods/?status=sleeping").status_code == 400


def test_delete_releases_the_allocations(cluster, operator):
    submit(operator, gpu_pod("p", mem=1000))
    run_cycle(trigger="test")
    card = Card.objects.get(uuid=Allocation.objects.get(active=True).card.uuid)
    assert card.used_memory == 1000
    answer = operator.delete("/api/v1/pods/default/p/")
    assert answer.status_code == 200 and answer.json()["status"] == "deleted"
    card.refresh_from_db()
    assert (card.used_slots, card.used_memory, card.used_cores) == (0, 0, 0)
    assert not Allocation.objects.filter(active=True).exists()
    assert operator.delete("/api/v1/pods/default/p/").status_code == 200  # idempotent


def test_complete_marks_succeeded_and_releases(cluster, operator):
    submit(operator, gpu_pod("p", mem=1000))
    run_cycle(trigger="test")
    answer = operator.post("/api/v1/pods/default/p/complete/")
    assert answer.status_code == 200
    assert answer.json()["status"] == "succeeded" and answer.json()["containers"][0]["devices"] == []
    assert not Allocation.objects.filter(active=True).exists()


def test_complete_of_a_pod_that_never_ran_is_409(cluster, operator):
    submit(operator, gpu_pod("wide", gpu=4))
    run_cycle(trigger="test")
    answer = operator.post("/api/v1/pods/default/wide/complete/")
    assert answer.status_code == 409 and "pending" in answer.json()["detail"]
    assert Pod.objects.get(name="wide").status == "pending"


@pytest.mark.parametrize(
    "method, path",
    [
        ("get", "/api/v1/pods/default/ghost/"),
        ("delete", "/api/v1/pods/default/ghost/"),
        ("post", "/api/v1/pods/default/ghost/complete/"),
        ("get", "/api/v1/pods/nowhere/ghost/"),
    ],
)
def test_unknown_pod_is_404(operator, method, path):
    answer = getattr(operator, method)(path)
    assert answer.status_code == 404 and answer.json()["detail"]


def test_submit_is_throttled_per_user(operator, monkeypatch):
    from rest_framework.throttling import ScopedRateThrottle

    monkeypatch.setitem(ScopedRateThrottle.THROTTLE_RATES, "pod-submit", "2/min")
    codes = [submit(operator, gpu_pod(f"p{i}")).status_code for i in range(3)]
    assert codes == [201, 201, 429]
    assert operator.get("/api/v1/pods/").status_code == 200  # reads are not throttled


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda b: b["annotations"].update(note="a\u0000b"), "annotations.note"),
        (lambda b: b["containers"][0].update(name="main\u0000"), "containers[0].name"),
        (lambda b: b["containers"][0].update(env={"K\u0000": "v"}), "containers[0].env.K\\u0000"),
    ],
)
def test_nul_characters_are_refused_naming_the_place(operator, change, field):
    """No name needs one, and PostgreSQL can store none (text and jsonb)."""
    body = gpu_pod("p")
    change(body)
    answer = submit(operator, body)
    assert answer.status_code == 400 and field in answer.json(), answer.content
    assert written() == (0, 0, 0)


def test_nul_in_a_path_is_404(operator):
    assert operator.get("/api/v1/pods/default/p%00/").status_code == 404
    assert operator.post("/api/v1/cards/G%00/cordon/").status_code == 404


def test_origin_is_api_shown_and_cannot_be_claimed_by_a_client(operator, viewer):
    """Only the kube agent and the extender mark pods as theirs: a client saying otherwise is
    refused naming `origin` (not a field a submission takes); its pods are `api` pods, which
    cycles place and the kube agent's cleanup never touches."""
    claimed = submit(operator, {**gpu_pod("p", mem=1000), "origin": "extender"})
    assert claimed.status_code == 400 and "unknown field" in claimed.json()["origin"][0]
    assert not Pod.objects.exists()
    answer = submit(operator, gpu_pod("p", mem=1000))
    assert answer.status_code == 201, answer.content
    assert answer.json()["origin"] == "api"
    assert Pod.objects.get(name="p").origin == Pod.API
    listed = viewer.get("/api/v1/pods/").json()["results"]
    assert [(pod["name"], pod["origin"], pod["bound_at"]) for pod in listed] == [("p", "api", None)]


def test_list_filters_by_origin(operator, viewer):
    from scheduling import services

    submit(operator, gpu_pod("by-client", mem=1000))
    services.submit_pod(
        "default",
        "watched",
        containers=gpu_pod("watched", mem=1000)["containers"],
        uid="u-1",
        origin=Pod.KUBERNETES,
    )

    def names(query):
        answer = viewer.get(f"/api/v1/pods/?{query}")
        assert answer.status_code == 200, answer.content
        return sorted(pod["name"] for pod in answer.json()["results"])

    assert names("origin=api") == ["by-client"]
    assert names("origin=kubernetes") == ["watched"]
    assert names("origin=extender") == []
    assert names("origin=api&origin=kubernetes") == ["by-client", "watched"]
    # a bad value: tests/api/test_cluster.py::test_bad_filter_values_are_400_naming_the_filter


def test_bound_at_is_shown_once_the_pod_is_bound(cluster, operator, viewer):
    from scheduling import services

    submit(operator, gpu_pod("p", mem=1000))
    run_cycle()
    assert viewer.get("/api/v1/pods/default/p/").json()["bound_at"] is None
    pod = Pod.objects.select_related("node").get(name="p")
    services.mark_bound(pod, pod.node.name)
    body = viewer.get("/api/v1/pods/default/p/").json()
    assert body["status"] == "running" and body["bound_at"] is not None
