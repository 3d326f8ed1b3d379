"""Preemption and reclaim in the engine: victims chosen card by card with the pod's own fit
check, the fewest and least work, gangs whole or not at all, protections, caps, nominations,
and reclaim by fair share that settles without flapping."""

from __future__ import annotations

import random

from scheduling.engine import Card, Cluster, Node, PodSpec, Scheduler
from scheduling.engine.batch.jobs import Gang, Job, JobRunner, Member, Nominated
from scheduling.engine.batch.preempt import (
    BUDGET_USED,
    CAP_REACHED,
    GANG_PROTECTED,
    MIN_RUNTIME,
    NO_LOWER_PRIORITY,
    NON_PREEMPTIBLE,
    PREEMPTING,
    Preemptor,
    Rules,
    Tenant,
    Tenants,
    preemptible,
)
from scheduling.engine.batch.queues import QueueBook, QueueState
from scheduling.engine.decision import PENDING, SCHEDULED


def pod(name: str, gpu: int = 1, mem: int = 1000, cores: int | None = None, **annotations) -> PodSpec:
    limits: dict = {"nvidia.com/gpu": gpu, "nvidia.com/gpumem": mem}
    if cores is not None:
        limits["nvidia.com/gpucores"] = cores
    return PodSpec(
        name=name,
        namespace="default",
        annotations=dict(annotations),
        containers=[{"name": "main", "resources": {"limits": limits}}],
    )


def job(name: str, priority: int = 100, queue: str = "default", **kwargs) -> Job:
    return Job(queue, priority, (0, name), [Member(pod(name, **kwargs))])


class World:
    """A cluster with running tenants placed on named cards."""

    def __init__(self, nodes: dict[str, list[int]], slots: int = 10):
        self.cluster = Cluster(
            [
                Node(
                    name=name,
                    cards=[
                        Card(uuid=f"{name}-GPU-{i}", index=i, memory=m, slots=slots)
                        for i, m in enumerate(mems)
                    ],
                )
                for name, mems in nodes.items()
            ]
        )
        self.scheduler = Scheduler(self.cluster)
        self.tenants: list[Tenant] = []
        self.gang_min: dict[str, int] = {}
        self.gang_budget: dict[str, int] = {}

    def run(
        self,
        key: str,
        node: str,
        cards: dict[int, int],
        priority: int = 0,
        queue: str = "default",
        runtime: float = 3600,
        cores: int = 0,
        **fields,
    ) -> Tenant:
        holdings = []
        for index, memory in cards.items():
            card = self.cluster.node(node).cards[index]
            card.used_slots += 1
            card.used_memory += memory
            card.used_cores += cores
            holdings.append((card.uuid, memory, cores))
        tenant = Tenant(
            key=f"default/{key}",
            namespace="default",
            node=node,
            priority=priority,
            queue=queue,
            runtime_seconds=runtime,
            holdings=holdings,
            **fields,
        )
        self.tenants.append(tenant)
        return tenant

    def book(self, queues=("default",), weights=None) -> QueueBook:
        weights = weights or {}
        book = QueueBook([QueueState(q, weight=weights.get(q, 1)) for q in queues], capacity=self.capacity())
        for tenant in self.tenants:
            book.add(tenant.queue, tenant.usage)
        return book

    def capacity(self) -> dict:
        cards = [c for n in self.cluster.nodes for c in n.cards]
        return {
            "vgpus": sum(c.slots for c in cards),
            "gpumem": sum(c.memory for c in cards),
            "gpucores": 100 * len(cards),
        }

    def runner(self, book=None, **rules) -> JobRunner:
        book = book or self.book()
        preemptor = Preemptor(
            self.scheduler,
            book,
            lambda: Tenants(list(self.tenants), self.gang_min, self.gang_budget),
            Rules(**rules),
        )
        return JobRunner(self.scheduler, book, preemptor=preemptor)


def used(world: World) -> list[tuple]:
    return [(c.uuid, c.used_slots, c.used_memory, c.used_cores) for n in world.cluster.nodes for c in n.cards]


def test_the_tenant_whose_card_frees_enough_is_the_only_victim_and_the_pod_lands_there():
    w = World({"n1": [16000, 16000, 6000]})
    w.run("peer", "n1", {0: 10000}, priority=100)  # same priority: not a victim
    w.run("low", "n1", {1: 12000}, priority=0, runtime=7200)
    w.run("lowest", "n1", {2: 2000}, priority=-5, runtime=60)  # freeing GPU-2 leaves 6000 < 8000
    outcome = w.runner().run([job("big", mem=8000)])[0]
    decision = outcome.decision
    assert decision.status == PENDING
    assert decision.batch.reason == PREEMPTING
    assert [t.key for t in outcome.victims] == ["default/low"]
    assert decision.preemption.node == "n1"
    assert decision.preemption.as_dict()["grants"] == [["n1-GPU-1", 8000, 0]]
    assert decision.preemption.victims[0].cards == ["n1-GPU-1"]
    assert decision.preemption.victims[0].why == "priority 0 < 100"


def test_the_node_needing_the_fewest_victims_wins_then_the_least_work():
    w = World({"a": [8000], "b": [8000], "c": [8000]})
    w.run("a1", "a", {0: 4000})
    w.run("a2", "a", {0: 4000})
    w.run("b1", "b", {0: 7000})
    w.run("c1", "c", {0: 6000})
    outcome = w.runner().run([job("p", mem=8000)])[0]
    assert [t.key for t in outcome.victims] == ["default/c1"]  # one pod, 6000 MiB < 7000
    alternatives = {a["node"]: a["victims"] for a in outcome.decision.preemption.alternatives}
    assert alternatives == {"b": 1, "a": 2}


def test_nothing_is_evicted_when_only_equal_or_higher_priority_runs_and_the_pod_says_why():
    w = World({"n1": [8000]})
    w.run("same", "n1", {0: 8000}, priority=100)
    before = used(w)
    outcome = w.runner().run([job("p", mem=8000)])[0]
    assert outcome.victims == []
    assert outcome.decision.batch is None
    assert NO_LOWER_PRIORITY in outcome.decision.preemption.why
    # too common to repeat on the reason line: it stays in the decision's payload
    assert NO_LOWER_PRIORITY not in outcome.decision.reason_text()
    assert outcome.decision.as_dict()["preemption"]["misses"] == {NO_LOWER_PRIORITY: 1}
    assert used(w) == before


def test_protections_min_runtime_non_preemptible_and_protected_priority():
    w = World({"young": [8000], "marked": [8000], "system": [8000]})
    w.run("y", "young", {0: 8000}, runtime=10)
    w.run("m", "marked", {0: 8000}, preemptible=False)
    w.run("s", "system", {0: 8000}, priority=50)
    outcome = w.runner(min_runtime_seconds=60, protect_priority=50).run([job("p", mem=8000)])[0]
    assert outcome.victims == []
    why = outcome.decision.preemption.why
    assert MIN_RUNTIME in why and NON_PREEMPTIBLE in why
    assert preemptible({"hami.io/preemptible": "False"}) is False
    assert preemptible({"hami.io/preemptible": "true"}) and preemptible({})


def test_a_gang_victim_goes_whole_or_not_at_all():
    w = World({"n1": [8000], "n2": [8000]})
    w.gang_min["default/g"] = 2
    w.run("g-0", "n1", {0: 8000}, gang="default/g")
    w.run("g-1", "n2", {0: 8000}, gang="default/g")
    outcome = w.runner().run([job("p", mem=8000)])[0]
    assert sorted(t.key for t in outcome.victims) == ["default/g-0", "default/g-1"]
    # with one member protected, the gang cannot go at all
    w2 = World({"n1": [8000], "n2": [8000]})
    w2.gang_min["default/g"] = 2
    w2.run("g-0", "n1", {0: 8000}, gang="default/g")
    w2.run("g-1", "n2", {0: 8000}, gang="default/g", preemptible=False)
    outcome = w2.runner().run([job("p", mem=8000)])[0]
    assert outcome.victims == []
    assert GANG_PROTECTED in outcome.decision.preemption.why


def test_a_gang_member_beyond_min_member_may_go_alone():
    w = World({"n1": [8000], "n2": [8000], "n3": [8000]})
    w.gang_min["default/g"] = 2
    for i, name in enumerate(["n1", "n2", "n3"]):
        w.run(f"g-{i}", name, {0: 8000}, gang="default/g")
    outcome = w.runner().run([job("p", mem=8000)])[0]
    assert len(outcome.victims) == 1


def test_a_gang_budget_of_one_never_lets_two_members_go_at_once_and_two_does():
    def world(budget: int | None) -> World:
        w = World({"n1": [8000, 8000]})
        w.gang_min["default/g"] = 2  # losing one member, the gang goes whole: both cards
        if budget is not None:
            w.gang_budget["default/g"] = budget
        w.run("g-0", "n1", {0: 8000}, gang="default/g")
        w.run("g-1", "n1", {1: 8000}, gang="default/g")
        return w

    for budget in (None, 2):
        outcome = world(budget).runner().run([job("p", gpu=2, mem=8000)])[0]
        assert sorted(t.key for t in outcome.victims) == ["default/g-0", "default/g-1"]
    outcome = world(1).runner().run([job("p", gpu=2, mem=8000)])[0]
    assert outcome.victims == []
    assert BUDGET_USED in outcome.decision.preemption.why


def test_a_gang_budget_counts_the_evictions_of_the_cycle_and_the_ones_under_way():
    def world(left: int) -> World:
        w = World({"n1": [8000], "n2": [8000], "n3": [8000]})
        w.gang_min["default/g"] = 1
        w.gang_budget["default/g"] = left
        for i, name in enumerate(["n1", "n2", "n3"]):
            w.run(f"g-{i}", name, {0: 8000}, gang="default/g")
        return w

    outcomes = world(1).runner().run([job("p1", mem=8000), job("p2", mem=8000)])
    assert [len(o.victims) for o in outcomes] == [1, 0]  # each extra may go alone, but one at a time
    assert BUDGET_USED in outcomes[1].decision.preemption.why
    # max_evicted 1 with one member being evicted already: nothing left this cycle
    outcome = world(0).runner().run([job("p3", mem=8000)])[0]
    assert outcome.victims == [] and BUDGET_USED in outcome.decision.preemption.why


def test_a_preempting_gang_that_cannot_reach_min_member_evicts_nothing():
    w = World({"n1": [8000], "n2": [8000]})
    w.run("low", "n1", {0: 8000})
    w.run("peer", "n2", {0: 8000}, priority=100)
    before = used(w)
    members = [Member(pod(f"t-{i}", mem=8000)) for i in range(2)]
    gang = Job("default", 100, (0, "t"), members, Gang("default/t", 2, 2))
    outcomes = w.runner().run([gang])
    assert all(o.victims == [] for o in outcomes)
    assert all(o.decision.batch.reason == "GangUnschedulable" for o in outcomes)
    assert used(w) == before


def test_a_preempting_gang_evicts_for_every_member_at_once():
    w = World({"n1": [8000], "n2": [8000]})
    w.run("low1", "n1", {0: 8000})
    w.run("low2", "n2", {0: 8000})
    members = [Member(pod(f"t-{i}", mem=8000)) for i in range(2)]
    outcomes = w.runner().run([Job("default", 100, (0, "t"), members, Gang("default/t", 2, 2))])
    assert sorted(t.key for o in outcomes for t in o.victims) == ["default/low1", "default/low2"]
    assert {o.decision.preemption.node for o in outcomes} == {"n1", "n2"}


def test_the_cap_of_cards_per_cycle_stops_further_evictions():
    w = World({"n1": [8000], "n2": [8000]})
    w.run("low1", "n1", {0: 8000})
    w.run("low2", "n2", {0: 8000})
    outcomes = w.runner(max_cards=1).run([job("p1", mem=8000), job("p2", mem=8000)])
    assert [len(o.victims) for o in outcomes] == [1, 0]
    assert CAP_REACHED in outcomes[1].decision.preemption.why


def test_dry_run_explains_the_victims_and_evicts_nothing():
    w = World({"n1": [8000]})
    w.run("low", "n1", {0: 8000})
    before = used(w)
    outcome = w.runner(dry_run=True).run([job("p", mem=8000)])[0]
    assert outcome.victims == []
    assert outcome.decision.preemption.dry_run is True
    assert "would evict 1 pod on n1" in outcome.decision.reason_text()
    assert used(w) == before


def test_a_later_pod_in_the_cycle_does_not_take_the_cards_a_preemptor_freed():
    w = World({"n1": [8000]})
    w.run("low", "n1", {0: 8000})
    outcomes = w.runner().run([job("p", priority=100, mem=8000), job("q", priority=50, mem=8000)])
    assert len(outcomes[0].victims) == 1
    assert outcomes[1].decision.status == PENDING and outcomes[1].victims == []


def test_a_nomination_keeps_others_off_the_freed_cards_and_its_pod_takes_them():
    w = World({"n1": [8000]})
    nominated = {
        "default/p": Nominated("n1", [("n1-GPU-0", 8000, 0)], waiting=0, since_seconds=3, grace_seconds=60)
    }
    runner = JobRunner(w.scheduler, w.book(), nominations=dict(nominated))
    other = runner.run([job("q", priority=1000, mem=4000)])[0]
    assert other.decision.status == PENDING  # the card is empty, but nominated
    mine = runner.run([job("p", mem=8000)])[0]
    assert mine.decision.status == SCHEDULED and mine.decision.node == "n1"


def test_a_nominated_pod_still_waiting_says_so_and_does_not_preempt_again():
    w = World({"n1": [8000], "n2": [8000]})
    w.run("victim", "n1", {0: 8000})  # still terminating
    w.run("other", "n2", {0: 8000})
    nominated = {
        "default/p": Nominated("n1", [("n1-GPU-0", 8000, 0)], waiting=1, since_seconds=5, grace_seconds=60)
    }
    book = w.book()
    preemptor = Preemptor(
        w.scheduler, book, lambda: Tenants([t for t in w.tenants if t.key != "default/victim"]), Rules()
    )
    outcome = JobRunner(w.scheduler, book, preemptor=preemptor, nominations=nominated).run(
        [job("p", mem=8000)]
    )[0]
    assert outcome.victims == []
    assert outcome.decision.batch.reason == "Nominated"
    assert "waiting for 1 victim to release" in outcome.decision.batch.message


def test_a_whole_node_gang_evicts_no_more_than_the_cheapest_nodes_hold():
    """KAI's 376-for-48 shape: 6 members of 8 cards each on a cluster of busy nodes; the least
    disruption is the 6 nodes with the fewest tenants, one big tenant each."""
    rng = random.Random(7)
    nodes = {f"n{i:02d}": [8000] * 8 for i in range(40)}
    w = World(nodes)
    big = rng.sample(sorted(nodes), 8)
    for name in nodes:
        if name in big:
            w.run(f"{name}-whole", name, dict.fromkeys(range(8), 8000))
        else:
            for i in range(8):
                for k in range(rng.randint(1, 4)):
                    w.run(f"{name}-{i}-{k}", name, {i: 2000})
    members = [Member(pod(f"train-{i}", gpu=8, mem=8000)) for i in range(6)]
    outcomes = w.runner(max_cards=1000).run(
        [Job("default", 100, (0, "train"), members, Gang("default/train", 6, 6))]
    )
    evicted = [t.key for o in outcomes for t in o.victims]
    assert len(evicted) == 6  # the lower bound: one whole-node tenant per member
    assert all(key.endswith("-whole") for key in evicted)


def test_reclaim_between_weight_one_and_three_settles_at_a_quarter_and_does_not_flap():
    """Queue a fills 20 single-slot cards; b (weight 3) arrives with more work than fits. Each
    cycle b reclaims from a while b stays within its fair share and a does not fall below
    its own; evicted pods of a come back as pending work. The split settles at 5/15."""
    w = World({f"n{i}": [8000] * 5 for i in range(4)}, slots=1)
    for n in range(4):
        for i in range(5):
            w.run(f"a-{n}-{i}", f"n{n}", {i: 1000}, queue="a")
    book = w.book(queues=("a", "b"), weights={"a": 1, "b": 3})
    history, evictions = [], []
    for cycle in range(12):
        jobs = [job(f"b{cycle}-{k}", priority=0, queue="b") for k in range(20)]
        jobs += [job(f"a{cycle}-{k}", priority=0, queue="a") for k in range(5)]
        preemptor = Preemptor(w.scheduler, book, lambda: Tenants(list(w.tenants)), Rules(max_cards=4))
        runner = JobRunner(w.scheduler, book, preemptor=preemptor)
        count = 0
        for outcome in runner.run(jobs):
            for victim in outcome.victims:
                w.tenants.remove(victim)
                count += 1
            if outcome.victims:  # the victims are gone by the next cycle: the preemptor runs
                grant = outcome.decision.preemption.as_dict()["grants"][0]
                w.tenants.append(
                    Tenant(
                        key=outcome.decision.name,
                        namespace="default",
                        node=outcome.decision.preemption.node,
                        queue=outcome.job.queue,
                        runtime_seconds=3600,
                        holdings=[tuple(grant)],
                    )
                )
            elif outcome.decision.status == SCHEDULED:
                w.tenants.append(
                    Tenant(
                        key=outcome.decision.name,
                        namespace="default",
                        node=outcome.decision.node,
                        queue=outcome.job.queue,
                        runtime_seconds=3600,
                        holdings=[
                            (d.uuid, d.memory, d.cores) for d in outcome.decision.containers[0].devices
                        ],
                    )
                )
        # the snapshot as the next cycle loads it: the evicted are gone, the preemptors run
        book = w.book(queues=("a", "b"), weights={"a": 1, "b": 3})
        for n in w.cluster.nodes:
            for c in n.cards:
                c.used_slots = c.used_memory = c.used_cores = 0
        for t in w.tenants:
            for uuid, memory, cores in t.holdings:
                c = next(c for n in w.cluster.nodes for c in n.cards if c.uuid == uuid)
                c.used_slots += 1
                c.used_memory += memory
                c.used_cores += cores
            w.cluster.node(t.node).touch()
        w.scheduler = Scheduler(w.cluster)
        history.append((book.queues["a"].used["vgpus"], book.queues["b"].used["vgpus"]))
        evictions.append(count)
    assert history[-1] == (5, 15), history
    settled = history.index((5, 15))
    assert settled <= 5, history
    assert all(h == (5, 15) for h in history[settled:]), history  # no flapping
    assert sum(evictions) == 15  # every eviction moved the split toward the fair share
    assert [a for a, _ in history] == sorted((a for a, _ in history), reverse=True)


def test_each_alternative_says_why_it_lost():
    w = World({"n1": [8000], "n2": [8000], "n3": [8000]})
    w.run("one", "n1", {0: 5000})
    w.run("two-a", "n2", {0: 2000})
    w.run("two-b", "n2", {0: 3000})
    w.run("heavier", "n3", {0: 6000})
    (outcome,) = w.runner().run([job("p", mem=8000)])
    preemption = outcome.decision.preemption
    assert preemption.node == "n1"
    assert {a["node"]: a["why"] for a in preemption.alternatives} == {
        "n3": "6000 MiB evicted > 5000 MiB",
        "n2": "2 victims > 1",
    }
