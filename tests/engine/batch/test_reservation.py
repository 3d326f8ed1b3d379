"""A reservation is its own notion: a healthy node held for a job reads `NodeReserved` ("held
this cycle for job ml/train") on every path of the engine, never `NodeNotReady`, and planning
never marks a node not ready."""

from __future__ import annotations

import pytest

from scheduling.engine import Card, Cluster, Node, PodSpec, Scheduler
from scheduling.engine import reasons as R
from scheduling.engine.batch.jobs import JobRunner
from scheduling.engine.batch.queues import QueueBook
from scheduling.engine.decision import PENDING, SCHEDULED
from scheduling.engine.explain import explained

from .test_consolidate import runner as consolidating_runner
from .test_preempt import World, job
from .test_queues_and_jobs import cluster, pod, single_job


def nodes(count: int, cards: int = 2, memory: int = 8000) -> Cluster:
    return Cluster(
        [
            Node(
                name=f"n{i:03d}",
                cards=[Card(uuid=f"n{i:03d}-GPU-{k}", index=k, memory=memory) for k in range(cards)],
            )
            for i in range(count)
        ]
    )


def pinned(name: str, uuid: str) -> PodSpec:
    spec = pod(name, mem=1000)
    spec.annotations["nvidia.com/use-gpuuuid"] = uuid
    return spec


@pytest.mark.parametrize("size", [3, Scheduler.SWEEP_NODES + 6], ids=["node-by-node", "columnar sweep"])
def test_a_reserved_healthy_node_reads_node_reserved_and_takes_pods_again_once_released(size):
    scheduler = Scheduler(nodes(size, cards=1))
    for i in range(size - 1):  # every node but the last one full
        scheduler.schedule(pod(f"fill{i}", mem=8000, **{"hami.io/node-scheduler-policy": "binpack"}))
    last = f"n{size - 1:03d}"
    assert scheduler.decide(pod("warm", mem=1000)).node == last  # the shape's verdicts are cached

    assert scheduler.reserve(last, "ml/train")
    assert scheduler.cluster.node(last).ready  # held, not marked not ready
    held = scheduler.decide(pod("later", mem=1000))
    assert held.status == PENDING
    assert held.reasons.get(R.NODE_RESERVED) == 1 and R.NODE_NOT_READY not in held.reasons
    assert dict(held.failed_nodes)[last] == f"1/1 {R.NODE_RESERVED}"
    words = explained(held.as_dict())
    assert any(line["code"] == R.NODE_RESERVED for line in words["waiting"])
    if size <= scheduler.config.closest_nodes:  # else the ready nodes come closer, as for not ready
        assert f"{last} is held this cycle for job ml/train" in " ".join(words["would_fit"])
    assert "not ready" not in " ".join(words["would_fit"] + [w["words"] for w in words["waiting"]])

    scheduler.release(last)
    assert scheduler.decide(pod("after", mem=1000)).node == last


def test_a_pod_pinned_to_a_card_of_a_reserved_node_reads_node_reserved():
    scheduler = Scheduler(nodes(Scheduler.SWEEP_NODES + 2))
    scheduler.reserve("n001", "ml/train")
    decision = scheduler.decide(pinned("pin", "n001-GPU-0"))
    assert decision.status == PENDING
    assert dict(decision.failed_nodes)["n001"] == f"2/2 {R.NODE_RESERVED}"
    assert R.NODE_NOT_READY not in decision.reasons


def test_a_fresh_scheduler_and_a_warm_one_agree_on_a_reservation():
    warm = Scheduler(nodes(Scheduler.SWEEP_NODES + 2))
    warm.decide(pod("warm", mem=1000))
    warm.reserve("n000", "ml/train")
    cold_cluster = nodes(Scheduler.SWEEP_NODES + 2)
    cold_cluster.node("n000").reserved_for = "ml/train"
    cold = Scheduler(cold_cluster)
    a, b = warm.decide(pod("p", mem=1000)), cold.decide(pod("p", mem=1000))
    assert (a.node, a.node_ranking, a.reasons) == (b.node, b.node_ranking, b.reasons)
    assert "n000" not in dict(a.node_ranking)


def test_a_node_is_held_once_and_release_leaves_an_unheld_node_alone():
    scheduler = Scheduler(nodes(2))
    assert scheduler.reserve("n000", "ml/train")
    assert not scheduler.reserve("n000", "ml/other")  # held already: the first job keeps it
    assert not scheduler.reserve("nowhere", "ml/train")
    assert scheduler.reserved == {"n000": "ml/train"}
    version = scheduler.cluster.node("n001").version
    scheduler.release("n001")
    assert scheduler.cluster.node("n001").version == version
    scheduler.release("n000")
    assert scheduler.reserved == {}


def test_a_job_that_waited_longest_holds_its_node_and_later_jobs_read_node_reserved():
    c = cluster(nodes=1, cards=1, memory=8000, slots=4)
    scheduler = Scheduler(c)
    scheduler.schedule(pod("tenant", mem=3000))  # the big job does not fit until it ends
    runner = JobRunner(scheduler, QueueBook([]), reserve_after_seconds=30)
    outcomes = runner.run(
        [
            single_job("big", age=0, priority=1, mem=8000, waited=60.0),
            single_job("small", age=1, mem=1000),
        ]
    )
    big, small = (o.decision for o in outcomes)
    assert big.status == PENDING and small.status == PENDING
    assert runner.reserved == {"node0": "default/big"}
    assert small.reasons == {R.NODE_RESERVED: 1}
    assert "node0 (job default/big)" in small.warnings[-1] and "not ready" not in small.warnings[-1]
    assert all(R.NODE_NOT_READY not in o.decision.reasons for o in outcomes)
    assert c.node("node0").ready
    # the reservation lasts the run: the next run places the small pod
    (again,) = JobRunner(scheduler, QueueBook([])).run([single_job("small", mem=1000)])
    assert again.decision.status == SCHEDULED


def test_a_moved_tenant_reads_its_old_node_as_held_for_the_pod_making_room_there():
    w = World({"n1": [16000], "n2": [16000]})
    w.run("t", "n1", {0: 6000})
    w.run("u", "n2", {0: 6000})
    runner = consolidating_runner(w)
    seen = []
    decide = runner.consolidator.decide

    def watching(spec):
        decision, parsed = decide(spec)
        seen.append(decision)
        return decision, parsed

    runner.consolidator.decide = watching
    (outcome,) = runner.run([job("p", priority=0, mem=12000)])
    assert outcome.decision.batch is not None and outcome.decision.batch.reason == "Consolidating"
    (home,) = seen
    assert home.node == "n2"
    old = dict(home.node_failures)["n1"]
    assert old.reasons == {R.NODE_RESERVED: 1}
    assert w.cluster.node("n1").ready and not w.cluster.node("n1").reserved_for
