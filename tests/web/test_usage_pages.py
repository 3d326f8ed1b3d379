"""The node page shows what a card really uses beside what was granted, and flags a card
using more memory than its tenants hold; the Cluster and node pages carry the history charts."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling import services
from scheduling.models import Card

pytestmark = pytest.mark.django_db


def report(*observed):
    services.report_inventory(
        "gpu-1",
        {},
        {},
        [
            {"uuid": f"GPU-{index}", "index": index, "memory": 15000, **({"observed": seen} if seen else {})}
            for index, seen in enumerate(observed)
        ],
    )


def test_the_node_page_shows_measured_beside_granted_and_flags_overuse(viewer_client):
    report(
        {"memory": 9000, "utilization": 88, "temperature": 70, "power": 65.4, "xid": 31},
        {"memory": 100},
        None,
    )
    Card.objects.filter(uuid="GPU-0").update(used_memory=2000)

    page = viewer_client.get(reverse("node", args=["gpu-1"])).content.decode()

    assert page.count('data-testid="card-overuse"') == 1
    assert "6488 MiB over grant" in page  # 9000 in use - 2000 granted - the 512 MiB driver margin
    assert "88% busy · 70 °C · 65 W" in page and "XID 31" in page
    assert page.count("not measured") == 2  # the third card: neither memory nor sensors


def test_cluster_and_node_pages_carry_the_history_charts_outside_the_live_blocks(viewer_client):
    report(None)
    for url in (reverse("home"), reverse("node", args=["gpu-1"])):
        page = viewer_client.get(url).content.decode()
        assert 'data-testid="history"' in page and "vendor/uplot/uPlot.iife.min.js" in page
        assert page.index('data-testid="history"') > page.index("</main>")
    assert 'data-node="gpu-1"' in viewer_client.get(reverse("node", args=["gpu-1"])).content.decode()
