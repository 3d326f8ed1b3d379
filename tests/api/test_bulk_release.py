"""`POST /api/v1/pods/bulk/release/`: many pods end in one request, one result per pod; an
unknown or refused pod is named with its field and never keeps the others from ending."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation, Card, Pod
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod

pytestmark = pytest.mark.django_db

URL = "/api/v1/pods/bulk/release/"


def release(client, pods, status="succeeded"):
    return client.post(URL, {"pods": pods, "status": status}, format="json")


@pytest.fixture
def placed(cluster, operator):
    """Three placed pods (one bound), one that waits (fits nowhere), one that finished."""
    pods = [gpu_pod(f"p-{n}", mem=1000) for n in range(3)]
    pods += [gpu_pod("done", mem=1000), gpu_pod("waiting", gpu=8)]
    answer = operator.post("/api/v1/pods/bulk/", {"pods": pods}, format="json")
    assert answer.json()["created"] == 5, answer.content
    run_cycle(trigger="test")
    assert operator.post("/api/v1/pods/default/done/complete/").status_code == 200
    Pod.objects.filter(name="p-2").update(status=Pod.RUNNING)
    assert Pod.objects.filter(status__in=Pod.BOUND).count() == 3


def test_placed_pods_complete_together_and_give_their_cards_back(placed, operator):
    answer = release(operator, [{"name": "p-0"}, {"namespace": "default", "name": "p-1"}, {"name": "p-2"}])
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["released"], body["unchanged"], body["refused"]) == (3, 0, 0)
    p1 = Pod.objects.get(name="p-1")
    assert body["pods"][1] == {
        "index": 1,
        "outcome": "released",
        "pod": {"namespace": "default", "name": "p-1", "id": p1.pk},
        "status": "succeeded",
        "error": None,
    }
    assert p1.reason.startswith("succeeded after running on node")
    assert not Allocation.objects.filter(active=True).exists()
    assert set(Card.objects.values_list("used_slots", "used_memory")) == {(0, 0)}


def test_deleted_takes_any_pod_and_leaves_a_finished_one_unchanged(placed, operator):
    answer = release(operator, [{"name": "waiting"}, {"name": "done"}, {"name": "p-0"}], status="deleted")
    results = answer.json()["pods"]
    assert [(r["outcome"], r["status"]) for r in results] == [
        ("released", "deleted"),
        ("unchanged", "succeeded"),
        ("released", "deleted"),
    ]
    assert Pod.objects.get(name="waiting").reason == "deleted after no placement"


def test_refusals_name_the_field_and_the_others_end(placed, operator):
    uid = Pod.objects.get(name="p-1").uid
    answer = release(
        operator,
        [
            {"name": "p-0"},
            {"name": "ghost"},
            {"name": "p-0"},
            {"name": "waiting"},
            {"name": "done"},
            {"name": "p-1", "uid": "another"},
            {"name": "p-2", "colour": "blue"},
            "default/p-2",
            {"name": 7},
            {"namespace": "default"},
            {"name": "x" * 300},
            {"name": "p-1", "uid": uid},
        ],
        status="failed",
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert [(r["outcome"], r["error"] and r["error"]["field"]) for r in body["pods"]] == [
        ("released", None),
        ("refused", "name"),
        ("refused", "name"),
        ("refused", "status"),
        ("refused", "status"),
        ("refused", "uid"),
        ("refused", "colour"),
        ("refused", "pod"),
        ("refused", "name"),
        ("refused", "name"),
        ("refused", "name"),
        ("refused", "name"),  # p-1 is item 5 already, whatever became of it
    ]
    assert (body["released"], body["unchanged"], body["refused"]) == (1, 0, 11)
    results = body["pods"]
    assert "no pod default/ghost" in results[1]["error"]["message"]
    assert "item 0 of this batch" in results[2]["error"]["message"]
    assert "pending" in results[3]["error"]["message"] and results[3]["status"] == "pending"
    assert results[1]["pod"] is None and results[1]["status"] is None
    statuses = dict(Pod.objects.values_list("name", "status"))
    assert (statuses["p-0"], statuses["p-1"], statuses["p-2"]) == ("failed", "scheduled", "running")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"pods": [{"name": "p-0"}]}, "status"),
        ({"pods": [{"name": "p-0"}], "status": "Succeeded"}, "status"),
        ({"pods": [{"name": "p-0"}], "status": "running"}, "status"),
        ({"pods": [{"name": "p-0"}], "status": ["succeeded"]}, "status"),
        ({"pods": [], "status": "succeeded"}, "pods"),
        ({"pods": {"name": "p-0"}, "status": "succeeded"}, "pods"),
        ({"status": "succeeded"}, "pods"),
        ({"pods": [{"name": "p-0"}], "status": "succeeded", "dry_run": True}, "dry_run"),
        ([{"name": "p-0"}], "pods"),
    ],
)
def test_a_body_that_is_not_pods_and_a_status_is_a_400_naming_it(placed, operator, body, field):
    answer = operator.post(URL, body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()
    assert Pod.objects.get(name="p-0").status == Pod.SCHEDULED


def test_more_than_a_thousand_pods_is_a_400_naming_pods(operator):
    answer = release(operator, [{"name": f"p-{n}"} for n in range(1001)])
    assert answer.status_code == 400
    assert "at most 1000" in answer.json()["pods"][0]


@pytest.mark.parametrize(("who", "code"), [(None, 401), ("viewer", 403), ("agent:node1", 403)])
def test_the_operator_role_is_needed(placed, client_for, who, code):
    answer = release(client_for(who), [{"name": "p-0"}])
    assert answer.status_code == code, answer.content
    assert Pod.objects.get(name="p-0").status == Pod.SCHEDULED


def test_a_nul_character_refuses_its_item_only(placed, operator):
    answer = release(operator, [{"name": "p-0"}, {"name": "p-\u00001"}])
    assert answer.status_code == 200, answer.content
    assert [(r["outcome"], r["error"]) for r in answer.json()["pods"]] == [
        ("released", None),
        ("refused", {"field": "name", "message": "must not contain NUL (\\u0000) characters"}),
    ]
