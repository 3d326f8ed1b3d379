"""Elastic gangs (docs/queues.md, "Elastic gangs"): every gang reaches its `min_member` before
any gang takes extras, and a gang short of its minimum takes other gangs' extras back (equal
or lower priority, cheapest first), never below their minimum; extras never evict."""

from __future__ import annotations

from scheduling.engine import Card, Cluster, Node, Scheduler
from scheduling.engine.batch.jobs import GANG_UNSCHEDULABLE, Gang, Job, JobRunner, Member
from scheduling.engine.batch.preempt import NO_LOWER_PRIORITY
from scheduling.engine.batch.queues import QueueBook
from scheduling.engine.decision import PENDING, SCHEDULED

from .test_preempt import World, job, pod


def gang(name: str, size: int = 4, min_member: int = 2, priority: int = 0, placed: int = 0, mem=8000) -> Job:
    """A pending gang of `size` members (named after the `placed` ones already running)."""
    members = [Member(pod(f"{name}-{i}", mem=mem)) for i in range(placed, placed + size)]
    return Job(
        "default", priority, (0, name), members, Gang(f"default/{name}", min_member, size + placed, placed)
    )


def placed(outcomes, name: str) -> int:
    return sum(o.decision.status == SCHEDULED for o in outcomes if o.decision.name.startswith(f"{name}-"))


def running_gang(w: World, name: str, cards: list[int], min_member: int = 2, priority: int = 0, mem=8000):
    w.gang_min[f"default/{name}"] = min_member
    for i, card in enumerate(cards):
        w.run(f"{name}-{i}", "n1", {card: mem}, priority=priority, gang=f"default/{name}")


def test_two_elastic_gangs_on_four_cards_end_two_and_two():
    c = Cluster(
        [Node(name="n1", cards=[Card(uuid=f"GPU-{i}", index=i, memory=8000, slots=1) for i in range(4)])]
    )
    outcomes = JobRunner(Scheduler(c), QueueBook([])).run([gang("a"), gang("b")])
    assert (placed(outcomes, "a"), placed(outcomes, "b")) == (2, 2)
    # every member's outcome is there, the extras decided after both minimums
    assert [o.decision.name for o in outcomes] == ["a-0", "a-1", "b-0", "b-1", "a-2", "a-3", "b-2", "b-3"]
    assert {o.gang_needed for o in outcomes} == {2}  # the commit keeps a gang's extras with its minimum


def test_extras_fill_what_the_minimums_leave():
    c = Cluster(
        [Node(name="n1", cards=[Card(uuid=f"GPU-{i}", index=i, memory=8000, slots=1) for i in range(6)])]
    )
    outcomes = JobRunner(Scheduler(c), QueueBook([])).run([gang("a"), gang("b")])
    assert (placed(outcomes, "a"), placed(outcomes, "b")) == (4, 2)


def test_a_gang_short_of_its_minimum_takes_another_gangs_extras_of_equal_priority():
    """a took all four cards in an earlier cycle; b (same priority) arrives: it evicts two of
    a's extras, cheapest first, and a keeps its minimum of 2."""
    w = World({"n1": [8000] * 4}, slots=1)
    running_gang(w, "a", [0, 1, 2, 3])
    w.tenants[1].holdings = [(w.tenants[1].holdings[0][0], 6000, 0)]  # a-1 is the cheapest
    w.cluster.node("n1").cards[1].used_memory = 6000
    outcomes = w.runner().run([gang("b")])
    evicted = sorted(t.key for o in outcomes for t in o.victims)
    assert len(evicted) == 2 and "default/a-1" in evicted
    assert all(
        o.decision.preemption.victims[0].why.startswith("extra of gang default/a (")
        for o in outcomes
        if o.victims
    )
    preempting = [o for o in outcomes if o.victims]
    assert len(preempting) == 2  # b's minimum; its extras wait and evict nobody
    assert [o.victims for o in outcomes if o not in preempting] == [[], []]


def test_extras_are_never_taken_below_their_gangs_minimum():
    """a runs 3 with min_member 2: one extra. b needs 2: one card is not enough, so nothing is
    evicted and b says why."""
    w = World({"n1": [8000] * 3}, slots=1)
    running_gang(w, "a", [0, 1, 2])
    outcomes = w.runner().run([gang("b")])
    assert all(not o.victims for o in outcomes)
    assert {o.decision.batch.reason for o in outcomes} == {GANG_UNSCHEDULABLE}
    assert len(w.tenants) == 3


def test_two_extras_on_one_node_never_both_go_when_one_is_spare():
    """One node holds all three of a's members (min_member 2); b's one member asks two cards
    there: a single extra may go, two would break a's minimum, so none goes."""
    w = World({"n1": [8000] * 3}, slots=1)
    running_gang(w, "a", [0, 1, 2])
    two_cards = Job("default", 0, (0, "b"), [Member(pod("b-0", gpu=2, mem=8000))], Gang("default/b", 1, 1))
    (outcome,) = w.runner().run([two_cards])
    assert outcome.victims == [] and outcome.decision.status == PENDING
    # with two extras (a runs 4), two may go
    w = World({"n1": [8000] * 4}, slots=1)
    running_gang(w, "a", [0, 1, 2, 3])
    two_cards = Job("default", 0, (0, "b"), [Member(pod("b-0", gpu=2, mem=8000))], Gang("default/b", 1, 1))
    (outcome,) = w.runner().run([two_cards])
    assert len(outcome.victims) == 2
    # a higher-priority pod asking two of those cards: the gang keeps its minimum or goes whole
    w = World({"n1": [8000] * 3}, slots=1)
    running_gang(w, "a", [0, 1, 2])
    (outcome,) = w.runner().run([job("high", priority=100, gpu=2, mem=8000)])
    assert len(outcome.victims) in (0, 3)


def test_a_lower_priority_gang_and_a_single_pod_do_not_take_extras():
    w = World({"n1": [8000] * 4}, slots=1)
    running_gang(w, "a", [0, 1, 2, 3], priority=10)
    outcomes = w.runner().run([gang("b", priority=5), job("single", priority=10, mem=8000)])
    assert all(not o.victims for o in outcomes)
    single = next(o for o in outcomes if o.decision.name == "single")
    assert NO_LOWER_PRIORITY in single.decision.preemption.why


def test_extras_never_evict_even_lower_priority_tenants():
    """a already has its minimum; its pending extra does not evict the low-priority tenant."""
    w = World({"n1": [8000] * 3}, slots=1)
    running_gang(w, "a", [0, 1], priority=10)
    w.run("low", "n1", {2: 8000}, priority=0)
    outcomes = w.runner().run([gang("a", size=1, min_member=2, priority=10, placed=2)])
    assert outcomes[0].victims == [] and outcomes[0].decision.status == PENDING
