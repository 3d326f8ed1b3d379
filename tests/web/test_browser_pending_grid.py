"""The pending pod's card grid in a real headless Chromium (the fixtures of test_browser)."""

from __future__ import annotations

import pytest

from .conftest import report_demo_cluster, t4_mutex_waits
from .test_browser import browser, page, shot, sign_in  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_waiting_pod_shows_a_card_grid_per_close_node_coloured_by_reason(page, viewer_user):  # noqa: F811
    report_demo_cluster()
    t4_mutex_waits()
    sign_in(page, next_path="/pods/default/mutex-waits/")
    grid = page.locator("[data-testid=closest-nodes]")
    assert grid.is_visible()
    first = page.locator("[data-testid=close-node]").first
    assert first.get_attribute("data-rank") == "1"
    cells = first.locator("[data-testid=close-card]")
    assert cells.count() >= 1
    assert cells.first.get_attribute("data-stage") == "mutex"
    colour = cells.first.evaluate("cell => getComputedStyle(cell).borderLeftColor")
    assert colour == "rgb(230, 81, 0)"  # capacity: tenants hold it
    lines = page.locator("[data-testid=would-fit-line]").all_inner_texts()
    assert any("mutex: every card has tenants" in line for line in lines)
    assert any("tenants: default/t4-tenant-" in line for line in lines)
    shot(page, "pending-card-grid")
