"""GET /api/v1/events/: refusals and repairs, newest first, filtered by kind, subject and time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Event, record_event

pytestmark = pytest.mark.django_db


def results(answer) -> list[dict]:
    assert answer.status_code == 200, answer.content
    return answer.json()["results"]


@pytest.fixture
def events():
    record_event(
        Event.OBJECT_REFUSED,
        "node/gpu-1",
        "InventoryInvalid",
        "malformed hami.io/node-nvidia-score",
        actor="kube-agent",
    )
    record_event(
        Event.OBJECT_REFUSED,
        "pod/ml/train",
        "PodInvalid",
        "annotations.note: the value contains a NUL",
        actor="kube-agent",
    )
    record_event(
        Event.BIND_REPAIRED,
        "pod/ml/infer",
        "BindCompleted",
        "wrote bind-phase success",
        actor="kube-agent",
        severity=Event.NORMAL,
    )
    Event.objects.filter(subject="node/gpu-1").update(last_seen=timezone.now() - timedelta(hours=2))


def test_a_viewer_reads_events_newest_first_counted(viewer, events):
    record_event(Event.OBJECT_REFUSED, "pod/ml/train", "PodInvalid", "seen again at the next resync")
    listed = results(viewer.get("/api/v1/events/"))
    assert [e["subject"] for e in listed] == ["pod/ml/train", "pod/ml/infer", "node/gpu-1"]
    train = listed[0]
    assert (train["kind"], train["reason"], train["count"], train["severity"]) == (
        "object_refused",
        "PodInvalid",
        2,
        "Warning",
    )
    assert train["message"] == "seen again at the next resync"
    assert set(train) == {
        "id",
        "kind",
        "severity",
        "subject",
        "reason",
        "message",
        "actor",
        "count",
        "first_seen",
        "last_seen",
    }


def test_filters_kind_subject_prefix_and_since(viewer, events):
    assert [e["subject"] for e in results(viewer.get("/api/v1/events/?kind=bind_repaired"))] == [
        "pod/ml/infer"
    ]
    assert {e["subject"] for e in results(viewer.get("/api/v1/events/?subject=pod/ml/"))} == {
        "pod/ml/train",
        "pod/ml/infer",
    }
    since = (timezone.now() - timedelta(hours=1)).isoformat()
    recent = results(viewer.get("/api/v1/events/", {"since": since}))
    assert "node/gpu-1" not in {e["subject"] for e in recent} and len(recent) == 2
    both = results(viewer.get("/api/v1/events/?kind=bind_repaired&kind=object_refused&subject=node/"))
    assert [e["subject"] for e in both] == ["node/gpu-1"]


def test_bad_filters_are_400_naming_the_filter(viewer, events):
    assert "kind" in viewer.get("/api/v1/events/?kind=nonsense").json()
    assert "since" in viewer.get("/api/v1/events/?since=yesterday").json()
    assert viewer.get("/api/v1/events/?subject=pod/\x00").status_code == 400


def test_pages_like_the_other_lists(viewer, events):
    page = viewer.get("/api/v1/events/?limit=2").json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]


def test_anonymous_and_agents_are_refused(client_for, events):
    assert client_for(None).get("/api/v1/events/").status_code == 401
    assert client_for("agent:node1").get("/api/v1/events/").status_code == 403
    assert client_for("viewer").post("/api/v1/events/", {}).status_code in (403, 405)
