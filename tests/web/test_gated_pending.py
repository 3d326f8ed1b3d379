"""The pending page names a gated pod's reason, `SchedulingGated`, although no decision exists."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from scheduling import services

from .conftest import limits

pytestmark = pytest.mark.django_db


def test_a_gated_pod_is_counted_under_scheduling_gated(viewer_client):
    containers = [{"name": "main", "resources": limits(gpu=1, mem=1000)}]
    gates = {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}
    services.submit_pod("default", "held", {}, containers, scheduling=gates)
    html = viewer_client.get(reverse("pending")).content.decode()
    assert re.findall(r'data-testid="facet" data-code="([^"]+)"', html) == ["SchedulingGated"]
    gated = viewer_client.get(reverse("pending") + "?dominant=SchedulingGated").content.decode()
    assert reverse("pod", args=["default", "held"]) in gated
