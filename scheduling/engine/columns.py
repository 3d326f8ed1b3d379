"""Every node at once: the verdicts of `evaluate` over numpy columns of every card.

`sweep` is `evaluate_node` for every node at once over numpy columns (`CardColumns`), for
the pods where it gives the same verdicts (`sweepable`): a new shape's first pass then costs
a few array operations over all cards instead of a Python loop per card, and its verdicts
stay columns (`Swept`) until one is read. `sweep_pinned` does the same for a pod pinned to
card UUIDs. `card_codes` (checks 1-10 over every card) is shared with
`closeness.closest_columns`.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from . import reasons as R
from .annotations import PodPolicy
from .chain import overrides
from .evaluate import NodeVerdict, evaluate_node
from .fit import NodeFailure
from .model import Card, Node
from .noderules.columns import NodeColumns
from .requests import ContainerAsk


def sweep_pinned(
    columns: CardColumns,
    nodes: list[Node],
    inits: list[ContainerAsk],
    apps: list[ContainerAsk | None],
    policy: PodPolicy,
) -> Swept:
    """`evaluate_node` for every node at once for a pod pinned to card UUIDs (use-gpuuuid),
    whatever its containers: on a node that carries none of them the first GPU container fails
    (`evaluate_unpinned`), its reasons counted over the columns; the few nodes that carry one
    are evaluated in full."""
    c = columns
    first = next(chain(inits, (ask for ask in apps if ask is not None)))
    codes = card_codes(c, first, policy, exclusions=True)
    assert codes is not None  # card by card when a hook has no columns
    code, reasons = codes
    width = len(reasons) + 1
    counts = np.bincount(c.node_of * width + code, minlength=c.count * width).reshape(c.count, width)
    fits = np.zeros(c.count, dtype=bool)
    fail_id, failures = _failures(counts, fits, c.ready, c.reserved, c.sizes, first.count, reasons)
    swept = Swept(fits, np.zeros(c.count), fail_id, failures, c)
    holders = np.unique(c.node_of[c.uuid_cards(policy.use_uuids)])
    for i in holders.tolist():
        swept.put(i, evaluate_node(nodes[i], inits, apps, policy))
    return swept


#: The checks the columnar sweep runs: code k (1-8) is entry k - 1, in SPEC 4 order; 0 fits.
_SWEEP_REASONS: tuple[str, ...] = (
    R.CARD_NOT_HEALTH,
    R.CARD_CORDONED,
    R.CARD_TYPE_MISMATCH,
    R.CARD_SLOTS_EXHAUSTED,
    R.CARD_INSUFFICIENT_MEMORY,
    R.CARD_INSUFFICIENT_CORE,
    R.EXCLUSIVE_CONFLICT,
    R.CARD_COMPUTE_EXHAUSTED,
)


class CardColumns:
    """Every card of a list of nodes as numpy columns, for `sweep`. Capacities and types are
    read once; `refresh` rewrites one node's rows (usage, health, cordons, readiness, version)
    after it was touched, and says False when its cards no longer line up (then `refill`)."""

    def __init__(self, nodes: list[Node]):
        self.refill(nodes)

    def refill(self, nodes: list[Node]) -> None:
        self.count = len(nodes)
        self._nodes: list[Node] | None = nodes
        self._node_rules: NodeColumns | None = None
        self.position = {node.name: i for i, node in enumerate(nodes)}
        self.names = np.array([node.name for node in nodes], dtype=object)
        #: each node's version when its rows were last read: what a sweep's verdicts hold for
        self.versions = [node.version for node in nodes]
        sizes = np.array([len(node.cards) for node in nodes], dtype=np.int64)
        self.sizes = sizes
        self.start = np.concatenate(([0], np.cumsum(sizes)[:-1])) if len(nodes) else sizes
        self.node_of = np.repeat(np.arange(len(nodes), dtype=np.int64), sizes)
        #: each card's position on its node; the card count of every node when they all have as many
        self.slot = np.arange(len(self.node_of), dtype=np.int64) - self.start[self.node_of]
        self.width = int(sizes[0]) if len(nodes) and bool((sizes == sizes[0]).all()) else None
        cards = [card for node in nodes for card in node.cards]
        self._cards: list[Card] | None = cards
        self._cards_of: tuple[list[Card], np.ndarray] | None = None
        self.types: list[str] = []
        type_ids: dict[str, int] = {}
        self.type_id = np.array([type_ids.setdefault(c.type, len(type_ids)) for c in cards], dtype=np.int64)
        self.types = list(type_ids)
        family_ids: dict[str, int] = {}
        self.family_id = np.array(
            [family_ids.setdefault(c.family, len(family_ids)) for c in cards], dtype=np.int64
        )
        self.families = list(family_ids)
        mode_ids: dict[str, int] = {}
        self.mode_id = np.array([mode_ids.setdefault(c.mode, len(mode_ids)) for c in cards], dtype=np.int64)
        self.modes = list(mode_ids)
        self._by_uuid: dict[str, list[int]] | None = None
        self.slots = np.array([c.slots for c in cards], dtype=np.int64)
        self.memory = np.array([c.memory for c in cards], dtype=np.int64)
        self.cores = np.array([c.cores for c in cards], dtype=np.int64)
        self.numa = np.array([c.numa for c in cards], dtype=np.int64)
        self.used_slots = np.array([c.used_slots for c in cards], dtype=np.int64)
        self.used_memory = np.array([c.used_memory for c in cards], dtype=np.int64)
        self.used_cores = np.array([c.used_cores for c in cards], dtype=np.int64)
        self.health = np.array([c.health for c in cards], dtype=bool)
        self.cordoned = np.array([c.cordoned for c in cards], dtype=bool)
        self.ready = np.array([node.ready for node in nodes], dtype=bool)
        self.reserved = np.array([bool(node.reserved_for) for node in nodes], dtype=bool)
        self.node_slots = np.array([sum(c.slots for c in node.cards) for node in nodes], dtype=np.float64)
        self.node_cores = np.array([sum(c.cores for c in node.cards) for node in nodes], dtype=np.float64)
        self.node_memory = np.array([sum(c.memory for c in node.cards) for node in nodes], dtype=np.float64)
        # nodes whose cards differ in MiB: a percentage ask's choice changes their score
        self.mixed_memory = np.array([len({c.memory for c in node.cards}) > 1 for node in nodes], dtype=bool)
        # nodes with a card cut into instances (MIG): the instance decides what a vGPU takes
        self.partitioned = np.array(
            [any(c.partition is not None for c in node.cards) for node in nodes], dtype=bool
        )
        self.card_memory = np.array(
            [node.cards[0].memory if node.cards else 0 for node in nodes], dtype=np.int64
        )
        self.cards_at = [_fixed(node) for node in nodes]

    @property
    def cards(self) -> list[Card]:
        """Every card, in column order. A subset's list is made on first use: a sweep reads it
        only for a card hook without columns, and most re-sweeps have none."""
        cards = self._cards
        if cards is None:
            assert self._cards_of is not None
            every, rows = self._cards_of
            cards = self._cards = list(map(every.__getitem__, rows.tolist()))
        return cards

    def refresh(self, i: int, node: Node) -> bool:
        cards = node.cards
        if _fixed(node) != self.cards_at[i]:
            return False
        at = int(self.start[i])
        for offset, card in enumerate(cards, at):
            self.cards[offset] = card
            self.used_slots[offset] = card.used_slots
            self.used_memory[offset] = card.used_memory
            self.used_cores[offset] = card.used_cores
            self.health[offset] = card.health
            self.cordoned[offset] = card.cordoned
        self.ready[i] = node.ready
        self.reserved[i] = bool(node.reserved_for)
        self.versions[i] = node.version
        if self._node_rules is not None:
            self._node_rules.refresh(i, node)
        return True

    @property
    def node_rules(self) -> NodeColumns:
        """What the per-node rules (SPEC 10) read of the same nodes, as columns (made on
        first use, kept in step by `refresh`)."""
        found = self._node_rules
        if found is None:
            assert self._nodes is not None, "a subset's columns carry no node rules"
            found = self._node_rules = NodeColumns(self._nodes)
        return found

    def subset(self, rows: list[int]) -> CardColumns:
        """The columns of the nodes at `rows` only (in that order), for a sweep over a few
        nodes: the ones touched since a shape's index last looked."""
        part = object.__new__(CardColumns)
        at = np.array(rows, dtype=np.int64)
        sizes = self.sizes[at]
        ends = np.cumsum(sizes)
        start = ends - sizes
        node_of = np.repeat(np.arange(len(rows), dtype=np.int64), sizes)
        cards = self.start[at][node_of] + np.arange(int(ends[-1]) if len(rows) else 0) - start[node_of]
        part.count = len(rows)
        part._nodes, part._node_rules = None, None
        part.names = self.names[at]
        part.position = dict(zip(part.names.tolist(), range(len(rows)), strict=True))
        part.versions = [self.versions[i] for i in rows]
        part.sizes, part.start, part.node_of = sizes, start, node_of
        part.slot = np.arange(len(node_of), dtype=np.int64) - start[node_of]
        part.width = int(sizes[0]) if len(rows) and bool((sizes == sizes[0]).all()) else None
        part._cards, part._cards_of = None, (self.cards, cards)
        part.types, part.modes, part._by_uuid = self.types, self.modes, None
        part.families = self.families
        for column in (
            "type_id",
            "family_id",
            "mode_id",
            "slots",
            "memory",
            "cores",
            "numa",
            "used_slots",
            "used_memory",
            "used_cores",
        ):
            setattr(part, column, getattr(self, column)[cards])
        part.health, part.cordoned = self.health[cards], self.cordoned[cards]
        for column in (
            "ready",
            "reserved",
            "node_slots",
            "node_cores",
            "node_memory",
            "mixed_memory",
            "partitioned",
            "card_memory",
        ):
            setattr(part, column, getattr(self, column)[at])
        part.cards_at = [self.cards_at[i] for i in rows]
        return part

    def uuid_cards(self, uuids) -> list[int]:
        """The positions of the cards whose UUID is one of `uuids` (a map built on first use:
        only pods that name UUIDs read it; `refresh` refuses a node whose UUIDs changed)."""
        by_uuid = self._by_uuid
        if by_uuid is None:
            by_uuid = self._by_uuid = {}
            for offset, card in enumerate(self.cards):
                by_uuid.setdefault(card.uuid, []).append(offset)
        return [offset for uuid in uuids for offset in by_uuid.get(uuid, ())]


def _fixed(node: Node) -> tuple:
    """What of a node's cards `CardColumns` reads once (capacities, type, mode, UUID, NUMA
    node): a node whose cards change in any of it is read again whole (`refill`)."""
    return tuple(
        (c.slots, c.memory, c.cores, c.type, c.mode, c.uuid, c.partition is None, c.family, c.numa)
        for c in node.cards
    )


def sweepable(
    inits: list[ContainerAsk],
    apps: list[ContainerAsk | None],
    policy: PodPolicy,
    exclusions: bool = False,
    fitting_columns: bool = False,
) -> ContainerAsk | None:
    """The one GPU container's ask when `sweep` decides this pod exactly as `evaluate_node`:
    no GPU init container, one GPU app container, no UUID or mode constraint, and no active
    filter with a hook over the fitting cards (check 11) unless `fitting_columns`; card hooks
    (check 6) run over the columns when the filter has `rejects_columns`, else card by card
    inside the sweep.
    `exclusions`: UUID and mode constraints allowed (`sweep` checks them; the columnar
    closeness, `closeness.closest_columns`, does not). `fitting_columns`: a filter with a
    hook over the fitting cards allowed when the hook has a columnar form (`sweep` runs it
    over the columns, `evaluate_alone` over one node's cards; the closeness does not know it)."""
    gpu = [ask for ask in apps if ask is not None]
    if inits or len(gpu) != 1:
        return None
    if not exclusions and (policy.use_modes or policy.use_uuids or policy.nouse_uuids):
        return None
    for f in policy.fitting_hooks:
        if not (fitting_columns and overrides(f, "rejects_fitting_columns")):
            return None
    return gpu[0]


def type_excluded(columns: CardColumns, policy: PodPolicy) -> np.ndarray | None:
    """Per card, whether use/nouse-gputype excludes its type (check 3); None when the pod names none."""
    if not (policy.use_types or policy.nouse_types):
        return None
    excluded = []
    for card_type in columns.types:
        lowered = card_type.lower()
        excluded.append(
            bool(policy.use_types and not any(t in lowered for t in policy.use_types))
            or any(t in lowered for t in policy.nouse_types)
        )
    return np.array(excluded, dtype=bool)[columns.type_id]


def mode_excluded(columns: CardColumns, policy: PodPolicy) -> np.ndarray:
    """Per card, whether vgpu-mode excludes it (check 3a: a card that registers no mode passes)."""
    excluded = [bool(mode) and mode.lower() not in policy.use_modes for mode in columns.modes]
    return np.array(excluded, dtype=bool)[columns.mode_id]


def uuid_excluded(columns: CardColumns, policy: PodPolicy) -> np.ndarray:
    """Per card, whether use/nouse-gpuuuid excludes it (check 4)."""
    excluded = np.full(len(columns.slots), bool(policy.use_uuids), dtype=bool)
    if policy.use_uuids:
        excluded[columns.uuid_cards(policy.use_uuids)] = False
    if policy.nouse_uuids:
        excluded[columns.uuid_cards(policy.nouse_uuids)] = True
    return excluded


def card_codes(
    columns: CardColumns,
    ask: ContainerAsk,
    policy: PodPolicy,
    card_by_card: bool = True,
    exclusions: bool = False,
) -> tuple[np.ndarray, list[str]] | None:
    """Checks 1-10 of SPEC 4 for `ask` on every card of `columns`: per card the code of the
    first failed check (0: fits), code k naming `reasons[k - 1]` (`_SWEEP_REASONS`, then the
    reasons of card hooks not among them). A card hook without `rejects_columns` runs card
    by card, or, without `card_by_card`, the answer is None. With `exclusions`, checks 3a
    and 4 (vgpu-mode, use/nouse-gpuuuid) too, their reasons after `_SWEEP_REASONS` when the
    pod names them; without, the caller has made sure it names none."""
    c = columns
    code = np.zeros(len(c.slots), dtype=np.int64)

    def mark(failed, k: int) -> None:
        code[(code == 0) & failed] = k

    mark(~c.health, 1)
    mark(c.cordoned, 2)
    if c.families and c.families != [ask.family]:
        # check 3: another family's cards (none to check where every card is the ask's family)
        mark(np.array([family != ask.family for family in c.families], dtype=bool)[c.family_id], 3)
    excluded = type_excluded(c, policy)
    if excluded is not None:
        mark(excluded, 3)
    reasons = list(_SWEEP_REASONS)
    if exclusions and policy.use_modes:
        reasons.append(R.CARD_MODE_MISMATCH)
        mark(mode_excluded(c, policy), len(reasons))
    if exclusions and (policy.use_uuids or policy.nouse_uuids):
        reasons.append(R.CARD_UUID_MISMATCH)
        mark(uuid_excluded(c, policy), len(reasons))
    mark(c.used_slots >= c.slots, 4)
    hooks = [f for f in policy.active_filters if f.decides_fit and overrides(f, "rejects")]
    for card_filter in hooks:
        # check 6: each card filter's own hook on the cards still in; a reason is counted by
        # its code's name, so a known reason reuses its code
        columnar = card_filter.rejects_columns(c.used_slots, c.used_memory, c.used_cores)
        if columnar is not None:
            rejected, reason = columnar
            if reason not in reasons:
                reasons.append(reason)
            mark(rejected, reasons.index(reason) + 1)
            continue
        if not card_by_card:
            return None
        cards = c.cards
        used = list(zip(c.used_slots.tolist(), c.used_memory.tolist(), c.used_cores.tolist(), strict=True))
        hit, codes = [], []
        for i in np.flatnonzero(code == 0).tolist():
            rejection = card_filter.rejects(cards[i], used[i])
            if rejection is not None:
                if rejection[0] not in reasons:
                    reasons.append(rejection[0])
                hit.append(i)
                codes.append(reasons.index(rejection[0]) + 1)
        if hit:
            code[np.array(hit, dtype=np.int64)] = np.array(codes, dtype=np.int64)
    memory = ask.memory_on(c.memory)
    mark(c.memory - c.used_memory < memory, 5)
    mark(c.cores - c.used_cores < ask.cores, 6)
    if ask.cores == 100:
        mark(c.used_slots > 0, 7)
    if ask.cores == 0:
        mark((c.cores > 0) & (c.used_cores >= c.cores), 8)
    return code, reasons


class Swept:
    """Every node's verdict for one pod shape from one sweep, as columns: whether it fits, its
    node score, and for a failed node which of `failures` it has (-1 when it fits). `versions`
    are the node versions the verdicts hold for; `verdict` makes one node's `NodeVerdict`, so
    a new shape creates objects only for the nodes a decision later re-reads."""

    __slots__ = ("fits", "score", "fail_id", "failures", "versions", "position", "names", "_failed")

    def __init__(self, fits, score, fail_id, failures: list[NodeFailure], columns: CardColumns):
        self.fits = fits
        self.score = score
        self.fail_id = fail_id
        self.failures = failures
        self.versions = list(columns.versions)
        self.position = columns.position
        self.names = columns.names
        self._failed: dict[int, NodeVerdict] = {}

    def verdict(self, i: int) -> NodeVerdict:
        if self.fits[i]:
            return NodeVerdict(True, score=float(self.score[i]))
        # one verdict per failure: the nodes that fail alike share it (a verdict is never changed)
        failure = int(self.fail_id[i])
        verdict = self._failed.get(failure)
        if verdict is None:
            verdict = self._failed[failure] = NodeVerdict(False, failure=self.failures[failure])
        return verdict

    def refused(self, found: tuple[np.ndarray, list[NodeFailure]] | None) -> Swept:
        """These verdicts with the nodes the per-node rules refuse (`noderules.columns.refusals`:
        per node the index of its failure, -1 where it passes) failed by that rule instead."""
        if found is None:
            return self
        code, failures = found
        out = object.__new__(Swept)
        hit = code >= 0
        out.fits = self.fits & ~hit
        out.score = self.score
        out.fail_id = np.where(hit, code + len(self.failures), self.fail_id)
        out.failures = self.failures + failures
        out.versions, out.position, out.names = self.versions, self.position, self.names
        out._failed = {}
        return out

    def put(self, i: int, verdict: NodeVerdict) -> None:
        """Take `verdict` (from `evaluate_node`) for node `i`."""
        self.fits[i] = verdict.failure is None
        if verdict.failure is None:
            self.score[i] = verdict.score
            self.fail_id[i] = -1
        else:
            self.fail_id[i] = len(self.failures)
            self.failures.append(verdict.failure)


def sweep(
    columns: CardColumns,
    nodes: list[Node],
    ask: ContainerAsk,
    apps: list[ContainerAsk | None],
    policy: PodPolicy,
) -> Swept:
    """`evaluate_node` for every node at once, for a pod `sweepable` accepts (`exclusions`
    allowed): checks 1-10 of
    SPEC 4 in order over all cards as arrays, the reasons counted per node, and the node score
    of SPEC 7 with the same float operations in the same order (so equal to the last bit).
    With one GPU container the score does not depend on which fitting cards are taken when
    they all take the same MiB; a percentage ask on a node whose cards differ in MiB is left
    to `evaluate_node`. Nodes whose cards fail with the same counts share one failure."""
    c = columns
    codes = card_codes(c, ask, policy, exclusions=True)
    assert codes is not None  # card by card when a hook has no columns
    code, reasons = codes
    for card_filter in policy.fitting_hooks:
        # check 11 over the cards that passed 1-10; a node it rejects keeps none fitting
        columnar = card_filter.rejects_fitting_columns(code == 0, c.node_of, c.numa, c.count, ask.count)
        assert columnar is not None  # `sweepable` lets only a columnar hook through
        rejected, reason = columnar
        if reason not in reasons:
            reasons = [*reasons, reason]
        code[rejected] = reasons.index(reason) + 1
    width = len(reasons) + 1
    counts = np.bincount(c.node_of * width + code, minlength=c.count * width).reshape(c.count, width)
    fitting = counts[:, 0]
    fits = c.ready & ~c.reserved & (c.sizes >= ask.count) & (fitting >= ask.count)
    # node score inputs: usage after the placement of `count` cards, per node
    taken = fits * ask.count
    each = ask.memory_on(c.card_memory)
    used_slots = np.bincount(c.node_of, weights=c.used_slots, minlength=c.count) + taken
    used_memory = np.bincount(c.node_of, weights=c.used_memory, minlength=c.count) + taken * each
    used_cores = np.bincount(c.node_of, weights=c.used_cores, minlength=c.count) + taken * ask.cores
    slots, cores, total_memory = c.node_slots, c.node_cores, c.node_memory
    zero = np.zeros(c.count)
    score = np.divide(used_slots, slots, out=zero.copy(), where=slots > 0)
    score = score + np.divide(used_cores, cores, out=zero.copy(), where=cores > 0)
    score = score + np.divide(used_memory, total_memory, out=zero.copy(), where=total_memory > 0)
    score = 10 * score
    fail_id, failures = _failures(counts, fits, c.ready, c.reserved, c.sizes, ask.count, reasons)
    swept = Swept(fits, score, fail_id, failures, c)
    own = (c.mixed_memory & (ask.memory is None)) | c.partitioned
    for i in np.flatnonzero(own).tolist():
        swept.put(i, evaluate_node(nodes[i], [], apps, policy))
    return swept


def _failures(
    counts, fits, ready, reserved, sizes, count: int, reasons: list[str]
) -> tuple[np.ndarray, list[NodeFailure]]:
    """Per node, which failure it has (-1 when it fits), and the distinct failures: a failed
    node's key is its row of card counts per code, or its node-level reason (not ready, then
    reserved, then too few cards) and card count."""
    fail_id = np.full(len(fits), -1, dtype=np.int64)
    failed = np.flatnonzero(~fits)
    if not len(failed):
        return fail_id, []
    rows = counts[failed]
    width = rows.shape[1]
    radix = int(sizes.max()) + 1
    if radix ** (width + 1) < 1 << 62:
        # one integer per row; node-level keys are negative, apart by reason
        key = rows @ (radix ** np.arange(width, dtype=np.int64))
        examined = sizes[failed]
        key = np.where(examined < count, -1 - examined, key)
        key = np.where(reserved[failed], -1 - 2 * radix - examined, key)
        key = np.where(ready[failed], key, -1 - radix - examined)
        distinct, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    else:
        flags = np.stack(
            [ready[failed], reserved[failed], sizes[failed] < count, sizes[failed]], axis=1
        ).astype(np.int64)
        _, first, inverse = np.unique(
            np.hstack([flags, rows]), axis=0, return_index=True, return_inverse=True
        )
    fail_id[failed] = inverse.reshape(-1)
    failures = []
    for j in first.tolist():
        i = int(failed[j])
        examined = int(sizes[i])
        if not ready[i]:
            key_: tuple = (R.NODE_NOT_READY, examined)
        elif reserved[i]:
            key_ = (R.NODE_RESERVED, examined)
        elif examined < count:
            key_ = (R.NODE_INSUFFICIENT_DEVICE, examined)
        else:
            key_ = tuple(rows[j].tolist())
        failures.append(NodeFailure(examined, _counts(key_, reasons)))
    return fail_id, failures


def _counts(key: tuple, reasons: list[str]) -> dict[str, int]:
    """A node's reason counts from its row of card counts per code (code k is `reasons[k - 1]`,
    code 0 the fitting cards), or from a node-level (reason, count) key."""
    if isinstance(key[0], str):
        return {key[0]: key[1]}
    counts: dict[str, int] = {}
    for reason, n in zip(reasons, key[1:], strict=True):
        if n:
            counts[reason] = counts.get(reason, 0) + n
    if key[0]:
        counts[R.ALLOCATED_INSUFFICIENT] = key[0]
    return counts
