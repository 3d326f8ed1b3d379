"""Batch terms of the engine: group and queue names, vGPU usage, the queue book, the Statement,
and the job runner (gangs all-or-nothing, queue limits, backfill without starvation)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import Card, Cluster, Node, PodInvalid, PodSpec, Scheduler
from scheduling.engine.annotations import group_ref, queue_ref
from scheduling.engine.batch.jobs import (
    GANG_UNSCHEDULABLE,
    NAMESPACE_QUOTA,
    NOT_ENOUGH_PODS,
    QUEUE_LIMIT,
    Gang,
    Job,
    JobRunner,
    Member,
)
from scheduling.engine.batch.queues import (
    DEFAULT_QUEUE,
    NamespaceBook,
    QueueBook,
    QueueState,
    decision_usage,
    quota_resource,
)
from scheduling.engine.batch.statement import Statement
from scheduling.engine.decision import PENDING, SCHEDULED


def cluster(nodes: int = 2, cards: int = 2, memory: int = 8000, slots: int = 10) -> Cluster:
    return Cluster(
        [
            Node(
                name=f"node{n}",
                cards=[Card(uuid=f"GPU-{n}-{i}", index=i, memory=memory, slots=slots) for i in range(cards)],
            )
            for n in range(nodes)
        ]
    )


def pod(name: str, gpu: int = 1, mem: int | None = 1000, pct: int | None = None, namespace="default", **ann):
    limits: dict = {"nvidia.com/gpu": gpu}
    if mem is not None:
        limits["nvidia.com/gpumem"] = mem
    if pct is not None:
        limits["nvidia.com/gpumem-percentage"] = pct
    return PodSpec(
        name=name,
        namespace=namespace,
        annotations=dict(ann),
        containers=[{"name": "main", "resources": {"limits": limits}}],
    )


def usage_of(c: Cluster) -> list[tuple]:
    return [
        (card.uuid, card.used_slots, card.used_memory, card.used_cores) for n in c.nodes for card in n.cards
    ]


# -- names ---------------------------------------------------------------------------------


def test_the_group_comes_from_the_first_place_that_names_it():
    assert group_ref({"hami.io/group-name": "g", "hami.io/group-min-member": "4"}).min_member == 4
    volcano = group_ref({"scheduling.k8s.io/group-name": "job-1"})
    assert (volcano.name, volcano.source, volcano.min_member) == ("job-1", "volcano", None)
    cosched = group_ref({}, {"scheduling.x-k8s.io/pod-group": "pg"})
    assert (cosched.name, cosched.source) == ("pg", "coscheduling")
    assert group_ref({}, {}) is None


@pytest.mark.parametrize(
    ("annotations", "labels", "field"),
    [
        ({"hami.io/group-name": ""}, {}, "hami.io/group-name"),
        ({"hami.io/group-name": "g", "hami.io/group-min-member": "two"}, {}, "hami.io/group-min-member"),
        ({"hami.io/group-name": "g", "hami.io/group-min-member": "0"}, {}, "hami.io/group-min-member"),
        ({"hami.io/group-min-member": "3"}, {}, "hami.io/group-min-member"),
        (
            {"hami.io/group-name": "a", "scheduling.k8s.io/group-name": "b"},
            {},
            "scheduling.k8s.io/group-name",
        ),
        ({"hami.io/group-name": "x" * 300}, {}, "hami.io/group-name"),
        ({"hami.io/group-name": "a\x00b"}, {}, "hami.io/group-name"),
    ],
)
def test_a_bad_group_annotation_names_its_field(annotations, labels, field):
    with pytest.raises(PodInvalid) as caught:
        group_ref(annotations, labels)
    assert caught.value.field == field


def test_the_queue_name_and_quota_resources():
    assert queue_ref({"hami.io/queue": "research"}) == "research"
    assert queue_ref({"scheduling.volcano.sh/queue-name": "q"}) == "q"
    assert queue_ref({}, {"kai.scheduler/queue": "team-a"}) == "team-a"
    assert queue_ref({}) is None
    with pytest.raises(PodInvalid) as caught:
        queue_ref({"hami.io/queue": " "})
    assert caught.value.field == "hami.io/queue"
    assert quota_resource("requests.nvidia.com/gpumem") == "gpumem"
    assert quota_resource("limits.nvidia.com/gpu") == "vgpus"
    assert quota_resource("nvidia.com/gpucores") == "gpucores"
    assert quota_resource("requests.cpu") is None


# -- usage in vGPU units -------------------------------------------------------------------


def test_a_two_card_ask_counts_every_vgpu_and_percentages_count_the_mib_granted():
    scheduler = Scheduler(cluster(nodes=1, cards=2, memory=8000))
    two = scheduler.decide(pod("two", gpu=2, mem=4000))
    assert two.status == SCHEDULED
    assert decision_usage(two) == {"vgpus": 2, "gpumem": 8000, "gpucores": 0}
    half = scheduler.decide(pod("half", gpu=1, mem=None, pct=50))
    assert decision_usage(half) == {"vgpus": 1, "gpumem": 4000, "gpucores": 0}


# -- the queue book ------------------------------------------------------------------------


def test_a_limit_binds_the_queue_and_every_ancestor_and_says_the_figures():
    book = QueueBook(
        [
            QueueState("org", limit={"gpumem": 100_000}),
            QueueState("research", parent="org", limit={"gpumem": 102_400}),
            QueueState("prod", parent="org"),
        ]
    )
    book.add("research", {"vgpus": 10, "gpumem": 81_920, "gpucores": 0})
    assert book.over_limit("research", {"gpumem": 40_960}) == (
        "queue research: gpumem 81920 + 40960 > limit 102400 MiB"
    )
    # the child has room, the parent does not: prod's ask is over org's limit
    assert book.over_limit("prod", {"gpumem": 20_000}) == "queue org: gpumem 81920 + 20000 > limit 100000 MiB"
    assert book.over_limit("prod", {"gpumem": 18_000}) is None
    assert book.leaf("org") == DEFAULT_QUEUE  # a parent takes no pods
    assert book.leaf("nope") == DEFAULT_QUEUE


def test_queues_below_their_guarantee_go_first_then_by_weighted_share():
    book = QueueBook(
        [
            QueueState("a", weight=1, guarantee={"vgpus": 10}),
            QueueState("b", weight=3),
        ],
        capacity={"vgpus": 100, "gpumem": 0, "gpucores": 0},
    )
    book.add("a", {"vgpus": 5})
    book.add("b", {"vgpus": 1})
    assert min(["a", "b"], key=book.order_key) == "a"  # a is below its guarantee
    book.add("a", {"vgpus": 10})  # a: 15 used of a 25 share; b: 1 used of 75
    assert min(["a", "b"], key=book.order_key) == "b"


# -- the Statement -------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["assume", "mark", "rollback"]), st.integers(1, 3), st.integers(1, 8)),
        max_size=30,
    )
)
def test_any_sequence_of_assume_and_rollback_leaves_the_snapshot_as_never_assumed(steps):
    c = cluster(nodes=2, cards=3, memory=8000, slots=4)
    scheduler = Scheduler(c)
    reference = Scheduler(cluster(nodes=2, cards=3, memory=8000, slots=4))
    statement = Statement(scheduler, QueueBook([QueueState("q")]), NamespaceBook())
    marks = [statement.mark()]
    live: list = []  # what a reference without rollbacks would hold
    for i, (step, gpu, mem) in enumerate(steps):
        if step == "mark":
            marks.append(statement.mark())
        elif step == "rollback":
            mark = marks.pop() if len(marks) > 1 else marks[0]
            statement.rollback(mark)
            del live[mark.at :]
        else:
            decision = scheduler.decide(pod(f"p{i}", gpu=gpu, mem=mem * 500))
            statement.assume(decision, "q")
            if decision.status == SCHEDULED:
                live.append(pod(f"p{i}", gpu=gpu, mem=mem * 500))
    for spec in live:
        reference.schedule(spec)
    assert usage_of(c) == usage_of(reference.cluster)
    # and decisions read the restored state, not a cached assumed one
    probe = pod("probe", gpu=2, mem=3000)
    assert scheduler.decide(probe).as_dict() | {"name": 0} == reference.decide(probe).as_dict() | {"name": 0}
    book_used = statement.book.queues["q"].used
    assert book_used["vgpus"] == sum(s for _, s, _, _ in usage_of(c))


def test_a_rollback_of_nothing_changes_nothing():
    c = cluster()
    statement = Statement(Scheduler(c))
    before = usage_of(c)
    assert statement.rollback(statement.mark()) == []
    assert usage_of(c) == before


# -- the job runner ------------------------------------------------------------------------


def gang_job(name: str, size: int, min_member: int, queue="default", priority=0, known=None, **pod_kwargs):
    members = [Member(pod(f"{name}-{i}", **pod_kwargs)) for i in range(size)]
    gang = Gang(f"default/{name}", min_member, known if known is not None else size)
    return Job(queue, priority, (0, name), members, gang)


def single_job(name: str, queue="default", priority=0, age=0, waited=0.0, **pod_kwargs):
    return Job(queue, priority, (age, name), [Member(pod(name, **pod_kwargs))], waited_seconds=waited)


def test_a_gang_that_cannot_reach_min_member_places_nothing_and_says_who_failed():
    c = cluster(nodes=1, cards=2, memory=8000, slots=1)  # room for two members, not three
    runner = JobRunner(Scheduler(c), QueueBook([]))
    outcomes = runner.run([gang_job("train", 3, 3, mem=6000)])
    assert [o.decision.status for o in outcomes] == [PENDING] * 3
    assert usage_of(c) == usage_of(cluster(nodes=1, cards=2, memory=8000, slots=1))
    first = outcomes[0].decision
    assert first.batch.reason == GANG_UNSCHEDULABLE
    assert first.batch.would_fit_on == "node0"
    assert first.reason_text().startswith(
        "GangUnschedulable: gang default/train: 2/3 members placeable; train-2: 0/1"
    )
    assert outcomes[2].decision.batch.reason == GANG_UNSCHEDULABLE


def test_a_gang_at_min_member_is_kept_and_members_beyond_it_go_when_they_fit():
    c = cluster(nodes=1, cards=2, memory=8000, slots=1)
    runner = JobRunner(Scheduler(c), QueueBook([]))
    outcomes = runner.run([gang_job("train", 3, 2, mem=6000)])
    assert [o.decision.status for o in outcomes] == [SCHEDULED, SCHEDULED, PENDING]
    assert all(o.gang_needed == 2 for o in outcomes)
    assert outcomes[2].decision.batch is None  # an extra member waits for cards, like a single pod


def test_a_gang_waits_for_its_members_and_one_already_running_counts():
    c = cluster(nodes=1, cards=1, memory=8000, slots=1)
    runner = JobRunner(Scheduler(c), QueueBook([]))
    waiting = runner.run([gang_job("g", 2, 3, known=2)])
    assert {o.decision.batch.reason for o in waiting} == {NOT_ENOUGH_PODS}
    assert waiting[0].decision.reason_text() == "NotEnoughPods: gang default/g: 2/3 members known"
    job = gang_job("h", 1, 2, known=2)
    job.gang.placed = 1  # one member holds cards already: one more reaches min_member
    (outcome,) = runner.run([job])
    assert outcome.decision.status == SCHEDULED and outcome.gang_needed == 1


def test_a_queue_limit_holds_a_pod_with_the_figures_and_backfill_goes_on():
    c = cluster(nodes=1, cards=2, memory=8000)
    book = QueueBook([QueueState("research", limit={"gpumem": 10_000})])
    book.add("research", {"gpumem": 6000})
    runner = JobRunner(Scheduler(c), book)
    outcomes = runner.run(
        [
            single_job("big", queue="research", priority=1, gpu=2, mem=4000),  # 8000 more: over
            single_job("small", queue="research", gpu=1, mem=3000),  # fits under the limit
        ]
    )
    by_name = {o.decision.name: o.decision for o in outcomes}
    assert by_name["big"].batch.reason == QUEUE_LIMIT
    assert by_name["big"].batch.message == "queue research: gpumem 6000 + 8000 > limit 10000 MiB"
    assert by_name["small"].status == SCHEDULED
    assert book.queues["research"].used["gpumem"] == 9000


def test_a_namespace_quota_counts_per_vgpu():
    c = cluster(nodes=1, cards=4, memory=8000)
    namespaces = NamespaceBook(hard={"team": {"gpumem": 10_000}})
    runner = JobRunner(Scheduler(c), QueueBook([]), namespaces)
    outcomes = runner.run(
        [
            single_job("a", gpu=2, mem=4000, namespace="team"),
            single_job("b", age=1, gpu=1, mem=4000, namespace="team"),
        ]
    )
    assert outcomes[0].decision.status == SCHEDULED  # 8000
    assert outcomes[1].decision.batch.reason == NAMESPACE_QUOTA  # 8000 + 4000 > 10000
    assert "namespace team: gpumem 8000 + 4000 > hard 10000 MiB" in outcomes[1].decision.reason_text()


def test_queues_take_turns_by_share():
    c = cluster(nodes=1, cards=4, memory=8000, slots=1)
    book = QueueBook(
        [QueueState("a"), QueueState("b")], capacity={"vgpus": 4, "gpumem": 32000, "gpucores": 400}
    )
    runner = JobRunner(Scheduler(c), book)
    jobs = [single_job(f"a{i}", queue="a", age=i, gpu=1, mem=1000) for i in range(4)]
    jobs += [single_job(f"b{i}", queue="b", age=10 + i, gpu=1, mem=1000) for i in range(4)]
    placed = [o.decision.name for o in runner.run(jobs) if o.decision.status == SCHEDULED]
    assert sorted(placed) == ["a0", "a1", "b0", "b1"]  # not a0-a3: the queues alternate


SPREAD = {"hami.io/node-scheduler-policy": "spread"}


def starvation_run(reserve_after, cycles=40):
    """Two nodes of one card; a stream of small pods spread over both (two arrive per cycle,
    each runs 2 cycles, so each card's two tenants end in turn and it is never empty), and one
    older pod that needs a whole card. Returns the cycle the big pod was placed in, or None."""
    c = cluster(nodes=2, cards=1, memory=8000, slots=4)
    scheduler = Scheduler(c)
    running: list[tuple[int, object]] = []
    for k, ends in enumerate((1, 2, 2, 1)):  # both cards busy at the start, ending apart
        running.append((ends, scheduler.schedule(pod(f"init{k}", gpu=1, mem=3000, **SPREAD))))
    pending: list[Job] = []
    for cycle in range(cycles):
        for entry in [r for r in running if r[0] <= cycle]:
            scheduler.unassume(entry[1])
            running.remove(entry)
        pending += [single_job(f"s{cycle}-{k}", age=cycle, gpu=1, mem=3000, **SPREAD) for k in range(2)]
        big = single_job("big", age=-1, gpu=1, mem=8000, waited=cycle * 10.0)
        runner = JobRunner(scheduler, QueueBook([]), reserve_after_seconds=reserve_after)
        jobs, pending = [*pending, big], []
        for outcome in runner.run(jobs):
            if outcome.decision.status == SCHEDULED:
                if outcome.decision.name == "big":
                    return cycle
                running.append((cycle + 2, outcome.decision))
            elif outcome.decision.name != "big":
                pending.append(outcome.job)
        for name in runner.reserved:  # a reservation lasts one cycle
            c.node(name).ready = True
            c.node(name).touch()
    return None


def test_backfill_does_not_starve_a_big_job():
    """Without reservations small pods keep refilling both cards and the big pod never fits;
    with them, the nodes it came closest on drain and it lands within a few cycles."""
    assert starvation_run(reserve_after=None) is None
    placed_in = starvation_run(reserve_after=30.0)
    assert placed_in is not None and placed_in <= 8


def test_a_random_mix_of_gangs_never_keeps_a_partial_gang():
    rng = random.Random(11)
    for _ in range(30):
        c = cluster(nodes=rng.randint(1, 3), cards=rng.randint(1, 4), memory=8000, slots=rng.randint(1, 3))
        runner = JobRunner(Scheduler(c), QueueBook([]))
        jobs = [
            gang_job(f"g{j}", rng.randint(1, 5), rng.randint(1, 5), mem=rng.choice([1000, 4000, 7000]))
            for j in range(rng.randint(1, 6))
        ]
        for job in jobs:
            job.gang.min_member = min(job.gang.min_member, len(job.members))
            job.gang.known = len(job.members)
        outcomes = runner.run(jobs)
        for job in jobs:
            placed = sum(o.decision.status == SCHEDULED for o in outcomes if o.job is job)
            assert placed == 0 or placed >= job.gang.min_member
        held = sum(o.decision.status == SCHEDULED for o in outcomes)
        assert held == sum(s for _, s, _, _ in usage_of(c))


# -- fair shares ---------------------------------------------------------------------------


def shares_of(book: QueueBook, wanting: set[str], resource: str = "vgpus") -> dict[str, float]:
    return {name: round(share[resource], 6) for name, share in book.fair_shares(wanting).items()}


def test_fair_share_splits_by_weight_among_queues_that_want_more():
    capacity = {"vgpus": 100, "gpumem": 0, "gpucores": 0}
    book = QueueBook([QueueState("a", weight=1), QueueState("b", weight=3)], capacity=capacity)
    assert shares_of(book, {"a", "b"}) == {"a": 25.0, "b": 75.0, "default": 0.0}
    # b wants no more than it uses (10): a gets the rest, default nothing
    book.add("b", {"vgpus": 10})
    assert shares_of(book, {"a"}) == {"a": 90.0, "b": 10.0, "default": 0.0}


def test_fair_share_gives_guarantees_first_and_never_passes_a_limit():
    capacity = {"vgpus": 100, "gpumem": 0, "gpucores": 0}
    book = QueueBook(
        [
            QueueState("a", weight=1, guarantee={"vgpus": 40}),
            QueueState("b", weight=1, limit={"vgpus": 10}),
            QueueState("c", weight=2),
        ],
        capacity=capacity,
    )
    shares = shares_of(book, {"a", "b", "c"})
    # 60 left after a's 40: b's quarter (15) is over its limit of 10, so 5 goes round again
    assert shares["b"] == 10.0
    assert shares["a"] + shares["c"] == 90.0
    assert shares["c"] == pytest.approx(2 * (shares["a"] - 40))


def test_fair_share_goes_down_the_tree():
    capacity = {"vgpus": 120, "gpumem": 0, "gpucores": 0}
    book = QueueBook(
        [
            QueueState("org", weight=2),
            QueueState("x", parent="org", weight=1),
            QueueState("y", parent="org", weight=1),
            QueueState("solo", weight=1),
        ],
        capacity=capacity,
    )
    shares = shares_of(book, {"x", "y", "solo"})
    assert (shares["org"], shares["solo"]) == (80.0, 40.0)
    assert shares["x"] == shares["y"] == 40.0


def test_queues_of_weight_one_and_three_converge_to_a_quarter_and_three_quarters():
    """Both queues always have work waiting; cycles place one vGPU at a time from the queue
    furthest below its fair share, and pods finish at random: the split settles at 25/75
    and does not flap once there."""
    rng = random.Random(2)
    c = cluster(nodes=4, cards=5, memory=8000, slots=1)  # 20 single-slot cards
    scheduler = Scheduler(c)
    book = QueueBook(
        [QueueState("a", weight=1), QueueState("b", weight=3)],
        capacity={"vgpus": 20, "gpumem": 160000, "gpucores": 2000},
    )
    running: list[tuple[str, object]] = []
    history = []
    for cycle in range(60):
        for entry in [r for r in running if rng.random() < 0.2]:
            scheduler.unassume(entry[1])
            book.add(entry[0], decision_usage(entry[1]), -1)
            running.remove(entry)
        jobs = [
            single_job(f"{q}{cycle}-{k}", queue=q, age=cycle, gpu=1, mem=1000)
            for q in "ab"
            for k in range(20)
        ]
        runner = JobRunner(scheduler, book)
        for outcome in runner.run(jobs):
            if outcome.decision.status == SCHEDULED:
                running.append((outcome.job.queue, outcome.decision))
        history.append((book.queues["a"].used["vgpus"], book.queues["b"].used["vgpus"]))
    late = history[20:]
    assert all(a + b == 20 for a, b in late)
    assert all(4 <= a <= 6 for a, _ in late), late  # a quarter of 20, give or take a pod


# -- gang-spread ---------------------------------------------------------------------------


def test_gang_spread_keeps_members_of_one_gang_off_each_others_cards():
    chain = {"hami.io/gpu-scheduler-policy": "gang-spread,binpack", "hami.io/group-name": "train"}

    def run(annotations):
        c = cluster(nodes=1, cards=2, memory=8000, slots=4)
        members = [Member(pod(f"w{i}", mem=2000, **annotations)) for i in range(2)]
        job = Job("default", 0, (0,), members, Gang("default/train", 2, 2))
        outcomes = JobRunner(Scheduler(c), QueueBook([])).run([job])
        return [o.decision.containers[0].devices[0].uuid for o in outcomes]

    assert run({"hami.io/gpu-scheduler-policy": "binpack", "hami.io/group-name": "train"}) == ["GPU-0-0"] * 2
    assert run(chain) == ["GPU-0-0", "GPU-0-1"]


def test_gang_spread_only_chooses_it_never_makes_a_node_unfit():
    c = cluster(nodes=1, cards=1, memory=8000, slots=4)
    c.nodes[0].cards[0].gangs = ("default/train",)
    spec = pod(
        "w", mem=2000, **{"hami.io/gpu-scheduler-policy": "gang-spread", "hami.io/group-name": "train"}
    )
    decision = Scheduler(c).decide(spec)
    assert decision.status == SCHEDULED  # the only card holds a gang-mate: taken all the same
    assert decision.policy["filters"] == ["gang-spread"]
