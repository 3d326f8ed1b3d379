"""Nodes and cards (`services.inventory`): a report is validated first (errors name the field,
nothing written), then upserted; a card belongs to the node that first reported it."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling import services
from scheduling.engine import ScenarioError
from scheduling.models import Allocation, Card, Node, Pod
from scheduling.pipeline import run_cycle
from tests.pipeline.conftest import assert_consistent, card, reload, submit, t4

from .conftest import AFTER_COMMIT

pytestmark = pytest.mark.django_db


def test_report_upserts_node_and_cards_with_pair_scores_on_both_sides():
    services.report_inventory(
        "node1", {"zone": "a"}, {}, [t4("GPU-0", 0, links={"GPU-1": 200}), t4("GPU-1", 1)]
    )
    node = Node.objects.get(name="node1")
    assert node.ready and node.last_heartbeat is not None and node.labels == {"zone": "a"}
    cards = {c.uuid: c for c in node.cards.all()}
    assert cards["GPU-0"].links == {"GPU-1": 200} and cards["GPU-1"].links == {"GPU-0": 200}
    assert cards["GPU-1"].memory == 15360 and cards["GPU-1"].slots == 10 and cards["GPU-1"].cores == 100


@AFTER_COMMIT
def test_a_card_missing_from_the_report_is_kept_absent_with_its_tenant_and_takes_no_new_pod():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    submit("tenant", gpu=1, mem=1000, annotations={"nvidia.com/use-gpuuuid": "GPU-1"})
    run_cycle()
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    gone = Card.objects.get(uuid="GPU-1")
    assert not gone.present and gone.used_slots == 1
    assert Allocation.objects.get(card=gone).active
    late = submit("late", gpu=1, mem=1000, annotations={"nvidia.com/use-gpuuuid": "GPU-1"})
    run_cycle()
    assert reload(late).status == Pod.PENDING and "CardUuidMismatch" in late.reason
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    assert Card.objects.get(uuid="GPU-1").present
    run_cycle()
    assert reload(late).status == Pod.SCHEDULED
    assert_consistent()


@pytest.mark.parametrize(
    ("devices", "where"),
    [
        ([card("GPU-0", 0), {"uuid": "GPU-1", "index": 1}], "devices[1].memory"),
        ([card("GPU-0", 0, slots=-1)], "devices[0].slots"),
        ([card("GPU-0", 0), card("GPU-0", 1)], "devices[1].uuid"),
        ([card("GPU-0", 0, used={"slots": 1})], "devices[0].used"),
        ([card("GPU-0", 0, links={"GPU-9": 10})], "devices"),
        ([{"index": 0, "memory": 10}], "devices[0].uuid"),
        ([card("GPU-0", 0, memory=2**31)], "devices[0].memory"),
    ],
)
def test_a_bad_report_names_the_field_and_writes_nothing(devices, where):
    with pytest.raises(ScenarioError) as error:
        services.report_inventory("node1", {}, {}, devices)
    assert error.value.where == where
    assert not Node.objects.exists() and not Card.objects.exists()


def test_a_node_cannot_claim_a_card_of_another_node_ready_or_not():
    services.report_inventory("node1", {}, {}, [card("GPU-0", 0)])
    services.mark_node_not_ready("node1", "no report for 60 s")
    node2 = services.report_inventory("node2", {}, {}, [card("GPU-1", 0), card("GPU-0", 1)])
    assert [(r["field"], r["uuid"]) for r in node2.refused] == [("devices[1].uuid", "GPU-0")]
    assert "belongs to node node1" in node2.refused[0]["message"]
    assert Card.objects.get(uuid="GPU-0").node.name == "node1"
    assert list(Card.objects.filter(node=node2).values_list("uuid", flat=True)) == ["GPU-1"]


def test_a_not_ready_reason_is_kept_until_the_next_valid_report():
    services.report_inventory("node1", {}, {"hami.io/device-cordon": "GPU-9"}, [card("GPU-0", 0)])
    services.mark_node_not_ready("node1", "malformed hami.io/node-nvidia-register[0]: memory")
    node = Node.objects.get(name="node1")
    assert (node.ready, node.not_ready_reason) == (False, "malformed hami.io/node-nvidia-register[0]: memory")
    assert node.annotations == {"hami.io/device-cordon": "GPU-9"}, "the reason is not an annotation"
    services.report_inventory("node1", {}, {"hami.io/device-cordon": "GPU-9"}, [card("GPU-0", 0)])
    node = Node.objects.get(name="node1")
    assert (node.ready, node.not_ready_reason) == (True, "")
    created = services.mark_node_not_ready("node2", "the node was deleted from Kubernetes")
    assert (created.ready, created.not_ready_reason) == (False, "the node was deleted from Kubernetes")


def test_a_report_writes_each_changed_card_once_and_stamps_only_what_scheduling_sees():
    """Capacity and presence changes move a card's `updated_at` (the pages' live token reads
    it); measurements alone write the card but leave it; every changed column lands, for every
    card of the report, in one statement per kind of change."""
    devices = [t4(f"GPU-{i}", i) for i in range(4)]
    services.report_inventory("node1", {}, {}, devices)
    before = {c.uuid: c.updated_at for c in Card.objects.all()}
    measured = [
        {**device, "observed": {"memory": 100 + i, "utilization": i, "power": 70.5}}
        for i, device in enumerate(devices)
    ]
    with CaptureQueriesContext(connection) as sent:
        services.report_inventory("node1", {}, {}, measured)
    assert sum('UPDATE "scheduling_card"' in q["sql"] for q in sent.captured_queries) == 1  # executemany: one
    cards = {c.uuid: c for c in Card.objects.all()}
    assert {uuid: (c.observed_memory, c.utilization, c.power) for uuid, c in cards.items()} == {
        f"GPU-{i}": (100 + i, i, 70.5) for i in range(4)
    }
    assert {uuid: c.updated_at for uuid, c in cards.items()} == before
    smaller = [{**measured[0], "memory": 8000}, *measured[1:3]]  # GPU-0 shrinks, GPU-3 goes
    services.report_inventory("node1", {}, {}, smaller)
    cards = {c.uuid: c for c in Card.objects.all()}
    assert (cards["GPU-0"].memory, cards["GPU-3"].present) == (8000, False)
    moved = {uuid for uuid, c in cards.items() if c.updated_at != before[uuid]}
    assert moved == {"GPU-0", "GPU-3"}
    assert all(c.present for uuid, c in cards.items() if uuid != "GPU-3")
