"""Deciding pods against one cluster snapshot: the node order of SPEC 7, and the explanation.

`Scheduler` holds one cluster snapshot. Node verdicts (`evaluate.evaluate_node`) are cached
per pod *shape* (what the pod asks and how it ranks) and per node version, and each shape
keeps a `NodeIndex` per node policy: its fitting nodes in policy order, its failed nodes and
reason sums, updated only for the nodes touched (`model.TOUCHES`) since it last looked. So
a stream of similar pods costs the re-evaluation of the nodes that changed, not a walk over
every node. When the pod allows it (`columns.sweepable`: one GPU container, no choice of
cards needed to decide), a new shape's first pass is one columnar sweep over all cards
(`columns.sweep`) whose verdicts stay columns (`columns.Swept`) and whose index is built
with array operations, many changed nodes are re-checked as one sweep over their cards,
and a few with `evaluate.evaluate_alone`; else `evaluate_node` per node. UUID and mode
constraints do not keep a one-container pod off the sweep; a pod pinned to card UUIDs
(use-gpuuuid) with any containers is swept too (`columns.sweep_pinned`: only the nodes that
carry a pinned card are evaluated in full, `evaluate.evaluate_unpinned` answers for the others
node by node), and pending, it measures the closeness of those carriers and of
`closest_nodes` others only (`_closest_pinned`).
Among the nodes where the pod fits, binpack takes the highest node score, spread the lowest,
scores within 1e-9 tie and go by node name; the chosen node is evaluated once more to
explain its cards. A pod that fits nowhere keeps the `config.closest_nodes` nodes that came
closest (`engine.closeness`), with their card tables: for a sweepable pod every node's
closeness key is computed over the card columns at once (`closeness.closest_columns`), kept
per shape (`closeness.ClosestKeys`) and computed again for the nodes whose columns changed
only, and only the kept nodes are measured; else each failed node's closeness is cached like
the verdicts, per pod shape and node version. Either way a pending decision measures the kept
nodes that changed, not every failed node, and one whose nodes did not change sweeps nothing.
With `keep=K` (`Scheduler.keep`, or per call) a decision holds only the K best fitting nodes
and the first K failed ones, read off the index without copying or re-sorting the rest, and
counts them all (`Decision.nodes_fit`, `nodes_failed`): a warm decision then costs the
changed nodes and K, not the cluster (issue 18).
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from dataclasses import replace

import numpy as np

from . import budget
from .chain import rank
from .claimhold import claims_hold
from .closeness import ClosestColumns, ClosestKeys, NodeCloseness, cluster_never, never_reason, node_closeness
from .columns import CardColumns, Swept, sweep, sweep_pinned, sweepable
from .decision import (
    PENDING,
    REJECTED,
    SCHEDULED,
    CardVerdict,
    ContainerPlacement,
    Decision,
    DeviceGrant,
    Hold,
)
from .errors import PodInvalid
from .evaluate import Grant, NodeVerdict, evaluate_alone, evaluate_node, evaluate_unpinned
from .model import TOUCHES, Cluster, ClusterConfig, Node, PodSpec
from .nodeindex import NodeIndex
from .noderules import PLAIN, RULES, Footprint, NodeRules, RuleFailure, accounting, refusals
from .noderules.columns import other_pod_refusals
from .noderules.columns import refusals as node_refusals
from .noderules.prefer import rank as prefer_rank
from .pod import ParsedPod, describe_policy, parse_pod
from .reasons import NODE_PORTS, NODE_RESOURCES_FIT, SCHEDULING_GATED


def _checked_keep(keep) -> int | None:
    """A decision's bound on its node lists: None (all) or a whole number from 1 (the chosen
    node's score, `Decision.node_score`, is read from the first entry)."""
    if keep is None:
        return None
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep: a whole number from 1, or None for every node, not {keep!r}")
    return keep


class ShapeTable:
    """What is cached for one pod shape: node verdicts per node version (those of the last
    sweep as its columns, `base`), and a `NodeIndex` per node policy (sign) built from them."""

    __slots__ = ("verdicts", "base", "indexes", "rules", "plain")

    def __init__(self, rules: NodeRules = PLAIN) -> None:
        self.verdicts: dict[str, tuple[int, NodeVerdict]] = {}
        self.base: Swept | None = None
        self.indexes: dict[float, NodeIndex] = {}
        #: the pod's per-node rules (SPEC 10), checked before any card
        self.rules = rules
        #: they read nothing of the pod: only a cordon or a taint can refuse a node then
        self.plain = rules.plain

    def verdict(self, node: Node, inits: list, apps: list, policy, alone=None) -> NodeVerdict:
        """The node's verdict at its version: cached, from the last sweep, or evaluated now
        (`evaluate_alone` when the pod is `sweepable`: `alone` is its ask; `evaluate_unpinned`
        when it is pinned to UUIDs the node does not carry)."""
        name, version = node.name, node.version
        cached = self.verdicts.get(name)
        if cached is not None and cached[0] == version:
            return cached[1]
        refused = None
        if not self.plain or node.unschedulable or node.taints or node.allocatable:
            refused = self.rules.refuse(node)
        if refused is not None:
            verdict = NodeVerdict(False, failure=refused)
            self.verdicts[name] = (version, verdict)
            return verdict
        base = self.base
        i = base.position.get(name) if base is not None else None
        if i is not None and base is not None and base.versions[i] == version:
            verdict = base.verdict(i)
        elif alone is not None:
            verdict = evaluate_alone(node, alone, apps, policy)
        else:
            verdict = evaluate_unpinned(node, inits, apps, policy) or evaluate_node(node, inits, apps, policy)
        self.verdicts[name] = (version, verdict)
        return verdict


class Scheduler:
    """Decides pods against one snapshot; `schedule` also applies each placement to it."""

    #: Node verdicts cached across all shapes, as shapes x nodes: 250 shapes at 10,000 nodes
    #: x 8 cards (a sweep's verdicts are columns, an index ~200 bytes a node: about 450 MiB
    #: measured on top of the snapshot). Node rules multiply shapes (each nodeSelector,
    #: toleration and request template is its own): the node-constraint mix of `bench.engine`
    #: asks about 200 in 1,000 pods, and a budget below that re-sweeps half its pods.
    CACHE_ENTRIES = 2_500_000
    #: From how many nodes a new shape's first pass runs as one columnar sweep (numpy costs a
    #: fixed overhead per call that a few nodes do not pay back).
    SWEEP_NODES = 64
    #: From how many changed nodes a shape re-evaluates them as one columnar sweep of their cards.
    RESWEEP_NODES = 32
    #: Closeness keys kept across pending decisions (`ClosestKeys`, ~60 bytes a node per
    #: shape), as shapes x nodes: 50 shapes at 20,000 nodes.
    CLOSEST_ENTRIES = 1_000_000
    #: Failed nodes a shape's `ClosestKeys` keeps sorted beyond the `closest_nodes` closest.
    CLOSEST_HEAD = 64

    def __init__(
        self,
        cluster: Cluster,
        config: ClusterConfig | None = None,
        cached_shapes: int | None = None,
        keep: int | None = None,
    ):
        self.cluster = cluster
        self.config = config or ClusterConfig()
        #: How many entries of `node_ranking` and of `node_failures` a decision holds (None:
        #: all). A caller that stores only the top K (`Decision.as_dict(top=K)`, K <= keep)
        #: then pays for K nodes per decision, not for the cluster (issue 18).
        self.keep = _checked_keep(keep)
        self._verdicts: OrderedDict[tuple, ShapeTable] = OrderedDict()
        self._closeness: OrderedDict[tuple, dict[str, tuple[int, NodeCloseness]]] = OrderedDict()
        self._never: dict[tuple, dict] = {}
        if cached_shapes is None:
            cached_shapes = max(16, self.CACHE_ENTRIES // max(1, len(cluster.nodes)))
        self._cached_shapes = cached_shapes
        self._columns: CardColumns | None = None
        self._columns_position = 0
        #: the card columns' rows rewritten since they were last read whole (`_columns_now`),
        #: and how many times they were read whole: what `ClosestKeys` brings itself up to date by
        self._columns_rows: list[int] = []
        self._columns_reads = 0
        #: per closeness shape and `closest_nodes`: (columns read, rows seen, `ClosestKeys`)
        self._closest_keys: OrderedDict[tuple, tuple[int, int, ClosestKeys]] = OrderedDict()
        self._uniform_memory = all(len({card.memory for card in node.cards}) <= 1 for node in cluster.nodes)
        #: per node, its pods' footprints with required anti-affinity (they may refuse any
        #: newcomer, SPEC 10), kept up to date from the touch log like the card columns
        self._holders: dict[str, list] | None = None
        self._holders_position = 0
        #: what each pod decided here holds of a node once assumed, by pod key
        self._footprints: dict[str, Footprint] = {}
        self._last_rules: tuple[ParsedPod | None, NodeRules] = (None, PLAIN)
        #: the touch log's entries from `_touched_base` on, each matched to this cluster's node
        #: (`(name, node)`, or `_FOREIGN`), for as many nodes as the cluster had then
        self._touched: list[tuple] = []
        self._touched_base = TOUCHES.position
        self._touched_by, self._touched_nodes = cluster.by_name, len(cluster.by_name)

    def _shape_key(self, parsed: ParsedPod) -> tuple:
        """With one GPU container whose MiB per card is the same on every card of a node, the
        node's verdict (fit and score) does not depend on which cards are picked, so pods that
        differ only in how they rank cards share cached verdicts."""
        gpu = [ask for ask in parsed.apps if ask is not None]
        if len(gpu) == 1 and (gpu[0].memory is not None or self._uniform_memory):
            return parsed.fit_shape
        return parsed.shape

    def _index_for(self, parsed: ParsedPod, sign: float, rules: NodeRules = PLAIN) -> NodeIndex:
        """The shape's node index under this node policy, brought up to date: only the nodes
        touched since it last looked are re-checked (their verdicts re-evaluated when their
        version moved); a full pass when it is new, when the cluster's node count changed, or
        when the touch log dropped what it would need. `rules`: the pod's per-node rules
        (SPEC 10), part of the shape: a node they refuse gets their failure, not its cards'."""
        shape = self._shape_key(parsed)
        if not rules.plain:
            shape = (shape, rules.key)
        table = self._cached(self._verdicts, shape, lambda: ShapeTable(rules))
        index = table.indexes.get(sign)
        if index is None:
            index = table.indexes[sign] = NodeIndex(sign)
        nodes = self.cluster.nodes
        inits, apps, policy = parsed.gpu_inits, list(parsed.apps), parsed.policy
        # the one GPU container's ask when the pod needs no choice of cards to be decided
        ask = sweepable(inits, apps, policy, exclusions=True, fitting_columns=True)
        touched = TOUCHES.since(index.position) if index.node_count == len(nodes) else None
        if touched is None:
            index.position = TOUCHES.position
            index.node_count = len(nodes)
            if len(nodes) < self.SWEEP_NODES or (ask is None and not policy.use_uuids):
                index.rebuild([(node.name, table.verdict(node, inits, apps, policy, ask)) for node in nodes])
                return index
            columns = self._columns_now()
            if ask is not None:
                swept = sweep(columns, nodes, ask, apps, policy)
            else:  # pinned to UUIDs: only the nodes that carry one are evaluated in full
                swept = sweep_pinned(columns, nodes, inits, apps, policy)
            # the nodes the per-node rules refuse take the rule's failure instead, as columns
            swept = table.base = swept.refused(node_refusals(table.rules, columns.node_rules))
            index.rebuild_swept(swept)
            return index
        mine, index.position = self._mine_since(index.position, touched)
        if mine:
            if len(mine) >= self.RESWEEP_NODES and ask is not None:
                self._resweep(table, list(mine.values()), ask, apps, policy)
            verdict, verdicts = table.verdict, table.verdicts
            found = []
            for name, node in mine.items():
                cached = verdicts.get(name)  # the other node policy's index, or a resweep, put it there
                if cached is not None and cached[0] == node.version:
                    found.append((name, cached[1]))
                else:
                    found.append((name, verdict(node, inits, apps, policy, ask)))
            index.update_all(found)
        return index

    def _mine_since(
        self, position: int, touched: tuple[list[tuple[int, str]], int]
    ) -> tuple[dict[str, Node], int]:
        """The nodes of this cluster among `touched` (`TOUCHES.since(position)`), by name in the
        order first touched, and the position after them. Each log entry is matched to a node
        once and kept (`_touched`), not once per index that reads it: a placement is read by
        every shape decided after it."""
        entries, after = touched
        if not entries:
            return {}, after
        by_name = self.cluster.by_name
        if by_name is not self._touched_by or len(by_name) != self._touched_nodes:
            # another set of nodes: the matches kept do not serve
            self._touched, self._touched_base = [], after
            self._touched_by, self._touched_nodes = by_name, len(by_name)
        kept, base = self._touched, self._touched_base
        end = base + len(kept)
        if end < after:  # match the entries not matched yet
            more = TOUCHES.since(end)
            if more is None:  # dropped before they were matched: start again from here
                self._touched, self._touched_base = [], after
                return _match(entries, by_name), after
            for ident, name in more[0]:
                node = by_name.get(name)
                kept.append((name, node) if node is not None and id(node) == ident else _FOREIGN)
            if len(kept) > TOUCHES.keep:
                drop = len(kept) // 2
                del kept[:drop]
                self._touched_base = base = base + drop
        if position < base:  # before the matches kept
            return _match(entries, by_name), after
        mine = dict(kept[position - base : after - base])
        mine.pop(None, None)  # type: ignore[call-overload]
        return mine, after

    def _resweep(self, table: ShapeTable, nodes: list[Node], ask, apps: list, policy) -> None:
        """Put the verdicts of those of `nodes` the table has none for at their version into
        it, from one columnar sweep over their cards (`ask`: the pod is `sweepable`)."""
        verdicts, rules, plain = table.verdicts, table.rules, table.plain
        stale = []
        for node in nodes:
            cached = verdicts.get(node.name)
            if cached is not None and cached[0] == node.version:
                continue
            if (not plain or node.unschedulable or node.taints) and rules.refuse(node) is not None:
                continue
            stale.append(node)
        if len(stale) < self.RESWEEP_NODES:
            return
        columns = self._columns_now()
        position, versions = columns.position, columns.versions
        rows = [position[node.name] for node in stale]
        swept = sweep(columns.subset(rows), stale, ask, apps, policy)
        for i, (node, row) in enumerate(zip(stale, rows, strict=True)):
            if versions[row] == node.version:  # its columns hold this version (else evaluated)
                verdicts[node.name] = (node.version, swept.verdict(i))

    def warm(self) -> None:
        """Build now what a new shape's first pass over a cluster large enough to sweep reads
        (the card columns), not at the first pod decided: a worker's whole read of the cluster
        calls it, so its first cycle after the read does not pay it (~0.3 s at 20,000 nodes)."""
        if len(self.cluster.nodes) >= self.SWEEP_NODES:
            self._columns_now()

    def _columns_now(self) -> CardColumns:
        """The cluster's card columns, with the rows of the nodes touched since last time rewritten."""
        nodes = self.cluster.nodes
        columns = self._columns
        touched = TOUCHES.since(self._columns_position)
        if columns is None or columns.count != len(nodes) or touched is None:
            self._columns_position = TOUCHES.position
            self._columns = columns = CardColumns(nodes)
            self._read_columns_whole()
            return columns
        changed, self._columns_position = touched
        by_name = self.cluster.by_name
        rows = self._columns_rows
        for ident, name in changed:
            mine = by_name.get(name)
            if mine is not None and id(mine) == ident:
                row = columns.position[name]
                if not columns.refresh(row, mine):
                    columns.refill(nodes)
                    self._read_columns_whole()
                    break
                rows.append(row)
        if len(rows) > max(4096, columns.count):
            self._read_columns_whole()  # the keys kept then read every node again, once
        return columns

    def _read_columns_whole(self) -> None:
        self._columns_reads += 1
        self._columns_rows = []

    def _closest_columns(
        self, shape: tuple, ask, policy, keep: int, columns: CardColumns
    ) -> ClosestColumns | None:
        """`closeness.closest_columns` over `columns` (as `_columns_now` left them), from the
        keys kept for this shape (`ClosestKeys`): only the rows rewritten since it last
        looked are computed again, none when none were (issue 29: a pending decision whose
        inputs did not change costs no sweep)."""
        entries = self._closest_keys
        at = (shape, keep)
        kept = entries.get(at)
        reads, rows = self._columns_reads, self._columns_rows
        if kept is not None and kept[0] == reads:
            entries.move_to_end(at)
            keys, changed = kept[2], rows[kept[1] :]
            # past an eighth of the nodes, one pass over every card costs less than the rows
            if len(changed) <= max(self.RESWEEP_NODES, columns.count // 8) and keys.update(columns, changed):
                entries[at] = (reads, len(rows), keys)
                return keys.answer(columns)
        found = ClosestKeys.build(columns, ask, policy, keep, self.CLOSEST_HEAD)
        if found is None:
            entries.pop(at, None)
            return None
        entries[at] = (reads, len(rows), found)
        entries.move_to_end(at)
        if len(entries) > max(4, self.CLOSEST_ENTRIES // max(1, columns.count)):
            entries.popitem(last=False)
        return found.answer(columns)

    def _cached(self, tables: OrderedDict, shape: tuple, make=dict):
        table = tables.get(shape)
        if table is None:
            table = tables[shape] = make()
            if len(tables) > self._cached_shapes:
                tables.popitem(last=False)
        else:
            tables.move_to_end(shape)
        return table

    def closest(self, parsed: ParsedPod, names: list[str]) -> tuple[list[dict], dict | None]:
        """The `config.closest_nodes` nodes among `names` (where the pod does not fit) that came
        closest, closest first; and, when no node at all could ever take the pod, why not."""
        gpu_apps = sum(ask is not None for ask in parsed.apps)
        # One GPU app container: no earlier container's choice changes its cards' usage, so
        # closeness depends on the fit shape and the weights (its card scores) only.
        shape = (parsed.fit_shape, parsed.policy.weights) if gpu_apps <= 1 else parsed.shape
        table = self._cached(self._closeness, shape)
        inits, apps = parsed.gpu_inits, list(parsed.apps)
        keep = max(0, self.config.closest_nodes)
        nodes = self.cluster.nodes
        ask = sweepable(inits, apps, parsed.policy) if len(nodes) >= self.SWEEP_NODES else None
        if ask is not None:
            # every node's closeness key at once; card tables for the kept nodes only
            found = self._closest_columns(shape, ask, parsed.policy, keep, self._columns_now())
            if found is not None and found.failed == len(names):
                kept = [self._closeness_of(table, nodes[i], parsed) for i in found.top]
                never = (
                    never_reason(ask, parsed.policy, found.largest, found.most, found.scope)
                    if found.never
                    else None
                )
                return [c.detail() for c in kept], never
        if parsed.policy.use_uuids and len(nodes) >= self.SWEEP_NODES:
            return self._closest_pinned(parsed, names, shape, table, keep)
        measured = [self._closeness_of(table, self.cluster.node(name), parsed) for name in names]
        never = None
        if measured and all(c.never for c in measured):
            never = self._cluster_never(parsed, shape, len(measured), lambda: [c.node for c in measured])
        return [c.detail() for c in heapq.nsmallest(keep, measured, key=lambda c: c.key)], never

    def _cluster_never(self, parsed: ParsedPod, shape: tuple, failed: int, nodes) -> dict:
        """`cluster_never` over the failed nodes (`nodes()` lists them, or as many as give the
        same answer); capacities only, so once per shape and number of failed nodes."""
        never_key = (shape, failed)
        never = self._never.get(never_key)
        if never is None:
            asks = [*parsed.gpu_inits, *(ask for ask in parsed.apps if ask is not None)]
            never = self._never[never_key] = cluster_never(nodes(), asks, parsed.policy)
        return never

    def _closest_pinned(
        self, parsed: ParsedPod, names: list[str], shape: tuple, table: dict, keep: int
    ) -> tuple[list[dict], dict | None]:
        """`closest` for a pod pinned to card UUIDs (use-gpuuuid), measuring the failed nodes
        that carry one and `keep` of the others: on a node without one no card could ever pass
        check 4, so `node_closeness` would give it the key (not ready, never, far, ..., name);
        those come after every other ready node, ready ones first, each by name (`names`, the
        index's failed nodes, are sorted by name). No node without a pinned card could ever take
        the pod, so whether none at all could is the carriers' answer, over the largest card
        and the most cards of all failed nodes (`cluster_never` over the carriers and the nodes
        that hold those)."""
        columns = self._columns_now()
        nodes = self.cluster.nodes
        carriers = {
            nodes[i].name for i in np.unique(columns.node_of[columns.uuid_cards(parsed.policy.use_uuids)])
        }
        by_name = self.cluster.by_name
        measured = [self._closeness_of(table, by_name[name], parsed) for name in names if name in carriers]
        others: list[Node] = []
        for ready in (True, False):
            for name in names:
                if len(others) >= keep:
                    break
                node = by_name[name]
                if (node.ready and not node.reserved_for) == ready and name not in carriers:
                    others.append(node)
        measured += [self._closeness_of(table, node, parsed) for node in others]
        never = None
        if names and all(c.never for c in measured):
            never = self._cluster_never(
                parsed, shape, len(names), lambda: [c.node for c in measured] + self._extremes(columns, names)
            )
        return [c.detail() for c in heapq.nsmallest(keep, measured, key=lambda c: c.key)], never

    def _extremes(self, columns: CardColumns, names: list[str]) -> list[Node]:
        """Among the nodes named, one holding the largest card (MiB) and one with the most cards."""
        rows = np.array([columns.position[name] for name in names], dtype=np.int64)
        failed = np.zeros(columns.count, dtype=bool)
        failed[rows] = True
        memory = np.where(failed[columns.node_of], columns.memory, -1)
        picked = {int(rows[np.argmax(columns.sizes[rows])])}
        if len(memory) and memory.max() >= 0:  # else no failed node has a card
            picked.add(int(columns.node_of[np.argmax(memory)]))
        return [self.cluster.nodes[i] for i in sorted(picked)]

    @staticmethod
    def _closeness_of(table: dict, node: Node, parsed: ParsedPod) -> NodeCloseness:
        """The node's closeness at its version, measured now unless cached."""
        cached = table.get(node.name)
        if cached is not None and cached[0] == node.version:
            return cached[1]
        # whether it never fits depends on capacities only: kept across versions
        never = cached[1].never if cached is not None else None
        closeness = node_closeness(node, parsed.gpu_inits, list(parsed.apps), parsed.policy, never)
        table[node.name] = (node.version, closeness)
        return closeness

    def decide(self, pod: PodSpec, keep: int | None = None) -> Decision:
        """Where `pod` would go on the snapshot as it is now. Does not change the snapshot.
        `keep`: as `Scheduler.keep`, for this decision only (None: the scheduler's)."""
        return self.decide_parsed(pod, keep)[0]

    def decide_parsed(self, pod: PodSpec, keep: int | None = None) -> tuple[Decision, ParsedPod | None]:
        """`decide`, plus the pod as read (None when it is invalid), for callers that
        re-check the placement later with the same asks (the pipeline's commit)."""
        budget.check()
        bound = self.keep if keep is None else _checked_keep(keep)
        started = time.perf_counter()
        if pod.claims is not None:  # before the asks: a pod its claims hold may ask nothing yet
            held = self._held_by_claims(pod, started)
            if held is not None:
                return held, None
        try:
            parsed = parse_pod(pod, self.config)
            rules = NodeRules.of(pod)
        except PodInvalid as exc:
            return self._rejected(pod, exc, started), None
        if rules.gated:  # not tried: it holds nothing and is counted nowhere
            decision = Decision(
                name=pod.name,
                namespace=pod.namespace,
                status=PENDING,
                policy=parsed.policy.as_dict(),
                nodes_fit=0,
                nodes_failed=0,
                reasons={SCHEDULING_GATED: 1},
                duration_ms=(time.perf_counter() - started) * 1000,
            )
            return decision, parsed
        decision = self._decide_parsed(pod, parsed, bound, rules)
        decision.duration_ms = (time.perf_counter() - started) * 1000
        return decision, parsed

    def _rejected(self, pod: PodSpec, exc: PodInvalid, started: float) -> Decision:
        """The decision of a pod that does not read: its error, naming the field."""
        return Decision(
            name=pod.name,
            namespace=pod.namespace,
            status=REJECTED,
            policy=describe_policy(pod.annotations, self.config),
            error=str(exc),
            error_field=exc.field,
            error_code=exc.code,
            duration_ms=(time.perf_counter() - started) * 1000,
        )

    def _held_by_claims(self, pod: PodSpec, started: float) -> Decision | None:
        """The pending decision of a pod its ResourceClaims hold (`claimhold`), not tried; a
        malformed hold is the pod's error, naming the field."""
        try:
            hold = claims_hold(pod.claims)
        except PodInvalid as exc:
            return self._rejected(pod, exc, started)
        if hold is None:
            return None
        return Decision(
            name=pod.name,
            namespace=pod.namespace,
            status=PENDING,
            policy=describe_policy(pod.annotations, self.config),
            nodes_fit=0,
            nodes_failed=0,
            batch=Hold(*hold),
            duration_ms=(time.perf_counter() - started) * 1000,
        )

    def _decide_parsed(
        self, pod: PodSpec, parsed: ParsedPod, keep: int | None, rules: NodeRules = PLAIN
    ) -> Decision:
        policy = parsed.policy
        sign = -1.0 if policy.node_policy == "binpack" else 1.0
        index = self._index_for(parsed, sign, rules)
        self._last_rules = (parsed, rules)
        holders = self.holders_for(rules)
        counted = {code: n for code, n in index.carriers.items() if code not in RULES}
        counted.update(index.messages)
        if holders or rules.dynamic or rules.prefers:
            ranking, failed, reasons, refused, fit_count, fail_count = self._other_pods(
                index, rules, holders, counted, keep
            )
        else:
            fit_count, fail_count = index.fit_count, len(index.fail_entries)
            if keep is None:
                ranking = list(index.ranking())
                failed = list(index.fail_entries)
            else:  # the best `keep` and the first `keep` by name; the counts below stay exact
                ranking = index.ranking(keep)
                failed = index.fail_entries[:keep]
            reasons = dict(index.reasons)
            refused = set()
        decision = Decision(
            name=pod.name,
            namespace=pod.namespace,
            status=PENDING,
            policy=policy.as_dict(),
            node_ranking=ranking,
            node_failures=failed,
            nodes_fit=fit_count,
            nodes_failed=fail_count,
            reasons=reasons,
            node_reasons=counted,
            warnings=[
                f"{where}: {message}" for where, messages in parsed.warnings().items() for message in messages
            ],
        )
        if ranking:
            node = self.cluster.node(ranking[0][0])
            decision.status = SCHEDULED
            decision.node = node.name
            decision.containers, decision.init_containers = self._explain(node, parsed)
            self._footprints[pod.key] = rules.footprint(pod.key)
        elif failed:
            decision.node_failures = failed = self._with_hints(failed, rules)
            names = index.fail_names
            if refused or any(code in RULES for code in index.carriers):
                # only the nodes refused by their cards can come close
                names = [
                    name
                    for name, failure in index.fail_entries
                    if not isinstance(failure, RuleFailure) and name not in refused
                ]
            if names:
                decision.closest, decision.never = self.closest(parsed, names)
                if refused or any(code in reasons for code in _FREEABLE):
                    # a node refused for what its pods hold could take the pod once they leave
                    decision.never = None
        return decision

    def _with_hints(self, failed: list, rules: NodeRules) -> list:
        """A pending decision's kept failures, those of the node rules with what would make
        each node pass (`NodeRules.hints`)."""
        by_name = self.cluster.by_name
        out = []
        for name, failure in failed:
            if isinstance(failure, RuleFailure) and not failure.hints:
                failure = replace(failure, hints=rules.hints(by_name[name], failure))
            out.append((name, failure))
        return out

    def _other_pods(
        self, index: NodeIndex, rules: NodeRules, holders: list, counted: dict[str, int], keep: int | None
    ) -> tuple[list, list, dict[str, int], set[str], int, int]:
        """The decision's lists when other pods matter (SPEC 10): `PodTopologySpread` and
        `InterPodAffinity` refuse, among the nodes the per-node rules passed, those they
        refuse (each moves from its card verdict to the rule's failure, in `counted` too), and
        preferences order the fitting nodes (`prefer.rank`, which reads them all). The rules
        are decided over columns of every node (`noderules.columns`) from `SWEEP_NODES` on, so
        a pod whose rules refuse a few nodes costs those nodes and `keep`, not the cluster.
        Returns the ranking and failures kept to `keep`, the reasons, the nodes these rules
        refused, and the fitting and failed node counts."""
        by_name = self.cluster.by_name
        nodes = self.cluster.nodes
        reasons = dict(index.reasons)
        refused: dict[str, RuleFailure] = {}
        moved: dict[str, RuleFailure] = {}  # of those, the nodes that fitted
        if holders or rules.dynamic:
            if len(nodes) < self.SWEEP_NODES:
                found = refusals(rules, nodes, nodes, holders)
            else:
                found = other_pod_refusals(rules, self._columns_now().node_rules, holders)
            for name, failure in found.items():
                verdict = index.verdict_of(name)
                if verdict is None or isinstance(verdict.failure, RuleFailure):
                    continue  # a per-node rule refused it first: it keeps that failure
                if verdict.failure is not None:
                    for code, n in verdict.failure.reasons.items():
                        reasons[code] -= n
                        counted[code] -= 1
                        if not counted[code]:
                            del counted[code], reasons[code]
                else:
                    moved[name] = failure
                _count(reasons, counted, failure)
                refused[name] = failure
        fits_refused = len(moved)
        fit_count = index.fit_count - fits_refused
        fail_count = len(index.fail_entries) + fits_refused
        if rules.prefers and fit_count > 1:
            ranking = [entry for entry in index.ranking() if entry[0] not in refused]
            ranking = prefer_rank(rules, ranking, by_name, nodes)
            if keep is not None:
                ranking = ranking[:keep]
        elif keep is None:
            ranking = [entry for entry in index.ranking() if entry[0] not in refused]
        else:  # the best `keep` of those left: at most `keep` + the refused fitting nodes read
            ranking = [entry for entry in index.ranking(keep + fits_refused) if entry[0] not in refused][
                :keep
            ]
        if not refused:
            failed = list(index.fail_entries) if keep is None else index.fail_entries[:keep]
        else:
            head = index.fail_entries if keep is None else index.fail_entries[:keep]
            failed = sorted(
                [(name, refused.get(name, failure)) for name, failure in head] + list(moved.items()),
                key=lambda entry: entry[0],
            )
            if keep is not None:
                failed = failed[:keep]
        return ranking, failed, reasons, set(refused), fit_count, fail_count

    def holders_for(self, rules: NodeRules) -> list:
        """(node, footprint) of the pods whose required anti-affinity selects this pod."""
        holders = self._anti_holders()
        if not holders:
            return []
        by_name = self.cluster.by_name
        return [
            (by_name[name], footprint)
            for name, footprints in holders.items()
            for footprint in footprints
            if any(term.matches(rules.namespace, rules.labels) for term in footprint.anti_affinity)
        ]

    def _anti_holders(self) -> dict[str, list]:
        """Per node, its footprints with required anti-affinity: all nodes once, then the
        touched ones."""
        holders = self._holders
        touched = TOUCHES.since(self._holders_position) if holders is not None else None
        nodes = self.cluster.nodes
        if holders is None or touched is None:
            self._holders_position = TOUCHES.position
            self._holders = holders = {}
            changed = nodes
        else:
            moved, self._holders_position = touched
            by_name = self.cluster.by_name
            changed = [
                by_name[name] for ident, name in moved if name in by_name and id(by_name[name]) == ident
            ]
        for node in changed:
            held = node.held
            found = [fp for fp in held.pods.values() if fp.anti_affinity] if held is not None else []
            if found:
                holders[node.name] = found
            else:
                holders.pop(node.name, None)
        return holders

    def failed_names(self, parsed: ParsedPod) -> list[str]:
        """Every node `parsed` fails on now, by name: what a decision kept to `keep` entries
        leaves out, for callers that search them all (preemption). Right after the pod was
        decided its index is up to date, so no node is evaluated again; the list is a copy.
        The node rules are those of the pod decided last with this `parsed` (`rules_of`)."""
        sign = -1.0 if parsed.policy.node_policy == "binpack" else 1.0
        return list(self._index_for(parsed, sign, self.rules_of(parsed)).fail_names)

    def rules_of(self, parsed: ParsedPod) -> NodeRules:
        """The node rules of the pod last decided with `parsed` (PLAIN for another)."""
        last, rules = self._last_rules
        return rules if last is parsed else PLAIN

    def _explain(
        self, node: Node, parsed: ParsedPod
    ) -> tuple[list[ContainerPlacement], list[ContainerPlacement]]:
        """The chosen node's card tables, per app container, in the order the chain ranked them;
        and per init container the cards the chain chose for it alone (no table)."""
        verdict = evaluate_node(node, parsed.gpu_inits, list(parsed.apps), parsed.policy, explain=True)
        assert verdict.grants is not None and verdict.containers is not None  # explain keeps both
        assert verdict.init_grants is not None
        init_grants = iter(verdict.init_grants)
        inits = [
            ContainerPlacement(
                name=name,
                devices=[] if ask is None else self._devices(node, next(init_grants)),
            )
            for name, ask in zip(parsed.init_names, parsed.inits, strict=True)
        ]
        placements = []
        for name, grants, container in zip(parsed.app_names, verdict.grants, verdict.containers, strict=True):
            if grants is None or container is None:
                placements.append(ContainerPlacement(name=name))
                continue
            chosen = {entry.position for entry in container.chosen}
            decided = {
                entry.position: by for entry, by in zip(container.ranked, container.decided_by, strict=True)
            }
            rest = [entry for entry in container.evals if entry.reason is not None]
            # the order alone: no key decides between removed cards
            rest_ranked = rank(rest, parsed.policy.sort_keys)
            cards = [
                CardVerdict(
                    uuid=entry.uuid,
                    index=entry.index,
                    score=entry.score,
                    eligible=entry.reason is None,
                    reason=entry.reason,
                    stage=entry.stage,
                    chosen=entry.position in chosen,
                    decided_by=decided.get(entry.position),
                    numa=entry.numa,
                )
                for entry in container.ranked + rest_ranked
            ]
            placements.append(ContainerPlacement(name=name, devices=self._devices(node, grants), cards=cards))
        return placements, inits

    @staticmethod
    def _devices(node: Node, grants: list[Grant]) -> list[DeviceGrant]:
        return [
            DeviceGrant(
                uuid=node.cards[grant[0]].uuid,
                memory=grant[1],
                cores=grant[2],
                index=node.cards[grant[0]].index,
                instance=grant[3] if len(grant) > 3 else None,
                family=node.cards[grant[0]].family,
            )
            for grant in grants
        ]

    def assume(self, decision: Decision) -> None:
        """Apply a scheduled decision's grants to the snapshot, so later pods see them."""
        if decision.status != SCHEDULED or decision.node is None:
            return
        node = self.cluster.node(decision.node)
        by_uuid = {card.uuid: card for card in node.cards}
        for container in decision.containers:
            for device in container.devices:
                card = by_uuid[device.uuid]
                card.used_slots += 1
                card.used_memory += device.memory
                card.used_cores += device.cores
                if card.partition is not None and device.instance is not None:
                    card.partition = card.partition.take(device.instance)
        footprint = self._footprints.get(f"{decision.namespace}/{decision.name}")
        if footprint is not None:  # its cpu, memory, pod slot, ports and labels (SPEC 10)
            accounting.add(node, footprint, touch=False)
        node.touch()

    def unassume(self, decision: Decision) -> None:
        """Undo `assume` of the same decision exactly. The node's version still moves on (never
        back), so no verdict cached for the assumed state is ever read for the restored one."""
        if decision.status != SCHEDULED or decision.node is None:
            return
        node = self.cluster.node(decision.node)
        by_uuid = {card.uuid: card for card in node.cards}
        for container in decision.containers:
            for device in container.devices:
                card = by_uuid[device.uuid]
                card.used_slots -= 1
                card.used_memory -= device.memory
                card.used_cores -= device.cores
                if card.partition is not None and device.instance is not None:
                    card.partition = card.partition.free(device.instance)
        accounting.remove(node, f"{decision.namespace}/{decision.name}", touch=False)
        node.touch()

    def reserve(self, name: str, for_job: str) -> bool:
        """Hold node `name` for `for_job` (a job's key, `ns/name`): until `release`, no pod is
        placed on it and its decisions read `NodeReserved` there, while the node itself stays
        ready. False, and nothing held, when the node is unknown or held already."""
        node = self.cluster.by_name.get(name)
        if node is None or node.reserved_for or not for_job:
            return False
        node.reserved_for = for_job
        node.touch()
        return True

    def release(self, name: str) -> None:
        """Undo `reserve`: the node takes pods again (a node not held is left as it is)."""
        node = self.cluster.by_name.get(name)
        if node is not None and node.reserved_for:
            node.reserved_for = ""
            node.touch()

    @property
    def reserved(self) -> dict[str, str]:
        """The nodes held now, each with the job it is held for."""
        return {node.name: node.reserved_for for node in self.cluster.nodes if node.reserved_for}

    def schedule(self, pod: PodSpec) -> Decision:
        decision = self.decide(pod)
        self.assume(decision)
        return decision


#: a touch log entry naming a node of another cluster (`Scheduler._mine_since`)
_FOREIGN = (None, None)


def _match(entries: list[tuple[int, str]], by_name: dict[str, Node]) -> dict[str, Node]:
    """The nodes of `by_name` among touch log entries, by name in the order first touched."""
    mine: dict[str, Node] = {}
    for ident, name in entries:
        node = by_name.get(name)
        if node is not None and id(node) == ident:
            mine[name] = node  # else a node of another cluster
    return mine


#: the node rules a node fails for what the pods on it hold: it may pass once they leave
_FREEABLE = (NODE_RESOURCES_FIT, NODE_PORTS)


def _count(reasons: dict[str, int], counted: dict[str, int], failure: RuleFailure) -> None:
    """Add one node refused by a rule to a decision's reasons and node counts."""
    reasons[failure.rule] = reasons.get(failure.rule, 0) + 1
    for message in failure.messages:
        counted[message] = counted.get(message, 0) + 1
