"""Consolidation: a pod that fits nowhere, with nobody of lower priority to evict, gets room
by moving one or two tenants to other nodes; only when every moved tenant has a new home."""

from __future__ import annotations

from scheduling.engine.batch.consolidate import CONSOLIDATING, Consolidator
from scheduling.engine.batch.jobs import JobRunner
from scheduling.engine.batch.preempt import Preemptor, Rules, Tenants
from scheduling.engine.decision import PENDING
from scheduling.engine.model import PodSpec
from scheduling.engine.noderules import accounting

from .test_preempt import World, job, pod, used


def runner(w: World, movable=lambda tenant: True, **rules) -> JobRunner:
    book = w.book()
    preemptor = Preemptor(w.scheduler, book, lambda: Tenants(list(w.tenants), w.gang_min), Rules(**rules))

    def spec_of(tenant):
        if not movable(tenant):
            return None
        return pod(tenant.key.split("/")[1], mem=tenant.work)

    consolidator = Consolidator(preemptor, w.scheduler.decide_parsed, spec_of)
    return JobRunner(w.scheduler, book, preemptor=preemptor, consolidator=consolidator)


def memory_on(w: World, node: str) -> int:
    return w.cluster.node(node).cards[0].used_memory


def test_a_tenant_moves_to_the_node_that_has_room_and_the_pod_takes_its_place():
    w = World({"n1": [16000], "n2": [16000]})
    t = w.run("t", "n1", {0: 6000})
    w.run("u", "n2", {0: 6000})
    (outcome,) = runner(w).run([job("p", priority=0, mem=12000)])
    decision = outcome.decision
    assert outcome.victims == [t]
    assert decision.status == PENDING and decision.batch.reason == CONSOLIDATING
    assert decision.preemption.as_dict()["moves"] == [
        {"pod": "default/t", "from": "n1", "to": "n2", "grants": [["n2-GPU-0", 6000, 0]]}
    ]
    assert decision.preemption.as_dict()["grants"] == [["n1-GPU-0", 12000, 0]]
    assert decision.preemption.victims[0].kind == "consolidate"
    assert decision.batch.message == "moving 1 pod to make room on n1: default/t n1 -> n2"
    # this cycle's snapshot holds both: the pod on n1, the moved tenant at its new home
    assert (memory_on(w, "n1"), memory_on(w, "n2")) == (12000, 12000)


def test_nothing_moves_when_a_moved_tenant_would_have_no_home():
    w = World({"n1": [16000], "n2": [16000]})
    w.run("t", "n1", {0: 6000})
    w.run("u", "n2", {0: 11000})
    before = used(w)
    (outcome,) = runner(w).run([job("p", priority=0, mem=12000)])
    assert outcome.victims == [] and outcome.decision.batch is None
    assert used(w) == before


def test_pods_the_caller_cannot_place_again_and_gang_members_do_not_move():
    w = World({"n1": [16000], "n2": [16000]})
    w.run("t", "n1", {0: 6000}, gang="default/g")
    w.gang_min["default/g"] = 1
    w.run("k", "n2", {0: 6000})
    before = used(w)
    (outcome,) = runner(w, movable=lambda tenant: tenant.key != "default/k").run(
        [job("p", priority=0, mem=12000)]
    )
    assert outcome.victims == []
    assert used(w) == before


def test_two_tenants_move_when_one_is_not_enough_and_the_cheaper_pair_wins():
    w = World({"n1": [16000], "n2": [16000], "n3": [16000]})
    w.run("a", "n1", {0: 5000})
    w.run("b", "n1", {0: 5000})
    w.run("c", "n1", {0: 6000})
    w.run("x", "n2", {0: 9000})  # too big to move into the 7000 MiB left anywhere
    w.run("y", "n3", {0: 9000})
    (outcome,) = runner(w).run([job("p", priority=0, mem=10000)])
    moved = sorted(m["pod"] for m in outcome.decision.preemption.as_dict()["moves"])
    assert moved == ["default/a", "default/b"]  # 10000 MiB moved, not 11000 with c
    homes = {m["to"] for m in outcome.decision.preemption.as_dict()["moves"]}
    assert homes <= {"n2", "n3"}
    assert memory_on(w, "n1") == 16000 and memory_on(w, "n2") + memory_on(w, "n3") == 28000


def test_dry_run_moves_nothing():
    w = World({"n1": [16000], "n2": [16000]})
    w.run("t", "n1", {0: 6000})
    w.run("u", "n2", {0: 6000})
    before = used(w)
    (outcome,) = runner(w, dry_run=True).run([job("p", priority=0, mem=12000)])
    assert outcome.victims == []
    assert outcome.decision.preemption.message.startswith("would move 1 pod")
    assert used(w) == before


def test_moving_the_tenant_whose_anti_affinity_bars_the_pod_makes_room_for_it():
    # n1's cards have room, but its tenant t will not share a node with app=web; n2's cards
    # are too full for the pod, and its tenant u may not move: t moves to n2
    w = World({"n1": [16000], "n2": [16000]})
    for node in w.cluster.nodes:
        node.labels = {"kubernetes.io/hostname": node.name}
    w.run("t", "n1", {0: 6000})
    w.run("u", "n2", {0: 9000})
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    barring = PodSpec("t", affinity=affinity, containers=[{"name": "main"}])
    accounting.add(w.cluster.node("n1"), accounting.footprint_of(barring))
    p = job("p", priority=0, mem=8000)
    p.members[0].spec.labels = {"app": "web"}
    (outcome,) = runner(w, movable=lambda tenant: tenant.key != "default/u").run([p])
    decision = outcome.decision
    assert decision.status == PENDING and decision.batch.reason == CONSOLIDATING
    assert [(m["pod"], m["from"], m["to"]) for m in decision.preemption.as_dict()["moves"]] == [
        ("default/t", "n1", "n2")
    ]
    assert decision.preemption.node == "n1"
