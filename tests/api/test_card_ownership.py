"""A card belongs to the node that first reported it: no agent token can take it, the
rightful agent is never locked out, and only an admin can move it (audited)."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation, Card, Event, Node
from scheduling.pipeline import run_cycle
from scheduling.pipeline.housekeeping import mark_silent_nodes_not_ready

from .conftest import gpu_pod, report_body, t4

pytestmark = pytest.mark.django_db

REPORT = "/api/v1/agents/report/"


def report(client, body):
    return client.post(REPORT, body, format="json")


def test_a_silent_nodes_cards_cannot_be_taken_by_another_agent_and_its_agent_comes_back(client_for, settings):
    victim, attacker = client_for("agent:node1"), client_for("agent:node2")
    assert report(victim, report_body("node1", t4("GPU-a", 0), t4("GPU-b", 1))).status_code == 200
    settings.HAMIADMIN = {**settings.HAMIADMIN, "HEARTBEAT_TIMEOUT_SECONDS": 0}
    assert mark_silent_nodes_not_ready() == 1  # node1 is down: the old rule let its cards move

    answer = report(
        attacker,
        report_body(
            "node2",
            t4("GPU-x", 0),
            t4("GPU-a", 1, links={"GPU-x": 100}),
            t4("GPU-x", 0) | {"uuid": "GPU-y", "index": 2},
        ),
    )
    assert answer.status_code == 200, answer.content
    refused = answer.json()["refused"]
    assert [(r["field"], r["uuid"]) for r in refused] == [("devices[1].uuid", "GPU-a")]
    assert "belongs to node node1" in refused[0]["message"]
    assert Card.objects.get(uuid="GPU-a").node.name == "node1"
    assert sorted(Card.objects.filter(node__name="node2").values_list("uuid", flat=True)) == [
        "GPU-x",
        "GPU-y",
    ]
    assert Card.objects.get(uuid="GPU-x").links == {}, "no pair score towards a card it does not own"
    event = Event.objects.get(kind=Event.CARD_CLAIM_REFUSED, subject="card/GPU-a")
    assert event.actor == "agent:node2" and event.reason == "ClaimedByAnotherNode"
    report(attacker, report_body("node2", t4("GPU-a", 0)))
    assert Event.objects.get(kind=Event.CARD_CLAIM_REFUSED).count == 2, "counted, not repeated"

    comeback = report(victim, report_body("node1", t4("GPU-a", 0), t4("GPU-b", 1)))
    assert comeback.status_code == 200, comeback.content
    assert comeback.json()["refused"] == []
    assert Node.objects.get(name="node1").ready
    assert set(Card.objects.filter(node__name="node1", present=True).values_list("uuid", flat=True)) == {
        "GPU-a",
        "GPU-b",
    }


def test_a_report_that_shrinks_a_card_under_its_tenants_keeps_them_and_marks_the_card(client_for, operator):
    agent = client_for("agent:node1")
    report(agent, report_body("node1", t4("GPU-a", 0, memory=8000)))
    assert operator.post("/api/v1/pods/", gpu_pod("big", mem=6000), format="json").status_code == 201
    assert run_cycle().placed

    assert report(agent, report_body("node1", t4("GPU-a", 0, memory=4000))).status_code == 200
    shrunk = Card.objects.get(uuid="GPU-a")
    assert shrunk.memory == 4000 and shrunk.used_memory == 6000
    assert shrunk.over_capacity == "memory MiB 6000 held, 4000 reported"
    assert Allocation.objects.filter(card=shrunk, active=True).count() == 1, "the tenant keeps running"
    event = Event.objects.get(kind=Event.CARD_OVERCOMMITTED, subject="card/GPU-a")
    assert "6000 held, 4000 reported" in event.message
    assert operator.get("/api/v1/cards/GPU-a/").json()["over_capacity"] == shrunk.over_capacity

    assert operator.post("/api/v1/pods/", gpu_pod("small", mem=100), format="json").status_code == 201
    assert not run_cycle().placed, "nothing new on a card already over capacity"

    assert operator.delete("/api/v1/pods/default/big/").status_code == 200
    assert Card.objects.get(uuid="GPU-a").over_capacity == ""


def test_only_an_admin_moves_a_card_and_never_from_under_its_tenants(client_for, operator, admin):
    report(client_for("agent:node1"), report_body("node1", t4("GPU-a", 0)))
    report(client_for("agent:node2"), report_body("node2", t4("GPU-b", 0)))
    move = "/api/v1/cards/GPU-a/reassign/"
    assert operator.post(move, {"node": "node2"}, format="json").status_code == 403
    assert "node" in admin.post(move, {"node": "nowhere"}, format="json").json()
    operator.post("/api/v1/pods/", gpu_pod("tenant", mem=1000), format="json")
    operator.post("/api/v1/pods/", gpu_pod("tenant2", mem=1000), format="json")
    run_cycle()
    held = set(Allocation.objects.filter(active=True, card__uuid="GPU-a").values_list("pod__name", flat=True))
    assert held
    assert admin.post(move, {"node": "node2"}, format="json").status_code == 409
    for name in held:
        operator.delete(f"/api/v1/pods/default/{name}/")

    answer = admin.post(move, {"node": "node2"}, format="json")
    assert answer.status_code == 200, answer.content
    moved = Card.objects.get(uuid="GPU-a")
    assert moved.node.name == "node2" and not moved.present, "present again once node2's agent reports it"
    assert Event.objects.get(kind=Event.CARD_REASSIGNED).actor == "admin-user"
    again = report(client_for("agent:node2"), report_body("node2", t4("GPU-b", 0), t4("GPU-a", 1)))
    assert again.json()["refused"] == [] and Card.objects.get(uuid="GPU-a").present
