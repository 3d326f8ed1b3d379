"""Evictions and nominations in the admin: listed, filtered by state and kind, searched by
pod name, linked to the pods' dashboard pages, and never changed here."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling.models import Eviction, Nomination
from tests.web.preemption_rows import build_scene

pytestmark = pytest.mark.django_db

EVICTIONS = reverse("admin:scheduling_eviction_changelist")
NOMINATIONS = reverse("admin:scheduling_nomination_changelist")


def listed(client, url: str, params=None) -> str:
    answer = client.get(url, params or {})
    assert answer.status_code == 200
    return answer.content.decode()


def test_eviction_list_filters_by_state_and_kind_and_searches_by_pod(admin_client):
    build_scene()
    everything = listed(admin_client, EVICTIONS)
    assert all(name in everything for name in ("ml/low-train", "ml/low-eval", "research/batch-1"))
    refused = listed(admin_client, EVICTIONS, {"state__exact": "refused"})
    assert "research/batch-1" in refused and "ml/low-train" not in refused
    reclaim = listed(admin_client, EVICTIONS, {"kind__exact": "reclaim"})
    assert "research/batch-1" in reclaim and "ml/low-eval" not in reclaim
    found = listed(admin_client, EVICTIONS, {"q": "low-train"})
    assert "ml/low-train" in found and "ml/low-eval" not in found and "research/batch-1" not in found
    by_preemptor = listed(admin_client, EVICTIONS, {"q": "serve"})
    assert "research/batch-1" in by_preemptor and "ml/low-train" not in by_preemptor
    assert f'href="{reverse("pod", args=["ml", "urgent"])}"' in everything


def test_eviction_and_nomination_pages_are_read_only(admin_client):
    scene = build_scene()
    eviction = scene.evictions["low"]
    url = reverse("admin:scheduling_eviction_change", args=[eviction.pk])
    page = admin_client.get(url).content.decode()
    assert "priority 1 &lt; 10 in queue ml" in page and 'name="_save"' not in page
    assert admin_client.post(url, {"state": "done"}).status_code == 403
    eviction.refresh_from_db()
    assert eviction.state == Eviction.REQUESTED
    assert admin_client.get(reverse("admin:scheduling_eviction_add")).status_code == 403
    assert (
        admin_client.get(reverse("admin:scheduling_eviction_delete", args=[eviction.pk])).status_code == 403
    )

    nomination = Nomination.objects.get()
    url = reverse("admin:scheduling_nomination_change", args=[nomination.pk])
    assert admin_client.get(url).status_code == 200
    assert admin_client.post(url, {"memory": 1}).status_code == 403
    assert admin_client.get(reverse("admin:scheduling_nomination_add")).status_code == 403


def test_nomination_list_searches_by_pod_and_tells_active_from_expired(admin_client):
    build_scene()
    nominated = listed(admin_client, NOMINATIONS, {"q": "urgent"})
    assert "ml/urgent" in nominated and "GPU-a-0" in nominated
    assert "ml/urgent" not in listed(admin_client, NOMINATIONS, {"q": "low-train"})
    assert "ml/urgent" in listed(admin_client, NOMINATIONS, {"active": "yes"})
    assert "ml/urgent" not in listed(admin_client, NOMINATIONS, {"active": "no"})
