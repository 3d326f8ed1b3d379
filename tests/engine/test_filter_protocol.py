"""A new filter is one class plus registration: a toy card filter (odd card indexes stay out),
registered for one test at a time, is obeyed by the decision, put in words by the explanation,
used by the preemption's trial fit and shown by the scenario output, with nothing else edited."""

from __future__ import annotations

import pytest

from scheduling.engine import Card, Cluster, Node, PodSpec, Scheduler, explain
from scheduling.engine.batch.jobs import Job, JobRunner, Member
from scheduling.engine.batch.preempt import Preemptor, Rules, Tenant, Tenants
from scheduling.engine.batch.queues import QueueBook, QueueState
from scheduling.engine.chain import FILTERS, BaseFilter
from scheduling.engine.decision import PENDING, SCHEDULED

from .builders import GPU_POLICY, ask, card, card_row, node, picked, pod, run_one

CHAIN = {GPU_POLICY: "even-only"}


class EvenOnlyFilter(BaseFilter):
    """A toy card filter: a card whose index is odd stays out, whatever its tenants."""

    name = "even-only"
    words = "only cards with an even index pass"
    stage = "odd-index"
    stage_words = "its index is odd and the chain has even-only"
    reason = "CardOddIndex"
    reason_words = "{n} of {m} cards on {node} have an odd index (even-only)"

    def rejects(self, card, used):
        return (self.reason, self.stage) if card.index % 2 else None


@pytest.fixture
def even_only(monkeypatch):
    """The toy filter in the registry for one test; monkeypatch takes it out again."""
    monkeypatch.setitem(FILTERS, EvenOnlyFilter.name, EvenOnlyFilter())


def spec(name: str, memory: int) -> PodSpec:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": memory}
    return PodSpec(
        name=name,
        namespace="default",
        annotations=dict(CHAIN),
        containers=[{"name": "main", "resources": {"limits": limits}}],
    )


def cluster(used_memory: list[int]) -> Cluster:
    """One node `n1`, 8000 MiB cards with the MiB given held by one tenant each (0: empty)."""
    cards = [
        Card(uuid=f"G{i}", index=i, memory=8000, used_slots=int(m > 0), used_memory=m)
        for i, m in enumerate(used_memory)
    ]
    return Cluster([Node(name="n1", cards=cards)])


def test_unregistered_the_name_is_ignored_and_the_odd_card_is_taken():
    decision = Scheduler(cluster([8000, 0])).decide(spec("p", 1000))
    assert decision.status == SCHEDULED
    assert [d.uuid for d in decision.containers[0].devices] == ["G1"]
    assert decision.as_dict()["policy"]["ignored"] == ["even-only"]


def test_the_decision_obeys_it_and_counts_its_reason(even_only):
    scheduled = Scheduler(cluster([0, 0, 0, 0])).decide(spec("p", 1000))
    assert [d.uuid for d in scheduled.containers[0].devices] == ["G0"]
    decision = Scheduler(cluster([8000, 0])).decide(spec("p", 1000))
    assert decision.status == PENDING
    assert decision.as_dict()["failed_reasons"]["n1"]["reasons"] == {
        "CardInsufficientMemory": 1,
        "CardOddIndex": 1,
    }


def test_the_explanation_uses_its_words_and_stage(even_only):
    payload = Scheduler(cluster([8000, 0])).decide(spec("p", 1000)).as_dict()
    words = [line.words for line in explain.waiting_reasons(payload)]
    assert "1 of 2 cards on n1 have an odd index (even-only)" in words
    close = payload["closest_nodes"][0]
    assert close["missing"] == 1, "a card its card hook refused did not pass checks 1-10"
    odd = next(row for row in close["cards"] if row["uuid"] == "G1")
    assert (odd["stage"], odd["freeable"]) == ("odd-index", False), "tenants leaving cannot clear it"
    assert explain.card_words(odd).startswith("its index is odd and the chain has even-only (")


def test_the_preemption_trial_fit_frees_an_even_card(even_only):
    world = cluster([8000, 8000])
    tenants = [
        Tenant(
            key=f"default/{key}",
            namespace="default",
            node="n1",
            priority=0,
            queue="default",
            runtime_seconds=runtime,
            holdings=[(uuid, 8000, 0)],
        )
        for key, uuid, runtime in (("on-even", "G0", 7200), ("on-odd", "G1", 60))
    ]
    book = QueueBook([QueueState("default")], capacity={"vgpus": 20, "gpumem": 16000, "gpucores": 200})
    for tenant in tenants:
        book.add(tenant.queue, tenant.usage)
    scheduler = Scheduler(world)
    preemptor = Preemptor(scheduler, book, lambda: Tenants(list(tenants), {}), Rules())
    runner = JobRunner(scheduler, book, preemptor=preemptor)
    outcome = runner.run([Job("default", 100, (0, "p"), [Member(spec("p", 8000))])])[0]
    assert [t.key for t in outcome.victims] == ["default/on-even"], "the odd card is no use to the pod"


def test_the_scenario_output_shows_it(even_only):
    nodes = [node("n1", card("G0", used=(1, 15360, 0)), card("G1"), card("G2"), card("G3"))]
    out = run_one(nodes, pod("p", CHAIN, ask(gpu=1, mem=1000)))
    assert picked(out) == ["G2"]
    assert out["policy"]["filters"] == ["even-only"]
    assert (card_row(out, "G1")["reason"], card_row(out, "G1")["stage"]) == ("CardOddIndex", "odd-index")
    assert (card_row(out, "G3")["reason"], card_row(out, "G3")["stage"]) == ("CardOddIndex", "odd-index")
