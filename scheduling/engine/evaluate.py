"""One pod on one node: every card checked for each container, then the chain's choice.

For a container: every card goes through the checks of SPEC 4 (`fit.check_card`) and gets
its score (SPEC 5), so the reason counts are complete; the active filters' `rejects_fitting`
hooks look at the cards that fit (check 11); the sort keys rank them (SPEC 6) and the
filters' `select` hooks choose, in registry order; the first `ask.count` cards are taken.
Node-level reasons: fewer cards than asked (`M/M NodeInsufficientDevice`), fewer fitting
cards than asked (`K/M AllocatedCardsInsufficientRequest`), a node not ready, a node a
planning cycle holds for another job (`NodeReserved`).

For a pod (SPEC 2): init containers one at a time against the node as it is, then the app
containers accumulating usage; the first container that does not fit gives the node's
failure. An init container's cards are the chain's choice for it alone; they count in no
score and no usage (it gives them back before the app containers start), but they are
written first in the allocation (SPEC 8), so an explaining evaluation keeps them.
This module names no filter: it runs whichever the policy makes active.

The same verdicts for every node at once, over numpy columns, are `engine.columns`;
`evaluate_alone` is that sweep's rule on one node, for the few nodes a shape re-checks
after they changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Any

from . import reasons as R
from .annotations import PodPolicy
from .chain import rank, ranking_order
from .fit import NodeFailure, check_card, count_cards
from .model import Card, Node
from .requests import ContainerAsk
from .score import card_score, node_score, utilization_score


@dataclass(slots=True)
class CardEval:
    """One card checked for one container: the first failed check, and the predicted score."""

    card: Card
    position: int
    score: float
    memory: int
    reason: str | None
    stage: str | None

    @property
    def uuid(self) -> str:
        return self.card.uuid

    @property
    def index(self) -> int:
        return self.card.index

    @property
    def numa(self) -> int:
        return self.card.numa


@dataclass(slots=True)
class ContainerVerdict:
    """One container on one node: the cards it takes (`chosen`, empty when it does not fit)
    and the reason counts; with `explain`, every card's evaluation and the ranking too, with
    the sort key that put each ranked card after the one before it (`decided_by`)."""

    evals: list[CardEval]
    chosen: list[CardEval]
    counts: dict[str, int]
    ranked: list[CardEval]
    decided_by: list[str | None]

    @property
    def fits(self) -> bool:
        return bool(self.chosen)


def evaluate_container(
    node: Node,
    ask: ContainerAsk,
    policy: PodPolicy,
    overlay: list[list[int]],
    explain: bool = False,
    need_choice: bool = True,
    taken: dict[int, list] | None = None,
) -> ContainerVerdict:
    """Check every card (so the reason counts are complete), then let the chain pick `ask.count`.

    `overlay` is, per card, (slots, MiB, cores) this pod's earlier containers took; `taken`,
    by card position, the instances they took on cards cut into instances (MIG). With
    `explain`, every card's evaluation is kept and the ranking records which key decided
    between neighbours; without it only what the choice needs is built.
    """
    cards = node.cards
    if len(cards) < ask.count:
        return ContainerVerdict([], [], {R.NODE_INSUFFICIENT_DEVICE: len(cards)}, [], [])
    weights = policy.weights
    memory_on, cores = ask.memory_on, ask.cores
    evals: list[CardEval] = []
    fitting: list[CardEval] = []
    counts: dict[str, int] = {}
    for position, card in enumerate(cards):
        extra = overlay[position]
        used = (card.used_slots + extra[0], card.used_memory + extra[1], card.used_cores + extra[2])
        memory = memory_on(card.memory)
        failed = check_card(card, ask, memory, policy, used, taken.get(position, ()) if taken else ())
        if failed is None:
            entry = CardEval(
                card, position, card_score(card, memory, cores, used, weights), memory, None, None
            )
            fitting.append(entry)
        else:
            counts[failed[0]] = counts.get(failed[0], 0) + 1
            if not explain:
                continue
            entry = CardEval(card, position, card_score(card, memory, cores, used, weights), memory, *failed)
        if explain:
            evals.append(entry)

    filters = policy.active_filters
    if filters and fitting:
        for card_filter in filters:
            rejected = card_filter.rejects_fitting(fitting, ask.count)
            if rejected is not None:
                reason, stage = rejected
                for entry in fitting:
                    entry.reason, entry.stage = reason, stage
                counts[reason] = counts.get(reason, 0) + len(fitting)
                fitting = []
                break

    if len(fitting) < ask.count:
        if fitting:
            counts[R.ALLOCATED_INSUFFICIENT] = len(fitting)
        return ContainerVerdict(evals, [], counts, [], [])

    if not need_choice and not explain and len({entry.memory for entry in fitting}) == 1:
        # Every fitting card would take the same MiB, so which ones the chain picks cannot
        # change the node score: stand-ins suffice, the chosen node is re-explained anyway.
        return ContainerVerdict(evals, fitting[: ask.count], counts, [], [])
    if explain:
        ranked, decided_by = ranking_order(fitting, policy.sort_keys)
    else:
        ranked, decided_by = rank(fitting, policy.sort_keys), []
    candidates = ranked
    for card_filter in filters:
        candidates = card_filter.select(candidates, ask.count, node, policy)
    return ContainerVerdict(evals, candidates[: ask.count], counts, ranked, decided_by)


@dataclass(slots=True)
class NodeVerdict:
    """A pod on one node: fits with a score and grants, or fails (`failure`, as data)."""

    fits: bool
    score: float = 0.0
    failure: NodeFailure | None = None
    # per app container: list of (position, memory, cores), or None (no GPU); only kept
    # when the cards were really chosen (an explaining or multi-container evaluation); a
    # grant on a card cut into instances (MIG) carries the instance fourth, its MiB and cores
    grants: list[list[Grant] | None] | None = None
    # per app container: its ContainerVerdict (None without GPU), kept for explaining
    containers: list[ContainerVerdict | None] | None = None
    # per GPU init container: list of (position, memory, cores), kept for explaining
    init_grants: list[list[Grant]] | None = None
    # the container that did not fit, kept for explaining a failure (`closeness`)
    failing: FailingContainer | None = None


@dataclass(slots=True)
class FailingContainer:
    """The first container that does not fit a node, as an explaining evaluation saw it:
    its ask, every card's evaluation, and the usage this pod's earlier containers add."""

    ask: ContainerAsk
    verdict: ContainerVerdict
    overlay: list[list[int]]
    init: bool = False


def evaluate_node(
    node: Node,
    inits: list[ContainerAsk],
    apps: list[ContainerAsk | None],
    policy: PodPolicy,
    explain: bool = False,
) -> NodeVerdict:
    """Init containers one at a time against the node as it is, then the app containers
    accumulating usage; the first container that does not fit gives the node's failure."""
    examined = len(node.cards)
    if not node.ready:
        return NodeVerdict(False, failure=NodeFailure(examined, {R.NODE_NOT_READY: examined}))
    if node.reserved_for:
        return NodeVerdict(False, failure=NodeFailure(examined, {R.NODE_RESERVED: examined}))
    empty = [[0, 0, 0] for _ in node.cards]
    init_grants: list[list[Grant]] = []
    for init in inits:
        verdict = evaluate_container(node, init, policy, empty, explain, need_choice=explain)
        if not verdict.fits:
            failing = FailingContainer(init, verdict, empty, init=True) if explain else None
            return NodeVerdict(False, failure=NodeFailure(examined, verdict.counts), failing=failing)
        if explain:
            init_grants.append([_grant(entry, init.cores, {}) for entry in verdict.chosen])
    overlay = [[0, 0, 0] for _ in node.cards]
    grants: list[list[Grant] | None] = []
    containers: list[ContainerVerdict | None] = []
    # instances this pod's containers took, by card position (cards cut into instances only)
    taken: dict[int, list] = {}
    # With one GPU container, only its count and asks matter to the score, not its cards;
    # on a card cut into instances the instance decides the MiB and cores it takes.
    need_choice = explain or sum(ask is not None for ask in apps) > 1 or _partitioned(node)
    for ask in apps:
        if ask is None:
            grants.append(None)
            containers.append(None)
            continue
        verdict = evaluate_container(node, ask, policy, overlay, explain, need_choice, taken)
        if not verdict.fits:
            failing = FailingContainer(ask, verdict, overlay) if explain else None
            return NodeVerdict(False, failure=NodeFailure(examined, verdict.counts), failing=failing)
        mine = []
        for entry in verdict.chosen:
            grant = _grant(entry, ask.cores, taken)
            extra = overlay[entry.position]
            extra[0] += 1
            extra[1] += grant[1]
            extra[2] += grant[2]
            mine.append(grant)
        grants.append(mine)
        containers.append(verdict if explain else None)
    return NodeVerdict(
        True,
        score=node_score(node, overlay),
        grants=grants if need_choice else None,
        containers=containers if explain else None,
        init_grants=init_grants if explain else None,
    )


#: What a vGPU takes on a card: (position, MiB, cores), with the instance fourth on a card cut
#: into instances (MIG), whose MiB and cores are the instance profile's.
Grant = tuple[int, int, int] | tuple[int, int, int, Any]


def _partitioned(node: Node) -> bool:
    for card in node.cards:
        if card.partition is not None:
            return True
    return False


def _grant(entry: CardEval, cores: int, taken: dict[int, list]) -> Grant:
    """The grant of `entry`'s card for a vGPU of `cores`: the asked MiB and cores, or on a card
    cut into instances the instance it gets (after those in `taken`, which it joins)."""
    partition = entry.card.partition
    if partition is None:
        return (entry.position, entry.memory, cores)
    mine = taken.setdefault(entry.position, [])
    instance = partition.choose(entry.memory, cores, mine)
    assert instance is not None  # check 10a passed for this card with these taken
    mine.append(instance.placement)
    return (entry.position, instance.memory, instance.cores, instance)


def evaluate_unpinned(
    node: Node, inits: list[ContainerAsk], apps: list[ContainerAsk | None], policy: PodPolicy
) -> NodeVerdict | None:
    """`evaluate_node`'s verdict for a pod pinned to card UUIDs (use-gpuuuid) on a node none of
    whose cards carries one, else None: there the first GPU container fails whatever the
    usage, every card at check 4 or before, so no card is scored, ranked or chosen."""
    pins = policy.use_uuids
    if not pins:
        return None
    first = next(chain(inits, (ask for ask in apps if ask is not None)), None)
    cards = node.cards
    if first is None or any(card.uuid in pins for card in cards):
        return None
    if not node.ready:
        return NodeVerdict(False, failure=NodeFailure(len(cards), {R.NODE_NOT_READY: len(cards)}))
    if node.reserved_for:
        return NodeVerdict(False, failure=NodeFailure(len(cards), {R.NODE_RESERVED: len(cards)}))
    if len(cards) < first.count:
        return NodeVerdict(False, failure=NodeFailure(len(cards), {R.NODE_INSUFFICIENT_DEVICE: len(cards)}))
    counts: dict[str, int] = {}
    for card in cards:
        rejected = check_card(card, first, 0, policy, (card.used_slots, card.used_memory, card.used_cores))
        assert rejected is not None  # check 4 at the latest
        counts[rejected[0]] = counts.get(rejected[0], 0) + 1
    return NodeVerdict(False, failure=NodeFailure(len(cards), counts))


#: The failed verdicts `failed_verdict` gave, by what they say: a few kinds recur on every
#: node a shape re-checks (the same reason on every card), and a verdict is never changed once
#: made, so one object serves them all.
_FAILED: dict[tuple, NodeVerdict] = {}
#: How many `_FAILED` keeps before it starts again.
FAILED_KEPT = 4096


def failed_verdict(examined: int, counts: dict[str, int]) -> NodeVerdict:
    """`NodeVerdict(False, failure=NodeFailure(examined, counts))`, one object for equal
    counts (in the order found): re-checking a node that still fails makes no objects, and the
    node's index sees the verdict it holds (`NodeIndex.update_all`) by identity."""
    key = (examined, *counts.items())
    verdict = _FAILED.get(key)
    if verdict is None:
        if len(_FAILED) >= FAILED_KEPT:
            _FAILED.clear()
        verdict = _FAILED[key] = NodeVerdict(False, failure=NodeFailure(examined, counts))
    return verdict


def evaluate_alone(
    node: Node, ask: ContainerAsk, apps: list[ContainerAsk | None], policy: PodPolicy
) -> NodeVerdict:
    """`evaluate_node` for a pod `sweepable` accepts (`exclusions` and `fitting_columns`
    allowed), on one node, as `sweep` does it: the
    cards are only counted (no evaluation objects, no ranking; a filter's check 11 reads the
    fitting cards themselves), the node score is SPEC 7's
    with `ask.count` cards of `ask` added (the same integer sums and float operations as
    `node_score`). A percentage ask on cards that differ in MiB needs the choice: `evaluate_node`."""
    cards = node.cards
    examined = len(cards)
    if not node.ready:
        return failed_verdict(examined, {R.NODE_NOT_READY: examined})
    if node.reserved_for:
        return failed_verdict(examined, {R.NODE_RESERVED: examined})
    if examined < ask.count:
        return failed_verdict(examined, {R.NODE_INSUFFICIENT_DEVICE: examined})
    fixed = ask.memory
    if (fixed is None and len({card.memory for card in cards}) > 1) or _partitioned(node):
        return evaluate_node(node, [], apps, policy)
    # every card takes the same MiB: the fixed ask, or its share of the one card size
    each = ask.memory_on(cards[0].memory) if cards else 0
    # check 11 (numa-bind) reads where the fitting cards sit: the count keeps them for it
    fits: list[Card] | None = [] if policy.fitting_hooks else None
    fitting, counts = count_cards(cards, ask, each, policy, fits)
    if fits:
        for card_filter in policy.fitting_hooks:
            rejected = card_filter.rejects_fitting(fits, ask.count)
            if rejected is not None:
                counts[rejected[0]] = counts.get(rejected[0], 0) + fitting
                fitting = 0
                break
    if fitting < ask.count:
        if fitting:
            counts[R.ALLOCATED_INSUFFICIENT] = fitting
        return failed_verdict(examined, counts)
    slots = cores = memory = used_slots = used_cores = used_memory = 0
    for card in cards:  # integer sums: the same in any order
        slots += card.slots
        cores += card.cores
        memory += card.memory
        used_slots += card.used_slots
        used_cores += card.used_cores
        used_memory += card.used_memory
    used_slots += ask.count
    used_cores += ask.count * ask.cores
    used_memory += ask.count * each
    return NodeVerdict(
        True, score=utilization_score(slots, used_slots, cores, used_cores, memory, used_memory)
    )
