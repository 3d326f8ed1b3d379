"""Draining a node from its page: the operator sees what runs there first, the drain cordons
every card, may requeue the pods hamiadmin runs itself (never Kubernetes pods), says what it
did and leaves one audit record; viewers are refused with the role they lack."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling import services
from scheduling.models import Allocation, Card, Event, Pod
from scheduling.roles import OPERATOR, role_group

from .conftest import PASSWORD, cycle, limits, submit
from .test_browser import WAIT_MS, browser, page, shot, sign_in  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(client, django_user_model):
    user = django_user_model.objects.create_user("oskar", password="an-operator-password")
    user.groups.add(role_group(OPERATOR))
    client.force_login(user)
    return client


@pytest.fixture
def two_nodes():
    """busy (two cards) runs `ours` (API) and `theirs` (Kubernetes); spare is empty."""
    for name in ("busy", "spare"):
        services.report_inventory(
            name,
            devices=[
                {"uuid": f"GPU-{name}-{i}", "index": i, "type": "A100", "memory": 16000} for i in range(2)
            ],
        )
    submit("ours", mem=4000, annotations={"nvidia.com/use-gpuuuid": "GPU-busy-0"})
    services.submit_pod(
        "default",
        "theirs",
        {"nvidia.com/use-gpuuuid": "GPU-busy-1"},
        [{"name": "main", "resources": limits(1, 4000)}],
        uid="uid-theirs",
        origin=Pod.KUBERNETES,
    )
    assert len(cycle("tenants").placed) == 2


def drain_url(node: str = "busy") -> str:
    return reverse("node-drain", args=[node])


def test_the_confirmation_lists_what_runs_there_and_changes_nothing(operator_client, two_nodes):
    node_page = operator_client.get(reverse("node", args=["busy"])).content.decode()
    assert f'action="{drain_url()}"' in node_page  # a button posting to it
    asked = operator_client.get(drain_url())
    html = asked.content.decode()
    assert asked.status_code == 200 and "Drain node busy?" in html
    assert 'data-pod="default/ours"' in html and 'data-pod="default/theirs"' in html
    assert "and requeue the 1 pod hamiadmin runs itself" in html
    assert operator_client.post(drain_url(), {"requeue": "yes"}).status_code == 200  # no confirm
    assert not Card.objects.filter(cordoned=True).exists()
    assert Pod.objects.get(name="ours").status == Pod.SCHEDULED


def test_a_drain_cordons_every_card_and_keeps_the_pods_unless_asked(operator_client, two_nodes):
    done = operator_client.post(drain_url(), {"confirm": "yes"}, follow=True)
    assert done.redirect_chain[-1][0] == reverse("node", args=["busy"])
    text = done.content.decode()
    assert (
        "busy drained: 2 of 2 cards of busy cordoned; still running 2: default/ours, default/theirs." in text
    )
    assert set(Card.objects.filter(cordoned=True).values_list("uuid", flat=True)) == {
        "GPU-busy-0",
        "GPU-busy-1",
    }
    assert set(Pod.objects.values_list("status", flat=True)) == {Pod.SCHEDULED}
    record = Event.objects.get(kind=services.OPERATOR_ACTION, subject="node/busy", reason="Drain")
    assert record.actor == "oskar" and record.message.endswith("; by oskar")
    assert "still running 2" in record.message

    submit("newcomer", mem=1000)
    placed = cycle("after drain").placed
    assert [(key, node) for key, node, *_ in placed] == [("default/newcomer", "spare")]


def test_a_drain_can_requeue_the_pods_hamiadmin_runs_itself(operator_client, two_nodes):
    done = operator_client.post(drain_url(), {"confirm": "yes", "requeue": "yes"}, follow=True)
    assert "requeued 1: default/ours; still running 1: default/theirs." in done.content.decode()
    ours, theirs = Pod.objects.get(name="ours"), Pod.objects.get(name="theirs")
    assert (ours.status, ours.node, ours.reason) == (Pod.PENDING, None, "node busy drained by oskar")
    assert not Allocation.objects.filter(pod=ours, active=True).exists()
    assert (theirs.status, theirs.node.name) == (Pod.SCHEDULED, "busy")
    assert Card.objects.get(uuid="GPU-busy-0").used_memory == 0
    record = Event.objects.get(kind=services.OPERATOR_ACTION, subject="node/busy", reason="Drain")
    assert "requeued 1: default/ours" in record.message


def test_a_viewer_is_refused_with_the_role_needed(viewer_client, two_nodes):
    refused = viewer_client.post(drain_url(), {"confirm": "yes"})
    assert refused.status_code == 403 and "operator role" in refused.content.decode()
    assert not Card.objects.filter(cordoned=True).exists()
    assert '"/nodes/busy/drain/"' not in viewer_client.get(reverse("node", args=["busy"])).content.decode()


def test_draining_an_unknown_node_is_a_404(operator_client):
    assert operator_client.get(drain_url("nowhere")).status_code == 404


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_an_operator_drains_a_node_from_its_page_in_chromium(page, django_user_model, two_nodes):  # noqa: F811
    user = django_user_model.objects.create_user("oskar", password=PASSWORD)
    user.groups.add(role_group(OPERATOR))
    sign_in(page, "oskar", PASSWORD, "/nodes/busy/")
    page.click("[data-testid=node-drain]")
    page.wait_for_url("**/nodes/busy/drain/", timeout=WAIT_MS)
    listed = page.inner_text("[data-testid=drain-pods]")
    assert "default/ours" in listed and "default/theirs" in listed
    shot(page, "drain-confirm")
    page.check("[data-testid=drain-requeue]")
    page.click("[data-testid=confirm-button]")
    page.wait_for_url("**/nodes/busy/", timeout=WAIT_MS)
    assert "requeued 1: default/ours; still running 1: default/theirs" in page.inner_text("body")
    assert Card.objects.filter(node__name="busy", cordoned=True).count() == 2
    assert Pod.objects.get(name="ours").status == Pod.PENDING


def test_the_message_names_twenty_pods_a_list_and_counts_the_rest():
    drain = services.Drain("big", 8, 8, staying=[f"ml/p{i:02d}" for i in range(25)])
    assert drain.message.startswith("8 of 8 cards of big cordoned; still running 25: ml/p00, ml/p01")
    assert drain.message.endswith("ml/p19 and 5 more")
