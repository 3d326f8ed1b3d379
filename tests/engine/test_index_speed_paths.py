"""Issue 18: the scheduler's faster paths decide exactly as the plain evaluation does.

`NodeIndex` keeps its fitting nodes as sorted `(sign x score, name)` keys; pods pinned to
card UUIDs (use-gpuuuid) fail in O(1) work per card on the nodes that carry none of them
(`evaluate.evaluate_unpinned`, `columns.sweep_pinned`) and measure the closeness of those
carriers and `closest_nodes` others only (`Scheduler._closest_pinned`); pods with one GPU
container and a UUID or mode constraint go through the columnar sweep (`sweepable(...,
exclusions=True)`). Each is checked against every node evaluated in full
(`evaluate_node(explain=True)`, which none of these paths use) and every failed node's
closeness measured (`node_closeness`), on random clusters and streams of changes.
"""

from __future__ import annotations

import copy
import heapq
from dataclasses import replace
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from scheduling.engine import reasons as R
from scheduling.engine.annotations import VGPU_MODE
from scheduling.engine.chain import TOLERANCE
from scheduling.engine.closeness import cluster_never, node_closeness
from scheduling.engine.columns import CardColumns, sweep, sweep_pinned, sweepable
from scheduling.engine.errors import PodInvalid
from scheduling.engine.evaluate import NodeVerdict, evaluate_alone, evaluate_node, evaluate_unpinned
from scheduling.engine.fit import NodeFailure
from scheduling.engine.nodeindex import NodeIndex
from scheduling.engine.nodeindex import order_nodes as _order_nodes
from scheduling.engine.noderules import rule_failure
from scheduling.engine.pod import parse_pod
from scheduling.engine.scenario import parse_scenario
from scheduling.engine.scheduler import Scheduler

from .builders import NOUSE_UUID, NUMA_BIND, USE_UUID, ask, card, node, pod, scenario
from .test_reference import NAMES, Reported, apply_step
from .worlds import GPU_POLICIES, NODE_POLICIES, Tape, from_tape, property_examples, read_scenario, read_steps

EXAMPLES = property_examples()
MODES = ["", "hami-core", "mig", "mps"]


def examples(share: float) -> settings:
    return settings(
        max_examples=max(1, round(EXAMPLES * share)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def read_pinned_stream(tape: Tape) -> tuple[dict, list[tuple]]:
    """A random cluster (cards with modes and nodes not ready now and then) and pods that each name card UUIDs to
    use or avoid, or card modes, with one or two containers, init containers and numa-bind as
    `worlds.read_pod` draws them; and a stream of steps."""
    raw = read_scenario(tape, NAMES, (1, 12), (2, 5), config={})
    uuids = [c["uuid"] for n in raw["nodes"] for c in n["devices"]]
    for entry in raw["nodes"]:
        if tape.one_in(4):
            entry["ready"] = False
        for device in entry["devices"]:
            mode = tape.mostly([""], MODES[1:])
            if mode:
                device["mode"] = mode
    for spec in raw["pods"]:
        annotations = spec["annotations"]
        kind = tape.pick(["use", "use", "use", "nouse", "both", "mode"])
        if kind in ("use", "both") and uuids:
            # now and then a UUID no card carries
            annotations[USE_UUID] = ",".join(tape.distinct(uuids + ["GPU-nowhere"], 1, 2))
        if kind in ("nouse", "both") and uuids:
            annotations[NOUSE_UUID] = ",".join(tape.distinct(uuids, 1, 2))
        if kind == "mode" or tape.one_in(4):
            annotations[VGPU_MODE] = ",".join(tape.distinct(MODES[1:], 1, 2))
    return raw, read_steps(tape, 4, 16)


PINNED_STREAMS = from_tape(640, read_pinned_stream)


def full_decision(scheduler: Scheduler, parsed) -> dict:
    """What a decision must hold, every node evaluated in full and every failed node's
    closeness measured: ranking, failures (data and text), reason sums, closest nodes, never."""
    cluster, policy = scheduler.cluster, parsed.policy
    inits, apps = parsed.gpu_inits, list(parsed.apps)
    sign = -1.0 if policy.node_policy == "binpack" else 1.0
    fitting, failed, reasons = [], [], {}
    for each in cluster.nodes:
        verdict = evaluate_node(each, inits, apps, policy, explain=True)
        if verdict.failure is None:
            fitting.append((sign * verdict.score, each.name, verdict.score))
        else:
            failed.append(each)
            for reason, n in verdict.failure.reasons.items():
                reasons[reason] = reasons.get(reason, 0) + n
    failures = [
        (each.name, evaluate_node(each, inits, apps, policy, explain=True).failure)
        for each in sorted(failed, key=lambda n: n.name)
    ]
    closest, never = None, None
    if not fitting and failed:
        measured = [node_closeness(each, inits, apps, policy) for each in failed]
        kept = heapq.nsmallest(max(0, scheduler.config.closest_nodes), measured, key=lambda c: c.key)
        closest = [c.detail() for c in kept]
        if all(c.never for c in measured):
            asks = [*inits, *(a for a in apps if a is not None)]
            never = cluster_never([c.node for c in measured], asks, policy)
    return {
        "ranking": _order_nodes(fitting),
        "failures": failures,
        "texts": [failure.text for _, failure in failures],
        "reasons": reasons,
        "closest": closest,
        "never": never,
    }


def check_decision(scheduler: Scheduler, spec) -> None:
    """The scheduler's decision of `spec`, whole and kept to 2 nodes, equals the full one."""
    decision = scheduler.decide(spec)
    try:
        parsed = parse_pod(spec, scheduler.config)
    except PodInvalid:
        assert decision.status == "rejected"
        return
    full = full_decision(scheduler, parsed)
    assert decision.node_ranking == full["ranking"]
    assert decision.node == (full["ranking"][0][0] if full["ranking"] else None)
    assert decision.node_failures == full["failures"]
    assert [failure.text for _, failure in decision.node_failures] == full["texts"]
    assert decision.reasons == full["reasons"]
    assert (decision.nodes_fit, decision.nodes_failed) == (len(full["ranking"]), len(full["failures"]))
    if full["closest"] is not None:
        assert decision.closest == full["closest"]
        assert decision.never == full["never"]
    bounded = scheduler.decide(spec, keep=2)
    assert bounded.node_ranking == full["ranking"][:2]
    assert bounded.node_failures == full["failures"][:2]
    assert bounded.reasons == full["reasons"]
    assert (bounded.nodes_fit, bounded.nodes_failed) == (decision.nodes_fit, decision.nodes_failed)
    assert (bounded.closest, bounded.never) == (decision.closest, decision.never)


@pytest.mark.parametrize("columnar", [False, True])
@pytest.mark.parametrize("node_policy", NODE_POLICIES)
@examples(0.03)
@given(stream=PINNED_STREAMS, gpu_policy=st.sampled_from(GPU_POLICIES))
def test_pinned_and_excluding_pods_decide_as_the_full_evaluation_through_a_stream(
    columnar, node_policy, stream, gpu_policy
):
    """`columnar`: every new shape and every changed node go through the columnar paths
    (`sweep` with UUID and mode checks, `sweep_pinned`, `_closest_pinned`) however few the
    nodes; else node by node (`evaluate_unpinned`). After every step each pod is decided."""
    raw, steps = stream
    config = {"node_scheduler_policy": node_policy, "gpu_scheduler_policy": gpu_policy}
    note(Reported({**raw, "config": config}, steps))
    cluster, config, pods = parse_scenario({**copy.deepcopy(raw), "config": config})
    scheduler = Scheduler(cluster, config)
    scheduler.SWEEP_NODES = 0 if columnar else 10**9
    scheduler.RESWEEP_NODES = 1 if columnar else 10**9
    assumed: list = []
    for step in steps:
        apply_step(scheduler, pods, assumed, step)
        for spec in pods:
            check_decision(scheduler, spec)


@examples(0.02)
@given(stream=PINNED_STREAMS)
def test_the_pinned_sweeps_give_every_node_its_full_verdict(stream):
    """`sweep` (one GPU container, UUID and mode checks over the columns) and `sweep_pinned`
    (any containers, pinned to UUIDs): each node's verdict is `evaluate_node`'s; and
    `evaluate_unpinned` answers for exactly the nodes that carry none of the pinned UUIDs."""
    raw, _ = stream
    cluster, config, pods = parse_scenario(copy.deepcopy(raw))
    columns = CardColumns(cluster.nodes)
    for spec in pods:
        try:
            parsed = parse_pod(spec, config)
        except PodInvalid:
            continue
        inits, apps, policy = parsed.gpu_inits, list(parsed.apps), parsed.policy
        full = [evaluate_node(each, inits, apps, policy, explain=True) for each in cluster.nodes]
        one = sweepable(inits, apps, policy, exclusions=True, fitting_columns=True)
        swept = None
        if one is not None:
            swept = sweep(columns, cluster.nodes, one, apps, policy)
        elif policy.use_uuids:
            swept = sweep_pinned(columns, cluster.nodes, inits, apps, policy)
        for i, (each, verdict) in enumerate(zip(cluster.nodes, full, strict=True)):
            if swept is not None:
                got = swept.verdict(i)
                assert (got.fits, got.failure) == (verdict.fits, verdict.failure)
                if verdict.fits:
                    assert got.score == verdict.score
            unpinned = evaluate_unpinned(each, inits, apps, policy)
            carries = any(c.uuid in policy.use_uuids for c in each.cards)
            assert (unpinned is None) == (not policy.use_uuids or carries)
            if unpinned is not None:
                assert not verdict.fits
                assert unpinned.failure == verdict.failure


NUMA_CARD = st.tuples(
    st.sampled_from([-1, 0, 1, 3, 70000]),  # NUMA nodes need not be 0..n-1
    st.integers(0, 3),  # tenants
    st.sampled_from([0, 4000, 15000, 16000]),  # MiB held
    st.booleans(),  # healthy
)


@examples(0.02)
@given(
    nodes=st.lists(st.lists(NUMA_CARD, min_size=0, max_size=8), min_size=1, max_size=9),
    count=st.integers(1, 5),
    memory=st.sampled_from([1000, 8000, 16000]),
    chain=st.sampled_from(["binpack", "spread", "mutex", "binpack,topology-aware", "numa,spread"]),
)
def test_a_numa_bind_pod_is_swept_as_the_full_evaluation_decides_each_node(nodes, count, memory, chain):
    """Issue 29: numa-bind's check 11 over columns (`NumaBindFilter.rejects_fitting_columns`),
    so a new numa-bind shape is swept, not evaluated node by node, and over one node's cards
    when it is re-checked alone (`evaluate_alone`): each node's verdict (fit, score to the
    last bit, reason counts with `NumaNotFit`) is `evaluate_node`'s, on nodes with no cards,
    NUMA nodes numbered anyhow and cards used, full or unhealthy."""
    raw = scenario(
        [
            node(
                f"n{i:02d}",
                *(
                    card(f"G{i}-{j}", 16000, numa=numa, health=healthy, used=(slots, mib, 0))
                    for j, (numa, slots, mib, healthy) in enumerate(cards)
                ),
            )
            for i, cards in enumerate(nodes)
        ],
        [
            pod(
                "bound",
                {NUMA_BIND: "true", "hami.io/gpu-scheduler-policy": chain},
                ask(gpu=count, mem=memory),
            )
        ],
    )
    cluster, config, pods = parse_scenario(raw)
    parsed = parse_pod(pods[0], config)
    apps, policy = list(parsed.apps), parsed.policy
    assert sweepable([], apps, policy) is None  # the closeness does not know the hook
    one = sweepable([], apps, policy, exclusions=True, fitting_columns=True)
    assert one is not None
    swept = sweep(CardColumns(cluster.nodes), cluster.nodes, one, apps, policy)
    for i, each in enumerate(cluster.nodes):
        full = evaluate_node(each, [], apps, policy, explain=True)
        for got in (swept.verdict(i), evaluate_alone(each, one, apps, policy)):
            assert (got.fits, got.failure) == (full.fits, full.failure)
            if full.fits:
                assert got.score == full.score


def test_numa_bind_rejects_the_fitting_cards_of_a_node_without_enough_on_one_numa_node():
    """The example: 4 free cards, 2 on each NUMA node, a pod asking 3 on one: the sweep
    fails the node with 4 NumaNotFit cards, as the card-by-card hook does; 2 asked fit."""
    raw = scenario(
        [node("n", *(card(f"G{j}", 16000, numa=j // 2) for j in range(4)))],
        [
            pod("three", {NUMA_BIND: "true"}, ask(gpu=3, mem=1000)),
            pod("two", {NUMA_BIND: "true"}, ask(gpu=2, mem=1000)),
        ],
    )
    cluster, config, pods = parse_scenario(raw)
    verdicts = []
    for spec in pods:
        parsed = parse_pod(spec, config)
        apps = list(parsed.apps)
        one = sweepable([], apps, parsed.policy, exclusions=True, fitting_columns=True)
        verdicts.append(sweep(CardColumns(cluster.nodes), cluster.nodes, one, apps, parsed.policy).verdict(0))
    assert verdicts[0].failure == NodeFailure(4, {R.NUMA_NOT_FIT: 4})
    assert verdicts[1].fits


def test_a_pod_pinned_to_a_full_card_waits_with_the_carrier_closest():
    """The issue's case at a size where the columnar paths run: the pinned card is full, every
    other node fails on UUID alone; the carrier comes first among the closest nodes, then the
    others by name, and the decision equals the full evaluation's."""
    nodes = [node(f"n{i:03d}", *(card(f"G{i}-{j}", 16000) for j in range(4))) for i in range(80)]
    nodes[41]["devices"][2] = card("G41-2", 16000, used=(10, 16000, 100))
    raw = scenario(nodes, [pod("pinned", {USE_UUID: "G41-2"}, ask(gpu=1, mem=1000))])
    cluster, config, pods = parse_scenario(raw)
    scheduler = Scheduler(cluster, config)
    assert len(cluster.nodes) >= scheduler.SWEEP_NODES
    decision = scheduler.decide(pods[0])
    assert decision.status == "pending"
    assert decision.reasons == {R.CARD_SLOTS_EXHAUSTED: 1, R.CARD_UUID_MISMATCH: 319}
    assert [entry["node"] for entry in decision.closest] == ["n041", "n000", "n001", "n002", "n003"]
    assert decision.never is None
    check_decision(scheduler, pods[0])


def test_a_card_that_changes_its_uuid_is_read_again():
    """The card columns map UUIDs to cards and read card modes once: a node whose card comes
    back under another UUID or mode (same capacities) is read again, so a pod pinned to the
    new UUID, or asking the new mode, finds it."""
    raw = scenario(
        [
            node(f"n{i:02d}", card(f"A{i}", mode="hami-core"), card(f"B{i}", mode="hami-core"))
            for i in range(6)
        ],
        [pod("p", {USE_UUID: "NEW"}, ask(gpu=1, mem=1000)), pod("q", {USE_UUID: "A3"}, ask(gpu=1, mem=1000))],
    )
    cluster, config, pods = parse_scenario(raw)
    scheduler = Scheduler(cluster, config)
    scheduler.SWEEP_NODES = 0
    assert scheduler.decide(pods[0]).status == "pending"
    assert scheduler.decide(pods[1]).node == "n03"
    target = cluster.node("n04")
    target.cards[1] = replace(target.cards[1], uuid="NEW")
    target.touch()
    decision = scheduler.decide(copy.deepcopy(pods[0]))
    assert decision.node == "n04"
    # a new shape after the change: built from the card columns, not from node updates
    later = parse_scenario(
        scenario(
            [], [pod("r", {USE_UUID: "NEW"}, ask(gpu=1, mem=2000)), pod("s", {VGPU_MODE: "mig"}, ask(gpu=1))]
        )
    )[2]
    assert scheduler.decide(later[0]).node == "n04"
    target.cards[0] = replace(target.cards[0], mode="mig")
    target.touch()
    assert scheduler.decide(later[1]).node == "n04"
    for spec in [*pods, *later]:
        check_decision(scheduler, spec)


def test_nodes_without_the_pinned_card_come_ready_first_then_by_name():
    """Among the closest nodes, those without the pinned card come after a ready carrier, the
    ready ones before the ones not ready, each by name; a carrier not ready that could take
    the pod comes between the two."""
    nodes = [node(f"n{i:03d}", card(f"G{i}", 16000, used=(10, 16000, 100))) for i in range(70)]
    for i in (0, 1, 2, 3, 5, 8):
        nodes[i]["ready"] = False
    raw = scenario(
        nodes, [pod("ready", {USE_UUID: "G30"}, ask(gpu=1)), pod("not", {USE_UUID: "G8"}, ask(gpu=1))]
    )
    cluster, config, pods = parse_scenario(raw)
    scheduler = Scheduler(cluster, config)
    assert [entry["node"] for entry in scheduler.decide(pods[0]).closest] == [
        "n030",
        "n004",
        "n006",
        "n007",
        "n009",
    ]
    wide = Scheduler(cluster, replace(config, closest_nodes=66))
    kept = [entry["node"] for entry in wide.decide(pods[1]).closest]
    ready = [f"n{i:03d}" for i in range(70) if i not in (0, 1, 2, 3, 5, 8)]
    assert kept == [*ready, "n008", "n000"]
    for spec in pods:
        check_decision(scheduler, spec)
        check_decision(wide, spec)


def test_why_no_node_ever_fits_reads_the_largest_card_and_most_cards_of_every_failed_node():
    """Pinned to a UUID no card carries, no node could ever take the pod: the cluster-wide
    reason names the largest card and the most cards among all the failed nodes, here on two
    nodes that are neither first nor last."""
    nodes = [node(f"n{i:03d}", card(f"G{i}", 8000)) for i in range(70)]
    nodes[33] = node("n033", card("BIG", 80000))
    nodes[51] = node("n051", *(card(f"M{j}", 1000) for j in range(6)))
    raw = scenario(nodes, [pod("nowhere", {USE_UUID: "GPU-nowhere"}, ask(gpu=1, mem=500))])
    cluster, config, pods = parse_scenario(raw)
    decision = Scheduler(cluster, config).decide(pods[0])
    assert decision.never is not None
    assert (decision.never["largest_memory"], decision.never["most_cards"]) == (80000, 6)
    check_decision(Scheduler(cluster, config), pods[0])


def test_numa_bind_and_two_containers_pinned_decide_as_the_full_evaluation():
    """Pods off the one-container sweep (numa-bind, two GPU containers, an init container)
    pinned to UUIDs on a cluster large enough for the columnar paths."""
    nodes = [
        node(
            f"n{i:03d}",
            *(card(f"G{i}-{j}", 16000, numa=j // 2, used=(j % 3, 1000 * (j % 3), 0)) for j in range(4)),
        )
        for i in range(70)
    ]
    pinned = "G5-0,G5-1,G9-3,G9-2"
    specs = [
        pod("numa", {USE_UUID: pinned, NUMA_BIND: "true"}, ask(gpu=2, mem=1000)),
        pod(
            "two",
            {USE_UUID: pinned},
            containers=[
                {"name": "a", "resources": {"limits": ask(gpu=1, mem=8000)}},
                {"name": "b", "resources": {"limits": ask(gpu=2, mem=8000)}},
            ],
        ),
        pod(
            "init",
            {USE_UUID: pinned},
            ask(gpu=1, mem=1000),
            init=[{"name": "setup", "resources": {"limits": ask(gpu=3, mem=15000)}}],
        ),
    ]
    cluster, config, pods = parse_scenario(scenario(nodes, specs))
    scheduler = Scheduler(cluster, config)
    for spec in pods:
        check_decision(scheduler, spec)


def index_state(index: NodeIndex) -> tuple:
    return (
        index.ranking(),
        index.fit_keys,
        index.fit_entries,  # made by the whole ranking just asked, kept in step after
        index.fail_entries,
        index.fail_names,
        index.reasons,
        index.carriers,
        index.near_pairs,
    )


#: Scores on both sides of 1e-9 apart, equal ones, and zero (-0.0 under binpack's sign).
BASES = [0.0, 5.0, 10.0, 7.25]
OFFSETS = [0.0, 3e-10, 6e-10, 9e-10, 1.2e-9, 2e-9, 1e-6]


@examples(0.05)
@given(
    st.lists(
        st.tuples(st.sampled_from(NAMES + ["a", "b"]), st.sampled_from(BASES), st.sampled_from(OFFSETS)),
        max_size=40,
    ),
    st.sampled_from([-1.0, 1.0]),
    st.integers(0, 1 << 30),
)
def test_the_index_after_any_changes_equals_one_built_from_scratch(changes, sign, seed):
    """Taking nodes out and putting them back on the key list leaves the index exactly as a
    rebuild from the same verdicts: the keys, the ranking (SPEC 7, near runs by name, every
    cut `top`), the failures and their sums, and the near-score bookkeeping."""
    index = NodeIndex(sign)
    index.rebuild([])
    verdicts: dict[str, NodeVerdict] = {}
    for n, (name, base, offset) in enumerate(changes):
        if (seed >> (n % 30)) & 1:
            reason = "CardInsufficientMemory" if n % 2 else "CardUuidMismatch"
            verdict = NodeVerdict(False, failure=NodeFailure(2, {reason: 1 + n % 2}))
        else:
            verdict = NodeVerdict(True, score=base + offset)
        verdicts[name] = verdict
        index.update(name, verdict)
        fresh = NodeIndex(sign)
        fresh.rebuild(sorted(verdicts.items()))
        assert index_state(index) == index_state(fresh)
        fitting = [(sign * v.score, k, v.score) for k, v in verdicts.items() if v.failure is None]
        expected = _order_nodes(fitting)
        assert index.ranking() == expected
        for top in range(len(expected) + 1):
            cut = NodeIndex(sign)
            cut.rebuild(sorted(verdicts.items()))
            assert cut.ranking(top) == expected[:top]
    keys = [value for value, _ in index.fit_keys]
    assert index.near_pairs == sum(0 < b - a < TOLERANCE for a, b in pairwise(keys))


def test_a_node_failing_again_for_the_same_counts_changes_nothing_but_the_verdict_held():
    """Issue 29: a re-checked node that fails for the same counts (a new, equal failure)
    keeps its entry and the sums, and the index holds the new verdict; one that fails for
    other counts, on other cards, with other words of a node rule, or comes to fit, moves
    them. After each, the index is what a rebuild from the same verdicts gives."""
    memory = {R.CARD_INSUFFICIENT_MEMORY: 2}
    verdicts = {
        "a": NodeVerdict(True, score=3.0),
        "b": NodeVerdict(False, failure=NodeFailure(2, memory)),
        "c": NodeVerdict(False, failure=NodeFailure(2, memory)),
    }
    index = NodeIndex(-1.0)
    index.rebuild(sorted(verdicts.items()))
    steps = [
        ("b", NodeVerdict(False, failure=NodeFailure(2, dict(memory)))),
        (
            "b",
            NodeVerdict(
                False, failure=NodeFailure(2, {R.CARD_INSUFFICIENT_MEMORY: 1, R.CARD_SLOTS_EXHAUSTED: 1})
            ),
        ),
        ("c", NodeVerdict(False, failure=NodeFailure(3, dict(memory)))),
        ("c", NodeVerdict(False, failure=rule_failure(R.NODE_RESOURCES_FIT, ("Insufficient cpu",), 3))),
        ("c", NodeVerdict(False, failure=rule_failure(R.NODE_RESOURCES_FIT, ("Insufficient cpu",), 3))),
        ("c", NodeVerdict(False, failure=rule_failure(R.NODE_RESOURCES_FIT, ("Insufficient memory",), 3))),
        ("a", NodeVerdict(False, failure=NodeFailure(2, dict(memory)))),
        ("c", NodeVerdict(True, score=5.0)),
    ]
    for name, verdict in steps:
        verdicts[name] = verdict
        index.update(name, verdict)
        fresh = NodeIndex(-1.0)
        fresh.rebuild(sorted(verdicts.items()))
        assert index_state(index) == index_state(fresh)
        assert (index.messages, index.verdict_of(name)) == (fresh.messages, verdict)
        assert index.verdict_of(name) is verdict
