"""The indexed scheduler decides exactly as a plain walk over every node (SPEC 4, 7).

`Scheduler` keeps per-shape node indexes that it updates only for the nodes touched since
it last looked. The reference here is the walk it replaced: evaluate every node with
`evaluate.evaluate_node`, order the fitting ones per SPEC 7 (binpack high first, spread low
first, scores within 1e-9 grouped from the lowest and ordered by name), sum the failed
nodes' reasons. Streams interleave placements (`assume`), their rollback (`unassume`),
reports that change a node's usage, health or cards behind the scheduler's back, and
cordons; after every step the indexed decision must equal the reference one, and also a
fresh scheduler's (no index history), explanation included.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine.chain import TOLERANCE
from scheduling.engine.closeness import closest_columns, cluster_never, never_reason, node_closeness
from scheduling.engine.errors import PodInvalid
from scheduling.engine.evaluate import NodeVerdict, evaluate_node, sweepable
from scheduling.engine.fit import NodeFailure
from scheduling.engine.model import Cluster
from scheduling.engine.pod import parse_pod
from scheduling.engine.scenario import parse_scenario
from scheduling.engine.scheduler import NodeIndex, Scheduler, _order_nodes

from .test_properties import node_strategy, pod_strategy

STREAMS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ORDERS = settings(max_examples=1500, deadline=None)

NAMES = [f"n{i:02d}" for i in range(12)]


def reference_order(fitting: list[tuple[float, str, float]]) -> list[tuple[str, float]]:
    """SPEC 7 written out: sort on (sign x score, name); then, from the lowest, each group is
    every node within 1e-9 of the group's first, and a group goes by name."""
    keyed = sorted(fitting)
    out: list[tuple[str, float]] = []
    start = 0
    while start < len(keyed):
        end = start
        while end < len(keyed) and keyed[end][0] - keyed[start][0] < TOLERANCE:
            end += 1
        out.extend((name, score) for _, name, score in sorted(keyed[start:end], key=lambda item: item[1]))
        start = end
    return out


def reference_sweep(cluster: Cluster, parsed) -> tuple[list, list, dict]:
    """Every node evaluated afresh: (node ranking, failed nodes by name, reason sums)."""
    sign = -1.0 if parsed.policy.node_policy == "binpack" else 1.0
    fitting, failed, reasons = [], [], {}
    for node in cluster.nodes:
        verdict = evaluate_node(node, parsed.gpu_inits, list(parsed.apps), parsed.policy)
        if verdict.failure is None:
            fitting.append((sign * verdict.score, node.name, verdict.score))
        else:
            failed.append((node.name, verdict.failure))
            for reason, n in verdict.failure.reasons.items():
                reasons[reason] = reasons.get(reason, 0) + n
    return reference_order(fitting), failed, reasons


def check_against_reference(scheduler: Scheduler, pod) -> object:
    decision = scheduler.decide(pod)
    try:
        parsed = parse_pod(pod, scheduler.config)
    except PodInvalid:
        assert decision.status == "rejected"
        return decision
    ranking, failed, reasons = reference_sweep(scheduler.cluster, parsed)
    assert decision.node_ranking == ranking
    assert decision.node == (ranking[0][0] if ranking else None)
    assert decision.node_failures == failed
    assert decision.reasons == reasons
    fresh = Scheduler(scheduler.cluster, scheduler.config).decide(copy.deepcopy(pod))
    assert decision.as_dict() == fresh.as_dict()
    return decision


@st.composite
def stream_strategy(draw) -> tuple[dict, list[tuple]]:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=8, unique=True))
    nodes = [draw(node_strategy(name)) for name in names]
    uuids = [c["uuid"] for n in nodes for c in n["devices"]]
    pods = [draw(pod_strategy(f"pod-{i}", uuids)) for i in range(draw(st.integers(2, 8)))]
    config = {
        "node_scheduler_policy": draw(st.sampled_from(["binpack", "spread"])),
        "gpu_scheduler_policy": draw(st.sampled_from(["spread", "binpack", "mutex,binpack", "numa,spread"])),
    }
    steps = []
    for _ in range(draw(st.integers(4, 24))):
        kind = draw(
            st.sampled_from(["place", "place", "place", "decide", "unassume", "report", "cordon", "card"])
        )
        steps.append((kind, draw(st.integers(0, 1 << 16)), draw(st.integers(0, 1 << 16))))
    return {"config": config, "nodes": nodes, "pods": pods}, steps


def apply_step(scheduler: Scheduler, pods: list, assumed: list, step: tuple) -> None:
    kind, a, b = step
    cluster = scheduler.cluster
    node = cluster.nodes[a % len(cluster.nodes)]
    if kind in ("place", "decide"):
        decision = check_against_reference(scheduler, copy.deepcopy(pods[a % len(pods)]))
        if kind == "place" and decision.status == "scheduled":
            scheduler.assume(decision)
            assumed.append(decision)
    elif kind == "unassume":
        if assumed:
            scheduler.unassume(assumed.pop(a % len(assumed)))
    elif not node.cards:
        node.touch()
    elif kind == "report":
        # a usage report read from outside: new usage on one card, then the node is touched
        card = node.cards[b % len(node.cards)]
        card.used_slots = min(card.slots, b % 3)
        card.used_memory = card.memory * (b % 4) // 4 if card.used_slots else 0
        card.used_cores = card.cores * (b % 5) // 5 if card.used_slots else 0
        if b % 7 == 0:
            card.health = not card.health
        node.touch()
    elif kind == "cordon":
        card = node.cards[b % len(node.cards)]
        card.cordoned = not card.cordoned
        node.touch()
    else:
        # the node reports a replaced card object: same card, no tenants (capacities stay:
        # a scheduler decides on one snapshot, whose capacities do not change)
        position = b % len(node.cards)
        old = node.cards[position]
        node.cards[position] = replace(old, used_slots=0, used_memory=0, used_cores=0, health=True)
        node.touch()


@STREAMS
@given(stream_strategy(), st.booleans())
def test_a_stream_with_placements_rollbacks_reports_and_cordons_decides_as_the_sweep(stream, columnar):
    """`columnar`: new shapes go through the numpy sweep (`evaluate.sweep`) however few the
    nodes, and so do the nodes changed since a shape's index last looked."""
    raw, steps = stream
    cluster, config, pods = parse_scenario(copy.deepcopy(raw))
    scheduler = Scheduler(cluster, config)
    scheduler.SWEEP_NODES = 0 if columnar else Scheduler.SWEEP_NODES
    scheduler.RESWEEP_NODES = 1 if columnar else Scheduler.RESWEEP_NODES
    assumed: list = []
    for step in steps:
        apply_step(scheduler, pods, assumed, step)
    for pod in pods:
        check_against_reference(scheduler, copy.deepcopy(pod))


@STREAMS
@given(stream_strategy(), st.integers(1, 3))
def test_a_scheduler_that_keeps_few_shapes_still_decides_as_the_sweep(stream, kept):
    """Evicted shapes are rebuilt from scratch; a second cluster over the same nodes sees the
    first one's placements."""
    raw, steps = stream
    cluster, config, pods = parse_scenario(copy.deepcopy(raw))
    scheduler = Scheduler(cluster, config, cached_shapes=kept)
    scheduler.SWEEP_NODES = 0
    other = Scheduler(Cluster(list(cluster.nodes)), config)
    assumed: list = []
    for n, step in enumerate(steps):
        apply_step(scheduler if n % 2 else other, pods, assumed, step)
    for pod in pods:
        check_against_reference(scheduler, copy.deepcopy(pod))
        check_against_reference(other, copy.deepcopy(pod))


def _verdict(score: float) -> NodeVerdict:
    return NodeVerdict(True, score=score)


# Scores that tie within 1e-9 without being equal, and runs longer than 1e-9 made of such steps.
BASES = [3.0, 2.5, 0.0, 1.0]
OFFSETS = [0.0, 4e-16, 8.9e-16, 3e-10, 6e-10, 9e-10, 1.2e-9, 2e-9, 0.1]


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
def test_the_index_orders_nodes_as_spec_7_through_any_sequence_of_changes(changes, sign, seed):
    """Each change gives a node a new score (or takes it out of the fitting ones); after every
    change the index's ranking equals SPEC 7's order of the scores it holds."""
    index = NodeIndex(sign)
    index.rebuild([])
    scores: dict[str, float] = {}
    for n, (name, base, offset) in enumerate(changes):
        if (seed >> (n % 30)) & 1 and name in scores:
            del scores[name]  # the node no longer fits
            index.update(name, NodeVerdict(False, failure=NodeFailure(1, {"CardInsufficientMemory": 1})))
        else:
            scores[name] = base + offset
            index.update(name, _verdict(base + offset))
        fitting = [(sign * score, name, score) for name, score in scores.items()]
        assert index.ranking() == reference_order(list(fitting)) == _order_nodes(list(fitting))


@STREAMS
@given(stream_strategy())
def test_the_columnar_closeness_keeps_the_nodes_node_closeness_ranks_closest(stream):
    """`closeness.closest_columns` orders the failed nodes by the key `node_closeness` gives
    each (missing cards, blocked ones, the smallest shortfalls, name), and says whether none of
    them could ever take the pod as `cluster_never` does, after any stream of changes."""
    raw, steps = stream
    cluster, config, pods = parse_scenario(copy.deepcopy(raw))
    scheduler = Scheduler(cluster, config)
    scheduler.SWEEP_NODES = 0
    assumed: list = []
    for step in steps:
        apply_step(scheduler, pods, assumed, step)
    for pod in pods:
        try:
            parsed = parse_pod(copy.deepcopy(pod), config)
        except PodInvalid:
            continue
        inits, apps, policy = parsed.gpu_inits, list(parsed.apps), parsed.policy
        ask = sweepable(inits, apps, policy)
        if ask is None:
            continue
        found = closest_columns(scheduler._columns_now(), ask, policy, len(cluster.nodes))
        if found is None:
            continue
        _, failed, _ = reference_sweep(cluster, parsed)
        measured = [node_closeness(cluster.node(name), inits, apps, policy) for name, _ in failed]
        assert found.failed == len(failed)
        assert [cluster.nodes[i].name for i in found.top] == [
            c.node.name for c in sorted(measured, key=lambda c: c.key)
        ]
        assert found.never == bool(measured and all(c.never for c in measured))
        if found.never:
            nodes = [c.node for c in measured]
            assert never_reason(ask, policy, found.largest, found.most) == cluster_never(nodes, [ask], policy)
