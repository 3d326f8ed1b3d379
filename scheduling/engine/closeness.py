"""Why a pending pod waits, node by node: the nodes that came closest, and what would make it fit.

For every node where the pod does not fit, `node_closeness` evaluates the first container
that does not fit with every card kept (`evaluate_node(explain=True)`) and measures how far
the node is from taking it. Closeness, compared in this order (lower is closer):

  1. ready: a node whose agent reports, and that planning holds for no other job
     (`NodeReserved`), comes before a not-ready or reserved one;
  2. never: a node that could not take the pod even with every card empty, healthy and
     uncordoned (fewer cards than asked, or too few cards of the right type/UUID and
     capacity, or of one NUMA node under numa-bind) comes last among the ready ones;
  3. missing: how many more cards the container needs beyond those that pass SPEC 4
     checks 1-10 (`count - passing`, 0 when only numa-bind or a choice rule refused);
  4. blocked: how many of those missing cards cannot be freed by tenants leaving (they
     fail on health, cordon, type or UUID, or lack the capacity altogether);
  5. shortfall: the MiB, then the cores, the `missing` closest capacity-blocked cards lack
     (the smallest change: which cards and how much, see `FreeCard`);
  6. node name.

The scheduler keeps the K closest (ClusterConfig.closest_nodes) with their card tables.
For a pod whose one GPU container is the failing one (`columns.sweepable`),
`closest_columns` computes these keys for every node at once over the card columns, so
only the K kept nodes are evaluated; `ClosestKeys` keeps them per pod shape from decision to
decision and computes again only those of the nodes that changed.
`hints` says, per close node, the smallest change that would make the pod fit, as data
(kinds: `not-ready`, `reserved`, `never`, `free`, `numa`, `mutex`, `blocked`); `explain.hint_words`
puts them in words. `unschedulable` is cluster-wide: no node could ever take the pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import reasons as R
from .annotations import PodPolicy
from .chain import card_stages
from .columns import _SWEEP_REASONS, CardColumns, card_codes, mode_excluded, type_excluded, uuid_excluded
from .evaluate import CardEval, FailingContainer, evaluate_node
from .model import Card, Node
from .requests import ContainerAsk

#: Stages of SPEC 4's own checks that tenants leaving can clear: the card is healthy, usable
#: and big enough (with those of the filters whose `empties_card` is set: `Stages`).
CAPACITY_STAGES = frozenset({"slots", "memory", "cores", "exclusive", "compute"})
#: Stages that keep a card out whatever its tenants do (until someone changes the card).
_EXCLUDED = frozenset({"health", "cordon", "type", "mode", "uuid"})
#: Check 10a: a card cut into instances (MIG) whose free slices hold no profile big enough.
PARTITION_STAGES = frozenset({"mig"})
#: At most this many cards of one close node are kept in a payload (bounds its size).
CARDS_KEPT = 32
#: A large number standing for "cannot be freed" in the closeness key.
_FAR = 1 << 30


def admitted(card: Card, policy: PodPolicy) -> bool:
    """The pod's own ask lets `card` in: use/nouse-gputype, vgpu-mode, use/nouse-gpuuuid
    (checks 3, 3a and 4). Cards it keeps out are none of the cluster's doing."""
    card_type = card.type.lower()
    if policy.use_types and not any(t in card_type for t in policy.use_types):
        return False
    if any(t in card_type for t in policy.nouse_types):
        return False
    if policy.use_modes and card.mode and card.mode.lower() not in policy.use_modes:
        return False
    return not ((policy.use_uuids and card.uuid not in policy.use_uuids) or card.uuid in policy.nouse_uuids)


def restricts(policy: PodPolicy) -> bool:
    """The pod narrows the cards it takes by type, mode or UUID."""
    return bool(
        policy.use_types or policy.nouse_types or policy.use_modes or policy.use_uuids or policy.nouse_uuids
    )


def statically_fits(card: Card, ask: ContainerAsk, policy: PodPolicy) -> bool:
    """Whether `card` could take one vGPU of `ask` once empty, healthy and uncordoned (and of
    the ask's device family: an NPU never takes an NVIDIA ask)."""
    if card.family != ask.family or not admitted(card, policy):
        return False
    return card.slots > 0 and card.memory >= ask.memory_on(card.memory) and card.cores >= ask.cores


def ask_scope(nodes: list[Node], policy: PodPolicy) -> dict:
    """The cards of `nodes` the pod's own ask lets in (`admitted`): how many, their types,
    the largest (MiB) and the most on one node. "Never fits" is judged over these: a pod
    that asks for T4s is not helped by an 80 GB A100."""
    types: set[str] = set()
    largest = most = count = 0
    for node in {node.name: node for node in nodes}.values():  # a node listed twice counts once
        on_node = 0
        for card in node.cards:
            if admitted(card, policy):
                on_node += 1
                types.add(card.type)
                largest = max(largest, card.memory)
        count += on_node
        most = max(most, on_node)
    return {"types": sorted(types), "cards": count, "largest_memory": largest, "most_cards": most}


def never_fits(node: Node, asks: list[ContainerAsk], policy: PodPolicy) -> bool:
    """No state of `node`'s tenants, health or cordons lets every container of the pod fit:
    some container asks more cards than the node has that could ever take it (on one NUMA
    node under numa-bind)."""
    for ask in asks:
        able = [card for card in node.cards if statically_fits(card, ask, policy)]
        if policy.numa_bind:
            per_numa: dict[int, int] = {}
            for card in able:
                per_numa[card.numa] = per_numa.get(card.numa, 0) + 1
            if max(per_numa.values(), default=0) < ask.count:
                return True
        elif len(able) < ask.count:
            return True
    return False


@dataclass(frozen=True, slots=True)
class CardRow:
    """One card of a close node for the failing container: the engine's verdict, what is free
    against what is asked, and by how much it falls short (0 when it passed)."""

    uuid: str
    index: int
    numa: int
    reason: str | None
    stage: str | None
    score: float
    free_slots: int
    free_memory: int
    free_cores: int
    ask_memory: int
    ask_cores: int
    short_memory: int
    short_cores: int
    freeable: bool

    def as_dict(self) -> dict:
        return {
            "uuid": self.uuid,
            "index": self.index,
            "numa": self.numa,
            "reason": self.reason,
            "stage": self.stage,
            "score": round(self.score, 6),
            "free": {"slots": self.free_slots, "memory": self.free_memory, "cores": self.free_cores},
            "ask": {"memory": self.ask_memory, "cores": self.ask_cores},
            "short": {"memory": self.short_memory, "cores": self.short_cores},
            "freeable": self.freeable,
        }


@dataclass(slots=True)
class NodeCloseness:
    """How close one failed node came: its closeness key (see the module). The card table and
    the smallest change that would make the pod fit there (`hints`) are built on demand
    (`detail`), for the nodes a decision keeps only, and kept with the key: both hold for the
    node version they were measured at."""

    node: Node
    key: tuple
    policy: PodPolicy
    inits: list[ContainerAsk]
    apps: list[ContainerAsk | None]
    failing: FailingContainer | None = None
    never: bool = False
    missing: int = 0
    best: list[int] = field(default_factory=list)  # positions of the closest freeable cards
    measured: bool = False  # `failing` was evaluated (a never-fitting node skips it until asked)
    _detail: dict | None = None

    @property
    def ready(self) -> bool:
        return self.node.ready

    def rows(self) -> list[CardRow]:
        """The failing container's card table, by card index."""
        if not self.measured:
            self.failing = evaluate_node(self.node, self.inits, self.apps, self.policy, explain=True).failing
            self.measured = True
        if self.failing is None:
            return []
        ask, overlay = self.failing.ask, self.failing.overlay
        stages = Stages.now()
        rows = [_row(entry, ask, overlay, stages) for entry in self.failing.verdict.evals]
        rows.sort(key=lambda row: row.index)
        return rows

    def detail(self) -> dict:
        """The node as a decision payload keeps it (`closest_nodes`); call it while the node is
        at the version it was measured at."""
        if self._detail is None:
            rows = self.rows()
            ask = self.failing.ask if self.failing is not None else None
            passed = Stages.now().passed
            self._detail = {
                "node": self.node.name,
                "container": ask.name if ask else "",
                "count": ask.count if ask else 0,
                "ready": self.ready,
                "never": self.never,
                "cards_total": len(self.node.cards),
                "missing": self.missing
                if not self.never or ask is None
                else max(0, ask.count - sum(passed(row.reason, row.stage) for row in rows)),
                "cards": [row.as_dict() for row in rows[:CARDS_KEPT]],
                "hints": hints(self, rows),
            }
        return self._detail


@dataclass(frozen=True, slots=True)
class Stages:
    """The stage words closeness sorts cards by, SPEC 4's own and those of the registered
    filters' card hooks (check 6): `capacity`, cleared by tenants leaving; `emptying`, the
    filters' among them (a card refused there needs its tenants gone: mutex); `checks`,
    every stage of checks 1-10 (a card removed at any other stage passed them)."""

    capacity: frozenset[str]
    emptying: frozenset[str]
    checks: frozenset[str]

    @classmethod
    def now(cls) -> Stages:
        hooks = card_stages()
        emptying = frozenset(stage for stage, empties in hooks.items() if empties)
        checks = CAPACITY_STAGES | _EXCLUDED | PARTITION_STAGES | frozenset(hooks)
        return cls(CAPACITY_STAGES | emptying, emptying, checks)

    def passed(self, reason: str | None, stage: str | None) -> bool:
        """The card passed SPEC 4 checks 1-10 (it fits alone; numa-bind may still refuse it)."""
        return reason is None or stage not in self.checks


def _row(entry: CardEval, ask: ContainerAsk, overlay: list[list[int]], stages: Stages) -> CardRow:
    card = entry.card
    extra = overlay[entry.position]
    free_slots = card.slots - card.used_slots - extra[0]
    free_memory = card.memory - card.used_memory - extra[1]
    free_cores = card.cores - card.used_cores - extra[2]
    return CardRow(
        uuid=card.uuid,
        index=card.index,
        numa=card.numa,
        reason=entry.reason,
        stage=entry.stage,
        score=entry.score,
        free_slots=free_slots,
        free_memory=free_memory,
        free_cores=free_cores,
        ask_memory=entry.memory,
        ask_cores=ask.cores,
        short_memory=max(0, entry.memory - free_memory),
        short_cores=max(0, ask.cores - free_cores),
        freeable=entry.stage in stages.capacity and _capacity_fits(card, entry.memory, ask.cores),
    )


def _capacity_fits(card: Card, memory: int, cores: int) -> bool:
    """An empty `card` could hold one vGPU of `memory` MiB and `cores` (type and UUID aside)."""
    return card.slots > 0 and card.memory >= memory and card.cores >= cores


def never_hint(node: Node, ask: ContainerAsk, policy: PodPolicy) -> dict:
    """Why `ask` never fits on `node`: `why` is `cards` (fewer cards than asked), `memory` (the
    ask exceeds every card), `numa` (no NUMA node has enough cards under numa-bind), else
    `excluded` (too few cards of the type/UUID asked with the capacity asked)."""
    able = [card for card in node.cards if statically_fits(card, ask, policy)]
    largest = max((card.memory for card in node.cards), default=0)
    if len(node.cards) < ask.count:
        why = "cards"
    elif ask.memory is not None and ask.memory > largest:
        why = "memory"
    elif policy.numa_bind and len(able) >= ask.count:
        why = "numa"
    else:
        why = "excluded"
    return {
        "kind": "never",
        "node": node.name,
        "why": why,
        "container": ask.name,
        "count": ask.count,
        "cards": len(node.cards),
        "able": len(able),
        "memory": ask.memory,
        "largest_memory": largest,
    }


def cluster_never(nodes: list[Node], asks: list[ContainerAsk], policy: PodPolicy) -> dict:
    """Why no node can ever take the pod, cluster-wide: the first container that fits on no
    node even empty, with the cluster's largest card (MiB) and most cards on one node, and
    for a pod that narrows its cards (`restricts`) the same over the cards it lets in."""
    largest = max((card.memory for node in nodes for card in node.cards), default=0)
    most = max((len(node.cards) for node in nodes), default=0)
    scope = ask_scope(nodes, policy) if restricts(policy) else None
    for ask in asks:
        if all(never_fits(node, [ask], policy) for node in nodes):
            return never_reason(ask, policy, largest, most, scope)
    out: dict = {"why": "combined", "largest_memory": largest, "most_cards": most}
    if scope is not None:
        out["scope"] = scope
    return out


def never_reason(
    ask: ContainerAsk, policy: PodPolicy, largest: int, most: int, scope: dict | None = None
) -> dict:
    """`cluster_never` for `ask`, the container no node can ever take, on nodes whose largest
    card has `largest` MiB and the most cards on one node are `most`. With `scope`
    (`ask_scope`, for a pod that narrows its cards) the deciding fact is read over the cards
    the pod lets in: `excluded` when there are none, else too few on one node (`cards`), too
    small (`memory`), numa-bind, or none of them with the cores asked (`excluded`)."""
    cards, big = (most, largest) if scope is None else (scope["most_cards"], scope["largest_memory"])
    if scope is not None and not scope["cards"]:
        why = "excluded"
    elif cards < ask.count:
        why = "cards"
    elif ask.memory is not None and ask.memory > big:
        why = "memory"
    elif policy.numa_bind:
        why = "numa"
    else:
        why = "excluded"
    out = {
        "why": why,
        "container": ask.name,
        "count": ask.count,
        "memory": ask.memory,
        "largest_memory": largest,
        "most_cards": most,
    }
    if scope is not None:
        out["scope"] = scope
    return out


def columns_scope(columns: CardColumns, policy: PodPolicy, nodes: np.ndarray) -> dict:
    """`ask_scope` over the card columns, for the nodes set in `nodes` (a bool per node)."""
    keep = nodes[columns.node_of].copy()
    excluded = type_excluded(columns, policy)
    if excluded is not None:
        keep &= ~excluded
    if policy.use_modes:
        keep &= ~mode_excluded(columns, policy)
    if policy.use_uuids or policy.nouse_uuids:
        keep &= ~uuid_excluded(columns, policy)
    type_ids = np.unique(columns.type_id[keep])
    return {
        "types": sorted(columns.types[int(i)] for i in type_ids),
        "cards": int(keep.sum()),
        "largest_memory": int(columns.memory[keep].max(initial=0)),
        "most_cards": int(_per_node(columns, keep).max(initial=0)),
    }


#: Codes of `columns.card_codes` that tenants leaving can clear (slots, memory, cores,
#: exclusive or mutex, compute): `CAPACITY_STAGES` as codes.
_CAPACITY_CODES = (4, 8)


@dataclass(slots=True)
class ClosestColumns:
    """`closest_columns`' answer: how many nodes fail, the positions of the `keep` closest,
    closest first, and over the failed nodes: whether none could ever take the pod, their
    largest card (MiB) and most cards on one node."""

    failed: int
    top: list[int]
    never: bool
    largest: int
    most: int
    scope: dict | None = None


def _per_node(columns: CardColumns, cards: np.ndarray) -> np.ndarray:
    """How many of each node's cards are set in `cards` (a bool per card)."""
    if columns.width is not None:
        return cards.reshape(columns.count, columns.width).sum(axis=1)
    return np.bincount(columns.node_of[cards], minlength=columns.count)


def closest_columns(
    columns: CardColumns, ask: ContainerAsk, policy: PodPolicy, keep: int
) -> ClosestColumns | None:
    """The closeness keys of `node_closeness` for every node at once, for a pod that
    `columns.sweepable` accepts (its one GPU container is the failing one, on a zero
    overlay), and the `keep` smallest among the nodes where it does not fit. None when a
    card hook has no `rejects_columns` or rejects with a reason of its own (its stage unknown
    here), or the shortfalls do not fit one integer: then `node_closeness` node by node.

    The `missing` closest freeable cards are the smallest (MiB, cores) shortfalls; which
    cards they are (ties by position) only matters to the card table of a kept node, which
    `node_closeness` measures again."""
    found = node_keys(columns, ask, policy)
    if found is None:
        return None
    failed, never, key = found
    c = columns
    at = _ranked(failed, key)
    cards_failed = failed[c.node_of]
    never_anywhere = bool(len(at)) and bool(never[at].all())
    return ClosestColumns(
        failed=len(at),
        top=at[: max(0, keep)].tolist(),
        never=never_anywhere,
        largest=int(c.memory[cards_failed].max(initial=0)),
        most=int(c.sizes[at].max(initial=0)),
        scope=columns_scope(c, policy, failed) if never_anywhere and restricts(policy) else None,
    )


def _ranked(failed: np.ndarray, key: np.ndarray) -> np.ndarray:
    """The positions of the failed nodes, closest first (ties by position: node name)."""
    at = np.flatnonzero(failed)
    return at[np.lexsort((at, *key[::-1, at]))]


def node_keys(
    columns: CardColumns, ask: ContainerAsk, policy: PodPolicy
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per node of `columns`, for `closest_columns`: whether the pod fails there, whether it
    never could (`never_fits`), and its closeness key without the name as six rows (not
    usable, never, missing, blocked, MiB short, cores short). Each node's answer reads its
    own cards only, so the keys of a few nodes come from their columns alone
    (`CardColumns.subset`, `ClosestKeys`). None as `closest_columns`."""
    codes = card_codes(columns, ask, policy, card_by_card=False)
    if codes is None or len(codes[1]) > len(_SWEEP_REASONS):
        return None
    code = codes[0]
    c = columns
    n, count = c.count, ask.count
    memory = ask.memory_on(c.memory)
    passing = _per_node(c, code == 0)
    usable = c.ready & ~c.reserved
    failed = ~(usable & (c.sizes >= count) & (passing >= count))
    capacity = (c.slots > 0) & (c.memory >= memory) & (c.cores >= ask.cores)
    excluded = type_excluded(c, policy)
    able = capacity if excluded is None else capacity & ~excluded
    never = _per_node(c, able) < count
    # only failed, ready nodes that might fit are measured: their freeable cards' shortfalls
    measured = failed & usable & ~never
    rows = np.flatnonzero(measured)
    missing = np.maximum(0, count - np.asarray(passing)[rows])
    cards = np.flatnonzero(measured[c.node_of])
    gap = capacity[cards] & (code[cards] >= _CAPACITY_CODES[0]) & (code[cards] <= _CAPACITY_CODES[1])
    asked = memory if ask.memory is not None else memory[cards]  # type: ignore[index]
    short_memory = np.maximum(0, asked - (c.memory[cards] - c.used_memory[cards]))
    short_cores = np.maximum(0, ask.cores - (c.cores[cards] - c.used_cores[cards]))
    radix = int(short_cores[gap].max(initial=0)) + 1
    if int(short_memory[gap].max(initial=0)) >= (1 << 62) // radix:
        return None
    # per node its freeable cards' shortfalls as one sortable integer, smallest first
    far = np.iinfo(np.int64).max
    table = np.full((len(rows), max(1, int(c.sizes.max(initial=0)))), far, dtype=np.int64)
    local = np.cumsum(measured) - 1
    table[local[c.node_of[cards]], c.slot[cards]] = np.where(gap, short_memory * radix + short_cores, far)
    table.sort(axis=1)
    taken = (np.arange(table.shape[1]) < missing[:, None]) & (table != far)
    blocked = missing - taken.sum(axis=1)
    memory_taken, cores_taken = np.divmod(np.where(taken, table, 0), radix)
    open_ = blocked == 0
    key = [np.full(n, _FAR, dtype=np.int64) for _ in range(4)]
    key[0][rows], key[1][rows] = missing, blocked
    key[2][rows] = np.where(open_, memory_taken.sum(axis=1), _FAR)
    key[3][rows] = np.where(open_, cores_taken.sum(axis=1), _FAR)
    return failed, never, np.stack([(~usable).astype(np.int64), never.astype(np.int64), *key])


class ClosestKeys:
    """`closest_columns` for one pod shape, kept from decision to decision (issue 29): every
    node's key as columns (`node_keys`), and the failed nodes closest first, `head` more than
    `keep` of them. That head is every failed node whose key is at most its last one's, so it
    stays exact as nodes change: a changed node leaves it, and comes back if its new key is
    within that bound. `update` computes the keys of the nodes changed since (over their cards
    only) and merges them; when nothing changed, `answer` is the last one as it was. Only when
    the head runs shorter than `keep` (its nodes moved away) are the failed nodes sorted
    again. The answer is always `closest_columns`' over the same columns."""

    __slots__ = (
        "ask",
        "policy",
        "keep",
        "length",
        "failed",
        "never",
        "key",
        "largest",
        "sizes",
        "head",
        "whole",
        "_answer",
    )

    def __init__(
        self,
        columns: CardColumns,
        ask: ContainerAsk,
        policy: PodPolicy,
        keep: int,
        found: tuple[np.ndarray, np.ndarray, np.ndarray],
        head: int = 64,
    ) -> None:
        self.ask, self.policy, self.keep = ask, policy, max(0, keep)
        #: how many failed nodes the head holds: `head` beyond the `keep` closest, so a few
        #: leaving it do not make every failed node be sorted again
        self.length = self.keep + max(0, head)
        self.failed, self.never, self.key = found
        #: per node its largest card (MiB) and its card count: they change only with the
        #: columns read again whole (`CardColumns.refill`), which makes new keys
        self.largest = np.zeros(columns.count, dtype=np.int64)
        np.maximum.at(self.largest, columns.node_of, columns.memory)
        self.sizes = columns.sizes
        self.head: list[tuple] = []
        self.whole = False  # the head holds every failed node
        self._answer: ClosestColumns | None = None
        self._sort()

    @classmethod
    def build(
        cls, columns: CardColumns, ask: ContainerAsk, policy: PodPolicy, keep: int, head: int = 64
    ) -> ClosestKeys | None:
        """Every node's key from `columns`; None where `closest_columns` answers None."""
        found = node_keys(columns, ask, policy)
        return None if found is None else cls(columns, ask, policy, keep, found, head)

    def _sort(self) -> None:
        """The head from every failed node."""
        order = _ranked(self.failed, self.key)
        self.whole = len(order) <= self.length
        rows = order[: self.length]
        self.head = [
            (*key, row) for key, row in zip(self.key[:, rows].T.tolist(), rows.tolist(), strict=True)
        ]

    def update(self, columns: CardColumns, rows: list[int]) -> bool:
        """Take the keys of the nodes at `rows` (their columns changed) from `columns`. False,
        nothing changed, when they cannot be computed over the columns (`node_keys`' None)."""
        if not rows:
            return True
        changed = sorted(set(rows))
        found = node_keys(columns.subset(changed), self.ask, self.policy)
        if found is None:
            return False
        failed, never, key = found
        at = np.array(changed, dtype=np.int64)
        self.failed[at], self.never[at], self.key[:, at] = failed, never, key
        # every failed node outside the head has a key past its last one
        bound = None if self.whole or not self.head else self.head[-1]
        gone = set(changed)
        head = [entry for entry in self.head if entry[-1] not in gone]
        came = np.flatnonzero(failed)
        for entry in zip(*key[:, came].tolist(), at[came].tolist(), strict=True):
            if bound is None or entry <= bound:
                head.append(entry)
        head.sort()
        if len(head) > self.length:
            head, self.whole = head[: self.length], False
        self.head = head
        if not self.whole and len(head) < self.keep:
            self._sort()  # a node past the head may be among the closest now
        self._answer = None
        return True

    def answer(self, columns: CardColumns) -> ClosestColumns:
        """`closest_columns(columns, ask, policy, keep)`, for the columns last updated from."""
        found = self._answer
        if found is None:
            failed = self.failed
            count = int(np.count_nonzero(failed))
            never_anywhere = bool(count) and not bool((failed & ~self.never).any())
            found = self._answer = ClosestColumns(
                failed=count,
                top=[entry[-1] for entry in self.head[: self.keep]],
                never=never_anywhere,
                largest=int(np.where(failed, self.largest, 0).max(initial=0)),
                most=int(np.where(failed, self.sizes, 0).max(initial=0)),
                scope=columns_scope(columns, self.policy, failed)
                if never_anywhere and restricts(self.policy)
                else None,
            )
        return found


def passed_checks(reason: str | None, stage: str | None) -> bool:
    """The card passed SPEC 4 checks 1-10 (it fits alone; numa-bind may still refuse it)."""
    return Stages.now().passed(reason, stage)


def node_closeness(
    node: Node,
    inits: list[ContainerAsk],
    apps: list[ContainerAsk | None],
    policy: PodPolicy,
    never: bool | None = None,
) -> NodeCloseness:
    """How close `node` (where the pod does not fit) came. `never`, when the caller knows it
    for this node and pod already (it depends on capacities only), saves its computation."""
    if never is None:
        never = never_fits(node, [*inits, *(ask for ask in apps if ask is not None)], policy)
    if not node.ready or node.reserved_for:
        key = (1, int(never), _FAR, _FAR, _FAR, _FAR, node.name)
        return NodeCloseness(node, key, policy, inits, apps, never=never, measured=True)
    if never:  # after every node that might fit, by name: its card table only when kept
        return NodeCloseness(node, (0, 1, _FAR, _FAR, _FAR, _FAR, node.name), policy, inits, apps, never=True)
    failing = evaluate_node(node, inits, apps, policy, explain=True).failing
    if failing is None:  # it fits after all (the caller's snapshot moved on): nothing to say
        return NodeCloseness(node, (0, 0, 0, 0, 0, 0, node.name), policy, inits, apps, measured=True)
    ask, overlay = failing.ask, failing.overlay
    stages = Stages.now()
    passing = 0
    gaps: list[tuple[int, int, int]] = []
    for entry in failing.verdict.evals:
        stage = entry.stage
        if stages.passed(entry.reason, stage):
            passing += 1
        elif stage in stages.capacity and _capacity_fits(entry.card, entry.memory, ask.cores):
            card, extra = entry.card, overlay[entry.position]
            short_memory = max(0, entry.memory - (card.memory - card.used_memory - extra[1]))
            short_cores = max(0, ask.cores - (card.cores - card.used_cores - extra[2]))
            gaps.append((short_memory, short_cores, entry.position))
    missing = max(0, ask.count - passing)
    best = sorted(gaps)[:missing]
    blocked = missing - len(best)
    key = (
        0,
        int(never),
        missing,
        blocked,
        sum(gap[0] for gap in best) if not blocked else _FAR,
        sum(gap[1] for gap in best) if not blocked else _FAR,
        node.name,
    )
    best_positions = [gap[2] for gap in best]
    return NodeCloseness(node, key, policy, inits, apps, failing, never, missing, best_positions, True)


def hints(closeness: NodeCloseness, rows: list[CardRow]) -> list[dict]:
    """The smallest change on the node that would let the pod fit, as data (see the module)."""
    node, policy, failing = closeness.node, closeness.policy, closeness.failing
    name = node.name
    if not node.ready:
        return [{"kind": "not-ready", "node": name}]
    if node.reserved_for:
        return [{"kind": "reserved", "node": name, "job": node.reserved_for}]
    if failing is None:
        return []
    ask = failing.ask
    counts = failing.verdict.counts
    missing = closeness.missing
    by_position = {entry.position: entry.card.uuid for entry in failing.verdict.evals}
    wanted = [by_position[position] for position in closeness.best]
    best = sorted((row for row in rows if row.uuid in wanted), key=lambda row: wanted.index(row.uuid))
    if closeness.never:
        return [never_hint(node, ask, policy)]
    hints: list[dict] = []
    stages = Stages.now()
    passing = [row for row in rows if stages.passed(row.reason, row.stage)]
    if R.NUMA_NOT_FIT in counts:
        per_numa: dict[int, int] = {}
        for row in passing:
            per_numa[row.numa] = per_numa.get(row.numa, 0) + 1
        hints.append(
            {
                "kind": "numa",
                "node": name,
                "fit": len(passing),
                "cards": len(rows),
                "count": ask.count,
                "best": max(per_numa.values(), default=0),
            }
        )
    mutex_rows = [row for row in rows if row.stage in stages.emptying]
    if mutex_rows:
        would = [
            row for row in mutex_rows if row.free_slots > 0 and not row.short_memory and not row.short_cores
        ]
        hints.append(
            {
                "kind": "mutex",
                "node": name,
                "busy": len(mutex_rows),
                "cards": len(rows),
                "every": len(mutex_rows) == len(rows),
                "would_fit": len(would),
                "count": ask.count,
            }
        )
    if missing and best and len(best) == missing:
        hints.append(
            {
                "kind": "free",
                "node": name,
                "missing": missing,
                "cards": [
                    {
                        "uuid": row.uuid,
                        "index": row.index,
                        "stage": row.stage,
                        "memory": row.short_memory,
                        "cores": row.short_cores,
                        "slots": 1 if row.free_slots <= 0 else 0,
                        "tenants_needed": row.stage == "exclusive" or row.stage in stages.emptying,
                    }
                    for row in best
                ],
            }
        )
    shortfalls = [
        {"uuid": entry.card.uuid, **entry.card.partition.shortfall(entry.memory, ask.cores)}
        for entry in sorted(failing.verdict.evals, key=lambda entry: entry.card.index)
        if entry.stage in PARTITION_STAGES and entry.card.partition is not None
    ]
    if shortfalls:
        hints.append({"kind": "mig", "node": name, "cards": shortfalls})
    excluded: dict[str, int] = {}
    for row in rows:
        if row.stage in _EXCLUDED:
            excluded[row.stage or ""] = excluded.get(row.stage or "", 0) + 1
    if missing and len(best) < missing and excluded:
        hints.append({"kind": "blocked", "node": name, "missing": missing - len(best), "stages": excluded})
    return hints
