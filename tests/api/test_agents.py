"""`POST agents/report/`: an agent upserts its own node and cards; nothing else, nothing partial."""

from __future__ import annotations

import pytest

from scheduling.models import Card, Node, Pod
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod, report_body, t4

pytestmark = pytest.mark.django_db

REPORT = "/api/v1/agents/report/"


def report(client, body):
    return client.post(REPORT, body, format="json")


def cluster_rows():
    nodes = list(Node.objects.values_list("name", "labels", "annotations").order_by("name"))
    cards = list(
        Card.objects.values_list("uuid", "node__name", "memory", "present", "cordoned").order_by("uuid")
    )
    return nodes, cards


def test_report_upserts_node_and_cards_and_beats_the_heart(client_for):
    agent = client_for("agent:node1")
    body = report_body(
        "node1",
        t4("GPU-a", 0, numa=0, links={"GPU-b": 100}),
        t4("GPU-b", 1, numa=1, links={"GPU-a": 100}, health=False, mode="hami-core"),
        labels={"zone": "eu-1"},
        annotations={"hami.io/device-cordon": ""},
    )
    answer = report(agent, body)
    assert answer.status_code == 200, answer.content
    assert answer.json()["node"] == "node1" and answer.json()["cards"] == 2 and answer.json()["absent"] == []
    node = Node.objects.get(name="node1")
    assert node.labels == {"zone": "eu-1"} and node.ready and node.last_heartbeat is not None
    b = Card.objects.get(uuid="GPU-b")
    assert (b.node.name, b.index, b.type, b.memory, b.numa, b.health, b.mode, b.links) == (
        "node1",
        1,
        "NVIDIA-Tesla T4",
        15360,
        1,
        False,
        "hami-core",
        {"GPU-a": 100},
    )
    first_beat = node.last_heartbeat
    body["devices"][0]["memory"] = 16000
    assert report(agent, body).status_code == 200
    node.refresh_from_db()
    assert node.last_heartbeat > first_beat
    assert Card.objects.get(uuid="GPU-a").memory == 16000
    assert Card.objects.count() == 2


def test_a_card_missing_from_the_report_is_kept_absent_and_takes_no_pods(client_for, operator):
    agent = client_for("agent:node1")
    report(agent, report_body("node1", t4("GPU-a", 0), t4("GPU-b", 1)))
    answer = report(agent, report_body("node1", t4("GPU-a", 0)))
    assert answer.status_code == 200 and answer.json()["absent"] == ["GPU-b"]
    gone = Card.objects.get(uuid="GPU-b")
    assert not gone.present and gone.node.name == "node1"
    operator.post(
        "/api/v1/pods/", gpu_pod("wants-b", annotations={"nvidia.com/use-gpuuuid": "GPU-b"}), format="json"
    )
    run_cycle(trigger="test")
    assert Pod.objects.get(name="wants-b").status == "pending"
    cards = operator.get("/api/v1/cards/?present=false").json()["results"]
    assert [c["uuid"] for c in cards] == ["GPU-b"]


def test_report_for_another_node_is_403_and_writes_nothing(client_for):
    answer = report(client_for("agent:node1"), report_body("node2", t4("GPU-x", 0)))
    assert answer.status_code == 403 and "node1" in answer.json()["detail"]
    assert cluster_rows() == ([], [])


@pytest.mark.parametrize("who", ["viewer", "operator", "admin"])
def test_people_cannot_report(client_for, who):
    assert report(client_for(who), report_body("node1", t4("GPU-x", 0))).status_code == 403
    assert cluster_rows() == ([], [])


def test_agent_cannot_steal_another_nodes_card(client_for):
    report(client_for("agent:node1"), report_body("node1", t4("GPU-a", 0)))
    before = cluster_rows()
    answer = report(client_for("agent:node2"), report_body("node2", t4("GPU-a", 0)))
    assert answer.status_code == 200 and answer.json()["cards"] == 1
    (refused,) = answer.json()["refused"]
    assert refused["field"] == "devices[0].uuid" and "node1" in refused["message"]
    assert cluster_rows()[1] == before[1], "the card stays with node1, unchanged"


# (body change, the field the error must name)
INVALID = [
    (lambda b: b.pop("node"), "node"),
    (lambda b: b.update(node=7), "node"),
    (lambda b: b.pop("devices"), "devices"),
    (lambda b: b.update(devices={"uuid": "GPU-a"}), "devices"),
    (lambda b: b.update(labels=["zone"]), "labels"),
    (lambda b: b["labels"].update(zone=3), "labels.zone"),
    (lambda b: b["annotations"].update({"hami.io/device-cordon": None}), "annotations.hami.io/device-cordon"),
    (lambda b: b["devices"].append("GPU-c"), "devices[2]"),
    (lambda b: b["devices"][1].pop("uuid"), "devices[1].uuid"),
    (lambda b: b["devices"][1].pop("memory"), "devices[1].memory"),
    (lambda b: b["devices"][1].update(memory=-1), "devices[1].memory"),
    (lambda b: b["devices"][1].update(memory="lots"), "devices[1].memory"),
    (lambda b: b["devices"][1].update(memory=2**31), "devices[1].memory"),
    (lambda b: b["devices"][1].update(numa=-(2**31) - 1), "devices[1].numa"),
    (lambda b: b["devices"][1].update(slots=1.5), "devices[1].slots"),
    (lambda b: b["devices"][1].update(cores=-10), "devices[1].cores"),
    (lambda b: b["devices"][1].update(health="yes"), "devices[1].health"),
    (lambda b: b["devices"][1].update(type=4), "devices[1].type"),
    (lambda b: b["devices"][1].update(index=0), "devices[1].index"),
    (lambda b: (b["devices"][0].pop("links"), b["devices"][1].update(uuid="GPU-a")), "devices[1].uuid"),
    (lambda b: b["devices"][1].update(used={"slots": 1}), "devices[1].used"),
    (lambda b: b["devices"][1].update(links={"GPU-a": -5}), "devices[1].links.GPU-a"),
    (lambda b: b["devices"][1].update(links={"GPU-a": 50}), "devices[1].links.GPU-a"),
]


@pytest.mark.parametrize(
    "change, field", INVALID, ids=[f"{i}-{field}" for i, (_, field) in enumerate(INVALID)]
)
def test_one_bad_card_refuses_the_whole_report(client_for, change, field):
    agent = client_for("agent:node1")
    good = report_body("node1", t4("GPU-a", 0, links={"GPU-b": 100}), t4("GPU-b", 1), labels={"zone": "a"})
    assert report(agent, good).status_code == 200
    before = cluster_rows()
    body = report_body(
        "node1", t4("GPU-a", 0, links={"GPU-b": 100}, memory=9999), t4("GPU-b", 1), labels={"zone": "b"}
    )
    change(body)
    answer = report(agent, body)
    assert answer.status_code == 400, answer.content
    assert field in answer.json(), answer.json()
    assert cluster_rows() == before


def test_report_is_throttled(client_for, monkeypatch):
    from rest_framework.throttling import ScopedRateThrottle

    monkeypatch.setitem(ScopedRateThrottle.THROTTLE_RATES, "agent-report", "2/min")
    agent = client_for("agent:node1")
    codes = [report(agent, report_body("node1", t4("GPU-a", 0))).status_code for _ in range(3)]
    assert codes == [200, 200, 429]


def test_nul_characters_refuse_the_report(client_for):
    answer = report(client_for("agent:node1"), report_body("node1", t4("GPU-a", 0, mode="x\u0000")))
    assert answer.status_code == 400 and "devices[0].mode" in answer.json()
    assert cluster_rows() == ([], [])
