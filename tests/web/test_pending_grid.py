"""The pod page of a pending pod: the closest nodes' card grids and what would make it fit,
naming the tenants of the cards to free (read from the live allocations)."""

from __future__ import annotations

import json
import re

from django.urls import reverse

from scheduling.models import Allocation, Decision, Pod

from .conftest import report_demo_cluster, t4_mutex_waits


def test_the_pod_page_of_a_waiting_pod_shows_the_closest_cards_and_their_tenants(viewer_client):
    report_demo_cluster()
    t4_mutex_waits()
    html = viewer_client.get(reverse("pod", args=["default", "mutex-waits"])).content.decode()
    nodes = re.findall(r'data-testid="close-node" data-node="([^"]+)" data-rank="(\d+)"', html)
    assert nodes and nodes[0][1] == "1"
    cells = re.findall(r'data-testid="close-card" data-uuid="[^"]+" data-stage="([^"]*)"', html)
    assert "mutex" in cells
    assert "mutex: every card has tenants" in html
    assert re.search(
        r"fits if \S+ had no tenants \(mutex\) \(tenants: default/t4-tenant-\d 2,000 MiB\)", html
    )


def test_the_simulator_against_the_live_cluster_places_pasted_pods_and_writes_nothing(viewer_client):
    report_demo_cluster()
    t4_mutex_waits()
    counts = (Pod.objects.count(), Decision.objects.count(), Allocation.objects.count())
    pods = {
        "pods": [
            {
                "name": "try-me",
                "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            },
            {
                "name": "too-big",
                "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpumem": 999999}}}],
            },
        ]
    }
    answer = viewer_client.post(reverse("simulator"), {"scenario": json.dumps(pods), "live": "1"})
    assert answer.status_code == 200
    html = answer.content.decode()
    assert 'data-testid="simulator-live-result"' in html
    assert re.search(r'data-pod="default/try-me".*?data-testid="decision-status">scheduled<', html, re.S)
    assert 'data-testid="unschedulable"' in html
    assert (Pod.objects.count(), Decision.objects.count(), Allocation.objects.count()) == counts


def test_the_simulator_live_mode_names_a_bad_edit(viewer_client):
    report_demo_cluster()
    body = {"pods": [{"name": "x", "containers": [{"name": "m"}]}], "edits": {"cordon": ["nope"]}}
    answer = viewer_client.post(reverse("simulator"), {"scenario": json.dumps(body), "live": "1"})
    assert answer.status_code == 400
    assert "edits.cordon[0]: no card" in answer.content.decode()


def test_the_pending_list_shows_each_pod_its_closest_cards_and_what_would_make_it_fit(viewer_client):
    report_demo_cluster()
    t4_mutex_waits()
    html = viewer_client.get(reverse("pending")).content.decode()
    row = html[html.index('data-pod="default/mutex-waits"') :]
    row = row[: row.index("</tr>")]
    closest = re.search(r'data-testid="row-closest" data-node="([^"]+)"', row)
    assert closest and closest.group(1) == "t4-node"
    reasons = re.findall(r'data-testid="row-close-card" data-uuid="[^"]+" data-reason="([^"]*)"', row)
    assert reasons and set(reasons) == {"ExclusiveDeviceAllocateConflict"}
    assert 'data-testid="row-would-fit"' in row and "mutex: every card has tenants" in row
