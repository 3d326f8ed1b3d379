"""Live refresh by parts in Chromium: after a change the Cluster page gets a small JSON of the
rows that moved, never the page again, and shows the change in place."""

from __future__ import annotations

import pytest

from .conftest import cycle, submit
from .test_browser import WAIT_MS, browser, page, shot, sign_in  # noqa: F401 (fixtures)
from .test_scale_pages import report_nodes

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_cluster_page_takes_only_the_changed_rows(page, viewer_user):  # noqa: F811
    report_nodes()
    sign_in(page, next_path="/")
    page_size = len(page.content())
    answers = []  # (content type, size) of every answer from now on: polls, parts, any page
    page.on("response", lambda r: answers.append((r.headers.get("content-type", ""), len(r.body()))))
    page.evaluate("window.__sameDocument = true")
    cell = 'a[data-node="n007"] i[title^="n007 #1:"]'
    other = 'a[data-node="n009"] i[title^="n009 #0:"]'

    submit("first", mem=8000, annotations={"nvidia.com/use-gpuuuid": "GPU-009-0"})
    cycle("first")
    page.wait_for_selector(
        f'{other}[title*="slots 1/10"]', timeout=WAIT_MS
    )  # the tab's first answer: all blocks
    submit("big", mem=16000, annotations={"nvidia.com/use-gpuuuid": "GPU-007-1"})
    cycle("second")
    page.wait_for_selector(f'{cell}[title*="slots 1/10"]', timeout=WAIT_MS)

    assert page.evaluate("window.__sameDocument") is True, "the page reloaded instead of updating in place"
    pages = [size for kind, size in answers if kind.startswith("text/html")]
    parts = [size for kind, size in answers if kind.startswith("application/json") and size > 100]
    assert pages == [], "a live update downloaded the whole page"
    assert len(parts) >= 2 and parts[-1] < page_size / 4, (parts, page_size)
    shot(page, "cluster-live-parts")
