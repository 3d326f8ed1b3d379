"""The browsable API shows small pages by default; JSON clients keep the default of 100."""

from __future__ import annotations

import re

import pytest

from scheduling import services

pytestmark = pytest.mark.django_db


def test_a_browser_gets_twenty_nodes_a_page_and_a_script_a_hundred(viewer):
    for n in range(30):
        services.report_inventory(
            f"n{n:02d}", devices=[{"uuid": f"GPU-{n:02d}", "index": 0, "memory": 16000}]
        )
    as_json = viewer.get("/api/v1/nodes/", HTTP_ACCEPT="application/json").json()
    assert as_json["count"] == 30 and len(as_json["results"]) == 30
    page = viewer.get("/api/v1/nodes/", HTTP_ACCEPT="text/html")
    html = page.content.decode()
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    assert len(set(re.findall(r"&quot;name&quot;: &quot;(n\d\d)&quot;", html))) == 20
    assert "limit=20&amp;offset=20" in html  # the next page's link
    asked = viewer.get("/api/v1/nodes/?limit=25", HTTP_ACCEPT="text/html").content.decode()
    assert len(set(re.findall(r"&quot;name&quot;: &quot;(n\d\d)&quot;", asked))) == 25
