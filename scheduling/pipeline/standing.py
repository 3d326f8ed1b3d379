"""The standing snapshot: a worker's cluster and engine kept from cycle to cycle and brought
up to date from what changed, instead of read whole and decided cold every cycle.

Why: at 1,000 nodes reading every card row and building the engine's objects costs 55-100 ms,
and a new `Scheduler` decides every pod shape cold; a pod waiting for a release waited for
both. Kept, a cycle reads one narrow query per table and re-evaluates only the nodes that
changed (the engine's indexes follow `Node.touch`).

What changed is found without trusting every writer to say so:
- in the database: on PostgreSQL each card, node and bound-pod row's `written` mark (the
  transaction that last wrote it, set by a trigger, indexed) and a log of deleted rows
  (migration 0024), read by index, and the changed rows read whole by id; elsewhere
  (SQLite, the small embedded default) the rows themselves, compared;
- in memory: the nodes a cycle's planning touched (placements assumed, nominations held,
  gangs marked, whatever it kept or not) are put back to their rows, found in the engine's
  touch log.

Counters, health, cordons and readiness are updated in place. Anything else (a card added,
gone or reshaped, links, a node's labels, annotations, taints, cordon or allocatable, a new
node, a pod others bound that came, went or changed), a touch log that dropped entries, a
planning error or SNAPSHOT_REBUILD_SECONDS reads it whole. A whole read that finds the same
nodes and cards, built alike (the usual case: the periodic read, a pod others bound), is
carried over onto the kept snapshot (`_carry_over`): the nodes whose state differs take the
read's and are touched, and the kept scheduler keeps its per-shape indexes and closest-node
caches, re-evaluating only those nodes; a fresh scheduler decided every shape cold (~6 ms a
shape at 20,000 nodes, issue 29). Only what else differs, or a planning error, replaces both.

hamiadmin's own placed pods (`Cluster.running`, for cpu, memory, ports and labels) are read
again for every node put back: a placement or release changes its cards' counters, which
marks the node. A node the last commit left as planned (`confirm`) whose rows agree with it is
kept instead (`_as_rows`): the pods placed there are counted on it already, as assumed. Each
process keeps its own; the commit re-checks under lock whatever a snapshot said, so a stale
view costs a conflict and another cycle, never an over-commit.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from operator import attrgetter

from django.db import connection

from scheduling.engine import Scheduler
from scheduling.engine.model import TOUCHES, RunningPod, cordoned_uuids
from scheduling.engine.model import Card as EngineCard
from scheduling.engine.model import Node as EngineNode
from scheduling.models import BoundPod, Card, Node

from . import collector, pools
from .options import option
from .snapshot import (
    CARD_COLUMNS,
    HORIZON,
    NODE_COLUMNS,
    USED_FIELDS,
    Snapshot,
    bound_mark,
    bound_written_since,
    build_snapshot,
    card_rows,
    count_running,
    current_config,
    load_snapshot,
    node_rows,
    others_on,
    own_running,
    running_pods,
    written_since,
)

#: Card columns kept up to date in place; a change to any other column rebuilds.
HEALTH, CORDONED = CARD_COLUMNS.index("health"), CARD_COLUMNS.index("cordoned")
IN_PLACE_CARD = frozenset(CARD_COLUMNS.index(name) for name in ("used_slots", "used_memory", "used_cores"))
IN_PLACE_CARD |= {HEALTH, CORDONED}
READY = NODE_COLUMNS.index("ready")
#: A card's state its row gives (`_card_row_state`), as the card holds it.
CARD_AS_ROW = attrgetter("used_slots", "used_memory", "used_cores", "health", "cordoned")


def _postgres_horizon() -> tuple[int, list[int]]:
    """The oldest transaction still running (a 64-bit xid), and the deletions logged at or
    after it. A row written after this moment (or by a transaction running now) carries a
    `written` mark at or after that horizon."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {HORIZON}, ARRAY(SELECT id FROM hamiadmin_gone WHERE xid >= {HORIZON})")
        return cursor.fetchone()


def _forget_old_deletions() -> None:
    """Drop the deletion log's entries older than GONE_KEEP seconds (or twice
    SNAPSHOT_REBUILD_SECONDS): a process that has not read its snapshot whole for that long
    reads it whole before it looks at the log again, so none still looks for them."""
    keep = max(GONE_KEEP, 2 * option("SNAPSHOT_REBUILD_SECONDS"))
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM hamiadmin_gone WHERE at < now() - make_interval(secs => %s)", [keep])


#: Seconds a deletion stays in the log at least (`_forget_old_deletions`).
GONE_KEEP = 3600


def _postgres_changes(since: int) -> tuple[int, list[int], list[int], list[int], list[int]]:
    """A new horizon (`_postgres_horizon`), the ids of the card, node and bound-pod rows
    written at or after the horizon `since`, and the deletions of card, node or bound-pod rows
    logged since, in one statement. The `written` marks and the deletion log are kept by
    triggers (migration 0024), so this reads an index, not every card row (25-30 ms at 160,000
    cards)."""
    cards, nodes, bound = Card._meta.db_table, Node._meta.db_table, BoundPod._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {HORIZON},"  # noqa: S608 - our own names
            f" ARRAY(SELECT id FROM {cards} WHERE written >= %s),"
            f" ARRAY(SELECT id FROM {nodes} WHERE written >= %s),"
            " ARRAY(SELECT id FROM hamiadmin_gone WHERE xid >= %s),"
            f" ARRAY(SELECT id FROM {bound} WHERE written >= %s)",
            [since, since, since, since],
        )
        return cursor.fetchone()


#: What a whole read carries over onto a kept node and its cards (`_carry_over`): their state.
#: Every other field of theirs (names, sizes, labels, annotations, taints, links...) is how
#: they are built, and a difference there replaces the snapshot and its scheduler.
NODE_STATE = ("ready", "reserved_for", "held")
CARD_STATE = ("health", "cordoned", "used_slots", "used_memory", "used_cores", "gangs", "partition")
NODE_BUILD = attrgetter(
    *(f.name for f in fields(EngineNode) if f.name not in {*NODE_STATE, "cards", "version"})
)
CARD_BUILD = attrgetter(*(f.name for f in fields(EngineCard) if f.name not in CARD_STATE))
NODE_STATE_OF = attrgetter("ready", "reserved_for")
CARD_STATE_OF = attrgetter(*CARD_STATE)


def _holding(node) -> tuple:
    """What the pods on a node hold of it (`NodeHeld`), none alike whether counted or not; not
    its `capacity`, read from `allocatable` (built) when first asked."""
    held = node.held
    return ({}, {}, {}) if held is None else (held.pods, held.requested, held.ports)


def built_alike(old, new) -> bool:
    """Whether two engine nodes are built alike: they differ at most in their state."""
    if NODE_BUILD(old) != NODE_BUILD(new) or len(old.cards) != len(new.cards):
        return False
    return all(CARD_BUILD(a) == CARD_BUILD(b) for a, b in zip(old.cards, new.cards, strict=True))


def same_state(old, new) -> bool:
    """Whether two nodes built alike are in the same state (`NODE_STATE`, `CARD_STATE`)."""
    if NODE_STATE_OF(old) != NODE_STATE_OF(new) or _holding(old) != _holding(new):
        return False
    return all(CARD_STATE_OF(a) == CARD_STATE_OF(b) for a, b in zip(old.cards, new.cards, strict=True))


def differs_beyond(old: tuple, new: tuple, allowed) -> bool:
    """Whether two rows differ in a column whose index is not in `allowed`."""
    return any(a != b for i, (a, b) in enumerate(zip(old, new, strict=True)) if i not in allowed)


def _by_node(pods: Iterable[RunningPod]) -> dict[str, list[RunningPod]]:
    """Running pods by the name of the node they run on, in the order given."""
    on: dict[str, list[RunningPod]] = {}
    for pod in pods:
        on.setdefault(pod.node, []).append(pod)
    return on


def _warm_scheduler(cluster, config) -> Scheduler:
    """A new scheduler for the kept snapshot, its card columns built now (`Scheduler.warm`):
    while a whole read has the collector asleep, not in the first cycle after it."""
    scheduler = Scheduler(cluster, config)
    scheduler.warm()
    return scheduler


class Rebuild(Exception):
    """What changed cannot be applied in place: read the snapshot whole."""


class StandingSnapshot:
    """One process's snapshot and scheduler between cycles (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        """Forget everything: the next cycle reads the cluster whole."""
        self.snapshot: Snapshot | None = None
        self.scheduler: Scheduler | None = None
        self.cards: dict[int, tuple] = {}  # card id -> row of CARD_COLUMNS
        self.nodes: dict[int, tuple] = {}  # node id -> row of NODE_COLUMNS
        self.horizon: int | None = None  # PostgreSQL: rows written before it were read
        self.gone: set[int] = set()  # the deletions logged since `horizon` that were read already
        self.bound: list[RunningPod] = []  # the pods others bound, as counted
        self.bound_on: dict[str, list[RunningPod]] = {}  # node name -> those of them on it
        self.own: dict[str, list[RunningPod]] = {}  # node name -> hamiadmin's placed pods on it
        self.bound_seen: dict[int, object] = {}  # BoundPod id -> updated_at (`_bound_changed`)
        self.position = 0  # where in the touch log the kept nodes were last put back
        self.built_at = float("-inf")
        self.rebuilds = 0  # whole reads, for tests and the bench
        self.carried = 0  # whole reads carried over onto the kept snapshot and scheduler
        self.spoiled = False  # the next whole read replaces the scheduler too (`spoil`)
        self.refreshes = 0
        self.refreshed_at = float("-inf")  # perf_counter() when last brought up to date
        self.pool = ""  # the node pool whose nodes it holds ('' the whole cluster, `pools`)
        self.confirmed: set[str] = set()  # nodes a commit left as planning left them (`confirm`)
        self.missed: set[str] = set()  # nodes where a placement planning assumed was not committed
        self.kept_as_planned = 0  # dirty nodes a refresh kept (`_as_rows`), for tests and the bench

    @contextmanager
    def use(self, since: float | None = None) -> Iterator[tuple[Snapshot, Scheduler]]:
        """The snapshot and scheduler for one cycle's planning, up to date. Whoever finds it in
        use (another thread of this process planning) gets a fresh one of its own. An error
        while planning forgets it: planning may have left the kept nodes half changed.

        `since` (a `time.perf_counter()` reading): a refresh made at or after it, with nothing
        planned on the snapshot since, is taken as up to date. A cycle's wake refreshes it
        moments before the cycle plans; reading again would find only what landed in those
        milliseconds, which any snapshot misses by its commit (re-checked under lock), at the
        cost of a second look's queries every cycle (issue 29)."""
        if not option("SNAPSHOT_KEEP") or not self.lock.acquire(blocking=False):
            snapshot = load_snapshot(pool=pools.current())
            yield snapshot, Scheduler(snapshot.cluster, snapshot.config)
            return
        try:
            pool = pools.current()
            if self.pool != pool:
                self.clear()  # a process plans one pool; a test may switch it
                self.pool = pool
            if not self._fresh_since(since):
                self.refresh()
            assert self.snapshot is not None and self.scheduler is not None
            yield self.snapshot, self.scheduler
        except BaseException:
            self.clear()
            raise
        finally:
            self.lock.release()

    def _fresh_since(self, since: float | None) -> bool:
        """Whether the last refresh was at or after `since` and left the snapshot untouched
        since (no planning assumed anything on it, nothing spoiled it)."""
        return (
            since is not None
            and self.snapshot is not None
            and not self.spoiled
            and self.refreshed_at >= since
            and TOUCHES.position == self.position
        )

    def confirm(self, placed: set[str], missed: set[str]) -> None:
        """A commit of a plan made on this snapshot: `placed`, the nodes where it committed
        placements planning assumed; `missed`, those where one it assumed was not committed
        (skipped, lost a race, held back). The next refresh keeps a node of the first and not
        the second as planning left it when its node and card rows agree with it (`_as_rows`):
        its placed pods are counted on it already, as assumed."""
        self.confirmed |= placed
        self.missed |= missed

    def bound_since(self, snapshot: Snapshot) -> set[str]:
        """The nodes where a pod others bound holding cards (HAMi's allocation, a DRA pass's
        claims) was written since `snapshot` read them: the cards' counters do not show what
        such a pod holds, so a commit's placement there planned without it waits for the next
        cycle, which counts it. Pods hamiadmin placed itself count as its own and are left
        out. This standing snapshot on PostgreSQL: the rows written since its horizon that it
        has not seen as they are (its marks); any other (a fresh one, SQLite): those written
        since its `bound_mark` and not as it counted them (`snapshot.bound_written_since`)."""
        if snapshot is not self.snapshot or self.horizon is None:
            return bound_written_since(snapshot)
        rows = (
            written_since(BoundPod, self.horizon)
            .exclude(allocated="", mig_allocations="")
            .values_list("id", "updated_at", "namespace", "name", "node_name")
        )
        return others_on(
            [
                (namespace, name, node)
                for pk, at, namespace, name, node in rows
                if self.bound_seen.get(pk) != at
            ]
        )

    def spoil(self) -> None:
        """Read it whole next time, into a new snapshot and scheduler (a pod's decision failed
        half way through a change: the scheduler's own tables may be half changed too)."""
        self.built_at = float("-inf")  # monotonic time starts near 0 on a fresh machine
        self.spoiled = True

    # --- bringing it up to date ----------------------------------------------------------

    def refresh(self) -> None:
        # SQLite: the time before the pods others bound are read (PostgreSQL: the horizon and
        # the marks seen, `bound_since`)
        mark = bound_mark() if connection.vendor != "postgresql" else None
        self._refresh()
        assert self.snapshot is not None
        self.snapshot.bound_mark = mark
        self.refreshed_at = time.perf_counter()

    def _refresh(self) -> None:
        config = current_config()
        age = time.monotonic() - self.built_at
        if self.snapshot is None or age >= option("SNAPSHOT_REBUILD_SECONDS"):
            self.rebuild(config)
            return
        try:
            self._apply_changes()
        except Rebuild:
            self.rebuild(config)
            return
        if config != self.snapshot.config:
            self.snapshot.config = config
            self.scheduler = _warm_scheduler(self.snapshot.cluster, config)
        self.refreshes += 1
        self._freeze()

    def rebuild(self, config) -> None:
        """Read the cluster whole: carried over onto the kept snapshot and scheduler where it
        found the same nodes and cards (`_carry_over`), else a new snapshot and scheduler.
        With HAMI_GC_FREEZE the collector sleeps through the read (a million new objects and
        no garbage among them: at 20,000 nodes its sweeps of the whole heap were three of
        about 500 ms a read); the one sweep after it (`_freeze`) lets what was replaced go."""
        self.confirmed, self.missed = set(), set()  # of nodes a whole read puts right anyway
        collecting = option("GC_FREEZE") and gc.isenabled()
        if collecting:
            gc.disable()
        try:
            self._read_whole(config)
        finally:
            if collecting:
                gc.enable()
        self.position = TOUCHES.position
        self.built_at = time.monotonic()
        self.rebuilds += 1
        self._freeze(whole=True)

    def _read_whole(self, config) -> None:
        """The rows read whole, and the snapshot and scheduler they give (`rebuild`)."""
        # the horizon before the rows: a write landing between them is read again next time
        self.horizon, gone = _postgres_horizon() if connection.vendor == "postgresql" else (None, [])
        self.gone = set(gone)
        if self.horizon is not None:
            _forget_old_deletions()
        self.bound_seen = self._bound_rows()
        self.cards = {row[0]: row for row in card_rows(self.pool)}
        self.nodes = {row[0]: row for row in node_rows(self.pool)}
        self.bound, own = running_pods(self.pool)
        self.bound_on = _by_node(self.bound)
        self.own = _by_node(own)
        read = build_snapshot(self.cards.values(), self.nodes.values(), config, [*self.bound, *own])
        kept = self.snapshot
        if not self.spoiled and kept is not None and self._carry_over(read):
            self.carried += 1
            if config != kept.config:
                kept.config = config
                self.scheduler = _warm_scheduler(kept.cluster, config)
        else:
            self.snapshot = read
            self.scheduler = _warm_scheduler(read.cluster, config)
        self.spoiled = False

    def _carry_over(self, read: Snapshot) -> bool:
        """Bring the kept snapshot to what a whole read found, when it found the same nodes and
        cards built alike (`built_alike`): each node whose state differs takes the read's
        (`NODE_STATE`, `CARD_STATE`) and is touched, so the kept scheduler looks again at those
        nodes only; it then decides as a new one on the read would. False, changing nothing,
        when anything else differs."""
        kept = self.snapshot
        if kept is None or self.scheduler is None:
            return False
        if kept.node_ids != read.node_ids or kept.card_ids != read.card_ids:
            return False
        if len(kept.cluster.nodes) != len(read.cluster.nodes):
            return False
        pairs = list(zip(kept.cluster.nodes, read.cluster.nodes, strict=True))
        if not all(old.name == new.name and built_alike(old, new) for old, new in pairs):
            return False
        for old, new in pairs:
            if same_state(old, new):
                continue
            old.ready, old.reserved_for, old.held = new.ready, new.reserved_for, new.held
            for mine, theirs in zip(old.cards, new.cards, strict=True):
                for name in CARD_STATE:
                    setattr(mine, name, getattr(theirs, name))
            old.touch()
        kept.cluster.running = read.cluster.running
        return True

    def _freeze(self, whole: bool = False) -> None:
        """Take what lives from cycle to cycle (the snapshot, the scheduler's verdict tables)
        out of the garbage collector's sweeps (`collector`): at 5,000 nodes they took a
        quarter of a cycle with pauses of 245 ms (issue 29). After every refresh what was made
        since the last freeze is frozen unswept (`collector.freeze_young`); after a rebuild
        (`whole`) everything is swept first, so a replaced snapshot, and whatever else was let
        go since, is collected. Off with HAMI_GC_FREEZE=false."""
        if whole:
            collector.sweep_whole()
        else:
            collector.freeze_young()

    def _changed_rows(self, kept: dict[int, tuple], read_all, read_since, ours=lambda row: True):
        """Rows changed since they were kept: id -> new row. Raises Rebuild when rows came or
        went. PostgreSQL reads the rows written since the horizon (`read_since`: (row, present)
        pairs; a deleted row is found by the caller, in the deletion log), of which a row not
        kept counts only if `ours` (a node pool's planner keeps its pool's rows, `pools`);
        elsewhere every row is read (`read_all`, the pool's) and compared."""
        if self.horizon is None:
            rows = {row[0]: row for row in read_all()}
            if rows.keys() != kept.keys():
                raise Rebuild
            return {key: row for key, row in rows.items() if kept[key] != row}
        changed = {}
        for row, present in read_since():
            if row[0] not in kept:
                if present and ours(row):
                    raise Rebuild  # a new row
                continue  # an absent card that was absent before, or another pool's row
            if not present:
                raise Rebuild  # a card gone absent
            if kept[row[0]] != row:
                changed[row[0]] = row
        return changed

    def _bound_rows(self) -> dict[int, object]:
        """BoundPod id -> updated_at: of every row (SQLite), or of those written since the
        horizon (PostgreSQL, by their marks)."""
        rows = BoundPod.objects.order_by() if self.horizon is None else written_since(BoundPod, self.horizon)
        return dict(rows.filter(pools.node_names_q(pool=self.pool)).values_list("id", "updated_at"))

    def _bound_changed(self, written: list[int] | None = None) -> bool:
        """Whether a pod others bound came, went or changed since it was read. On PostgreSQL: a
        row written since the last horizon is not as it was seen then (a row gone is in the
        deletion log, which `_apply_changes` reads first); elsewhere every row is read and the
        whole is compared. Cheap: on PostgreSQL only the rows written since, elsewhere two
        narrow columns. `written`: the ids of the rows written since the last horizon, read
        with the new one (`_postgres_changes`); none, the usual case, reads nothing more."""
        if written is not None and not written:
            self.bound_seen = {}  # what `_bound_rows` reads now, as of the new horizon's statement
            return False
        rows = self._bound_rows()
        if self.horizon is None:
            changed = rows != self.bound_seen
        else:
            changed = any(self.bound_seen.get(pk) != at for pk, at in rows.items())
        # read after `horizon` was taken: a superset of the rows the next check reads, as seen
        self.bound_seen = rows
        return changed

    def _apply_changes(self) -> None:
        assert self.snapshot is not None
        horizon = None
        card_ids: list[int] = []
        node_ids: list[int] = []
        bound_ids: list[int] | None = None
        if self.horizon is not None:  # PostgreSQL
            horizon, card_ids, node_ids, gone, bound_ids = _postgres_changes(self.horizon)
            if not self.gone.issuperset(gone):
                raise Rebuild  # a card, node or bound-pod row deleted
            self.gone = set(gone)  # seen: found again by each look until the horizon passes them
        if self._bound_changed(bound_ids):
            raise Rebuild  # a pod others bound came, went or changed: counted anew
        pool = self.pool
        cards = self._changed_rows(
            self.cards,
            lambda: card_rows(pool),
            lambda: (
                (row[:-1], row[-1])
                for row in Card.objects.filter(
                    pools.nodes_q(pool, prefix="node__"), id__in=card_ids
                ).values_list(*CARD_COLUMNS, "present")
            ),
        )
        nodes = self._changed_rows(
            self.nodes,
            lambda: node_rows(pool),
            lambda: ((row, True) for row in Node.objects.filter(id__in=node_ids).values_list(*NODE_COLUMNS)),
            lambda row: pools.in_pool(row[NODE_COLUMNS.index("labels")], pool),
        )
        for node_id, row in nodes.items():
            if differs_beyond(self.nodes[node_id], row, {READY}):
                raise Rebuild  # renamed, labels or annotations: the node is built anew
        for card_id, row in cards.items():
            if differs_beyond(self.cards[card_id], row, IN_PLACE_CARD):
                raise Rebuild
        touched = TOUCHES.since(self.position)
        if touched is None:
            raise Rebuild  # the log dropped what planning changed
        cluster = self.snapshot.cluster
        dirty = {self.nodes[node_id][1] for node_id in nodes}
        dirty.update(self.nodes[row[1]][1] for row in cards.values())
        for ident, name in touched[0]:
            node = cluster.by_name.get(name)
            if node is not None and id(node) == ident:
                dirty.add(name)
        self.cards.update(cards)
        self.nodes.update(nodes)
        self.horizon = horizon
        ids = self.snapshot.node_ids
        confirmed = self.confirmed - self.missed
        self.confirmed, self.missed = set(), set()
        put_back = set()
        for name in dirty:
            node, node_id = cluster.by_name[name], ids[name]
            if name in confirmed and node_id not in nodes and self._as_rows(node, self.nodes[node_id]):
                self.kept_as_planned += 1
                continue  # a commit wrote what planning assumed, and nobody wrote over it
            self._put_back(node, self.nodes[node_id])
            put_back.add(name)
        if put_back:
            self._recount(put_back)
        self.position = TOUCHES.position

    def _as_rows(self, node, row) -> bool:
        """Whether a node is as its rows say, as `_put_back` would leave it but for its pods'
        footprints: ready as its row, and each card's counters, health and cordon as its row,
        no gangs marked, no MIG partition (those are put back)."""
        if node.ready != row[READY]:
            return False
        cordoned = cordoned_uuids(node.annotations)
        return all(
            card.partition is None
            and not card.gangs
            and CARD_AS_ROW(card) == self._card_row_state(card, cordoned)
            for card in node.cards
        )

    def _card_row_state(self, card, cordoned: set[str]) -> tuple:
        """What a card's kept row says of it, as `CARD_AS_ROW` reads the card: its counters,
        health, and cordon (the row's, or the node annotation's, `cordoned`)."""
        assert self.snapshot is not None
        values = self.cards[self.snapshot.card_ids[card.uuid]]
        return (*values[USED_FIELDS], values[HEALTH], values[CORDONED] or card.uuid in cordoned)

    def _recount(self, names: set[str]) -> None:
        """The running pods of the nodes put back counted again: hamiadmin's own placed pods on
        them read anew (one query), and every running pod of those nodes applied to them
        (`count_running`); the other nodes' pods are as they were counted (a pod others bound
        that came, went or changed reads the snapshot whole), so they are not gone over."""
        assert self.snapshot is not None
        ids = self.snapshot.node_ids
        for name in names:
            self.own.pop(name, None)
        self.own.update(_by_node(own_running((ids[name] for name in names), self.pool)))
        cluster = self.snapshot.cluster
        cluster.running = [*self.bound, *(pod for pods in self.own.values() for pod in pods)]
        bound, own = self.bound_on, self.own
        count_running(
            cluster, [pod for name in names for pod in (*bound.get(name, ()), *own.get(name, ()))], names
        )

    def _put_back(self, node, row) -> None:
        """The node as its rows say: readiness and every card's counters, health and cordon
        (planning's assumed placements, held nominations and marked gangs undone)."""
        node.ready = row[READY]
        node.held = None  # what pods hold of it: counted again (`_recount`)
        cordoned = cordoned_uuids(node.annotations)
        for card in node.cards:
            (card.used_slots, card.used_memory, card.used_cores, card.health, card.cordoned) = (
                self._card_row_state(card, cordoned)
            )
            card.gangs = ()
            if card.partition is not None:  # its instances: taken again with its pods (`_recount`)
                card.partition = card.partition.emptied()
        node.touch()


#: This process's standing snapshot (cycles run one at a time per process; see `use`).
STANDING = StandingSnapshot()
