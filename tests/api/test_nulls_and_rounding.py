"""What the API writes out: an absent value is null (never "" nor a missing key), durations
are milliseconds to 0.01 and scores to 1e-6, and the schema says nullable where null is."""

from __future__ import annotations

import pytest

from scheduling.models import Cycle, Decision
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod
from .test_schema import schema_document

pytestmark = pytest.mark.django_db


def results(answer) -> list[dict]:
    assert answer.status_code == 200, answer.content
    return answer.json()["results"]


def places(value: float) -> int:
    """Decimal places of a float as JSON writes it."""
    text = repr(value)
    return len(text.split(".")[1]) if "." in text and "e" not in text else 0


@pytest.fixture
def scheduled(cluster, operator, settings):
    settings.REDIS_URL = ""
    assert operator.post("/api/v1/pods/", gpu_pod("fits", mem=1000), format="json").status_code == 201
    assert operator.post("/api/v1/pods/", gpu_pod("waits", mem=99999), format="json").status_code == 201
    run_cycle("test")


def test_absent_text_is_null_in_the_lists(scheduled, viewer):
    node = results(viewer.get("/api/v1/nodes/"))[0]
    assert node["ready"] is True and node["not_ready_reason"] is None
    card = node["cards"][0]
    assert card["mode"] is None and card["over_capacity"] is None
    assert results(viewer.get("/api/v1/cards/"))[0]["over_capacity"] is None

    pods = {pod["name"]: pod for pod in results(viewer.get("/api/v1/pods/"))}
    assert set(pods) == {"fits", "waits"}
    for pod in pods.values():
        assert (pod["uid"], pod["error"], pod["error_field"], pod["allocated"] is None) == (
            None,
            None,
            None,
            pod["name"] == "waits",
        )
    assert pods["fits"]["node"] == "node1" or pods["fits"]["node"] == "node2"
    assert pods["waits"]["node"] is None

    pending = results(viewer.get("/api/v1/pending/"))
    assert [(row["name"], row["error"], row["error_field"]) for row in pending] == [("waits", None, None)]

    decisions = {row["pod"]: row for row in results(viewer.get("/api/v1/decisions/"))}
    assert decisions["default/waits"]["node"] is None and decisions["default/waits"]["error"] is None
    assert decisions["default/fits"]["node"] in ("node1", "node2")
    assert "" not in [value for row in decisions.values() for value in row.values()]


def test_text_that_is_there_is_written_as_is(scheduled, admin):
    assert admin.get("/api/v1/config/").json()["changed_by"] is None
    assert (
        admin.patch("/api/v1/config/", {"node_scheduler_policy": "spread"}, format="json").status_code == 200
    )
    assert admin.get("/api/v1/config/").json()["changed_by"] == "admin-user"


def test_durations_are_rounded_to_a_hundredth_of_a_millisecond(scheduled, viewer):
    Cycle.objects.update(snapshot_ms=1.23456789, decide_ms=0.004999, commit_ms=2.0, duration_ms=12.345)
    Decision.objects.update(duration_ms=0.123456789)
    cycle = results(viewer.get("/api/v1/cycles/"))[0]
    assert (cycle["snapshot_ms"], cycle["decide_ms"], cycle["commit_ms"]) == (1.23, 0.0, 2.0)
    assert cycle["duration_ms"] in (12.35, 12.34)  # binary 12.345 is a hair either side
    assert {row["duration_ms"] for row in results(viewer.get("/api/v1/decisions/"))} == {0.12}
    detail = viewer.get("/api/v1/pods/default/fits/").json()
    assert detail["decision"]["duration_ms"] == 0.12


def test_real_cycles_come_out_rounded(scheduled, viewer):
    """The measured times carry many digits in the database; none leaves the API with more than two."""
    assert any(places(value) > 2 for value in Cycle.objects.values_list("duration_ms", flat=True))
    for row in results(viewer.get("/api/v1/cycles/")):
        assert all(places(row[key]) <= 2 for key in ("snapshot_ms", "decide_ms", "commit_ms", "duration_ms"))
    for row in results(viewer.get("/api/v1/decisions/")):
        assert places(row["duration_ms"]) <= 2


def test_scores_are_rounded_to_a_millionth(scheduled, viewer):
    decision = Decision.objects.get(pod__name="fits")
    decision.payload["node_scores"] = {"node1": 0.12345678912, "node2": 2 / 3}
    decision.save(update_fields=["payload"])
    row = next(row for row in results(viewer.get("/api/v1/decisions/")) if row["pod"] == "default/fits")
    assert row["node_scores"] == {"node1": 0.123457, "node2": 0.666667}


def test_the_schema_says_nullable_where_null_is_written():
    components = schema_document()["components"]["schemas"]
    nullable = {
        ("Node", "not_ready_reason"),
        ("Card", "mode"),
        ("Card", "over_capacity"),
        ("Pod", "uid"),
        ("Pod", "error"),
        ("Pod", "error_field"),
        ("PendingPod", "error"),
        ("Decision", "node"),
        ("Decision", "error"),
        ("Event", "actor"),
        ("Config", "changed_by"),
    }
    for schema, field in nullable:
        assert components[schema]["properties"][field].get("nullable") is True, (schema, field)
    assert components["Node"]["properties"]["name"].get("nullable") is not True
