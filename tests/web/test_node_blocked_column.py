"""The Cluster page's node table counts, per node, the pending pods that came closest on it
(what that node holds up), reads those counts once per page whatever the number of pods, and
sorts by them in the database."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scheduling import services
from scheduling.models import Pod
from scheduling.models.samples import pending_by_closest_node

from .conftest import cycle, submit

pytestmark = pytest.mark.django_db


def one_card_node(name: str) -> None:
    services.report_inventory(
        name, devices=[{"uuid": f"GPU-{name}", "index": 0, "type": "A100", "memory": 16000}]
    )


def blocked_cells(html: str) -> dict[str, str]:
    """node -> the text of its "pending here" cell."""
    rows = re.findall(r'<tr[^>]*data-testid="node-row"[^>]*data-node="([^"]+)"[^>]*>(.*?)</tr>', html, re.S)
    return {
        node: re.sub(
            r"<[^>]+>", "", re.search(r'data-testid="node-blocked"[^>]*>(.*?)</td>', row, re.S)[1]
        ).strip()
        for node, row in rows
    }


def table_nodes(html: str) -> list[str]:
    return re.findall(r'data-testid="node-row" data-node="([^"]+)"', html)


@pytest.fixture
def held_up():
    """alpha keeps 4000 MiB free and beta 1000 MiB, gamma is empty but out of the way (cordoned):
    two 14000 MiB pods come closest on alpha, one pinned to beta's card on beta, and a 40000 MiB
    pod fits no card anywhere (unschedulable: no node holds it up)."""
    for name in ("alpha", "beta", "gamma"):
        one_card_node(name)
    services.cordon_card("GPU-gamma", True)
    submit("fills-alpha", mem=12000, annotations={"nvidia.com/use-gpuuuid": "GPU-alpha"})
    submit("fills-beta", mem=15000, annotations={"nvidia.com/use-gpuuuid": "GPU-beta"})
    assert len(cycle("tenants").placed) == 2
    submit("wide-1", mem=14000)
    submit("wide-2", mem=14000)
    submit("pinned-to-beta", mem=5000, annotations={"nvidia.com/use-gpuuuid": "GPU-beta"})
    submit("never-fits", mem=40000)
    cycle("waiters")
    assert Pod.objects.filter(status=Pod.PENDING).count() == 4


def test_each_node_counts_the_pending_pods_that_came_closest_on_it(viewer_client, held_up):
    assert pending_by_closest_node() == {"alpha": 2, "beta": 1}
    cells = blocked_cells(viewer_client.get(reverse("home")).content.decode())
    assert cells == {"alpha": "2", "beta": "1", "gamma": "0"}


def test_the_column_sorts_by_the_pods_held_up_then_by_name(viewer_client, held_up):
    most_first = viewer_client.get(reverse("home"), {"sort": "-blocked"}).content.decode()
    assert table_nodes(most_first) == ["alpha", "beta", "gamma"]
    fewest_first = viewer_client.get(reverse("home"), {"sort": "blocked"}).content.decode()
    assert table_nodes(fewest_first) == ["gamma", "beta", "alpha"]


def test_a_pod_placed_since_no_longer_counts(viewer_client, held_up):
    services.release_pod(Pod.objects.get(name="fills-beta"))
    services.wake_pending_pods()  # what the release's commit does
    cycle("freed")
    placed = Pod.objects.get(name="wide-1")  # first in the queue: beta is empty now
    assert (placed.status, placed.node.name) == (Pod.SCHEDULED, "beta")
    assert pending_by_closest_node() == {"alpha": 1, "beta": 1}


def test_the_counts_cost_the_same_queries_for_many_pending_pods(viewer_client, held_up):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert viewer_client.get(reverse("home")).status_code == 200
        return len(captured.captured_queries)

    before = queries()
    for i in range(30):
        submit(f"wide-more-{i}", mem=14000)
    cycle("more waiters")
    assert pending_by_closest_node()["alpha"] == 32
    assert queries() == before
