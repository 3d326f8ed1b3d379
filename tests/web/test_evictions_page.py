"""The Evictions page: every eviction with why and how far it got, filtered as the API is."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from .preemption_rows import build_scene

pytestmark = pytest.mark.django_db


def rows(html: str) -> list[tuple[str, str]]:
    return re.findall(r'data-testid="eviction-row" data-victim="([^"]+)" data-state="([^"]+)"', html)


def test_every_eviction_is_listed_newest_first_with_why_and_where(viewer_client):
    scene = build_scene()
    html = viewer_client.get(reverse("evictions")).content.decode()
    assert rows(html) == [
        (scene.low.key, "requested"),
        (scene.done.key, "done"),
        (scene.batch.key, "refused"),
    ] or rows(html) == [
        (scene.done.key, "done"),
        (scene.low.key, "requested"),
        (scene.batch.key, "refused"),
    ]  # the first two were asked at the same moment
    assert "queue research holds 16000 MiB over its fair share 8000 MiB" in html
    assert "disruption budget" in html
    assert 'data-testid="evictions-shown">3 shown of 3<' in html
    assert f'href="{reverse("pod", args=[scene.urgent.namespace, scene.urgent.name])}"' in html


def test_filters_narrow_the_list_and_the_count_says_so(viewer_client):
    scene = build_scene()
    html = viewer_client.get(reverse("evictions"), {"state": ["requested", "refused"]}).content.decode()
    assert sorted(rows(html)) == sorted([(scene.low.key, "requested"), (scene.batch.key, "refused")])
    assert "2 shown of 2 matching (3 in all)" in html
    html = viewer_client.get(reverse("evictions"), {"kind": "reclaim"}).content.decode()
    assert rows(html) == [(scene.batch.key, "refused")]
    html = viewer_client.get(reverse("evictions"), {"preemptor": scene.urgent.key}).content.decode()
    assert {victim for victim, _ in rows(html)} == {scene.low.key, scene.done.key}


def test_a_bad_filter_is_named_and_nothing_is_hidden(viewer_client):
    build_scene()
    html = viewer_client.get(reverse("evictions"), {"state": "gone"}).content.decode()
    assert re.search(r'data-testid="filter-error">state: [^<]*gone', html)
    assert len(rows(html)) == 3
