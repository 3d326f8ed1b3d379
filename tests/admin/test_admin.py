"""The Django admin: rich read-only pages, and actions that go through scheduling.services."""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.api.tokens import issue_role_token
from scheduling.models import Allocation, Card, Cycle, Decision, Event, Node, Pod, SchedulerConfig
from scheduling.pipeline import triggers
from scheduling.pipeline.wake import wake_movable
from tests.web.conftest import cycle, report_demo_cluster, report_walkthrough, submit

pytestmark = pytest.mark.django_db

MODELS = ("node", "card", "pod", "decision", "cycle", "allocation", "schedulerconfig")


def changelist(model: str) -> str:
    return reverse(f"admin:scheduling_{model}_changelist")


def run_action(client, model: str, action: str, pks) -> None:
    answer = client.post(changelist(model), {"action": action, "_selected_action": [str(pk) for pk in pks]})
    assert answer.status_code == 302, answer.content[:500]


@pytest.fixture
def woken():
    """An in-process scheduler loop's wake-up event, as `manage.py schedule` attaches it."""
    event = threading.Event()
    triggers.attach_local_loop(event)
    yield event
    triggers.detach_local_loop(event)


@pytest.mark.parametrize("model", MODELS)
def test_every_changelist_and_change_page_renders(admin_client, model):
    report_walkthrough()
    assert admin_client.get(changelist(model)).status_code == 200
    rows = {
        "node": Node,
        "card": Card,
        "pod": Pod,
        "decision": Decision,
        "cycle": Cycle,
        "allocation": Allocation,
        "schedulerconfig": None,
    }[model]
    if rows is not None:
        obj = rows.objects.order_by("pk").first()
        assert admin_client.get(reverse(f"admin:scheduling_{model}_change", args=[obj.pk])).status_code == 200


def test_admin_forms_are_read_only(admin_client):
    report_walkthrough()
    card = Card.objects.get(uuid="GPU-2")
    url = reverse("admin:scheduling_card_change", args=[card.pk])
    page = admin_client.get(url).content.decode()
    assert 'name="_save"' not in page
    answer = admin_client.post(url, {"uuid": "GPU-2", "used_slots": 0, "cordoned": "on"})
    assert answer.status_code == 403
    card.refresh_from_db()
    assert card.cordoned is False
    assert admin_client.get(reverse("admin:scheduling_pod_add")).status_code == 403
    assert admin_client.get(reverse("admin:scheduling_node_delete", args=[card.node_id])).status_code == 403


def test_card_list_filters_by_type_health_node_and_cordon(admin_client):
    report_demo_cluster()
    page = admin_client.get(changelist("card"), {"type": "NVIDIA-Tesla T4"}).content.decode()
    assert "GPU-t4-0" in page and "GPU-v100-0" not in page
    page = admin_client.get(changelist("card"), {"node__id__exact": Node.objects.get(name="v100-node").pk})
    assert "GPU-v100-1" in page.content.decode() and "GPU-t4-1" not in page.content.decode()
    Card.objects.filter(uuid="GPU-a100-0").update(health=False)
    page = admin_client.get(changelist("card"), {"health__exact": "0"}).content.decode()
    assert "GPU-a100-0" in page and "GPU-a100-1" not in page


def backed_off_pod() -> Pod:
    """A T4 pod that waits (all four T4 cards cordoned) and is backing off before its next try."""
    for uuid in ("GPU-t4-0", "GPU-t4-1", "GPU-t4-2", "GPU-t4-3"):
        Card.objects.filter(uuid=uuid).update(cordoned=True)
    submit("waits-for-t4", mem=1000, annotations={"nvidia.com/use-gputype": "T4"})
    cycle()
    pod = Pod.objects.get(name="waits-for-t4")
    assert pod.status == Pod.PENDING and pod.next_attempt_at is not None
    return pod


def uncordon_through_api(uuid: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_role_token('op', 'operator')}")
    assert client.post(f"/api/v1/cards/{uuid}/uncordon/").status_code == 200


def uncordon_through_admin(admin_client, uuid: str) -> None:
    run_action(admin_client, "card", "uncordon", [Card.objects.get(uuid=uuid).pk])


@pytest.mark.parametrize("path", ["api", "admin"])
def test_uncordon_wakes_the_scheduler_the_same_from_admin_and_api(
    admin_client, woken, django_capture_on_commit_callbacks, path
):
    report_demo_cluster()
    pod = backed_off_pod()
    woken.clear()
    with django_capture_on_commit_callbacks(execute=True):
        if path == "api":
            uncordon_through_api("GPU-t4-2")
        else:
            uncordon_through_admin(admin_client, "GPU-t4-2")
    pod.refresh_from_db()
    assert Card.objects.get(uuid="GPU-t4-2").cordoned is False
    assert woken.is_set(), "the scheduler loop was not woken"
    assert wake_movable() == 1, "the backed-off pod was not made due"
    cycle()
    pod.refresh_from_db()
    assert pod.status == Pod.SCHEDULED and pod.allocated.startswith("GPU-t4-2,")


def test_cordon_action_keeps_tenants_and_stops_new_vgpus(admin_client):
    report_demo_cluster()
    submit("tenant", mem=1000, annotations={"nvidia.com/use-gpuuuid": "GPU-v100-0"})
    cycle()
    run_action(
        admin_client,
        "card",
        "cordon",
        Card.objects.filter(node__name="v100-node").values_list("pk", flat=True),
    )
    assert set(Card.objects.filter(node__name="v100-node").values_list("cordoned", flat=True)) == {True}
    assert Pod.objects.get(name="tenant").status == Pod.SCHEDULED
    submit("v100-again", mem=1000, annotations={"nvidia.com/use-gputype": "V100"})
    cycle()
    pod = Pod.objects.get(name="v100-again")
    assert pod.status == Pod.PENDING and "CardCordoned" in pod.reason


def test_release_and_mark_succeeded_give_the_cards_back(admin_client):
    report_demo_cluster()
    submit("one", mem=3000, cores=20, annotations={"nvidia.com/use-gpuuuid": "GPU-t4-0"})
    submit("two", mem=2000, cores=10, annotations={"nvidia.com/use-gpuuuid": "GPU-t4-0"})
    cycle()
    card = Card.objects.get(uuid="GPU-t4-0")
    assert (card.used_slots, card.used_memory, card.used_cores) == (2, 5000, 30)
    one = Pod.objects.get(name="one").pk
    asked = admin_client.post(changelist("pod"), {"action": "release", "_selected_action": [str(one)]})
    assert asked.status_code == 200 and "Release these pods?" in asked.content.decode()
    assert "default/one" in asked.content.decode() and "GPU-t4-0" in asked.content.decode()
    assert Pod.objects.get(name="one").status == Pod.SCHEDULED  # nothing released before the confirm
    answer = admin_client.post(
        changelist("pod"), {"action": "release", "_selected_action": [str(one)], "confirm": "yes"}
    )
    assert answer.status_code == 302
    card.refresh_from_db()
    assert (card.used_slots, card.used_memory, card.used_cores) == (1, 2000, 10)
    assert Pod.objects.get(name="one").status == Pod.DELETED
    run_action(admin_client, "pod", "mark_succeeded", [Pod.objects.get(name="two").pk])
    card.refresh_from_db()
    assert (card.used_slots, card.used_memory, card.used_cores) == (0, 0, 0)
    assert Pod.objects.get(name="two").status == Pod.SUCCEEDED
    assert not Allocation.objects.filter(card=card, active=True).exists()


def test_requeue_makes_a_backed_off_pod_due_now(admin_client):
    report_demo_cluster()
    submit("far-future", gpu=16, mem=1000)
    cycle()
    Pod.objects.filter(name="far-future").update(next_attempt_at=timezone.now() + timedelta(hours=1))
    run_action(admin_client, "pod", "requeue", [Pod.objects.get(name="far-future").pk])
    pod = Pod.objects.get(name="far-future")
    assert pod.status == Pod.PENDING and pod.next_attempt_at is None
    before = Decision.objects.filter(pod=pod).count()
    cycle()
    assert Decision.objects.filter(pod=pod).count() == before + 1


def test_pod_search_by_namespace_and_name(admin_client):
    report_demo_cluster()
    submit("findme", mem=1000, namespace="team-a")
    submit("other", mem=1000, namespace="team-b")
    page = admin_client.get(changelist("pod"), {"q": "team-a"}).content.decode()
    assert "team-a/findme" in page and "team-b/other" not in page
    page = admin_client.get(changelist("pod"), {"q": "findme"}).content.decode()
    assert "team-a/findme" in page and "team-b/other" not in page


def test_pod_page_inlines_allocations_and_decisions(admin_client):
    report_walkthrough()
    pod = Pod.objects.get(name="latency-tier")
    page = admin_client.get(reverse("admin:scheduling_pod_change", args=[pod.pk])).content.decode()
    assert "GPU-2" in page  # the allocation inline names the card
    assert "scheduled on t4-node" in page  # the decision inline
    assert reverse("pod", args=["default", "latency-tier"]) in page


def test_decision_page_draws_the_card_table_not_json(admin_client):
    """The admin shows a decision through the Pod page's component, once: the cards in chain
    order (the chosen one first, the tiebreak named), then the ones mutex removed."""
    report_walkthrough()
    decision = Decision.objects.get(pod__name="latency-tier")
    page = admin_client.get(reverse("admin:scheduling_decision_change", args=[decision.pk])).content.decode()
    assert page.count('data-testid="pod-decision"') == 1
    ranked = re.findall(
        r'data-testid="ranked-card" data-uuid="([^"]+)" data-chosen="(\w+)" data-decided-by="(\w*)"', page
    )
    assert ranked == [("GPU-2", "true", ""), ("GPU-3", "false", "index")]
    removed = re.findall(r'data-testid="removed-card" data-uuid="([^"]+)" data-stage="(\w+)"', page)
    assert removed == [("GPU-0", "mutex"), ("GPU-1", "mutex")]
    assert "decision-cards" not in page, "the admin's own card table is gone"
    assert '"eligible"' not in page and "&quot;eligible&quot;" not in page


def test_new_cluster_config_goes_through_services(admin_client, woken, django_capture_on_commit_callbacks):
    url = reverse("admin:scheduling_schedulerconfig_add")
    form = {
        "node_scheduler_policy": "spread",
        "gpu_scheduler_policy": "mutex,binpack",
        "memory_percentage": 100,
        "default_cores": 0,
        "exclusive_cores": 100,
    }
    with django_capture_on_commit_callbacks(execute=True):
        answer = admin_client.post(url, form)
    assert answer.status_code == 302
    row = SchedulerConfig.objects.get()
    assert (row.node_scheduler_policy, row.gpu_scheduler_policy, row.changed_by) == (
        "spread",
        "mutex,binpack",
        "admin",
    )
    assert woken.is_set()
    bad = admin_client.post(url, {**form, "node_scheduler_policy": "sideways"})
    assert bad.status_code == 200 and "must be binpack or spread" in bad.content.decode()
    assert SchedulerConfig.objects.count() == 1


def test_requeue_refuses_a_placed_pod_and_rereads_a_parked_one(admin_client):
    report_demo_cluster()
    submit("placed", mem=1000)
    from scheduling import services

    services.submit_pod(
        "default",
        "bad-weights",
        {"hami.io/device-scoring-weights": "slot=1"},
        [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        validate=False,
    )
    cycle()
    parked = Pod.objects.get(name="bad-weights")
    assert parked.parked and "device-scoring-weights" in parked.error
    answer = admin_client.post(
        changelist("pod"),
        {"action": "requeue", "_selected_action": [str(Pod.objects.get(name="placed").pk), str(parked.pk)]},
        follow=True,
    )
    text = answer.content.decode().lower()  # the admin capitalises messages
    assert "requeued: default/bad-weights" in text
    assert "not requeued: default/placed: only a waiting pod can be requeued" in text
    assert Pod.objects.get(name="placed").status == Pod.SCHEDULED
    parked.refresh_from_db()
    assert parked.parked is False
    cycle()
    parked.refresh_from_db()
    assert parked.parked is True and Decision.objects.filter(pod=parked).count() == 2


def test_drain_asks_first_then_cordons_the_nodes_and_may_requeue_hamiadmins_own_pods(admin_client):
    report_demo_cluster()
    submit("ours", mem=3000, annotations={"nvidia.com/use-gpuuuid": "GPU-t4-0"})
    cycle()
    node = Node.objects.get(name="t4-node")
    asked = admin_client.post(changelist("node"), {"action": "drain", "_selected_action": [str(node.pk)]})
    html = asked.content.decode()
    assert asked.status_code == 200 and "Drain these nodes?" in html
    assert "default/ours (REST API)" in html and "and requeue the 1 pod hamiadmin runs itself" in html
    assert not Card.objects.filter(cordoned=True).exists()  # nothing drained before the confirm
    answer = admin_client.post(
        changelist("node"),
        {"action": "drain", "_selected_action": [str(node.pk)], "confirm": "yes", "requeue": "yes"},
    )
    assert answer.status_code == 302
    assert Card.objects.filter(node=node, cordoned=True).count() == node.cards.count() == 4
    assert not Card.objects.exclude(node=node).filter(cordoned=True).exists()
    pod = Pod.objects.get(name="ours")
    assert pod.status == Pod.PENDING and pod.node is None
    assert Event.objects.get(subject="node/t4-node", reason="Drain").actor == "admin"
