"""The pending pod's card grid in a real headless Chromium (the fixtures of test_browser)."""

from __future__ import annotations

import re

import pytest

from .conftest import cycle, report_demo_cluster, submit, t4_mutex_waits
from .test_browser import browser, page, shot, sign_in  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_waiting_pod_shows_a_card_grid_per_close_node_coloured_by_reason(page, viewer_user):  # noqa: F811
    report_demo_cluster()
    t4_mutex_waits()
    sign_in(page, next_path="/pods/default/mutex-waits/")
    page.locator("[data-testid=decision-details] > summary").click()  # folded under the first screen
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


def test_a_never_fitting_pod_is_flagged_first_on_the_pending_page(page, viewer_user):  # noqa: F811
    """A T4 pod asking more than any T4 holds reads "never fits here" and the deciding fact as
    its row's first visible line, and the verdict facet narrows the page to such pods."""
    report_demo_cluster()
    t4_mutex_waits()
    submit("t4-huge", mem=60000, annotations={"nvidia.com/use-gputype": "T4"})
    cycle("huge")
    sign_in(page, next_path="/pending/")
    page.locator("[data-testid=verdict-facet][data-verdict=never]").click()
    page.wait_for_url(re.compile(r"verdict=never"))
    rows = page.locator("[data-testid=pending-row]")
    assert rows.count() == 1 and rows.first.get_attribute("data-pod") == "default/t4-huge"
    first = rows.first.locator("[data-testid=decisive]")
    assert first.is_visible()
    assert first.inner_text().startswith("never fits here 60,000 MiB > the largest NVIDIA-Tesla T4")
    shot(page, "pending-never")
