"""The Pod page's Preemption panel: the preemptor lists its victims (linked), the cards and
why, the alternatives it compared and the cards it holds while it waits; a victim names its
preemptor; a pod whose preemption did not help says why. Names are escaped."""

from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from scheduling.models import Eviction

from .preemption_rows import STUCK_WHY, build_scene

pytestmark = pytest.mark.django_db


def page(client, namespace: str, name: str) -> str:
    answer = client.get(reverse("pod", args=[namespace, name]))
    assert answer.status_code == 200
    return answer.content.decode()


def block(text: str, testid: str) -> str:
    """The element marked `data-testid=testid`, up to its closing tag (enough for these checks)."""
    found = re.search(rf'<(\w+)[^>]*data-testid="{testid}"[^>]*>(.*?)</\1>', text, re.S)
    assert found, f"no {testid} on the page"
    return found.group(2)


def test_the_preemptors_page_lists_its_victims_with_links_cards_and_why(viewer_client):
    scene = build_scene()
    text = page(viewer_client, "ml", "urgent")
    victims = block(text, "victims")
    assert f'href="{reverse("pod", args=["ml", "low-train"])}"' in victims
    assert f'href="{reverse("pod", args=["ml", "low-eval"])}"' in victims
    assert "GPU-a-0" in victims and "priority 1 &lt; 10 in queue ml" in victims
    assert ">requested<" in victims and ">done<" in victims  # each eviction's state
    assert "evicting 2 pods on gpu-a" in block(text, "preemption-plan")
    alternatives = block(text, "alternatives")
    assert "gpu-b" in alternatives and "more victims or more work" in alternatives
    nominated = block(text, "nominated")
    assert "1 vGPU (8000 MiB)" in nominated and re.search(r"waiting 3\ds", nominated)  # nominated 30 s ago
    assert "GPU-a-0" in block(text, "nominations")
    assert 'data-testid="preempted-by"' not in text
    assert scene.decision.reason in text  # the attempts table keeps the one-line reason


def test_the_victims_page_names_its_preemptor_and_the_evictions_state(viewer_client):
    build_scene()
    line = block(page(viewer_client, "ml", "low-train"), "preempted-by")
    assert "Preempted by" in line
    assert f'<a href="{reverse("pod", args=["ml", "urgent"])}">ml/urgent</a>' in line
    assert ">requested<" in line and "priority 1 &lt; 10 in queue ml" in line

    refused = block(page(viewer_client, "research", "batch-1"), "preempted-by")
    assert "prod/serve" in refused and ">refused<" in refused and "disruption budget" in refused


def test_an_earlier_attempts_victims_stay_listed_once_the_pod_moved_on(viewer_client):
    scene = build_scene()
    text = page(viewer_client, "prod", "serve")  # no decision of its own shows the reclaim
    caused = block(text, "caused")
    assert f'href="{reverse("pod", args=["research", "batch-1"])}"' in caused and "reclaim" in caused
    assert 'data-testid="victims"' not in text
    scene.serve.delete()
    assert "a pod since deleted" in block(page(viewer_client, "research", "batch-1"), "preempted-by")


def test_a_pod_that_tried_and_could_not_preempt_says_why(viewer_client):
    build_scene()
    text = page(viewer_client, "ml", "stuck")
    assert html.unescape(block(text, "preemption-why")).strip() == STUCK_WHY
    assert 'data-testid="victims"' not in text


def test_the_pending_page_says_why_preemption_did_not_help_or_what_it_evicts(viewer_client):
    build_scene()
    text = viewer_client.get(reverse("pending")).content.decode()
    rows = re.findall(r'<tr data-testid="pending-row" data-pod="([^"]+)">(.*?)</tr>', text, re.S)
    lines = {pod: html.unescape(block(row, "row-preemption")) for pod, row in rows if "row-preemption" in row}
    assert lines["ml/stuck"] == STUCK_WHY
    assert lines["ml/urgent"].startswith("evicting 2 pods on gpu-a")
    assert "prod/serve" not in lines  # no decision: nothing to say


def test_a_pod_without_preemption_has_no_panel(viewer_client):
    build_scene()
    text = page(viewer_client, "ml", "low-eval")  # a victim: its panel names the preemptor
    assert 'data-testid="preemption"' in text
    Eviction.objects.all().delete()
    assert 'data-testid="preemption"' not in page(viewer_client, "ml", "low-eval")


def test_markup_in_pod_names_and_reasons_is_escaped(viewer_client):
    evil = "<img src=x onerror=alert(1)>"  # no slash: a Kubernetes name never has one
    scene = build_scene(urgent_name=f"urgent{evil}", low_name=f"low{evil}")
    scene.evictions["low"].reason = f"why {evil}"
    scene.evictions["low"].save()
    for name in (scene.urgent.name, scene.low.name):
        text = page(viewer_client, "ml", name)
        assert evil not in text
        assert "&lt;img src=x onerror=alert(1)&gt;" in text
    victim = block(page(viewer_client, "ml", scene.low.name), "preempted-by")
    assert "why &lt;img src=x" in victim


def test_the_panel_needs_a_signed_in_viewer(client):
    build_scene()
    answer = client.get(reverse("pod", args=["ml", "urgent"]))
    assert answer.status_code == 302 and "/accounts/login/" in answer["Location"]
