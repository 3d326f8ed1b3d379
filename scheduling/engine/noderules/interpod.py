"""The node rules that read other nodes' pods: `PodTopologySpread` (hard constraints) and
`InterPodAffinity` (required terms, both directions), as kube-scheduler decides them.

They change whenever a pod lands anywhere in a topology domain, so they are not part of a
node's cached verdict: `refusals` computes, per decision, which of the candidate nodes they
refuse. Few pods carry them; the pods they read are the nodes' `held` footprints
(`accounting`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import PodInvalid
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


def _domain(labels: dict[str, str], key: str) -> str | None:
    return labels.get(key)


def affinity_refusals(
    candidates: Iterable,
    nodes: list,
    namespace: str,
    labels: dict[str, str],
    mine: PodAffinity,
    holders: Iterable[tuple[object, object]],
) -> dict[str, str]:
    """`InterPodAffinity`: node name -> its message, for the `candidates` it refuses.
    `nodes` are every node (their footprints are the pods counted); `holders` the (node,
    footprint) pairs whose footprint has required anti-affinity."""
    # Existing pods' anti-affinity against the newcomer: domains it may not join.
    barred: set[tuple[str, str]] = set()
    for node, footprint in holders:
        for term in footprint.anti_affinity:  # type: ignore[attr-defined]
            if term.matches(namespace, labels):
                value = _domain(node.labels, term.topology_key)  # type: ignore[attr-defined]
                if value is not None:
                    barred.add((term.topology_key, value))
    needs_pods = bool(mine.affinity or mine.anti_affinity)
    affinity_pairs: set[tuple[str, str]] = set()
    anti_pairs: set[tuple[str, str]] = set()
    if needs_pods:
        for node in nodes:
            held = node.held
            if held is None or not held.pods:
                continue
            for footprint in held.pods.values():
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
    first_of_group = (
        bool(mine.affinity)
        and not affinity_pairs
        and all(t.matches(namespace, labels) for t in mine.affinity)
    )
    refused: dict[str, str] = {}
    for node in candidates:
        node_labels = node.labels
        if mine.affinity:
            ok = True
            for term in mine.affinity:
                value = node_labels.get(term.topology_key)
                if value is None:
                    ok = False
                    break
                if (term.topology_key, value) not in affinity_pairs and not first_of_group:
                    ok = False
                    break
            if not ok:
                refused[node.name] = AFFINITY
                continue
        if anti_pairs and any(
            (term.topology_key, node_labels.get(term.topology_key)) in anti_pairs
            for term in mine.anti_affinity
        ):
            refused[node.name] = ANTI_AFFINITY
            continue
        if barred and any((key, value) in barred for key, value in node_labels.items()):
            refused[node.name] = EXISTING_ANTI_AFFINITY
    return refused


def spread_refusals(
    candidates: Iterable,
    nodes: list,
    namespace: str,
    labels: dict[str, str],
    constraints: tuple[Spread, ...],
    node_passes,
) -> dict[str, str]:
    """`PodTopologySpread` (hard constraints): node name -> message for the `candidates` it
    refuses. `node_passes(node, honor_affinity, honor_taints)` says whether a node counts
    toward the domains under the constraint's node policies."""
    hard = [c for c in constraints if c.hard]
    if not hard:
        return {}
    keys = [c.topology_key for c in hard]
    tables = []
    for c in hard:
        counts: dict[str, int] = {}
        for node in nodes:
            node_labels = node.labels
            if any(k not in node_labels for k in keys) or not node_passes(
                node, c.honor_affinity, c.honor_taints
            ):
                continue
            value = node_labels[c.topology_key]
            n = counts.get(value, 0)
            held = node.held
            if held is not None and c.selector is not None:
                for footprint in held.pods.values():
                    if footprint.namespace == namespace and c.selector.matches(footprint.labels):
                        n += 1
            counts[value] = n
        least = min(counts.values()) if counts else 0
        if len(counts) < c.min_domains:
            least = 0
        itself = 1 if c.selector is not None and c.selector.matches(labels) else 0
        tables.append((c, counts, least, itself))
    refused: dict[str, str] = {}
    for node in candidates:
        node_labels = node.labels
        if any(k not in node_labels for k in keys):
            refused[node.name] = SPREAD_LABEL
            continue
        for c, counts, least, itself in tables:
            if counts.get(node_labels[c.topology_key], 0) + itself - least > c.max_skew:
                refused[node.name] = SPREAD
                break
    return refused
