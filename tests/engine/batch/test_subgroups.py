"""A gang's parts (docs/queues.md, "Subgroups"): each part (a PyTorchJob's master and workers,
Volcano's tasks, a JobSet's jobs) reaches its own minimum or the gang does not start; the
members beyond each part's minimum are extras."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import Card, Cluster, Node, Scheduler
from scheduling.engine.annotations import subgroup_of
from scheduling.engine.batch.jobs import GANG_UNSCHEDULABLE, NOT_ENOUGH_PODS, Gang, Job, JobRunner, Member
from scheduling.engine.batch.queues import QueueBook
from scheduling.engine.decision import SCHEDULED
from scheduling.engine.model import PodSpec

REPLICA = "training.kubeflow.org/replica-type"


def member(name: str, mem: int = 8000, labels: dict | None = None, annotations: dict | None = None) -> Member:
    return Member(
        PodSpec(
            name=name,
            namespace="default",
            annotations=dict(annotations or {}),
            labels=dict(labels or {}),
            containers=[
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem}}}
            ],
        )
    )


def cards(n: int, memory: int = 8000) -> Cluster:
    return Cluster(
        [Node(name="n1", cards=[Card(uuid=f"GPU-{i}", index=i, memory=memory, slots=1) for i in range(n)])]
    )


def pytorchjob(master_mem: int = 8000, workers: int = 7, min_available: int = 4) -> Job:
    """A PyTorchJob with `minAvailable` of a master and `workers` workers, as kube/owners.py
    reads it: the master's part keeps its 1, the workers' part the rest of minAvailable."""
    members = [member("pt-master-0", master_mem, {REPLICA: "master"})]
    members += [member(f"pt-worker-{i}", labels={REPLICA: "worker"}) for i in range(workers)]
    gang = Gang(
        "default/pt", min_available, len(members), subgroups={"Master": 1, "Worker": min_available - 1}
    )
    return Job("default", 0, (0, "pt"), members, gang)


def scheduled(outcomes, prefix: str) -> int:
    return sum(o.decision.status == SCHEDULED for o in outcomes if o.decision.name.startswith(prefix))


def test_a_pytorchjob_whose_master_cannot_fit_does_not_start_on_four_workers():
    outcomes = JobRunner(Scheduler(cards(8)), QueueBook([])).run([pytorchjob(master_mem=20000)])
    assert scheduled(outcomes, "pt-") == 0
    verdicts = {o.decision.batch.message for o in outcomes if o.decision.batch is not None}
    assert len(verdicts) == 1
    (message,) = verdicts
    assert message.startswith(
        "gang default/pt: subgroup Master: 0/1 placeable; 3/4 members placeable; pt-master-0:"
    )
    assert {o.decision.batch.reason for o in outcomes} == {GANG_UNSCHEDULABLE}


def test_a_pytorchjob_starts_with_its_master_first_then_takes_workers_as_extras():
    outcomes = JobRunner(Scheduler(cards(5)), QueueBook([])).run([pytorchjob()])
    assert scheduled(outcomes, "pt-master") == 1
    assert scheduled(outcomes, "pt-worker") == 4  # 3 for the minimum, one extra on the fifth card
    assert {o.gang_needed for o in outcomes} == {4}


@settings(max_examples=40, deadline=None)
@given(
    free=st.integers(min_value=0, max_value=9),
    master_fits=st.booleans(),
    workers=st.integers(min_value=3, max_value=8),
    min_available=st.integers(min_value=2, max_value=4),
)
def test_a_pytorchjob_never_starts_without_its_master_or_short_of_its_workers(
    free, master_fits, workers, min_available
):
    outcomes = JobRunner(Scheduler(cards(free)), QueueBook([])).run(
        [pytorchjob(8000 if master_fits else 20000, workers, min_available)]
    )
    masters, hands = scheduled(outcomes, "pt-master"), scheduled(outcomes, "pt-worker")
    assert (masters, hands) == (0, 0) or (masters == 1 and hands >= min_available - 1)
    started = master_fits and free >= min_available
    assert (masters + hands > 0) == started
    if started:
        assert masters + hands == min(free, 1 + workers)  # extras take what is left


def test_volcano_task_minimums_count_beyond_min_member():
    """minMember 2, minTaskMember {ps: 1, worker: 2}: Volcano starts it with 3."""
    task = "volcano.sh/task-spec"
    members = [member("tf-ps-0", annotations={task: "ps"})]
    members += [member(f"tf-worker-{i}", annotations={task: "worker"}) for i in range(3)]
    job = Job("default", 0, (0, "tf"), members, Gang("default/tf", 2, 4, subgroups={"ps": 1, "worker": 2}))
    assert job.gang.min_member == 3
    outcomes = JobRunner(Scheduler(cards(2)), QueueBook([])).run([job])
    assert scheduled(outcomes, "tf-") == 0
    outcomes = JobRunner(Scheduler(cards(3)), QueueBook([])).run([job])
    assert (scheduled(outcomes, "tf-ps"), scheduled(outcomes, "tf-worker")) == (1, 2)


def test_a_part_short_of_known_members_waits_naming_it():
    members = [member(f"tf-worker-{i}", annotations={"volcano.sh/task-spec": "worker"}) for i in range(4)]
    job = Job("default", 0, (0, "tf"), members, Gang("default/tf", 3, 4, subgroups={"ps": 1, "worker": 2}))
    outcomes = JobRunner(Scheduler(cards(8)), QueueBook([])).run([job])
    assert scheduled(outcomes, "tf-") == 0
    assert {(o.decision.batch.reason, o.decision.batch.message) for o in outcomes} == {
        (NOT_ENOUGH_PODS, "gang default/tf: subgroup ps: 0/1 members known")
    }


def test_each_jobset_job_gets_its_minimum_before_either_takes_extras():
    """Two replicated jobs of 2 (min_member 4) with a third pod each, listed job a first, on 4
    cards: 2 + 2, not a's three and one of b's."""
    job_label = "jobset.sigs.k8s.io/replicatedjob-name"
    members = [member(f"js-a-{i}", labels={job_label: "a"}) for i in range(3)]
    members += [member(f"js-b-{i}", labels={job_label: "b"}) for i in range(3)]
    job = Job("default", 0, (0, "js"), members, Gang("default/js", 4, 6, subgroups={"a": 2, "b": 2}))
    outcomes = JobRunner(Scheduler(cards(4)), QueueBook([])).run([job])
    assert (scheduled(outcomes, "js-a"), scheduled(outcomes, "js-b")) == (2, 2)


def test_a_running_gang_missing_its_master_places_it_as_its_minimum():
    """Four workers run (min_member reached) but the master's pod was recreated: the master is
    tried as the gang's minimum, not as an extra."""
    job = Job(
        "default",
        0,
        (0, "pt"),
        [member("pt-master-0", labels={REPLICA: "master"})],
        Gang("default/pt", 4, 5, placed=4, subgroups={"Master": 1, "Worker": 3}, parts_placed={"Worker": 4}),
    )
    outcomes = JobRunner(Scheduler(cards(1)), QueueBook([])).run([job])
    assert scheduled(outcomes, "pt-master") == 1
    assert outcomes[0].gang_needed == 1


def test_a_pods_part_is_read_from_what_its_operator_stamps():
    parts = {"head", "gpu-workers"}
    assert subgroup_of({}, {"ray.io/node-type": "head", "ray.io/group": "headgroup"}, parts) == "head"
    assert (
        subgroup_of({}, {"ray.io/node-type": "worker", "ray.io/group": "gpu-workers"}, parts) == "gpu-workers"
    )
    lws = {"leader", "workers"}
    assert subgroup_of({}, {"leaderworkerset.sigs.k8s.io/worker-index": "0"}, lws) == "leader"
    assert subgroup_of({}, {"leaderworkerset.sigs.k8s.io/worker-index": "3"}, lws) == "workers"
    assert subgroup_of({}, {REPLICA: "worker"}, {"Master", "Worker"}) == "Worker"
    # KAI's label wins over what the operator stamps; a name of no part is no part
    assert (
        subgroup_of({}, {"kai.scheduler/subgroup-name": "decode", REPLICA: "worker"}, {"decode", "Worker"})
        == "decode"
    )
    assert subgroup_of({}, {REPLICA: "evaluator"}, {"Master", "Worker"}) == ""


def test_a_gang_whose_pods_name_no_part_is_held_to_its_min_member_only():
    """Pods without their operator's labels cannot be told apart: the parts are set aside
    rather than the gang waiting for ever."""
    members = [member(f"js-{i}") for i in range(4)]
    job = Job("default", 0, (0, "js"), members, Gang("default/js", 4, 4, subgroups={"a": 2, "b": 2}))
    outcomes = JobRunner(Scheduler(cards(4)), QueueBook([])).run([job])
    assert scheduled(outcomes, "js-") == 4


def test_a_gang_taking_extras_back_never_takes_a_part_below_its_own_minimum():
    """a runs its master and 3 workers (min_member 2: Master 1, Worker 1): two are extras, but
    never the master, first in preference order as it is (all cost the same, its name sorts
    first); b's member takes a worker's card instead."""
    from scheduling.engine.batch.preempt import Preemptor, Rules, Tenants

    from .test_preempt import World

    w = World({"n1": [8000] * 4}, slots=1)
    master = w.run("a-master", "n1", {0: 8000}, gang="default/a", part="Master")
    for i in (1, 2, 3):
        w.run(f"a-worker-{i}", "n1", {i: 8000}, gang="default/a", part="Worker")
    book = w.book()
    tenants = lambda: Tenants(  # noqa: E731
        list(w.tenants), {"default/a": 2}, None, {("default/a", "Master"): 1, ("default/a", "Worker"): 1}
    )
    runner = JobRunner(w.scheduler, book, preemptor=Preemptor(w.scheduler, book, tenants, Rules()))
    b = Job("default", 0, (0, "b"), [member("b-0", mem=8000)], Gang("default/b", 1, 1))
    (outcome,) = runner.run([b])
    assert [t.key for t in outcome.victims] and master not in outcome.victims
    assert outcome.victims[0].part == "Worker"
