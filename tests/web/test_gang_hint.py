"""A gang left short because some members ended (the demo's `allreduce` after two members
succeeded and two were put back to wait) says why it cannot start and what would start it,
on its pod page's first screen."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling import services
from scheduling.models import Pod

from .conftest import cycle, report_demo_cluster, submit

pytestmark = pytest.mark.django_db


def test_a_gang_whose_members_ended_says_it_waits_for_resubmitted_members(viewer_client):
    report_demo_cluster()
    gang = {"hami.io/group-name": "allreduce", "hami.io/group-min-member": "4"}
    for i in range(4):
        submit(f"allreduce-r{i}", annotations=gang)
    assert len(cycle("gang").placed) == 4
    ranks = Pod.objects.filter(name__startswith="allreduce-").select_related("node")
    by_node = {pod.node.name: [] for pod in ranks}
    for pod in ranks:
        by_node[pod.node.name].append(pod)
    (drained, back), (_, ended) = sorted(by_node.items(), key=lambda item: item[0] == "v100-node")
    for pod in ended:
        services.release_pod(pod, Pod.SUCCEEDED)
    assert sorted(services.drain_node(drained, "olga", requeue_own=True).requeued) == sorted(
        p.key for p in back
    )
    cycle("short")
    waiting = back[0]

    html = viewer_client.get(reverse("pod", args=[waiting.namespace, waiting.name])).content.decode()
    first = html[html.index('data-testid="first-screen"') :]
    first = first[: first.index("</section>")]
    assert 'data-code="NotEnoughPods"' in first
    assert (
        "gang default/allreduce: 2/4 members known; 2 ended already and count no more: "
        "it starts only once 2 more members are submitted"
    ) in first
    assert "submit the missing members (same hami.io/group-name)" in first
    assert "or delete the members left if the job is over" in first
