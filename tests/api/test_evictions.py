"""GET /api/v1/evictions/: who gave way to whom, on which cards, why, how far it got; and a
pod's detail showing its part in preemption (as victim, as preemptor, its nominated cards)."""

from __future__ import annotations

import pytest

from tests.web.preemption_rows import STUCK_WHY, build_scene

pytestmark = pytest.mark.django_db

URL = "/api/v1/evictions/"


@pytest.fixture
def scene():
    return build_scene()


def victims(answer) -> list[str]:
    assert answer.status_code == 200, answer.content
    return [row["victim"] for row in answer.json()["results"]]


def test_a_viewer_lists_every_eviction_newest_first_with_its_figures(viewer, scene):
    answer = viewer.get(URL)
    assert victims(answer) == ["ml/low-eval", "ml/low-train", "research/batch-1"]  # ties: newest row first
    row = next(r for r in answer.json()["results"] if r["victim"] == "ml/low-train")
    assert row == {
        "id": scene.evictions["low"].pk,
        "victim": "ml/low-train",
        "victim_id": scene.low.pk,
        "preemptor": "ml/urgent",
        "kind": "preempt",
        "node": "gpu-a",
        "cards": ["GPU-a-0"],
        "reason": "priority 1 < 10 in queue ml",
        "state": "requested",
        "message": "",
        "created_at": row["created_at"],
        "finished_at": None,
        "decision": scene.decision.pk,
    }
    detail = viewer.get(f"{URL}{scene.evictions['batch'].pk}/")
    assert detail.status_code == 200
    assert detail.json()["kind"] == "reclaim" and detail.json()["state"] == "refused"
    assert "disruption budget" in detail.json()["message"]


def test_filters_by_state_kind_victim_preemptor_and_node(viewer, scene):
    assert victims(viewer.get(URL, {"state": "refused"})) == ["research/batch-1"]
    assert sorted(victims(viewer.get(URL, {"state": ["requested", "done"]}))) == [
        "ml/low-eval",
        "ml/low-train",
    ]
    assert victims(viewer.get(URL, {"kind": "reclaim"})) == ["research/batch-1"]
    assert victims(viewer.get(URL, {"victim": "ml/low-train"})) == ["ml/low-train"]
    assert victims(viewer.get(URL, {"victim": str(scene.batch.pk)})) == ["research/batch-1"]
    assert sorted(victims(viewer.get(URL, {"preemptor": "ml/urgent"}))) == ["ml/low-eval", "ml/low-train"]
    assert victims(viewer.get(URL, {"preemptor": str(scene.serve.pk)})) == ["research/batch-1"]
    assert victims(viewer.get(URL, {"preemptor": "ml/nobody"})) == []
    assert victims(viewer.get(URL, {"victim": "9" * 30})) == []  # past any id: no row, not a 500
    assert len(victims(viewer.get(URL, {"node": "gpu-a"}))) == 3
    assert victims(viewer.get(URL, {"node": "gpu-b"})) == []


def test_ordering_by_created_at_either_way(viewer, scene):
    oldest_first = victims(viewer.get(URL, {"ordering": "created_at"}))
    assert oldest_first[0] == "research/batch-1"
    assert victims(viewer.get(URL, {"ordering": "-created_at"}))[-1] == "research/batch-1"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"state": "gone"}, "state"),
        ({"kind": "evict"}, "kind"),
        ({"victm": "ml/low-train"}, "victm"),
        ({"ordering": "reason"}, "ordering"),
        ({"limit": "many"}, "limit"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(viewer, scene, params, field):
    answer = viewer.get(URL, params)
    assert answer.status_code == 400, answer.content
    assert field in answer.json()


def test_anonymous_is_401_and_writes_are_refused(client_for, viewer, admin, scene):
    assert client_for(None).get(URL).status_code == 401
    row = f"{URL}{scene.evictions['low'].pk}/"
    assert viewer.post(URL, {"victim": "ml/stuck"}, format="json").status_code == 403
    assert viewer.delete(row).status_code == 403
    assert admin.post(URL, {"victim": "ml/stuck"}, format="json").status_code == 405
    assert admin.patch(row, {"state": "done"}, format="json").status_code == 405
    assert admin.delete(row).status_code == 405
    assert viewer.get(row).json()["state"] == "requested"
    assert viewer.get(f"{URL}nonsense/").status_code == 404


def test_the_api_root_names_the_evictions(viewer):
    assert viewer.get("/api/v1/").json()["eviction"].endswith(URL)


def test_the_preemptors_detail_has_its_victims_and_nominated_cards(viewer, scene):
    pod = viewer.get("/api/v1/pods/ml/urgent/").json()
    assert sorted(row["victim"] for row in pod["preemptions"]) == ["ml/low-eval", "ml/low-train"]
    assert {row["state"] for row in pod["preemptions"]} == {"requested", "done"}
    assert pod["evictions"] == []
    assert [(n["card"], n["node"], n["memory"], n["cores"]) for n in pod["nominations"]] == [
        ("GPU-a-0", "gpu-a", 8000, 50)
    ]
    preemption = pod["decision"]["preemption"]
    assert preemption["node"] == "gpu-a"
    assert [v["pod"] for v in preemption["victims"]] == ["ml/low-train", "ml/low-eval"]
    assert preemption["alternatives"][0] == {
        "node": "gpu-b",
        "victims": 3,
        "memory": 24000,
        "why": "more victims or more work",
    }


def test_the_victims_detail_names_its_preemptor(viewer, scene):
    pod = viewer.get("/api/v1/pods/ml/low-train/").json()
    assert [(e["preemptor"], e["state"], e["kind"]) for e in pod["evictions"]] == [
        ("ml/urgent", "requested", "preempt")
    ]
    assert pod["preemptions"] == [] and pod["nominations"] == []


def test_a_deleted_preemptor_leaves_the_eviction_with_none(viewer, scene):
    scene.serve.delete()
    row = viewer.get(f"{URL}{scene.evictions['batch'].pk}/").json()
    assert row["preemptor"] is None and row["victim"] == "research/batch-1"


def test_a_decision_that_tried_says_why_preemption_did_not_help(viewer, scene):
    decision = viewer.get("/api/v1/pods/ml/stuck/").json()["decision"]
    assert decision["preemption"] == {"tried": True, "why": STUCK_WHY}
    assert decision["reason"].endswith(f"{STUCK_WHY}.")
    assert viewer.get("/api/v1/pods/prod/serve/").json()["decision"] is None
