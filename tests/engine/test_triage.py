"""Triage: every waiting decision is `never`, `capacity`, `rule` or `invalid`, with the one
fact that decides it, chosen by what would make the pod fit. Scenarios inline."""

from __future__ import annotations

import pytest

from scheduling.engine import reasons as R
from scheduling.engine.annotations import USE_TYPE, USE_UUID
from scheduling.engine.decision import PENDING, Decision, Hold
from scheduling.engine.model import Card, Cluster, Node, PodSpec
from scheduling.engine.noderules import account_running
from scheduling.engine.scenario import parse_scenario
from scheduling.engine.scheduler import Scheduler
from scheduling.engine.triage import CAPACITY, INVALID, NEVER, RULE, triage

from .builders import ask, card, node, pod, run_one, scenario

A100, T4 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-Tesla-T4"


def t4_and_a100_nodes(count: int) -> list[dict]:
    """Half the nodes with eight 80 GB A100s, half with eight 15,360 MiB T4s."""
    return [
        node(
            f"n{i:04d}",
            *(
                card(f"G-{i}-{j}", 81920 if i % 2 else 15360, index=j, type=A100 if i % 2 else T4)
                for j in range(8)
            ),
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("nodes", [4, Scheduler.SWEEP_NODES + 2], ids=["node by node", "over the columns"])
def test_a_t4_pod_asking_more_than_a_t4_has_never_fits_for_memory_not_type(nodes):
    out = run_one(t4_and_a100_nodes(nodes), pod("big", {USE_TYPE: "T4"}, ask(gpu=8, mem=60000)))
    verdict = out["verdict"]
    assert out["unschedulable"] is True
    assert verdict["class"] == NEVER
    assert verdict["code"] == R.CARD_INSUFFICIENT_MEMORY  # not CardTypeMismatch: memory decides
    assert verdict["fact"] == f"60,000 MiB > the largest {T4} (15,360 MiB)"
    assert verdict["actions"][0] == "ask at most 15,360 MiB (nvidia.com/gpumem)"
    assert "81,920 MiB" in verdict["actions"][1]  # letting in the A100s would do
    assert out["unschedulable_reason"]["scope"]["types"] == [T4]


def test_a_pod_asking_more_than_any_card_never_fits_over_the_whole_cluster():
    out = run_one(t4_and_a100_nodes(2), pod("huge", None, ask(gpu=1, mem=100000)))
    assert out["verdict"]["class"] == NEVER
    assert out["verdict"]["fact"] == "100,000 MiB > the largest card (81,920 MiB)"


def test_a_type_no_card_has_is_never_and_counted_as_type_mismatch():
    out = run_one(t4_and_a100_nodes(2), pod("h100", {USE_TYPE: "H100"}, ask(gpu=1, mem=1000)))
    assert (out["verdict"]["class"], out["verdict"]["code"]) == (NEVER, R.CARD_TYPE_MISMATCH)
    assert "type, mode or UUID" in out["verdict"]["fact"]


def test_too_many_cards_of_the_asked_uuids_never_fits_with_the_count_first():
    out = run_one(t4_and_a100_nodes(2), pod("pinned", {USE_UUID: "G-1-0,G-1-1"}, ask(gpu=3, mem=1000)))
    assert (out["verdict"]["class"], out["verdict"]["code"]) == (NEVER, R.NODE_INSUFFICIENT_DEVICE)
    assert out["verdict"]["fact"] == f"3 cards asked > the most {A100} cards on one node (2)"


def test_a_pod_that_fits_once_tenants_leave_waits_for_capacity_on_the_closest_node():
    out = run_one(
        [
            node("far", card("F0", 8000, used=(1, 7500, 0))),
            node("near", card("N0", 8000, used=(1, 6000, 0))),
        ],
        pod("p", None, ask(gpu=1, mem=3000)),
    )
    verdict = out["verdict"]
    assert (verdict["class"], verdict["code"], verdict["node"]) == (
        CAPACITY,
        R.CARD_INSUFFICIENT_MEMORY,
        "near",
    )
    assert verdict["fact"] == "closest node near needs 1,000 MiB freed on N0"
    assert verdict["actions"] == ["free 1,000 MiB on N0 (near)"]


def test_cards_the_pod_excludes_by_type_are_never_the_capacity_fact():
    """The T4 node is full, the A100 node empty; the pod asks for T4s: the A100 node never fits
    it, so the fact names the T4 node's tenants, not the empty A100."""
    out = run_one(
        [
            node("a100", card("A0", 81920, type=A100)),
            node("t4", card("T0", 15360, type=T4, used=(1, 15000, 0))),
        ],
        pod("p", {USE_TYPE: "T4"}, ask(gpu=1, mem=4000)),
    )
    assert (out["verdict"]["class"], out["verdict"]["node"]) == (CAPACITY, "t4")
    assert "T0" in out["verdict"]["fact"]


def test_a_node_not_ready_waits_for_capacity():
    raw = scenario([node("n", card("G0"))], [pod("p", None, ask(gpu=1, mem=1000))])
    cluster, config, pods = parse_scenario(raw)
    cluster.nodes[0].ready = False
    decision = Scheduler(cluster, config).decide(pods[0])
    assert (decision.triage.verdict, decision.triage.code) == (CAPACITY, R.NODE_NOT_READY)


def test_a_batch_hold_is_a_rule_whatever_the_cards_say():
    decision = Decision(
        "p", "ml", PENDING, batch=Hold("QueueLimitExceeded", "queue team-a is at its limit", "n1")
    )
    found = triage(decision)
    assert (found.verdict, found.code) == (RULE, "QueueLimitExceeded")
    assert found.fact == "queue team-a is at its limit (its cards fit on n1)"


def test_a_rejected_pod_is_invalid():
    out = run_one([node("n", card("G0"))], pod("bad", None, ask(gpu=1, cores=-1)))
    assert out["verdict"]["class"] == INVALID and out["verdict"]["fact"] == out["error"]


def test_a_placed_pod_has_no_verdict():
    assert run_one([node("n", card("G0"))], pod("ok", None, ask(gpu=1, mem=1000)))["verdict"] is None


def test_a_node_rule_is_the_verdict_when_no_node_gets_to_its_cards():
    """Every node refused before its cards are read: a taint is a rule, cpu is capacity."""
    taint = {"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}
    tainted = Cluster(nodes=[Node("a", cards=[Card("a-0", 0, 16000)], taints=[taint])])
    spec = PodSpec("p", containers=[{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}])
    found = Scheduler(tainted).decide(spec).triage
    assert (found.verdict, found.code) == (RULE, R.TAINT_TOLERATION)
    assert found.fact == "1 of 1 nodes: node(s) had untolerated taint {dedicated: team-b}"
    small = Cluster(nodes=[Node("a", cards=[Card("a-0", 0, 16000)], allocatable={"cpu": "1"})])
    hungry = PodSpec(
        "p",
        containers=[
            {"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "2"}}}
        ],
    )
    account_running(small)
    found = Scheduler(small).decide(hungry).triage
    assert (found.verdict, found.code) == (CAPACITY, R.NODE_RESOURCES_FIT)
    assert found.fact == "1 of 1 nodes: Insufficient cpu"
