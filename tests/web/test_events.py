"""The Events page and the Event admin: refusals and repairs, newest first, read-only."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling import services
from scheduling.models import Event, record_event

pytestmark = pytest.mark.django_db


@pytest.fixture
def events():
    services.report_inventory("gpu-1", {}, {}, [{"uuid": "GPU-a-0", "memory": 15360}])
    record_event(
        Event.OBJECT_REFUSED,
        "pod/ml/nul",
        "PodInvalid",
        "annotations.example.com/note: the value contains a NUL character",
        actor="kube-agent",
    )
    record_event(
        Event.OBJECT_REFUSED,
        "node/gpu-1",
        "InventoryInvalid",
        "malformed hami.io/node-nvidia-score.GPU-a-0.GPU-a-1: score must be a finite number",
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


def test_the_events_page_lists_refusals_newest_first_naming_the_field(viewer_client, events):
    page = viewer_client.get(reverse("events")).content.decode()
    assert 'data-testid="events-total">3<' in page
    subjects = [part.split('"', 1)[0] for part in page.split('data-subject="')[1:]]
    assert subjects == ["pod/ml/infer", "node/gpu-1", "pod/ml/nul"]
    assert "annotations.example.com/note" in page and "PodInvalid" in page
    assert f'href="{reverse("node", args=["gpu-1"])}"' in page, "a known node links to its page"
    assert 'href="/pods/ml/nul/"' not in page, "a refused pod has no row, so no page"


def test_the_events_page_filters_by_kind_and_subject(viewer_client, events):
    page = viewer_client.get(reverse("events"), {"kind": "bind_repaired"}).content.decode()
    assert 'data-subject="pod/ml/infer"' in page and 'data-subject="pod/ml/nul"' not in page
    page = viewer_client.get(reverse("events"), {"subject": "node/"}).content.decode()
    assert page.count('data-testid="event-row"') == 1
    empty = viewer_client.get(reverse("events"), {"subject": "nothing/"}).content.decode()
    assert 'data-testid="no-events"' in empty


def test_anonymous_is_sent_to_login(client):
    assert client.get(reverse("events")).status_code == 302


def test_the_event_admin_is_read_only(admin_client, events):
    changelist = admin_client.get(reverse("admin:scheduling_event_changelist"))
    assert changelist.status_code == 200 and b"pod/ml/nul" in changelist.content
    event = Event.objects.get(subject="pod/ml/nul")
    change = admin_client.get(reverse("admin:scheduling_event_change", args=[event.pk]))
    assert change.status_code == 200 and b'name="_save"' not in change.content
    assert admin_client.post(reverse("admin:scheduling_event_change", args=[event.pk]), {}).status_code == 403
    assert admin_client.get(reverse("admin:scheduling_event_add")).status_code == 403
