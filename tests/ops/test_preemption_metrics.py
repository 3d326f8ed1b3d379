"""/metrics counts evictions by kind and state, and the nominations still holding cards,
as the database says at scrape time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Eviction, Nomination
from tests.web.preemption_rows import build_scene

from .conftest import scrape, series, value

pytestmark = pytest.mark.django_db


def test_evictions_are_counted_by_kind_and_state_with_zeros(client):
    empty = series(scrape(client), "hamiadmin_evictions")
    assert len(empty) == len(Eviction.KINDS) * len(Eviction.STATES) and set(empty.values()) == {0.0}
    assert value(scrape(client), "hamiadmin_nominations") == 0

    scene = build_scene()
    samples = scrape(client)
    assert value(samples, "hamiadmin_evictions", kind="preempt", state="requested") == 1
    assert value(samples, "hamiadmin_evictions", kind="preempt", state="done") == 1
    assert value(samples, "hamiadmin_evictions", kind="reclaim", state="refused") == 1
    assert sum(series(samples, "hamiadmin_evictions").values()) == 3
    assert value(samples, "hamiadmin_nominations") == 1

    Eviction.objects.filter(pk=scene.evictions["low"].pk).update(state=Eviction.DONE)
    Nomination.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    samples = scrape(client)
    assert value(samples, "hamiadmin_evictions", kind="preempt", state="requested") == 0
    assert value(samples, "hamiadmin_evictions", kind="preempt", state="done") == 2
    assert value(samples, "hamiadmin_nominations") == 0  # expired: no longer holds its card
