"""`POST /api/v1/pods/bulk/`: many pods in one request, one result per pod; a bad pod is
refused naming its field and never keeps the others out."""

from __future__ import annotations

import pytest
from rest_framework.throttling import ScopedRateThrottle

from scheduling.models import Pod
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod

pytestmark = pytest.mark.django_db

URL = "/api/v1/pods/bulk/"


def bulk(client, pods):
    return client.post(URL, {"pods": pods}, format="json")


def test_a_batch_answers_one_result_per_pod_in_order(operator):
    answer = bulk(
        operator,
        [
            gpu_pod("a", "team-a", mem=1000),
            gpu_pod("b", "team-a", labels={"kai.scheduler/queue": "research"}, priority=3),
            gpu_pod("c", annotations={"hami.io/gpu-scheduler-policy": "mutex,fastest"}),
        ],
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["created"], body["updated"], body["unchanged"], body["refused"]) == (3, 0, 0, 0)
    assert [(r["index"], r["outcome"], r["error"]) for r in body["pods"]] == [
        (0, "created", None),
        (1, "created", None),
        (2, "created", None),
    ]
    b = Pod.objects.get(namespace="team-a", name="b")
    assert body["pods"][1]["pod"] == {"namespace": "team-a", "name": "b", "id": b.pk}
    assert (b.priority, b.labels, b.status) == (3, {"kai.scheduler/queue": "research"}, Pod.PENDING)
    assert "'fastest'" in body["pods"][2]["warnings"]["annotations.hami.io/gpu-scheduler-policy"][0]


def test_bad_pods_are_refused_naming_the_field_and_the_others_go_in(operator):
    answer = bulk(
        operator,
        [
            gpu_pod("ok-1"),
            gpu_pod("Not_A_Name"),
            gpu_pod("ok-1", mem=2000),
            {**gpu_pod("stray"), "colour": "blue"},
            "a string",
            gpu_pod("lots", gpu=0),
            gpu_pod("typed", annotations={"team": ["a"]}),
            {"name": "empty", "containers": []},
            gpu_pod("ok-2", init_containers=[]),
            gpu_pod("ok-3"),
        ],
    )
    assert answer.status_code == 200, answer.content
    results = answer.json()["pods"]
    assert [(r["outcome"], r["error"] and r["error"]["field"]) for r in results] == [
        ("created", None),
        ("refused", "name"),
        ("refused", "name"),
        ("refused", "colour"),
        ("refused", "pod"),
        ("refused", "containers[0].resources.limits.nvidia.com/gpu"),
        ("refused", "annotations.team"),
        ("refused", "containers"),
        ("refused", "init_containers"),
        ("created", None),
    ]
    assert "item 0 of this batch" in results[2]["error"]["message"]
    assert all(r["pod"] is None for r in results if r["outcome"] == "refused")
    assert set(Pod.objects.values_list("name", flat=True)) == {"ok-1", "ok-3"}
    assert Pod.objects.get(name="ok-1").containers == gpu_pod("ok-1")["containers"]


def test_resubmission_unchanged_updated_and_a_placed_pod_keeps_its_containers(operator, cluster):
    assert bulk(operator, [gpu_pod("placed", mem=1000), gpu_pod("waiting", gpu=8)]).status_code == 200
    run_cycle(trigger="test")
    answer = bulk(
        operator,
        [
            gpu_pod("placed", mem=3000),
            gpu_pod("waiting", gpu=1),
            gpu_pod("placed-again", mem=1000),
        ],
    )
    results = answer.json()["pods"]
    assert [r["outcome"] for r in results] == ["refused", "updated", "created"]
    assert results[0]["error"]["field"] == "containers" and "placed on node" in results[0]["error"]["message"]
    same = bulk(operator, [gpu_pod("waiting", gpu=1)]).json()
    assert same["unchanged"] == 1 and same["pods"][0]["pod"]["name"] == "waiting"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "pods"),
        ({"pods": []}, "pods"),
        ({"pods": {"name": "p"}}, "pods"),
        ({"pods": [gpu_pod("p")], "dry_run": True}, "dry_run"),
        ([gpu_pod("p")], "pods"),
    ],
)
def test_a_body_that_is_not_a_list_of_pods_is_a_400_naming_it(operator, body, field):
    answer = operator.post(URL, body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()
    assert not Pod.objects.exists()


def test_more_than_a_thousand_pods_is_a_400_naming_pods(operator):
    answer = bulk(operator, [gpu_pod(f"p-{n}") for n in range(1001)])
    assert answer.status_code == 400
    assert "at most 1000" in answer.json()["pods"][0]
    assert not Pod.objects.exists()


def test_a_thousand_pods_go_in_one_request(operator):
    answer = bulk(operator, [gpu_pod(f"p-{n}") for n in range(1000)])
    assert answer.status_code == 200 and answer.json()["created"] == 1000
    assert Pod.objects.filter(status=Pod.PENDING).count() == 1000


def test_an_operator_may_submit_a_viewer_may_not(client_for):
    assert bulk(client_for("viewer"), [gpu_pod("p")]).status_code == 403
    assert bulk(client_for("agent:node1"), [gpu_pod("p")]).status_code == 403
    assert bulk(client_for(None), [gpu_pod("p")]).status_code == 401
    assert not Pod.objects.exists()
    assert bulk(client_for("admin"), [gpu_pod("p")]).status_code == 200


def test_a_batch_counts_once_against_the_pod_submit_rate(operator, monkeypatch):
    monkeypatch.setitem(ScopedRateThrottle.THROTTLE_RATES, "pod-submit", "2/min")
    assert bulk(operator, [gpu_pod(f"a-{n}") for n in range(5)]).status_code == 200
    assert operator.post("/api/v1/pods/", gpu_pod("single"), format="json").status_code == 201
    refused = bulk(operator, [gpu_pod("late")])
    assert refused.status_code == 429 and refused.has_header("Retry-After")
    assert not Pod.objects.filter(name="late").exists()


def test_a_nul_character_refuses_its_item_only(operator):
    """docs/api.md: only the bad item is refused; a NUL used to make the whole request a 400."""
    pods = [gpu_pod("ok-1"), gpu_pod("bad", annotations={"note": "a\u0000b"}), gpu_pod("ok-2")]
    body = bulk(operator, pods).json()
    assert [(r["outcome"], r["error"]) for r in body["pods"]] == [
        ("created", None),
        ("refused", {"field": "annotations.note", "message": "must not contain NUL (\\u0000) characters"}),
        ("created", None),
    ]
    assert set(Pod.objects.values_list("name", flat=True)) == {"ok-1", "ok-2"}


def test_a_nul_character_outside_the_items_is_a_400_naming_it(operator):
    answer = operator.post(URL, {"pods": [gpu_pod("ok")], "k\u0000": 1}, format="json")
    assert answer.status_code == 400 and list(answer.json()) == ["k\\u0000"]
