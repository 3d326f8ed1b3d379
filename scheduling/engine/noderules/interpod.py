"""The node rules that read other nodes' pods: `PodTopologySpread` (hard constraints) and
`InterPodAffinity` (required terms, both directions), as kube-scheduler decides them.

They change whenever a pod lands anywhere in a topology domain, so they are not part of a
node's cached verdict: `OtherPods` counts, per decision, what they read of the nodes' `held`
footprints (`accounting`) and judges the candidate nodes from the counts, also with some pods
taken as gone (preemption's trial fit). Few pods carry them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import PodInvalid
from ..reasons import INTER_POD_AFFINITY, POD_TOPOLOGY_SPREAD
from .terms import LabelSelector, Requirement, _dict, _list, _text, label_selector

AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
SPREAD = "node(s) didn't match pod topology spread constraints"
SPREAD_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"


@dataclass(frozen=True, slots=True)
class PodTerm:
    """A required pod (anti-)affinity term: which pods (`selector` in `namespaces`; empty: the
    owner's namespace; None: every namespace) and the node label that makes a domain."""

    selector: LabelSelector | None
    namespaces: frozenset[str] | None
    topology_key: str

    def matches(self, namespace: str, labels: dict[str, str]) -> bool:
        if self.selector is None:
            return False
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return self.selector.matches(labels)


def _label_keys(entry: dict, where: str, name: str) -> list[str]:
    return [
        _text(k, f"{where}.{name}[{i}]", empty=False)
        for i, k in enumerate(_list(entry.get(name), f"{where}.{name}"))
    ]


def pod_term(entry, where: str, namespace: str, labels: dict[str, str]) -> PodTerm:
    """One `PodAffinityTerm` of a pod in `namespace` with `labels` (for `matchLabelKeys`)."""
    entry = _dict(entry, where)
    key = _text(entry.get("topologyKey"), f"{where}.topologyKey", empty=False)
    selector = label_selector(entry.get("labelSelector"), f"{where}.labelSelector")
    names = [
        _text(n, f"{where}.namespaces[{i}]")
        for i, n in enumerate(_list(entry.get("namespaces"), f"{where}.namespaces"))
    ]
    namespace_selector = entry.get("namespaceSelector")
    if namespace_selector is not None and _dict(namespace_selector, f"{where}.namespaceSelector") == {}:
        namespaces = None  # `{}`: every namespace
    else:
        namespaces = frozenset(names or [namespace])
    if selector is not None:
        pairs = tuple((k, labels[k]) for k in _label_keys(entry, where, "matchLabelKeys") if k in labels)
        selector = selector.with_labels(pairs)
        mismatch = tuple(
            Requirement(k, "NotIn", (labels[k],))
            for k in _label_keys(entry, where, "mismatchLabelKeys")
            if k in labels
        )
        if mismatch:
            selector = LabelSelector(selector.labels, selector.expressions + mismatch)
    return PodTerm(selector, namespaces, key)


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """A pod's pod (anti-)affinity: required terms (filters) and weighted preferred ones."""

    affinity: tuple[PodTerm, ...] = ()
    anti_affinity: tuple[PodTerm, ...] = ()
    preferred: tuple[tuple[int, PodTerm], ...] = ()  # weight, negative for anti-affinity

    def __bool__(self) -> bool:
        return bool(self.affinity or self.anti_affinity or self.preferred)


def pod_affinity(affinity, where: str, namespace: str, labels: dict[str, str]) -> PodAffinity:
    """`affinity.podAffinity` and `affinity.podAntiAffinity` of a pod, read."""
    affinity = _dict(affinity, where)
    found: dict[str, tuple] = {}
    preferred: list[tuple[int, PodTerm]] = []
    for name, sign in (("podAffinity", 1), ("podAntiAffinity", -1)):
        at = f"{where}.{name}"
        part = _dict(affinity.get(name), at)
        required = f"{at}.requiredDuringSchedulingIgnoredDuringExecution"
        found[name] = tuple(
            pod_term(t, f"{required}[{i}]", namespace, labels)
            for i, t in enumerate(_list(part.get("requiredDuringSchedulingIgnoredDuringExecution"), required))
        )
        soft = f"{at}.preferredDuringSchedulingIgnoredDuringExecution"
        for i, entry in enumerate(_list(part.get("preferredDuringSchedulingIgnoredDuringExecution"), soft)):
            entry = _dict(entry, f"{soft}[{i}]")
            weight = _weight(entry.get("weight"), f"{soft}[{i}].weight")
            term = pod_term(entry.get("podAffinityTerm"), f"{soft}[{i}].podAffinityTerm", namespace, labels)
            preferred.append((sign * weight, term))
    return PodAffinity(found["podAffinity"], found["podAntiAffinity"], tuple(preferred))


def _weight(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise PodInvalid(where, f"must be a whole number from 1 to 100, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Spread:
    """One `topologySpreadConstraints` entry, read."""

    max_skew: int
    topology_key: str
    hard: bool
    selector: LabelSelector | None
    min_domains: int
    honor_affinity: bool
    honor_taints: bool


def spreads(value, where: str, labels: dict[str, str]) -> tuple[Spread, ...]:
    out = []
    for i, entry in enumerate(_list(value, where)):
        at = f"{where}[{i}]"
        entry = _dict(entry, at)
        skew = entry.get("maxSkew")
        if isinstance(skew, bool) or not isinstance(skew, int) or skew < 1:
            raise PodInvalid(f"{at}.maxSkew", f"must be a whole number from 1, got {skew!r}")
        key = _text(entry.get("topologyKey"), f"{at}.topologyKey", empty=False)
        when = entry.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise PodInvalid(
                f"{at}.whenUnsatisfiable", f"must be DoNotSchedule or ScheduleAnyway, got {when!r}"
            )
        minimum = entry.get("minDomains", 1)
        if minimum is None:
            minimum = 1
        if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 1:
            raise PodInvalid(f"{at}.minDomains", f"must be a whole number from 1, got {minimum!r}")
        policies = []
        for name, default, choices in (
            ("nodeAffinityPolicy", "Honor", ("Honor", "Ignore")),
            ("nodeTaintsPolicy", "Ignore", ("Honor", "Ignore")),
        ):
            policy = entry.get(name) or default
            if policy not in choices:
                raise PodInvalid(f"{at}.{name}", f"must be Honor or Ignore, got {policy!r}")
            policies.append(policy == "Honor")
        selector = label_selector(entry.get("labelSelector"), f"{at}.labelSelector")
        if selector is not None:
            pairs = tuple((k, labels[k]) for k in _label_keys(entry, at, "matchLabelKeys") if k in labels)
            selector = selector.with_labels(pairs)
        out.append(Spread(skew, key, when == "DoNotSchedule", selector, minimum, *policies))
    return tuple(out)


#: A topology domain: a node label's key and value.
Pair = tuple[str, str]


@dataclass(slots=True)
class _SpreadCount:
    """One hard constraint counted: matching pods per domain of the nodes that count, the
    least of them (0 while fewer domains than `minDomains`), and 1 when the pod itself matches."""

    constraint: Spread
    counts: dict[str, int]
    least: int
    itself: int


class OtherPods:
    """The other pods as `PodTopologySpread` (hard constraints) and `InterPodAffinity`
    (required terms, both directions) count them for one pod, as kube-scheduler decides them.

    They change whenever a pod lands anywhere in a topology domain, so they are not part of a
    node's cached verdict: they are counted once per decision over the nodes' `held`
    footprints (`accounting`), per domain: the pods each spread constraint selects, the pods
    matching the pod's affinity and anti-affinity terms, and the existing pods whose required
    anti-affinity selects the pod (`holders`). `refuse(node)` then judges one node from the
    counts; with `leaving` (a preemption's victims) it judges it as if those pods were gone,
    without counting the cluster again, as kube-scheduler re-runs its filters with the
    victims removed.
    """

    def __init__(
        self,
        nodes: list,
        namespace: str,
        labels: dict[str, str],
        constraints: tuple[Spread, ...],
        mine: PodAffinity,
        holders: Iterable[tuple[object, object]],
        node_passes,
    ):
        """`nodes`: every node (their footprints are the pods counted); `holders`: (node,
        footprint) of the pods whose required anti-affinity may select this pod;
        `node_passes(node, honor_affinity, honor_taints)`: whether a node counts toward a spread
        constraint's domains under its node policies."""
        self.namespace = namespace
        self.labels = labels
        self.mine = mine
        self.node_passes = node_passes
        hard = [c for c in constraints if c.hard]
        self.keys = tuple(c.topology_key for c in hard)
        self.spread = [self._count_spread(c, nodes) for c in hard]
        #: domains existing pods' anti-affinity bars this pod from, and which pod bars which
        self.barred: dict[Pair, int] = {}
        self.barring: dict[tuple[str, str], tuple[Pair, ...]] = {}
        for node, footprint in holders:
            pairs = tuple(
                (term.topology_key, value)
                for term in footprint.anti_affinity  # type: ignore[attr-defined]
                if term.matches(namespace, labels)
                and (value := node.labels.get(term.topology_key)) is not None  # type: ignore[attr-defined]
            )
            if pairs:
                self.barring[(node.name, footprint.key)] = pairs  # type: ignore[attr-defined]
                _add(self.barred, pairs)
        #: pods matching all of the pod's affinity terms, and its anti-affinity terms, per domain
        self.affine: dict[Pair, int] = {}
        self.repelled: dict[Pair, int] = {}
        if mine.affinity or mine.anti_affinity:
            affine, repelled = self.affine, self.repelled
            for node in nodes:
                held = node.held
                if held is None or not held.pods:
                    continue
                node_labels = node.labels
                for footprint in held.pods.values():  # `_affine` and `_repelled` inlined: hot
                    space, pod_labels = footprint.namespace, footprint.labels
                    if mine.affinity and all(t.matches(space, pod_labels) for t in mine.affinity):
                        _add(affine, self._affine(node_labels, footprint))
                    for term in mine.anti_affinity:
                        if term.matches(space, pod_labels):
                            value = node_labels.get(term.topology_key)
                            if value is not None:
                                pair = (term.topology_key, value)
                                repelled[pair] = repelled.get(pair, 0) + 1
        self.affine_total = sum(self.affine.values())
        #: the pod matches its own affinity terms: the first of its group may go anywhere
        self.own_group = bool(mine.affinity) and all(t.matches(namespace, labels) for t in mine.affinity)

    def _count_spread(self, c: Spread, nodes: list) -> _SpreadCount:
        counts: dict[str, int] = {}
        for node in nodes:
            if not self._counted(c, node):
                continue
            value = node.labels[c.topology_key]
            n = counts.get(value, 0)
            held = node.held
            if held is not None and c.selector is not None:
                for footprint in held.pods.values():
                    if footprint.namespace == self.namespace and c.selector.matches(footprint.labels):
                        n += 1
            counts[value] = n
        least = min(counts.values()) if counts and len(counts) >= c.min_domains else 0
        itself = 1 if c.selector is not None and c.selector.matches(self.labels) else 0
        return _SpreadCount(c, counts, least, itself)

    def _counted(self, c: Spread, node) -> bool:
        """Whether `node` is one of the domains' nodes for constraint `c`."""
        node_labels = node.labels
        return all(k in node_labels for k in self.keys) and self.node_passes(
            node, c.honor_affinity, c.honor_taints
        )

    def _affine(self, node_labels: dict[str, str], footprint) -> list[Pair]:
        terms = self.mine.affinity
        if not terms or not all(t.matches(footprint.namespace, footprint.labels) for t in terms):
            return []
        return [(t.topology_key, v) for t in terms if (v := node_labels.get(t.topology_key)) is not None]

    def _repelled(self, node_labels: dict[str, str], footprint) -> list[Pair]:
        return [
            (t.topology_key, v)
            for t in self.mine.anti_affinity
            if t.matches(footprint.namespace, footprint.labels)
            and (v := node_labels.get(t.topology_key)) is not None
        ]

    def refuse(self, node, leaving: Iterable[tuple[object, object]] = ()) -> tuple[str, str] | None:
        """(rule, message) when `PodTopologySpread` or `InterPodAffinity` (in that order)
        refuses `node`, else None. `leaving`: (node, footprint) of pods counted now that are
        to be taken as gone."""
        leaving = list(leaving)
        message = self._spread_refusal(node, leaving)
        if message is not None:
            return POD_TOPOLOGY_SPREAD, message
        message = self._affinity_refusal(node, leaving)
        if message is not None:
            return INTER_POD_AFFINITY, message
        return None

    def _spread_refusal(self, node, leaving: list) -> str | None:
        if not self.spread:
            return None
        node_labels = node.labels
        if any(k not in node_labels for k in self.keys):
            return SPREAD_LABEL
        for table in self.spread:
            c = table.constraint
            here = node_labels[c.topology_key]
            count, least = table.counts.get(here, 0), table.least
            gone: dict[str, int] = {}
            for where, footprint in leaving:
                if (
                    c.selector is not None
                    and footprint.namespace == self.namespace  # type: ignore[attr-defined]
                    and c.selector.matches(footprint.labels)  # type: ignore[attr-defined]
                    and self._counted(c, where)
                ):
                    value = where.labels[c.topology_key]  # type: ignore[attr-defined]
                    gone[value] = gone.get(value, 0) + 1
            if gone:
                count -= gone.get(here, 0)
                if len(table.counts) >= c.min_domains:
                    least = min(least, *(table.counts[value] - n for value, n in gone.items()))
            if count + table.itself - least > c.max_skew:
                return SPREAD
        return None

    def _affinity_refusal(self, node, leaving: list) -> str | None:
        mine = self.mine
        node_labels = node.labels
        affine: dict[Pair, int] = {}
        repelled: dict[Pair, int] = {}
        barred: dict[Pair, int] = {}
        for where, footprint in leaving:
            _add(affine, self._affine(where.labels, footprint))  # type: ignore[attr-defined]
            _add(repelled, self._repelled(where.labels, footprint))  # type: ignore[attr-defined]
            _add(barred, self.barring.get((where.name, footprint.key), ()))  # type: ignore[attr-defined]
        if mine.affinity:
            first = self.own_group and self.affine_total == sum(affine.values())
            for term in mine.affinity:
                value = node_labels.get(term.topology_key)
                if value is None:
                    return AFFINITY
                pair = (term.topology_key, value)
                if self.affine.get(pair, 0) - affine.get(pair, 0) <= 0 and not first:
                    return AFFINITY
        if self.repelled:
            for term in mine.anti_affinity:
                value = node_labels.get(term.topology_key)
                pair = (term.topology_key, value or "")
                if value is not None and self.repelled.get(pair, 0) - repelled.get(pair, 0) > 0:
                    return ANTI_AFFINITY
        if self.barred:
            for pair in node_labels.items():
                if self.barred.get(pair, 0) - barred.get(pair, 0) > 0:
                    return EXISTING_ANTI_AFFINITY
        return None


def _add(counts: dict[Pair, int], pairs: Iterable[Pair]) -> None:
    for pair in pairs:
        counts[pair] = counts.get(pair, 0) + 1
