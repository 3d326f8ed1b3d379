"""One verdict per decision: `Decision.reason_text` (what `Pod.reason` stores), the API's
decision `summary` (`explain.explained` of the stored payload), the pod page's decision block
(`explain.decision_path`) and `simulate --format table` say the same line, for every kind of
outcome the gang, queue and preemption worlds give; and the typed holds and preemptions
travel into the payload and back without losing a key."""

from __future__ import annotations

import json

import pytest

from scheduling.engine import ClusterConfig, PodSpec, Scheduler
from scheduling.engine import reasons as R
from scheduling.engine.batch.consolidate import Consolidator
from scheduling.engine.batch.jobs import (
    QUEUE_NOT_FOUND,
    Gang,
    Job,
    JobRunner,
    Member,
    Nominated,
    held_decision,
)
from scheduling.engine.batch.preempt import Preemptor, Rules, Tenants
from scheduling.engine.batch.queues import NamespaceBook, QueueBook, QueueState
from scheduling.engine.decision import SCHEDULED, Decision, Hold, Preemption
from scheduling.engine.explain import decision_path, explained, summary_of
from scheduling.management.commands.simulate import why_cell

from .batch.test_preempt import World, job, pod
from .batch.test_queues_and_jobs import cluster, gang_job, single_job


def kind_of(decision: Decision) -> str:
    """Which outcome a decision is: its status, the batch rule that held it, or how
    preemption ended."""
    if decision.status != "pending":
        return decision.status
    if decision.batch is not None:
        rolled = decision.preemption is not None and decision.preemption.tried
        return f"{decision.batch.reason}{' after eviction' if rolled else ''}"
    preemption = decision.preemption
    if preemption is not None and preemption.tried:
        return "preemption said" if preemption.say else "preemption quiet"
    codes = set(decision.reasons)
    return "node reserved" if R.NODE_RESERVED in codes else "card reasons"


def placed_and_card_reasons() -> list[Decision]:
    runner = JobRunner(Scheduler(cluster(nodes=1, cards=1, memory=8000)), QueueBook([]))
    outcomes = runner.run([single_job("fits", mem=4000), single_job("too-big", age=1, mem=16000)])
    return [o.decision for o in outcomes]


def gang_holds() -> list[Decision]:
    runner = JobRunner(Scheduler(cluster(nodes=1, cards=2, memory=8000, slots=1)), QueueBook([]))
    short = runner.run([gang_job("train", 3, 3, mem=6000)])  # room for two of three
    unknown = runner.run([gang_job("wait", 2, 3, known=2)])  # one member not created yet
    return [short[0].decision, unknown[0].decision]


def queue_and_quota_holds() -> list[Decision]:
    book = QueueBook([QueueState("research", limit={"gpumem": 10_000})])
    book.add("research", {"gpumem": 6000})
    namespaces = NamespaceBook(hard={"team": {"gpumem": 1000}})
    runner = JobRunner(Scheduler(cluster(nodes=1, cards=4, memory=8000)), book, namespaces)
    outcomes = runner.run(
        [
            single_job("big", queue="research", gpu=2, mem=4000),
            single_job("quota", age=1, mem=4000, namespace="team"),
        ]
    )
    missing = held_decision(pod("lost"), ClusterConfig(), QUEUE_NOT_FOUND, "queue nowhere does not exist")
    return [o.decision for o in outcomes] + [missing]


def preemption_outcomes() -> list[Decision]:
    w = World({"n1": [8000]})
    w.run("low", "n1", {0: 8000})
    (preempting,) = w.runner().run([job("p", mem=8000)])
    w = World({"n1": [8000]})
    w.run("young", "n1", {0: 8000}, runtime=10)
    (protected,) = w.runner(min_runtime_seconds=60).run([job("p", mem=8000)])
    w = World({"n1": [8000]})
    w.run("same", "n1", {0: 8000}, priority=100)
    (quiet,) = w.runner().run([job("p", mem=8000)])
    w = World({"n1": [8000], "n2": [8000]})
    w.run("low", "n1", {0: 8000})
    w.run("peer", "n2", {0: 8000}, priority=100)
    members = [Member(pod(f"t-{i}", mem=8000)) for i in range(2)]
    rolled = w.runner().run([Job("default", 100, (0, "t"), members, Gang("default/t", 2, 2))])
    return [preempting.decision, protected.decision, quiet.decision, rolled[0].decision]


def consolidating_and_nominated() -> list[Decision]:
    w = World({"n1": [16000], "n2": [16000]})
    w.run("t", "n1", {0: 6000})
    w.run("u", "n2", {0: 6000})
    book = w.book()
    preemptor = Preemptor(w.scheduler, book, lambda: Tenants(list(w.tenants)), Rules())
    consolidator = Consolidator(
        preemptor, w.scheduler.decide_parsed, lambda tenant: pod(tenant.key.split("/")[1], mem=tenant.work)
    )
    runner = JobRunner(w.scheduler, book, preemptor=preemptor, consolidator=consolidator)
    (moving,) = runner.run([job("p", priority=0, mem=12000)])
    w = World({"n1": [8000]})
    w.run("victim", "n1", {0: 8000})
    nominated = {"default/q": Nominated("n1", [("n1-GPU-0", 8000, 0)], waiting=1, grace_seconds=60)}
    (waiting,) = JobRunner(w.scheduler, w.book(), nominations=nominated).run([job("q", mem=8000)])
    return [moving.decision, waiting.decision]


def reserved_for_a_job() -> list[Decision]:
    scheduler = Scheduler(cluster(nodes=1, cards=1, memory=8000))
    assert scheduler.reserve("node0", "ml/train")
    return [scheduler.decide(pod("later", mem=1000))]


def rejected() -> list[Decision]:
    spec = PodSpec(name="cpu", namespace="default", containers=[{"name": "main", "resources": {}}])
    return [Scheduler(cluster(nodes=1)).decide(spec)]


WORLDS = (
    placed_and_card_reasons,
    gang_holds,
    queue_and_quota_holds,
    preemption_outcomes,
    consolidating_and_nominated,
    reserved_for_a_job,
    rejected,
)


def every_decision() -> list[Decision]:
    return [decision for world in WORLDS for decision in world()]


def test_the_worlds_give_every_kind_of_outcome():
    assert sorted(kind_of(d) for d in every_decision()) == sorted(
        [
            SCHEDULED,
            "card reasons",
            "GangUnschedulable",
            "NotEnoughPods",
            "QueueLimitExceeded",
            "NamespaceQuotaExceeded",
            "QueueNotFound",
            "Preempting",
            "preemption said",
            "preemption quiet",
            "GangUnschedulable after eviction",
            "Consolidating",
            "Nominated",
            "node reserved",
            "rejected",
        ]
    )


@pytest.mark.parametrize("decision", every_decision(), ids=kind_of)
def test_every_face_gives_the_same_line(decision):
    line = decision.reason_text()
    stored = json.loads(json.dumps(decision.as_dict(top=1)))  # as the database gives it back
    assert summary_of(stored) == line
    assert explained(stored)["summary"] == line
    assert decision_path(stored)["summary"] == line
    if decision.status == SCHEDULED:
        assert why_cell(stored) == ""
    else:
        assert why_cell(stored).startswith(line)


def test_a_held_pod_is_explained_by_its_rule_not_as_a_cluster_without_nodes():
    held = gang_holds()[1]
    stored = json.loads(json.dumps(held.as_dict()))
    assert explained(stored)["summary"] == "NotEnoughPods: gang default/wait: 2/3 members known"


@pytest.mark.parametrize("decision", every_decision(), ids=kind_of)
def test_holds_and_preemptions_read_back_as_they_were_written(decision):
    stored = json.loads(json.dumps(decision.as_dict()))
    if decision.batch is not None:
        assert Hold.from_dict(stored["batch"]) == decision.batch
        assert stored["batch"] == decision.batch.as_dict()
    else:
        assert "batch" not in stored
    if decision.preemption is not None:
        again = Preemption.from_dict(stored["preemption"])
        assert again.as_dict() == stored["preemption"] == decision.preemption.as_dict()
        assert [v.pod for v in again.victims] == [v.pod for v in decision.preemption.victims]
    else:
        assert "preemption" not in stored


def test_the_payload_keys_of_each_hold_and_preemption_are_the_ones_stored_before():
    preempting, protected, quiet, rolled = preemption_outcomes()
    assert list(preempting.as_dict()["batch"]) == ["reason", "message", "would_fit_on"]
    assert list(preempting.as_dict()["preemption"]) == [
        "node",
        "victims",
        "cards",
        "grants",
        "alternatives",
        "dry_run",
        "message",
    ]
    assert list(protected.as_dict()["preemption"]) == ["tried", "why", "misses", "say"]
    assert quiet.as_dict()["preemption"]["say"] is False
    assert list(rolled.as_dict()["preemption"]) == ["tried", "why"]
    assert list(rolled.as_dict()["batch"]) == ["reason", "message", "would_fit_on", "group"]
    moving, _ = consolidating_and_nominated()
    assert list(moving.as_dict()["preemption"])[-1] == "moves"
    by_name = {d.name: d for d in queue_and_quota_holds()}
    big, missing = by_name["big"], by_name["lost"]
    assert big.as_dict()["batch"]["queue"] == "research"
    assert big.batch is not None and big.batch.reason == "QueueLimitExceeded"
    assert "queue" not in missing.as_dict()["batch"] and "group" not in missing.as_dict()["batch"]
