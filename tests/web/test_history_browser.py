"""The history charts in Chromium: drawn from the samples API with the vendored uPlot, a unit
on every axis, and still there after a live update redraws the blocks around them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Node, UsageSample

from .conftest import report_demo_cluster, submit
from .test_browser import WAIT_MS, browser, page, shot, sign_in  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def samples(node: str) -> None:
    now = timezone.now()
    UsageSample.objects.bulk_create(
        UsageSample(
            at=now - timedelta(minutes=minute),
            slots_share=minute / 100,
            memory_share=0.3,
            cores_share=0.2,
            pending=minute % 7,
            placements=minute % 3,
            cycles=1,
            cycle_p50_ms=12.5,
            cycle_max_ms=40.0,
            nodes={node: 50},
        )
        for minute in range(60)
    )


def test_cluster_and_node_pages_draw_their_charts_with_units(page, viewer_user):  # noqa: F811
    report_demo_cluster()
    name = Node.objects.order_by("name").first().name
    samples(name)
    sign_in(page)
    charts = page.locator("[data-testid=history] .uplot")
    charts.nth(2).wait_for(timeout=WAIT_MS)
    assert charts.count() == 3
    text = page.inner_text("[data-testid=history]")
    for title in (
        "Allocated share of the cluster (%)",
        "Pending pods and placements (pods)",
        "Cycle time (ms)",
    ):
        assert title in text, title

    shot(page, "history-cluster")
    submit("moves-the-live-token")  # a live update redraws the blocks of <main>, not the charts
    page.wait_for_function(
        "document.querySelector('[data-testid=pending-count]').textContent !== '0'", timeout=WAIT_MS
    )
    assert page.locator("[data-testid=history] .uplot").count() == 3

    page.goto(f"/nodes/{name}/")
    page.locator("[data-testid=history] .uplot").first.wait_for(timeout=WAIT_MS)
    assert page.locator("[data-testid=history] .uplot").count() == 1
    assert "Allocated on" in page.inner_text("[data-testid=history]")
