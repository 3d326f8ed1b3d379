"""The per-node rules (SPEC 10) for every node at once, over numpy columns.

A new pod shape's first pass otherwise asks `NodeRules.refuse` of every node: at 10,000 nodes
that is 10,000 Python calls before any card is looked at. `NodeColumns` keeps what those
rules read of each node (cordon, taint set, label values per key, what is free of each
resource, whether host ports are held, the card count) as columns, rewritten row by row as
nodes are touched like `CardColumns`; `refusals` then gives, per node, the failure
`NodeRules.refuse` would give (the same `RuleFailure`, shared between nodes that fail alike),
as array operations plus one Python call per distinct label value, taint set or failure.
"""

from __future__ import annotations

import math

import numpy as np

from ..model import Node
from ..quantity import STANDARD
from ..reasons import (
    INTER_POD_AFFINITY,
    NODE_RESOURCES_FIT,
    NODE_RULES,
    POD_TOPOLOGY_SPREAD,
    TAINT_TOLERATION,
    VOLUME_BINDING,
)
from . import accounting
from .interpod import AFFINITY, ANTI_AFFINITY, EXISTING_ANTI_AFFINITY, SPREAD, SPREAD_LABEL
from .rules import UNSCHEDULABLE_TAINT, WORDS, NodeRules, RuleFailure, rule_failure, shortage_words
from .terms import NAME_FIELD, NO_EXECUTE, NO_SCHEDULE, NodeTerm, Requirement, taint_words, untolerated

#: the per-node rules in `NodeRules.refuse`'s order, as the codes `refusals` works with
_ORDER = tuple(rule for rule in NODE_RULES if rule not in (POD_TOPOLOGY_SPREAD, INTER_POD_AFFINITY))


class _Labels:
    """One label key over every node: a code per node (0: the node lacks the key) and the
    value of each code."""

    __slots__ = ("key", "codes", "values", "ids")

    def __init__(self, key: str, nodes: list[Node]):
        self.key = key
        self.values: list[str | None] = [None]
        self.ids: dict[str, int] = {}
        self.codes = np.fromiter((self.code(node) for node in nodes), dtype=np.int64, count=len(nodes))

    def code(self, node: Node) -> int:
        value = node.labels.get(self.key)
        if value is None:
            return 0
        found = self.ids.get(value)
        if found is None:
            found = self.ids[value] = len(self.values)
            self.values.append(value)
        return found

    def where(self, requirement: Requirement) -> np.ndarray:
        """The nodes whose label satisfies `requirement` (one on this key)."""
        key = self.key
        table = np.fromiter(
            (requirement.matches({} if value is None else {key: value}) for value in self.values),
            dtype=bool,
            count=len(self.values),
        )
        return table[self.codes]

    def equals(self, value: str) -> np.ndarray:
        code = self.ids.get(value)
        if code is None:
            return np.zeros(len(self.codes), dtype=bool)
        return self.codes == code


class NodeColumns:
    """What the per-node rules read of every node of a list, as columns (`refusals`). Label
    keys and resources are read into columns on first use; `refresh` rewrites one node's row
    in every column made so far."""

    def __init__(self, nodes: list[Node]):
        self.refill(nodes)

    def refill(self, nodes: list[Node]) -> None:
        self.count = len(nodes)
        self.nodes = list(nodes)
        self.position = {node.name: i for i, node in enumerate(nodes)}
        self.unschedulable = np.fromiter((node.unschedulable for node in nodes), dtype=bool, count=len(nodes))
        #: each distinct taint list (by key, value and effect: all a toleration reads), and
        #: which one each node carries (0: none)
        self.taint_ids: dict[tuple, int] = {(): 0}
        self.taint_sets: list[list[dict]] = [[]]
        self.taints = np.fromiter((self._taint_id(node) for node in nodes), dtype=np.int64, count=len(nodes))
        self.cards = np.fromiter((len(node.cards) for node in nodes), dtype=np.int64, count=len(nodes))
        self.ports = np.fromiter((_holds_ports(node) for node in nodes), dtype=bool, count=len(nodes))
        #: whether any pod is counted on the node (the pods the rules reading other pods read)
        self.pods = np.fromiter((_holds_pods(node) for node in nodes), dtype=bool, count=len(nodes))
        self._labels: dict[str, _Labels] = {}
        self._free: dict[str, np.ndarray] = {}

    def _taint_id(self, node: Node) -> int:
        taints = node.taints
        if not taints:
            return 0
        key = tuple((t.get("key"), t.get("value") or "", t.get("effect")) for t in taints)
        found = self.taint_ids.get(key)
        if found is None:
            found = self.taint_ids[key] = len(self.taint_sets)
            self.taint_sets.append(list(taints))
        return found

    def refresh(self, i: int, node: Node) -> None:
        """Rewrite node `i`'s row after it was touched."""
        self.nodes[i] = node
        self.unschedulable[i] = node.unschedulable
        self.taints[i] = self._taint_id(node)
        self.cards[i] = len(node.cards)
        self.ports[i] = _holds_ports(node)
        self.pods[i] = _holds_pods(node)
        for column in self._labels.values():
            column.codes[i] = column.code(node)
        for name, free in self._free.items():
            free[i] = _free(node, name)

    def labels(self, key: str) -> _Labels:
        column = self._labels.get(key)
        if column is None:
            column = self._labels[key] = _Labels(key, self.nodes)
        return column

    def free(self, resource: str) -> np.ndarray:
        """What each node has left of `resource` (canonical units): inf where not limited."""
        column = self._free.get(resource)
        if column is None:
            column = self._free[resource] = np.fromiter(
                (_free(node, resource) for node in self.nodes), dtype=np.float64, count=self.count
            )
        return column

    def named(self, requirement: Requirement) -> np.ndarray:
        """The nodes whose name satisfies a `matchFields` requirement (In / NotIn)."""
        mask = np.zeros(self.count, dtype=bool)
        for value in requirement.values:
            i = self.position.get(value)
            if i is not None:
                mask[i] = True
        return ~mask if requirement.operator == "NotIn" else mask

    def term(self, term: NodeTerm) -> np.ndarray:
        """The nodes a node selector term matches."""
        if not term.expressions and not term.fields:
            return np.zeros(self.count, dtype=bool)
        mask = np.ones(self.count, dtype=bool)
        for requirement in term.expressions:
            mask &= self.labels(requirement.key).where(requirement)
        for requirement in term.fields:
            if requirement.key == NAME_FIELD:
                mask &= self.named(requirement)
        return mask


def _holds_pods(node: Node) -> bool:
    return node.held is not None and bool(node.held.pods)


def _holds_ports(node: Node) -> bool:
    return node.held is not None and bool(node.held.ports)


def _free(node: Node, resource: str) -> float:
    """`resource` left on `node` as `NodeRules.node_resources_fit` reads it: allocatable less
    what its pods request; inf when not limited (a standard resource absent from allocatable),
    an extended resource the node does not list has none."""
    limit = accounting.capacity(node).get(resource) if node.allocatable else None
    if limit is None:
        if resource in STANDARD:
            return math.inf
        limit = 0
    requested = node.held.requested.get(resource, 0) if node.held is not None else 0
    return float(limit - requested)


def untolerated_taints(rules: NodeRules, columns: NodeColumns) -> np.ndarray | None:
    """The nodes with a NoSchedule or NoExecute taint the pod does not tolerate (None: none)."""
    if len(columns.taint_sets) == 1:
        return None
    refused_sets = np.zeros(len(columns.taint_sets), dtype=bool)
    for k, taints in enumerate(columns.taint_sets[1:], 1):
        refused_sets[k] = untolerated(taints, rules.tolerations, (NO_SCHEDULE, NO_EXECUTE)) is not None
    return refused_sets[columns.taints] if refused_sets.any() else None


def node_affinity(rules: NodeRules, columns: NodeColumns) -> np.ndarray | None:
    """The nodes matching the pod's nodeSelector and required node affinity (None: the pod has
    neither, every node matches)."""
    if not rules.selector and rules.required is None:
        return None
    matches = np.ones(columns.count, dtype=bool)
    for key, value in rules.selector:
        matches &= columns.labels(key).equals(value)
    if rules.required is not None:
        any_term = np.zeros(columns.count, dtype=bool)
        for term in rules.required:
            any_term |= columns.term(term)
        matches &= any_term
    return matches


def refusals(rules: NodeRules, columns: NodeColumns) -> tuple[np.ndarray, list] | None:
    """For every node of `columns`, the index into the returned failures of the failure
    `rules.refuse(node)` gives (-1: it passes), or None when no node is refused. Nodes that
    fail alike (rule, words, card count) share one `RuleFailure`."""
    n = columns.count
    rule = np.full(n, -1, dtype=np.int64)  # index into _ORDER of the first rule failed
    variant = np.zeros(n, dtype=np.int64)  # which words of that rule

    def mark(failed: np.ndarray, code: int, words: np.ndarray | int = 0) -> None:
        new = failed & (rule < 0)
        rule[new] = code
        if not isinstance(words, int) or words:
            variant[new] = words[new] if isinstance(words, np.ndarray) else words

    if columns.unschedulable.any():
        if not any(t.tolerates(UNSCHEDULABLE_TAINT) for t in rules.tolerations):
            mark(columns.unschedulable, 0)
    if rules.node_name:
        named = np.zeros(n, dtype=bool)
        i = columns.position.get(rules.node_name)
        if i is not None:
            named[i] = True
        mark(~named, 1)
    tainted = untolerated_taints(rules, columns)
    if tainted is not None:
        mark(tainted, 2, columns.taints)
    matches = node_affinity(rules, columns)
    if matches is not None:
        mark(~matches, 3)
    if rules.ports and columns.ports.any():
        conflict = np.zeros(n, dtype=bool)
        for i in np.flatnonzero(columns.ports & (rule < 0)).tolist():
            held = columns.nodes[i].held
            conflict[i] = held is not None and accounting.port_conflict(rules.ports, held.ports)
        mark(conflict, 4)
    asked = [(name, amount) for name, amount in rules.request if amount]
    if asked:
        short = np.zeros(n, dtype=np.int64)  # bit k: the k-th asked resource does not fit
        for k, (name, amount) in enumerate(asked):
            short |= (columns.free(name) < amount).astype(np.int64) << k
        mark(short > 0, 5, short)
    volume_words: list[tuple[str, ...]] = []  # VolumeBinding's words, by variant
    if rules.volumes.refusal:  # its PreFilter: every node, whatever else it fails
        volume_words.append((rules.volumes.refusal,))
        rule[:], variant[:] = 6, 0
    elif rules.volumes.needs:  # node by node, on the nodes the other rules passed
        for i in np.flatnonzero(rule < 0).tolist():
            node = columns.nodes[i]
            said = rules.volumes.refuse(node.name, node.labels)
            if said:
                if said not in volume_words:
                    volume_words.append(said)
                rule[i], variant[i] = 6, volume_words.index(said)
    refused = np.flatnonzero(rule >= 0)
    if not len(refused):
        return None
    # one whole number per (rule, words, card count): nodes that fail alike share a failure
    cards = columns.cards[refused]
    words_span, cards_span = int(variant.max()) + 1, int(cards.max()) + 1
    keys = (rule[refused] * words_span + variant[refused]) * cards_span + cards
    distinct, which = np.unique(keys, return_inverse=True)
    failures = []
    for key in distinct.tolist():
        key, cards_of = divmod(key, cards_span)
        code, words = divmod(key, words_span)
        name = _ORDER[code]
        if name == TAINT_TOLERATION:
            taint = untolerated(columns.taint_sets[words], rules.tolerations, (NO_SCHEDULE, NO_EXECUTE))
            messages: tuple[str, ...] = (f"node(s) had untolerated taint {taint_words(taint or {})}",)
        elif name == NODE_RESOURCES_FIT:
            messages = tuple(
                shortage_words(resource) for k, (resource, _) in enumerate(asked) if words >> k & 1
            )
        elif name == VOLUME_BINDING:
            messages = volume_words[words]
        else:
            messages = (WORDS[name],)
        failures.append(rule_failure(name, messages, cards_of))
    out = np.full(n, -1, dtype=np.int64)
    out[refused] = np.asarray(which).reshape(-1)
    return out, failures


def spread_refused(rules: NodeRules, columns: NodeColumns) -> np.ndarray:
    """`PodTopologySpread` (hard constraints) over every node: 0 passes, 1 lacks a topology
    label, 2 would break a constraint's skew (`interpod.spread_refusals`, as columns)."""
    n = columns.count
    out = np.zeros(n, dtype=np.int64)
    hard = [c for c in rules.spread if c.hard]
    if not hard:
        return out
    labelled = np.ones(n, dtype=bool)
    for c in hard:
        labelled &= columns.labels(c.topology_key).codes > 0
    out[~labelled] = 1
    affinity = taints = None
    for c in hard:
        eligible = labelled.copy()
        if c.honor_affinity:
            affinity = node_affinity(rules, columns) if affinity is None else affinity
            if affinity is not None:
                eligible &= affinity
        if c.honor_taints:
            taints = untolerated_taints(rules, columns) if taints is None else taints
            if taints is not None:
                eligible &= ~taints
        domain = columns.labels(c.topology_key)
        matching = np.zeros(n, dtype=np.int64)
        if c.selector is not None:
            for i in np.flatnonzero(eligible & columns.pods).tolist():
                matching[i] = sum(
                    1
                    for fp in columns.nodes[i].held.pods.values()
                    if fp.namespace == rules.namespace and c.selector.matches(fp.labels)
                )
        size = len(domain.values)
        codes = domain.codes[eligible]
        counts = np.bincount(codes, weights=matching[eligible], minlength=size)
        present = np.bincount(codes, minlength=size) > 0
        least = int(counts[present].min()) if present.any() else 0
        if int(present.sum()) < c.min_domains:
            least = 0
        itself = 1 if c.selector is not None and c.selector.matches(rules.labels) else 0
        out[labelled & (out == 0) & (counts[domain.codes] + itself - least > c.max_skew)] = 2
    return out


def affinity_refused(rules: NodeRules, columns: NodeColumns, holders) -> np.ndarray:
    """`InterPodAffinity` over every node: 0 passes, 1 the pod's affinity, 2 its anti-affinity,
    3 an existing pod's anti-affinity refuses it (`interpod.affinity_refusals`, as columns).
    `holders`: (node, footprint) of the pods whose required anti-affinity selects this pod."""
    n = columns.count
    out = np.zeros(n, dtype=np.int64)
    mine = rules.pods
    affinity_pairs: set[tuple[str, str]] = set()
    anti_pairs: set[tuple[str, str]] = set()
    if mine.affinity or mine.anti_affinity:
        for i in np.flatnonzero(columns.pods).tolist():
            node = columns.nodes[i]
            for footprint in node.held.pods.values():
                if mine.affinity and all(
                    t.matches(footprint.namespace, footprint.labels) for t in mine.affinity
                ):
                    for term in mine.affinity:
                        value = node.labels.get(term.topology_key)
                        if value is not None:
                            affinity_pairs.add((term.topology_key, value))
                for term in mine.anti_affinity:
                    if term.matches(footprint.namespace, footprint.labels):
                        value = node.labels.get(term.topology_key)
                        if value is not None:
                            anti_pairs.add((term.topology_key, value))
    if mine.affinity:
        first = not affinity_pairs and all(t.matches(rules.namespace, rules.labels) for t in mine.affinity)
        ok = np.ones(n, dtype=bool)
        for term in mine.affinity:
            domain = columns.labels(term.topology_key)
            table = np.fromiter(
                (
                    v is not None and (first or (term.topology_key, v) in affinity_pairs)
                    for v in domain.values
                ),
                dtype=bool,
                count=len(domain.values),
            )
            ok &= table[domain.codes]
        out[~ok] = 1
    if anti_pairs:
        anti = np.zeros(n, dtype=bool)
        for term in mine.anti_affinity:
            domain = columns.labels(term.topology_key)
            table = np.fromiter(
                ((term.topology_key, v) in anti_pairs for v in domain.values),
                dtype=bool,
                count=len(domain.values),
            )
            anti |= table[domain.codes]
        out[anti & (out == 0)] = 2
    barred: set[tuple[str, str]] = set()
    for node, footprint in holders:
        for term in footprint.anti_affinity:
            if term.matches(rules.namespace, rules.labels):
                value = node.labels.get(term.topology_key)
                if value is not None:
                    barred.add((term.topology_key, value))
    if barred:
        hit = np.zeros(n, dtype=bool)
        for key, value in barred:
            hit |= columns.labels(key).equals(value)
        out[hit & (out == 0)] = 3
    return out


def other_pod_refusals(rules: NodeRules, columns: NodeColumns, holders) -> dict[str, RuleFailure]:
    """`noderules.refusals` over every node of `columns` as array operations: the nodes
    `PodTopologySpread` refuses, then of the rest those `InterPodAffinity` refuses, each with
    its failure (one object per message, shared)."""
    out: dict[str, RuleFailure] = {}
    nodes = columns.nodes
    spread = None
    if any(c.hard for c in rules.spread):
        spread = spread_refused(rules, columns)
        said = (None, *(rule_failure(POD_TOPOLOGY_SPREAD, (m,)) for m in (SPREAD_LABEL, SPREAD)))
        for i in np.flatnonzero(spread).tolist():
            out[nodes[i].name] = said[spread[i]]  # type: ignore[assignment]
    if rules.pods.affinity or rules.pods.anti_affinity or holders:
        refused = affinity_refused(rules, columns, holders)
        if spread is not None:
            refused[spread > 0] = 0
        said = (
            None,
            *(
                rule_failure(INTER_POD_AFFINITY, (m,))
                for m in (AFFINITY, ANTI_AFFINITY, EXISTING_ANTI_AFFINITY)
            ),
        )
        for i in np.flatnonzero(refused).tolist():
            out[nodes[i].name] = said[refused[i]]  # type: ignore[assignment]
    return out
