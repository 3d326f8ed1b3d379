"""A gang with a topology key (the Workload API's `schedulingConstraints.topology[].key`) is
placed within one value of that node label: values tried in order, the first where its
minimum fits kept, its extras there too; when none holds it, the verdict names the key."""

from __future__ import annotations

from scheduling.engine import Card, Cluster, Node, Scheduler
from scheduling.engine.batch.jobs import GANG_UNSCHEDULABLE, Gang, Job, JobRunner, Member
from scheduling.engine.batch.queues import QueueBook
from scheduling.engine.decision import SCHEDULED

from .test_preempt import pod

RACK = "topology.kubernetes.io/rack"


def node(name: str, rack: str | None, cards: int = 2) -> Node:
    return Node(
        name=name,
        labels={RACK: rack} if rack else {},
        cards=[Card(uuid=f"{name}-GPU-{i}", index=i, memory=8000, slots=1) for i in range(cards)],
    )


def gang(size: int, min_member: int, key: str = RACK, **selector) -> Job:
    members = []
    for i in range(size):
        spec = pod(f"w-{i}", mem=8000)
        spec.node_selector = dict(selector)
        members.append(Member(spec))
    return Job("default", 0, (0, "w"), members, Gang("default/w", min_member, size, topology_key=key))


def nodes_of(outcomes) -> list[str | None]:
    return [o.decision.node for o in outcomes if o.decision.status == SCHEDULED]


def test_the_gang_lands_in_the_first_rack_that_holds_its_minimum():
    """rack-a has 2 cards, rack-b 4 (over two nodes): a gang of 4 spreads over rack-b's two
    nodes and never over the racks, though rack-a's cards are free too."""
    cluster = Cluster([node("a1", "rack-a"), node("b1", "rack-b"), node("b2", "rack-b"), node("x", None, 4)])
    outcomes = JobRunner(Scheduler(cluster), QueueBook([])).run([gang(4, 4)])
    assert sorted(nodes_of(outcomes)) == ["b1", "b1", "b2", "b2"]


def test_extras_stay_in_the_gangs_rack():
    cluster = Cluster([node("a1", "rack-a", 3), node("b1", "rack-b", 4)])
    outcomes = JobRunner(Scheduler(cluster), QueueBook([])).run([gang(4, 2)])
    assert nodes_of(outcomes) == ["a1", "a1", "a1"], (
        "rack-a first: its minimum and one extra, no member in rack-b"
    )


def test_no_rack_holding_the_minimum_leaves_the_gang_waiting_naming_the_key():
    cluster = Cluster([node("a1", "rack-a"), node("b1", "rack-b"), node("x", None, 8)])
    outcomes = JobRunner(Scheduler(cluster), QueueBook([])).run([gang(3, 3)])
    assert not nodes_of(outcomes), "never split over racks, never on the node without the label"
    (message,) = {o.decision.batch.message for o in outcomes}
    assert {o.decision.batch.reason for o in outcomes} == {GANG_UNSCHEDULABLE}
    assert message.startswith(
        f"gang default/w: no value of node label {RACK} holds 3 members (rack-a: 2/3 members placeable; "
    )
    assert "; rack-b: 2/3 members placeable" in message


def test_no_node_with_the_label_says_so():
    outcomes = JobRunner(Scheduler(Cluster([node("x", None, 4)])), QueueBook([])).run([gang(2, 2)])
    assert {o.decision.batch.message for o in outcomes} == {f"gang default/w: no node has the label {RACK}"}


def test_a_members_own_selector_narrows_the_racks():
    cluster = Cluster([node("a1", "rack-a"), node("b1", "rack-b")])
    outcomes = JobRunner(Scheduler(cluster), QueueBook([])).run([gang(2, 2, **{RACK: "rack-b"})])
    assert nodes_of(outcomes) == ["b1", "b1"]


def test_without_a_key_the_gang_spreads_as_before():
    cluster = Cluster([node("a1", "rack-a"), node("b1", "rack-b")])
    outcomes = JobRunner(Scheduler(cluster), QueueBook([])).run([gang(4, 4, key="")])
    assert sorted(nodes_of(outcomes)) == ["a1", "a1", "b1", "b1"]


def test_a_gang_at_its_minimum_places_extras_only_in_its_rack():
    """Two members run in rack-a (an earlier cycle); the extras may take rack-a's last card but
    not rack-b's free ones, and a member whose own nodeSelector names rack-b waits saying so."""
    cluster = Cluster([node("a1", "rack-a", 3), node("b1", "rack-b", 4)])
    job = gang(3, 2)
    job.members[2].spec.node_selector = {RACK: "rack-b"}
    job.gang.placed, job.gang.domain = 2, "rack-a"
    outcomes = JobRunner(Scheduler(cluster), QueueBook([])).run([job])
    assert nodes_of(outcomes) == ["a1", "a1"]
    (apart,) = [o for o in outcomes if o.decision.name == "w-2"]
    assert apart.decision.batch.message == (
        f"gang default/w is in {RACK}=rack-a; this member's nodeSelector names {RACK}=rack-b"
    )
