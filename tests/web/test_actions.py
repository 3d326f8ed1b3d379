"""Operator actions on the dashboard: each asks first, acts through the services, says what
it did and leaves an audit record; viewers are refused with the role they lack."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling import services
from scheduling.models import Card, Event, Pod
from scheduling.roles import OPERATOR, role_group

from .conftest import cycle, report_demo_cluster, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(client, django_user_model):
    user = django_user_model.objects.create_user("oskar", password="an-operator-password")
    user.groups.add(role_group(OPERATOR))
    client.force_login(user)
    return client


def audit(subject: str) -> Event:
    return Event.objects.get(kind=services.OPERATOR_ACTION, subject=subject)


def test_cordoning_a_node_asks_first_then_cordons_every_card_and_audits(
    operator_client, django_capture_on_commit_callbacks
):
    report_demo_cluster()
    url = reverse("node-cordon", args=["t4-node"])
    asked = operator_client.get(url)
    assert asked.status_code == 200 and "Cordon node t4-node?" in asked.content.decode()
    assert not Card.objects.filter(node__name="t4-node", cordoned=True).exists()
    assert operator_client.post(url).status_code == 200  # no confirm: still only asks
    assert not Card.objects.filter(node__name="t4-node", cordoned=True).exists()

    done = operator_client.post(url, {"confirm": "yes"}, follow=True)
    assert done.redirect_chain[-1][0] == reverse("node", args=["t4-node"])
    assert "t4-node: 4 cards cordoned." in done.content.decode()
    assert Card.objects.filter(node__name="t4-node", cordoned=True).count() == 4
    assert Card.objects.filter(cordoned=True).count() == 4  # no other node's card
    record = audit("node/t4-node")
    assert record.actor == "oskar" and "4 of 4 cards of t4-node cordoned by oskar" in record.message
    assert (
        "4 of 4 cards of t4-node cordoned by oskar" in operator_client.get(reverse("events")).content.decode()
    )

    submit("t4-wants", mem=1000, annotations={"nvidia.com/use-gputype": "T4"})
    assert cycle().placed == []
    with django_capture_on_commit_callbacks(execute=True):  # the wake runs after the commit
        operator_client.post(reverse("node-uncordon", args=["t4-node"]), {"confirm": "yes"})
    assert not Card.objects.filter(cordoned=True).exists()
    assert [placed[0] for placed in cycle().placed] == ["default/t4-wants"]


def test_a_card_is_cordoned_from_its_node_page(operator_client):
    report_demo_cluster()
    html = operator_client.get(reverse("node", args=["t4-node"])).content.decode()
    assert reverse("card-cordon", args=["GPU-t4-1"]) in html
    operator_client.post(reverse("card-cordon", args=["GPU-t4-1"]), {"confirm": "yes"})
    assert list(Card.objects.filter(cordoned=True).values_list("uuid", flat=True)) == ["GPU-t4-1"]
    assert audit("card/GPU-t4-1").reason == "Cordon"
    html = operator_client.get(reverse("node", args=["t4-node"])).content.decode()
    assert reverse("card-uncordon", args=["GPU-t4-1"]) in html


def test_requeue_and_delete_a_pod(operator_client):
    report_demo_cluster()
    submit("placed", mem=3000, annotations={"nvidia.com/use-gpuuuid": "GPU-t4-0"})
    submit("waits", gpu=16, mem=1000)
    cycle()
    refused = operator_client.post(
        reverse("pod-requeue", args=["default", "placed"]), {"confirm": "yes"}, follow=True
    )
    assert "only a waiting pod can be requeued" in refused.content.decode()
    operator_client.post(reverse("pod-requeue", args=["default", "waits"]), {"confirm": "yes"})
    assert audit("pod/default/waits").reason == "Requeue"

    asked = operator_client.get(reverse("pod-delete", args=["default", "placed"])).content.decode()
    assert "Delete default/placed?" in asked and "cannot be undone" in asked
    operator_client.post(reverse("pod-delete", args=["default", "placed"]), {"confirm": "yes"})
    assert Pod.objects.get(name="placed").status == Pod.DELETED
    assert Card.objects.get(uuid="GPU-t4-0").used_memory == 0
    assert audit("pod/default/placed").actor == "oskar"


def test_a_viewer_sees_no_action_and_is_refused_naming_the_role(viewer_client):
    report_demo_cluster()
    html = viewer_client.get(reverse("node", args=["t4-node"])).content.decode()
    assert 'data-testid="node-actions"' not in html and "card-cordon" not in html
    for url in (reverse("node-cordon", args=["t4-node"]), reverse("card-cordon", args=["GPU-t4-1"])):
        for method in (viewer_client.get, viewer_client.post):
            answer = method(url, {"confirm": "yes"}) if method == viewer_client.post else method(url)
            assert answer.status_code == 403 and "operator role" in answer.content.decode()
    assert not Card.objects.filter(cordoned=True).exists()
    assert not Event.objects.filter(kind=services.OPERATOR_ACTION).exists()


def test_node_actions_are_post_buttons_shown_only_where_they_apply(operator_client):
    """An open node offers cordon and drain, not uncordon; once every card is cordoned and
    nothing runs there, only uncordon is left. Each is a form that POSTs to the action, which
    still asks to confirm."""
    report_demo_cluster()

    def buttons() -> set[str]:
        html = operator_client.get(reverse("node", args=["t4-node"])).content.decode()
        actions = html[html.index('data-testid="node-actions"') :]
        actions = actions[: actions.index("</div>")]
        found = set()
        for name in ("node-cordon", "node-uncordon", "node-drain"):
            form = f'<form method="post" action="{reverse(name, args=["t4-node"])}">'
            if form in actions:
                assert f'data-testid="{name}"' in actions
                found.add(name)
        return found

    assert buttons() == {"node-cordon", "node-drain"}
    asked = operator_client.post(reverse("node-cordon", args=["t4-node"]))  # the button's POST
    assert (
        'data-testid="confirm"' in asked.content.decode() and not Card.objects.filter(cordoned=True).exists()
    )
    services.cordon_node("t4-node", True, by="oskar")
    assert buttons() == {"node-uncordon"}
    services.cordon_card_by("GPU-t4-2", False, by="oskar")
    assert buttons() == {"node-cordon", "node-uncordon", "node-drain"}
