"""SPEC 6: the GPU policy chain as small pieces: one class per filter or sort key.

Filters remove cards or choose among the fitting ones and never rank; sort keys only rank.
Every filter implements the one `Filter` protocol and is registered in `FILTERS`; every sort
key is a `SortKey` registered in `SORT_KEYS`. The engine (`fit.check_card`,
`evaluate.evaluate_container`) calls the hooks of whichever filters a pod's policy makes
active and names none; what other modules need to know of a filter (the stage word its card
hook reports and its words, whether a card it refuses takes the pod once empty, whether it
reads the pod's group) are attributes of the protocol, never tests of its name. So adding a
policy is one class here with its `words`, registered below, and a test in
tests/engine/test_chain.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cmp_to_key
from itertools import combinations
from math import comb
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from . import budget
from . import reasons as R

if TYPE_CHECKING:
    from .model import Card, Node

TOLERANCE = 1e-9

#: Why a filter removed a card: (reason code of SPEC 4, stage), the stage naming the check.
Rejection = tuple[str, str]


class PolicyView(Protocol):
    """What a filter reads of a pod's policy to know whether it is active
    (`annotations.PodPolicy`, which imports this module for the registry)."""

    @property
    def filters(self) -> tuple[str, ...]: ...

    @property
    def numa_bind(self) -> bool: ...

    @property
    def gang(self) -> str: ...


class Ranked(Protocol):
    """What sort keys read of a card under evaluation."""

    @property
    def score(self) -> float: ...

    @property
    def numa(self) -> int: ...

    @property
    def index(self) -> int: ...


class Placed(Protocol):
    """What check 11 (`rejects_fitting`) reads of a fitting card: where it sits, never its
    score (a score ranks cards, it does not decide whether a node fits). So a node re-checked
    alone passes its cards themselves (`evaluate.evaluate_alone`), not their evaluations."""

    @property
    def numa(self) -> int: ...

    @property
    def index(self) -> int: ...


class Candidate(Ranked, Protocol):
    """What filters read of a fitting card: also its position among the node's cards."""

    @property
    def position(self) -> int: ...


CandidateT = TypeVar("CandidateT", bound=Candidate)


class Filter(Protocol):
    """One filter. The engine calls the hooks of the active filters in registry order:

    - `rejects(card, used)`, card level: SPEC 4 check 6, after the slots and before memory
      and cores are looked at. `used` is (slots, MiB, cores) held on the card, this pod's
      earlier containers included. The rejection, or None to let the card on.
    - `rejects_columns(used_slots, used_memory, used_cores)`, the same rule over numpy
      columns of every card (which it rejects, and the reason) for the columnar sweep, or
      None when the filter has no columnar form (the sweep then calls `rejects` card by card).
    - `rejects_fitting(fitting, count)`, over the cards that passed checks 1-10 (at least
      one) for a container asking `count` cards: the rejection every one of them fails
      with (SPEC 4 check 11), or None. It reads where the cards sit (`Placed`), not scores.
    - `rejects_fitting_columns(fitting, node_of, numa, nodes, count)`, the same rule over
      numpy columns of every card of `nodes` nodes (which fitting cards it rejects, and the
      reason) for the columnar sweep, or None when the filter has no columnar form (a pod
      it is active for is then evaluated node by node).
    - `select(ranked, count, node, policy)`, the choice: `ranked` are at least `count` fitting cards
      in chain order; the cards left to choose from, best first, at least `count` of them
      (the engine takes the first `count`).

    `name` is the chain name (or, when `in_chain` is false, the annotation's short name);
    `words` is what an operator reads next to it; `decides_fit` is false only for a filter
    whose hooks never change whether a node fits (only `select`), which lets pods that
    differ in it share cached node verdicts. What the rest of the engine reads of a filter:

    - `stage`: the stage word its card hook's rejections carry ("" without a card hook), and
      `stage_words`, what one card removed at that stage means to an operator;
    - `reason` and `reason_words`: the reason code its card hook rejects with and, when the
      code is its own (no SPEC 4 words for it), the operator's words for "{n} of {m} cards
      on {node}" failing with it;
    - `empties_card`: a card it refuses takes the pod once its tenants leave (mutex), so
      preemption frees such a card whole and the closest nodes count it as freeable;
    - `needs_gang`: it reads the pod's group (`PolicyView.gang`), which the pod and the
      cycle then look up;
    - `shows_choice`: the pages say so when its `select` took other cards than the chain's
      first ones;
    - `choice_work(cards, count)`: the steps its `select` may take on a node of `cards`
      fitting cards for a container asking `count` (what a simulation's work estimate adds).
    """

    name: str
    words: str
    in_chain: bool
    decides_fit: bool
    stage: str
    stage_words: str
    reason: str
    reason_words: str
    empties_card: bool
    needs_gang: bool
    shows_choice: bool

    def active(self, policy: PolicyView) -> bool: ...

    def rejects(self, card: Card, used: tuple[int, int, int]) -> Rejection | None: ...

    def rejects_columns(
        self, used_slots: Any, used_memory: Any, used_cores: Any
    ) -> tuple[Any, str] | None: ...

    def rejects_fitting(self, fitting: Sequence[Placed], count: int) -> Rejection | None: ...

    def rejects_fitting_columns(
        self, fitting: Any, node_of: Any, numa: Any, nodes: int, count: int
    ) -> tuple[Any, str] | None: ...

    def select(
        self, ranked: list[CandidateT], count: int, node: Node, policy: PolicyView
    ) -> list[CandidateT]: ...

    def choice_work(self, cards: int, count: int) -> int: ...


class BaseFilter:
    """The protocol's defaults: a filter named in the chain that lets every card pass and
    chooses nothing; a subclass sets `name` and `words` and overrides the hooks it needs."""

    name = ""
    words = ""
    in_chain = True
    decides_fit = True
    stage = ""
    stage_words = ""
    reason = ""
    reason_words = ""
    empties_card = False
    needs_gang = False
    shows_choice = False

    def active(self, policy: PolicyView) -> bool:
        return self.name in policy.filters

    def rejects(self, card: Card, used: tuple[int, int, int]) -> Rejection | None:
        return None

    def rejects_columns(self, used_slots: Any, used_memory: Any, used_cores: Any) -> tuple[Any, str] | None:
        return None

    def rejects_fitting(self, fitting: Sequence[Placed], count: int) -> Rejection | None:
        return None

    def rejects_fitting_columns(
        self, fitting: Any, node_of: Any, numa: Any, nodes: int, count: int
    ) -> tuple[Any, str] | None:
        return None

    def select(
        self, ranked: list[CandidateT], count: int, node: Node, policy: PolicyView
    ) -> list[CandidateT]:
        return ranked

    def choice_work(self, cards: int, count: int) -> int:
        return 0


def overrides(card_filter: object, hook: str) -> bool:
    """Whether a filter has its own `hook`, not `BaseFilter`'s pass-everything default."""
    return getattr(type(card_filter), hook, None) is not getattr(BaseFilter, hook)


def fitting_hooks(filters: Sequence[Filter]) -> tuple[Filter, ...]:
    """Those of `filters` with a hook over a container's fitting cards (check 11) that can
    change whether a node fits (numa-bind's)."""
    return tuple(f for f in filters if f.decides_fit and overrides(f, "rejects_fitting"))


class MutexFilter(BaseFilter):
    """Only cards with no tenants pass (check 6 of SPEC 4). Guarantees no tenant at placement only."""

    name = "mutex"
    words = "only cards without tenants pass"
    stage = "mutex"
    stage_words = "has tenants and the chain has mutex"
    reason = R.EXCLUSIVE_CONFLICT
    empties_card = True

    def rejects(self, card: Card, used: tuple[int, int, int]) -> Rejection | None:
        return (self.reason, self.stage) if used[0] > 0 else None

    def rejects_columns(self, used_slots: Any, used_memory: Any, used_cores: Any) -> tuple[Any, str] | None:
        """`rejects` over every card at once (numpy columns of usage, `columns.sweep`): which
        cards it rejects, and the reason."""
        return used_slots > 0, self.reason


class NumaBindFilter(BaseFilter):
    """`nvidia.com/numa-bind: true` (SPEC 6.7): all of a container's cards on one NUMA node.

    Fit: some NUMA node holds `count` fitting cards, else every fitting card fails with
    `NumaNotFit` (check 11 of SPEC 4). Choice: walk the cards in chain order; the first whose
    NUMA node holds enough fitting cards picks that NUMA node; its cards stay, in chain order.
    Not a chain name: the pod annotation turns it on.
    """

    name = "numa-bind"
    words = "all cards of a container on one NUMA node"
    in_chain = False

    def active(self, policy: PolicyView) -> bool:
        return policy.numa_bind

    def rejects_fitting(self, fitting: Sequence[Placed], count: int) -> Rejection | None:
        per_numa: dict[int, int] = {}
        for entry in fitting:
            per_numa[entry.numa] = per_numa.get(entry.numa, 0) + 1
        return (R.NUMA_NOT_FIT, "numa") if max(per_numa.values()) < count else None

    def rejects_fitting_columns(
        self, fitting: Any, node_of: Any, numa: Any, nodes: int, count: int
    ) -> tuple[Any, str] | None:
        """`rejects_fitting` on every node at once: per card whether it fits (`fitting`), its
        node (`node_of`, 0 to `nodes` - 1) and NUMA node; the fitting cards of each node none of
        whose NUMA nodes holds `count` of them are rejected. A new numa-bind shape is then
        swept, not evaluated node by node (~0.1 ms a node, seconds at 20,000; issue 29)."""
        groups, group_of = np.unique(numa, return_inverse=True)
        width = len(groups)
        per_group = np.bincount(
            node_of * width + group_of.reshape(-1), weights=fitting, minlength=nodes * width
        )
        most = per_group.reshape(nodes, width).max(axis=1) if nodes and width else np.zeros(nodes)
        return fitting & (most < count)[node_of], R.NUMA_NOT_FIT

    def select(
        self, ranked: list[CandidateT], count: int, node: Node, policy: PolicyView
    ) -> list[CandidateT]:
        per_numa: dict[int, int] = {}
        for entry in ranked:
            per_numa[entry.numa] = per_numa.get(entry.numa, 0) + 1
        numa = next(entry.numa for entry in ranked if per_numa[entry.numa] >= count)
        return [entry for entry in ranked if entry.numa == numa]


class TopologyFilter(BaseFilter):
    """Pick the fitting cards by NVLink/PCIe pair scores (SPEC 6.8), NVIDIA only.

    One card: the one least linked to the other fitting cards, keeping well-linked cards
    for multi-card work. n cards: the n-combination with the highest summed pair score.
    Ties go to what the chain ranked first (combinations compared as lists of ranks).
    It only chooses among cards that fit, so it never changes whether a node fits.
    """

    name = "topology-aware"
    words = "picks among fitting cards by NVLink/PCIe pair scores"
    decides_fit = False
    shows_choice = True
    max_combinations = 200_000

    def select(
        self, ranked: list[CandidateT], count: int, node: Node, policy: PolicyView
    ) -> list[CandidateT]:
        matrix = node.pair_matrix
        return self.pick(ranked, count, lambda a, b: matrix[a.position][b.position])

    def pick(
        self, ranked: list[CandidateT], count: int, pair_score: Callable[[CandidateT, CandidateT], float]
    ) -> list[CandidateT]:
        """`pair_score(a, b)` gives the score between two of the `ranked` cards."""
        if len(ranked) <= count:
            return ranked[:count]
        if count == 1:
            best, best_sum = ranked[0], None
            for card in ranked:
                total = sum(pair_score(card, other) for other in ranked if other is not card)
                if best_sum is None or total < best_sum:
                    best, best_sum = card, total
            return [best]
        best_combo: tuple[CandidateT, ...] = ()
        combo_sum = None
        for n, combo in enumerate(combinations(ranked, count)):
            if n >= self.max_combinations:
                break
            if not n & 0xFFF:
                budget.check()
            total = sum(pair_score(a, b) for a, b in combinations(combo, 2))
            # combinations() yields in rank order, so the first maximum wins ties.
            if combo_sum is None or total > combo_sum:
                best_combo, combo_sum = combo, total
        return list(best_combo)

    def choice_work(self, cards: int, count: int) -> int:
        """Pair scores `pick` reads: every pair once for one card; for n cards each
        n-combination it weighs (at most `max_combinations`) sums its n(n-1)/2 pairs."""
        if cards <= count:
            return 0
        if count == 1:
            return cards * (cards - 1)
        return min(comb(cards, count), self.max_combinations) * (comb(count, 2) + 1)


class SortKey:
    """A sort key maps a card to a number; lower comes first. The first key that differs decides."""

    name = ""
    words = ""

    def value(self, card: Ranked) -> float:  # pragma: no cover - interface
        raise NotImplementedError


class BinpackKey(SortKey):
    """Higher predicted utilization first: fill busy cards, keep empty ones whole."""

    name = "binpack"
    words = "fuller card first (higher score)"

    def value(self, card: Ranked) -> float:
        return -card.score


class SpreadKey(SortKey):
    """Lower predicted utilization first: spread tenants across cards."""

    name = "spread"
    words = "emptier card first (lower score)"

    def value(self, card: Ranked) -> float:
        return card.score


class NumaKey(SortKey):
    """Lower NUMA node number first."""

    name = "numa"
    words = "lower NUMA node first"

    def value(self, card: Ranked) -> float:
        return card.numa


class GangSpreadFilter(BaseFilter):
    """`gang-spread`: members of one pod group avoid sharing a physical card. When at least
    `count` of the ranked cards hold no member of the pod's group, the choice is among those
    (in chain order; topology-aware, which runs after, picks among them); otherwise they come
    first and cards with a gang-mate fill the rest. It only chooses, so it never changes
    whether a node fits. Opt-in: a chain naming it, on a pod of a group (SPEC-style name
    `hami.io/group-name`, or Volcano's `scheduling.k8s.io/group-name`)."""

    name = "gang-spread"
    words = "cards without a member of the pod's group first"
    decides_fit = False
    needs_gang = True

    def select(
        self, ranked: list[CandidateT], count: int, node: Node, policy: PolicyView
    ) -> list[CandidateT]:
        gang = policy.gang
        if not gang:
            return ranked
        cards = node.cards
        free = [entry for entry in ranked if gang not in cards[entry.position].gangs]
        if len(free) >= count:
            return free  # enough cards without a gang-mate: topology, if on, picks among them
        return free + [entry for entry in ranked if gang in cards[entry.position].gangs]


#: Every filter, in the order their hooks run (numa-bind picks the NUMA node before topology
#: picks within it, SPEC 6.8), whatever order the chain names them in.
FILTERS: dict[str, Filter] = {
    f.name: f for f in (MutexFilter(), NumaBindFilter(), GangSpreadFilter(), TopologyFilter())
}
SORT_KEYS: dict[str, SortKey] = {k.name: k for k in (BinpackKey(), SpreadKey(), NumaKey())}
#: The sort keys of a chain that names none (filters only): SPEC 6.
DEFAULT_SORT_KEYS: tuple[str, ...] = ("spread",)

if TYPE_CHECKING:
    # mypy holds each registered class to the protocol (kube-scheduler's `var _ FilterPlugin = &Fit{}`).
    _filters: tuple[type[Filter], ...] = (MutexFilter, NumaBindFilter, GangSpreadFilter, TopologyFilter)


def chain_names() -> tuple[str, ...]:
    """The names a chain may hold: sort keys, then the filters named in chains."""
    return (*SORT_KEYS, *(name for name, f in FILTERS.items() if f.in_chain))


def gang_filter_names() -> tuple[str, ...]:
    """The chain names of the filters that read the pod's group (`needs_gang`)."""
    return tuple(name for name, f in FILTERS.items() if f.needs_gang and f.in_chain)


def card_stages() -> dict[str, bool]:
    """The stage words of the registered filters' card hooks (SPEC 4 check 6), each with
    whether a card refused at that stage takes the pod once its tenants leave (`empties_card`)."""
    return {f.stage: f.empties_card for f in FILTERS.values() if f.stage}


def stage_words(stage: str) -> str:
    """A registered filter's words for one card its card hook removed at `stage`; "" if none."""
    return next((f.stage_words for f in FILTERS.values() if f.stage and f.stage == stage), "")


def reason_words(code: str) -> str:
    """A registered filter's words for "{n} of {m} cards on {node}" failing with `code`, its
    own reason code; "" when no filter has words for it."""
    return next((f.reason_words for f in FILTERS.values() if f.reason_words and f.reason == code), "")


def _compare_with(keys: Sequence[SortKey]):
    def compare(a: Ranked, b: Ranked) -> int:
        for key in keys:
            va, vb = key.value(a), key.value(b)
            if abs(va - vb) >= TOLERANCE:
                return -1 if va < vb else 1
        return (a.index > b.index) - (a.index < b.index)

    return cmp_to_key(compare)


RankedT = TypeVar("RankedT", bound=Ranked)


def rank(cards: Sequence[RankedT], keys: tuple[str, ...]) -> list[RankedT]:
    """Sort cards by the chain's keys in order, then by index; values within 1e-9 are equal.

    Sorting on exact values is fast and right unless two values differ by less than the
    tolerance without being equal; only then is the tolerant comparison used.
    """
    if len(cards) < 2:
        return list(cards)
    if len(keys) == 1:
        return _rank_by_one(cards, SORT_KEYS[keys[0]])
    key_objects = [SORT_KEYS[name] for name in keys]
    ranked = sorted(cards, key=lambda c: (*[k.value(c) for k in key_objects], c.index))
    for key in key_objects:
        values = sorted(key.value(c) for c in ranked)
        for low, high in zip(values, values[1:], strict=False):
            if low != high and high - low < TOLERANCE:
                return sorted(cards, key=_compare_with(key_objects))
    return ranked


def _rank_by_one(cards: Sequence[RankedT], key: SortKey) -> list[RankedT]:
    """`rank` under one sort key (most chains): each card's value read once, as
    `(value, index, position)` rows that sort as the stable sort on `(value, index)` does
    and leave the values in order for the 1e-9 check (half the time of the general form)."""
    value = key.value
    rows = sorted([(value(card), card.index, at) for at, card in enumerate(cards)])
    low = rows[0][0]
    for row in rows:
        high = row[0]
        if low != high and high - low < TOLERANCE:
            return sorted(cards, key=_compare_with((key,)))
        low = high
    return [cards[row[2]] for row in rows]


def ranking_order(cards: Sequence[RankedT], keys: tuple[str, ...]) -> tuple[list[RankedT], list[str | None]]:
    """`rank`, plus for each card the name of the key that put it after its predecessor
    ("index" when every key tied; None for the first). Used to explain the chosen node."""
    key_objects = [SORT_KEYS[name] for name in keys]
    ranked = rank(cards, keys)
    decided: list[str | None] = [None] if ranked else []
    for prev, card in zip(ranked, ranked[1:], strict=False):
        name = "index"
        for key in key_objects:
            if abs(key.value(prev) - key.value(card)) >= TOLERANCE:
                name = key.name
                break
        decided.append(name)
    return ranked, decided
