"""The Queues page draws the tree with a bar per resource against its figures; the Job page shows
each member, where it landed or why not, and the gang verdict; the pod page says a batch rule
held the pod and links its job and queue."""

from __future__ import annotations

import re

import pytest

from scheduling import services
from scheduling.models import Decision, PodGroup, Queue
from tests.services.test_batch_services import place

pytestmark = pytest.mark.django_db


@pytest.fixture
def job():
    services.create_queue("org", limit_gpumem=100000)
    services.create_queue("team", parent="org", guarantee_gpumem=8000, quota_gpumem=20000)
    team = Queue.objects.get(name="team")
    group = services.create_pod_group("default", "train", min_member=2, queue="team")
    place("worker-0", team, (4000, 30), (4000, 30), group=group)
    waiting = place("worker-1", team, group=group)
    verdict = {
        "reason": "GangUnschedulable",
        "message": "1/2 members placeable; worker-1: no card",
        "would_fit_on": None,
    }
    Decision.objects.create(
        pod=waiting, outcome=Decision.PENDING, reason="GangUnschedulable", payload={"batch": verdict}
    )
    group.set_phase(PodGroup.INQUEUE, "GangUnschedulable", "1/2 members placeable; worker-1: no card")
    group.save()
    return group


def test_the_queues_page_draws_the_tree_with_usage_against_the_figures(viewer_client, job):
    page = viewer_client.get("/queues/")
    assert page.status_code == 200
    html = page.content.decode()
    assert html.index('data-queue="org"') < html.index('data-queue="team"')
    team = html[html.index('data-queue="team"') :]
    assert 'data-resource="gpumem" data-used="8000"' in team
    assert 'data-mark="guarantee"' in team and 'data-mark="quota"' in team
    assert re.search(r"1 / 1", team)  # one pending pod, one running
    assert "default/train" in html and "1/2 members placeable" in html
    assert 'href="/queues/"' in viewer_client.get("/pods/").content.decode()  # the nav link


def test_the_job_page_shows_members_and_the_gang_verdict(viewer_client, job):
    page = viewer_client.get("/jobs/default/train/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "1/2 members placeable" in html and 'data-testid="job-phase">inqueue' in html
    assert "1 of 2 (min 2)" in html and 'href="/nodes/n1/"' in html
    assert 'data-testid="member-batch">GangUnschedulable' in html
    assert viewer_client.get("/jobs/default/nope/").status_code == 404


def test_the_pod_page_shows_the_batch_verdict_and_links_job_and_queue(viewer_client, job):
    html = viewer_client.get("/pods/default/worker-1/").content.decode()
    assert 'data-testid="pod-batch"' in html and "GangUnschedulable" in html
    assert 'href="/jobs/default/train/"' in html and 'href="/queues/?queue=team"' in html


def test_the_pages_need_a_role(client, job):
    assert client.get("/queues/").status_code == 302
    assert client.get("/jobs/default/train/").status_code == 302


def test_the_pending_page_facets_pods_a_batch_rule_held_by_that_rule(viewer_client, job):
    page = viewer_client.get("/pending/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "GangUnschedulable" in body
    narrowed = viewer_client.get("/pending/?dominant=GangUnschedulable").content.decode()
    assert "worker-1" in narrowed
