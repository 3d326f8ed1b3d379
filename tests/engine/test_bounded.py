"""A scheduler that keeps only the first K node entries (`Scheduler(..., keep=K)`) decides as
one that keeps them all (issue 18).

The bounded decision must hold exactly the first K entries of the full `node_ranking`
(SPEC 7's order, 1e-9 ties by name) and of `node_failures` (by name), while the node, the
cards, the counts (`nodes_fit`, `nodes_failed`), the reason sums over every failed node and
the closest-nodes explanation stay those of the full decision; `as_dict(top=T)` for T <= K
gives the same dict. Streams of placements, rollbacks, reports and cordons come from the
reference tests, so the index is checked after any sequence of changes, not only cold.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine.decision import Decision
from scheduling.engine.evaluate import NodeVerdict
from scheduling.engine.fit import NodeFailure
from scheduling.engine.model import Cluster, ClusterConfig
from scheduling.engine.nodeindex import NodeIndex
from scheduling.engine.scenario import parse_scenario
from scheduling.engine.scheduler import Scheduler

from .builders import ask, card, node, pod, scenario
from .test_reference import BASES, NAMES, OFFSETS, apply_step, reference_order
from .worlds import Tape, from_tape, read_scenario, read_steps

STREAMS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ORDERS = settings(max_examples=1000, deadline=None)


def read_stream(tape: Tape) -> tuple[dict, list[tuple]]:
    """A cluster of 1 to 8 nodes, 2 to 8 pods, its policies, and 4 to 24 steps for `apply_step`."""
    return read_scenario(tape, NAMES, (1, 8), (2, 8)), read_steps(tape, 4, 24)


STREAM = from_tape(512, read_stream)


def assert_bounded_as_full(bounded: Decision, full: Decision, keep: int) -> None:
    """`bounded` (kept to `keep` entries) says what `full` says, less the entries past `keep`."""
    assert bounded.node_ranking == full.node_ranking[:keep]
    assert bounded.node_failures == full.node_failures[:keep]
    assert (bounded.nodes_fit, bounded.nodes_failed) == (len(full.node_ranking), len(full.node_failures))
    assert (full.nodes_fit, full.nodes_failed) == (len(full.node_ranking), len(full.node_failures))
    assert bounded.reasons == full.reasons
    assert (bounded.status, bounded.node, bounded.node_score) == (full.status, full.node, full.node_score)
    assert bounded.containers == full.containers and bounded.init_containers == full.init_containers
    assert (bounded.closest, bounded.never) == (full.closest, full.never)
    assert bounded.reason_text() == full.reason_text()
    for top in range(keep + 1):
        assert bounded.as_dict(top=top) == full.as_dict(top=top)
    whole = bounded.as_dict()
    assert (whole["nodes_fit"], whole["nodes_failed"]) == (len(full.node_ranking), len(full.node_failures))


def decide_both(bounded: Scheduler, full: Scheduler, spec, keep: int, per_call: bool) -> Decision:
    """The pod decided by both schedulers on the same nodes; the bounded decision."""
    if per_call:  # the bound given for this decision only, on an unbounded scheduler
        kept = bounded.decide(copy.deepcopy(spec), keep=keep)
    else:
        kept = bounded.decide(copy.deepcopy(spec))
    everything = full.decide(copy.deepcopy(spec))
    assert_bounded_as_full(kept, everything, keep)
    return kept


@STREAMS
@given(STREAM, st.integers(1, 4), st.booleans(), st.booleans())
def test_a_bounded_scheduler_keeps_the_first_k_entries_of_the_full_decision(stream, keep, columnar, per_call):
    """Both schedulers share the cluster, so each sees every placement, report and cordon;
    `columnar`: new shapes and changed nodes go through the numpy sweep however few nodes."""
    raw, steps = stream
    cluster, config, pods = parse_scenario(copy.deepcopy(raw))
    bounded = Scheduler(cluster, config, keep=None if per_call else keep)
    full = Scheduler(cluster, config)
    for scheduler in (bounded, full):
        scheduler.SWEEP_NODES = 0 if columnar else Scheduler.SWEEP_NODES
        scheduler.RESWEEP_NODES = 1 if columnar else Scheduler.RESWEEP_NODES
    assumed: list = []
    for kind, a, b in steps:
        if kind in ("place", "decide"):
            decision = decide_both(bounded, full, pods[a % len(pods)], keep, per_call)
            if kind == "place" and decision.status == "scheduled":
                bounded.assume(decision)  # what later decisions of both see
                assumed.append(decision)
        else:
            apply_step(bounded if a % 2 else full, pods, assumed, (kind, a, b))
    for spec in pods:
        decide_both(bounded, full, spec, keep, per_call)


@STREAMS
@given(STREAM, st.integers(1, 4))
def test_failed_names_lists_every_failed_node_a_bounded_decision_leaves_out(stream, keep):
    """What preemption searches: every failed node, by name, however few the decision kept."""
    raw, steps = stream
    cluster, config, pods = parse_scenario(copy.deepcopy(raw))
    bounded = Scheduler(cluster, config, keep=keep)
    assumed: list = []
    for kind, a, b in steps:
        if kind == "place":
            decision = bounded.decide(copy.deepcopy(pods[a % len(pods)]))
            if decision.status == "scheduled":
                bounded.assume(decision)
                assumed.append(decision)
        elif kind != "decide":
            apply_step(bounded, pods, assumed, (kind, a, b))
    for spec in pods:
        decision, parsed = bounded.decide_parsed(copy.deepcopy(spec))
        if parsed is None:
            continue
        full = Scheduler(cluster, config).decide(copy.deepcopy(spec))
        assert bounded.failed_names(parsed) == [name for name, _ in full.node_failures]
        assert len(bounded.failed_names(parsed)) == decision.nodes_failed


@ORDERS
@given(
    st.lists(
        st.tuples(
            st.sampled_from(NAMES + [f"m{i}" for i in range(20)]),
            st.sampled_from(BASES),
            st.sampled_from(OFFSETS),
        ),
        max_size=40,
    ),
    st.sampled_from([-1.0, 1.0]),
    st.integers(0, 1 << 30),
)
def test_the_index_gives_the_first_k_of_spec_7_order_through_any_changes(changes, sign, seed):
    """After every change, `NodeIndex.ranking(top)` equals the first `top` of SPEC 7's order for
    every `top`, asked before the full ranking is cached (so it orders the near-score runs
    itself, wherever `top` cuts a run or a group of ties) and after."""
    index = NodeIndex(sign)
    index.rebuild([])
    scores: dict[str, float] = {}
    for n, (name, base, offset) in enumerate(changes):
        if (seed >> (n % 30)) & 1 and name in scores:
            del scores[name]
            index.update(name, NodeVerdict(False, failure=NodeFailure(1, {"CardInsufficientMemory": 1})))
        else:
            scores[name] = base + offset
            index.update(name, NodeVerdict(True, score=base + offset))
        expected = reference_order([(sign * score, name, score) for name, score in scores.items()])
        tops = range(len(expected) + 2)
        assert [index.ranking(top) for top in tops] == [expected[:top] for top in tops]
        assert index.ranking() == expected
        assert [index.ranking(top) for top in tops] == [expected[:top] for top in tops]


#: MiB on one card so large that one MiB more in use moves the node score by 5e-10 (< 1e-9).
HUGE_CARD = 20_000_000_000


@STREAMS
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=10),
    st.sampled_from(["binpack", "spread"]),
    st.integers(1, 10),
)
def test_a_bound_that_cuts_a_group_of_near_scores_keeps_its_first_names(used, policy, keep):
    """Node scores that differ by less than 1e-9 (but are not equal) form groups ordered by
    name; the bound may fall inside one, and inside a run longer than 1e-9."""
    nodes = [
        node(f"n{i:02d}", card(f"C{i}", HUGE_CARD, used=(1, 1000 + extra, 0))) for i, extra in enumerate(used)
    ]
    raw = scenario(nodes, [pod("p", limits=ask(gpu=1, mem=1000))], node_scheduler_policy=policy)
    cluster, config, pods = parse_scenario(raw)
    full = Scheduler(cluster, config).decide(copy.deepcopy(pods[0]))
    assert full.nodes_fit == len(used)
    assert_bounded_as_full(Scheduler(cluster, config, keep=keep).decide(pods[0]), full, keep)


def test_a_group_tied_within_1e_9_cut_by_k_keeps_its_first_names():
    """Three scores within 1e-9 of each other, listed in score order opposite to name order:
    the first two kept are the first two by name, not the two best scores."""
    index = NodeIndex(-1.0)  # binpack: high first
    index.rebuild(
        [
            ("a", NodeVerdict(True, score=5.0)),
            ("b", NodeVerdict(True, score=5.0 + 6e-10)),
            ("c", NodeVerdict(True, score=5.0 + 9e-10)),
            ("d", NodeVerdict(True, score=1.0)),
        ]
    )
    assert [name for name, _ in index.ranking(2)] == ["a", "b"]
    assert [name for name, _ in index.ranking()] == ["a", "b", "c", "d"]


def test_counts_and_reasons_cover_every_node_while_the_lists_keep_k():
    raw = scenario(
        [node(f"free-{i}", card(f"F{i}")) for i in range(5)]
        + [node(f"full-{i}", card(f"X{i}", used=(10, 15360, 100))) for i in range(4)],
        [pod("p", limits=ask(gpu=1, mem=1000))],
    )
    cluster, config, pods = parse_scenario(raw)
    decision = Scheduler(cluster, config, keep=2).decide(pods[0])
    assert [name for name, _ in decision.node_ranking] == ["free-0", "free-1"]
    assert [name for name, _ in decision.node_failures] == ["full-0", "full-1"]
    assert (decision.nodes_fit, decision.nodes_failed) == (5, 4)
    assert sum(decision.reasons.values()) == 4  # one full card on each failed node, not two
    out = decision.as_dict(top=2)
    assert (out["nodes_fit"], out["nodes_failed"]) == (5, 4)
    assert list(out["node_scores"]) == ["free-0", "free-1"]
    assert decision.node_score == Scheduler(cluster, config).decide(pods[0]).node_score


def test_a_pending_pod_counts_every_failed_node_in_its_reason_line():
    raw = scenario([node(f"n{i}", card(f"C{i}")) for i in range(6)], [pod("big", limits=ask(gpu=3))])
    cluster, config, pods = parse_scenario(raw)
    decision = Scheduler(cluster, config, keep=1).decide(pods[0])
    assert decision.status == "pending" and len(decision.node_failures) == 1
    assert decision.reason_text().startswith("0/6 nodes are available:")


@pytest.mark.parametrize("keep", [0, -3, 1.5, "10", True])
def test_a_bound_that_is_not_a_whole_number_from_1_is_refused_naming_keep(keep):
    with pytest.raises(ValueError, match="keep"):
        Scheduler(Cluster([]), ClusterConfig(), keep=keep)
    with pytest.raises(ValueError, match="keep"):
        Scheduler(Cluster([]), ClusterConfig()).decide(
            parse_scenario({"nodes": [], "pods": [pod("p")]})[2][0], keep
        )


def test_a_decision_made_elsewhere_counts_its_complete_lists():
    """Decisions built outside the scheduler (held, rejected, tests) give no counts: their
    lists are complete, so the counts are their lengths."""
    failure = NodeFailure(1, {"CardInsufficientMemory": 1})
    decision = Decision(name="p", namespace="default", status="pending", node_failures=[("n1", failure)])
    assert (decision.nodes_fit, decision.nodes_failed) == (0, 1)
    assert decision.as_dict()["nodes_failed"] == 1


def test_a_rejected_pod_is_rejected_the_same_under_a_bound():
    bad = pod("bad", limits=ask(gpu=-1))
    cluster, config, specs = parse_scenario(scenario([node("n", card("C"))], [bad]))
    bounded = Scheduler(cluster, config, keep=1).decide(copy.deepcopy(specs[0]))
    full = Scheduler(cluster, config).decide(specs[0])
    assert bounded.status == "rejected"
    assert bounded.as_dict() == full.as_dict()
