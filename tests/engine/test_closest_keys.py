"""A pending decision reads the closeness keys kept for its shape (issue 29): the same payload
as a fresh scheduler's, and nothing measured again when nothing changed.

`Scheduler` keeps, per pod shape, every node's closeness key over the card columns
(`closeness.ClosestKeys`) and updates only the rows of the nodes touched since it last
looked. Streams of placements, rollbacks, reports, cordons and replaced cards (the
reference tests' `apply_step`) are decided after every step by the scheduler that keeps
them and by a fresh one: the decisions, closest nodes, card tables, hints and the
never-fits reason included, must be equal. A head of 0 or 2 failed nodes past the kept
ones makes the head run short and be sorted again often.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.engine.closeness import closest_columns
from scheduling.engine.columns import sweepable
from scheduling.engine.pod import parse_pod
from scheduling.engine.scenario import parse_scenario
from scheduling.engine.scheduler import Scheduler

from .builders import ask, card, node, pod, scenario
from .test_reference import EXAMPLES, STREAMS, apply_step, batch, start
from .worlds import GPU_POLICIES, NODE_POLICIES

#: (closest nodes kept, head past them)
HEADS = [(1, 0), (2, 2), (5, 0), (5, 64)]


def columnar(scheduler: Scheduler) -> Scheduler:
    """Closeness over the card columns however few the nodes."""
    scheduler.SWEEP_NODES = 0
    scheduler.RESWEEP_NODES = 1
    return scheduler


@pytest.mark.parametrize(("closest", "head"), HEADS)
@batch(EXAMPLES * 0.05, len(HEADS))
@given(stream=STREAMS, node_policy=st.sampled_from(NODE_POLICIES), gpu_policy=st.sampled_from(GPU_POLICIES))
def test_a_pending_decision_from_the_kept_keys_reads_as_a_fresh_schedulers(
    closest, head, stream, node_policy, gpu_policy
):
    raw, steps = stream
    cluster, config, pods = start(raw, steps, node_policy, gpu_policy)
    config = replace(config, closest_nodes=closest)
    kept = columnar(Scheduler(cluster, config))
    kept.CLOSEST_HEAD = head
    assumed: list = []
    for step in steps:
        apply_step(kept, pods, assumed, step)
        for spec in pods:
            fresh = columnar(Scheduler(cluster, config))
            assert kept.decide(spec).as_dict() == fresh.decide(spec).as_dict()


def test_the_keys_kept_answer_again_without_measuring_when_no_node_changed():
    cluster, config, (waiting,) = parse_scenario(
        scenario(
            [node(f"n{i}", card(f"G{i}", 8000, used=(1, 2000 + 1000 * i, 0))) for i in range(1, 5)],
            [pod("wait", None, ask(gpu=1, mem=6000))],
        )
    )
    scheduler = columnar(Scheduler(cluster, config))
    first = scheduler.decide(waiting)
    assert first.status == "pending"
    assert [c["node"] for c in first.as_dict()["closest_nodes"]] == ["n1", "n2", "n3", "n4"]
    parsed = parse_pod(waiting, config)
    shape = (parsed.fit_shape, parsed.policy.weights)
    (entry,) = scheduler._closest_keys.values()
    keys, answered = entry[2], entry[2].answer(scheduler._columns_now())
    assert scheduler.decide(waiting).as_dict() == first.as_dict()
    assert scheduler._closest_keys[(shape, config.closest_nodes)][2] is keys
    assert keys.answer(scheduler._columns_now()) is answered, "nothing changed: the answer as it was"
    # one node moves: only its keys are computed again, and the answer follows it
    cluster.node("n1").cards[0].used_memory = 7500
    cluster.node("n1").touch()
    moved = scheduler.decide(waiting)
    assert scheduler._closest_keys[(shape, config.closest_nodes)][2] is keys
    ask_ = sweepable(parsed.gpu_inits, list(parsed.apps), parsed.policy)
    fresh = closest_columns(scheduler._columns_now(), ask_, parsed.policy, config.closest_nodes)
    assert keys.answer(scheduler._columns_now()) == fresh
    assert [c["node"] for c in moved.as_dict()["closest_nodes"]] == ["n2", "n3", "n4", "n1"]
