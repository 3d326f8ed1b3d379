"""The pages that hold at 1,000 nodes: the heatmap, the paged node table, pending facets and
pages, the all-pods page. Data made by the services and real cycles, on a cluster just big
enough to need a second page."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from scheduling import services
from scheduling.models import Card, Pod
from scheduling.web import tables
from scheduling.web.queries import TILE_CARDS

from .conftest import cycle, submit

pytestmark = pytest.mark.django_db

NODES = 60  # x 2 cards: more cards than the tiles show, more nodes than one table page


def report_nodes(count: int = NODES) -> None:
    for n in range(count):
        services.report_inventory(
            f"n{n:03d}",
            devices=[
                {"uuid": f"GPU-{n:03d}-{i}", "index": i, "type": "A100" if n % 2 else "T4", "memory": 16000}
                for i in range(2)
            ],
        )


def cells(html: str) -> list[tuple[str, str, str]]:
    """(node, classes, title) of each heatmap cell, in order."""
    found = []
    for node, inner in re.findall(
        r'<a class="hm-node[^"]*" href="/nodes/([^/]+)/" data-node="[^"]+">(.*?)</a>', html
    ):
        found += [
            (node, cls, title) for cls, title in re.findall(r'<i class="([^"]+)" title="([^"]+)"></i>', inner)
        ]
    return found


def table_nodes(html: str) -> list[str]:
    return re.findall(r'data-testid="node-row" data-node="([^"]+)"', html)


def test_the_heatmap_has_one_cell_per_card_coloured_by_what_it_holds(viewer_client):
    report_nodes()
    submit("big", mem=16000, annotations={"nvidia.com/use-gpuuuid": "GPU-007-1"})
    assert len(cycle().placed) == 1
    services.cordon_card("GPU-010-0", True)
    html = viewer_client.get(reverse("home")).content.decode()
    shown = cells(html)
    assert len(shown) == Card.objects.count() == 2 * NODES
    by_title = {title.split(":")[0]: (node, cls, title) for node, cls, title in shown}
    node, cls, title = by_title["n007 #1"]
    assert node == "n007" and cls == "heat-4" and "slots 1/10" in title and "mem 100%" in title
    assert by_title["n007 #0"][1] == "heat-0"
    assert "cordoned" in by_title["n010 #0"][1].split() and "cordoned" in by_title["n010 #0"][2]
    assert '<select name="node"' not in html  # no select with an option per node


def test_the_node_table_pages_sorts_and_searches_in_the_database(viewer_client):
    report_nodes()
    submit("big", mem=12000, annotations={"nvidia.com/use-gpuuuid": "GPU-042-0"})
    submit("small", mem=1000, annotations={"nvidia.com/use-gpuuuid": "GPU-013-1"})
    cycle()
    first = table_nodes(viewer_client.get(reverse("home")).content.decode())
    assert first == [f"n{n:03d}" for n in range(tables.NODES_PER_PAGE)]
    second = table_nodes(viewer_client.get(reverse("home"), {"page": 2}).content.decode())
    assert second == [f"n{n:03d}" for n in range(tables.NODES_PER_PAGE, NODES)]
    past_the_end = table_nodes(viewer_client.get(reverse("home"), {"page": 99}).content.decode())
    assert past_the_end == second
    busiest = table_nodes(viewer_client.get(reverse("home"), {"sort": "-used_memory"}).content.decode())
    assert busiest[:2] == ["n042", "n013"]
    html = viewer_client.get(reverse("home"), {"q": "n04"}).content.decode()
    assert table_nodes(html) == [f"n04{i}" for i in range(10)]
    assert {node for node, _, _ in cells(html)} == {f"n04{i}" for i in range(10)}
    row = html[html.index('data-node="n042"', html.index("node-table")) :]
    assert (
        "11.7/31.2 GiB" in row[: row.index("</tr>")]
        and 'title="12000/32000 MiB"' in row[: row.index("</tr>")]
    )
    a100 = table_nodes(viewer_client.get(reverse("home"), {"type": "A100", "q": "n00"}).content.decode())
    assert a100 == ["n001", "n003", "n005", "n007", "n009"]


def test_card_tiles_show_only_when_the_filters_leave_a_few_cards(viewer_client):
    report_nodes()
    html = viewer_client.get(reverse("home")).content.decode()
    assert 2 * NODES > TILE_CARDS
    assert 'data-testid="card-tile"' not in html and 'data-testid="tiles-hint"' in html
    narrowed = viewer_client.get(reverse("home"), {"q": "n01"}).content.decode()
    assert len(re.findall(r'data-testid="card-tile"', narrowed)) == 20


def waiting_pods() -> None:
    """55 pods too big for any card, 5 asking for a type nobody has; one tried several times."""
    report_nodes(4)
    for i in range(55):
        submit(f"huge-{i:02d}", mem=60000)
    for i in range(5):
        submit(f"h100-{i}", mem=1000, annotations={"nvidia.com/use-gputype": "H100"})
    cycle()
    for _ in range(2):
        services.requeue_pod(Pod.objects.get(name="huge-00"))
        cycle()


def test_pending_pods_are_paged_and_counted_by_dominant_reason(viewer_client):
    waiting_pods()
    html = viewer_client.get(reverse("pending")).content.decode()
    facets = dict(
        re.findall(r'data-testid="facet" data-code="([^"]+)"><code>[^<]+</code> <b>(\d+)</b>', html)
    )
    assert facets == {"CardInsufficientMemory": "55", "CardTypeMismatch": "5"}
    rows = re.findall(r'data-testid="pending-row" data-pod="default/([^"]+)"', html)
    assert len(rows) == tables.PODS_PER_PAGE and rows[0] == "huge-00"
    second = viewer_client.get(reverse("pending"), {"page": 2}).content.decode()
    assert len(re.findall(r'data-testid="pending-row"', second)) == 60 - tables.PODS_PER_PAGE
    typed = viewer_client.get(reverse("pending"), {"dominant": "CardTypeMismatch"}).content.decode()
    assert re.findall(r'data-testid="pending-row" data-pod="default/([^"]+)"', typed) == [
        f"h100-{i}" for i in range(5)
    ]
    found = viewer_client.get(reverse("pending"), {"name": "uge-1"}).content.decode()
    assert re.findall(r'data-testid="pending-row" data-pod="default/([^"]+)"', found) == [
        f"huge-1{i}" for i in range(10)
    ]


def test_repeated_attempts_of_a_pod_are_one_row_with_a_count(viewer_client):
    waiting_pods()
    attempts = Pod.objects.get(name="huge-00").attempts
    assert attempts == 3
    html = viewer_client.get(reverse("pending")).content.decode()
    assert len(re.findall(r'data-pod="default/huge-00"', html)) == 1
    row = html[html.index('data-pod="default/huge-00"') :]
    assert f"×{attempts}" in row[: row.index("</tr>")]


def test_the_pods_page_filters_by_status_namespace_node_and_name(viewer_client):
    report_nodes(2)
    submit("placed-a", mem=1000, annotations={"nvidia.com/use-gpuuuid": "GPU-001-0"})
    submit("waits-b", mem=60000)
    submit("other-c", mem=1000, namespace="ml", annotations={"nvidia.com/use-gpuuuid": "GPU-000-0"})
    cycle()

    def listed(**params) -> list[str]:
        html = viewer_client.get(reverse("pods"), params).content.decode()
        return sorted(re.findall(r'data-testid="pod-row" data-pod="([^"]+)"', html))

    assert listed() == ["default/placed-a", "default/waits-b", "ml/other-c"]
    assert listed(status="pending") == ["default/waits-b"]
    assert listed(status=["scheduled", "pending"], namespace="default") == [
        "default/placed-a",
        "default/waits-b",
    ]
    assert listed(node="n001") == ["default/placed-a"]
    assert listed(q="her") == ["ml/other-c"]
    bad = viewer_client.get(reverse("pods"), {"status": "sleeping"}).content.decode()
    assert "status:" in bad and "sleeping" in bad
