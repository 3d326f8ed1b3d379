"""How the preferences of a pod rank the nodes where it fits (SPEC 10, `docs/policies.md`).

Preferred node affinity, `PreferNoSchedule` taints, soft topology spread (`ScheduleAnyway`) and
preferred pod (anti-)affinity give each fitting node a preference score; nodes are ordered by
that score first (higher first) and SPEC 7's node order breaks ties. A pod with none of them
scores every node 0, so its order is SPEC 7's, unchanged. The score is the sum of:
- the weights of the preferred node affinity terms the node matches;
- minus 100 per `PreferNoSchedule` taint the pod does not tolerate;
- per preferred pod (anti-)affinity term, plus (minus) its weight when a pod it selects runs
  in the node's domain;
- per soft spread constraint, minus the pods it selects in the node's domain.
"""

from __future__ import annotations

from .rules import NodeRules
from .terms import PREFER_NO_SCHEDULE, untolerated


def preference(rules: NodeRules, node, domains: dict) -> int:
    """The node's preference score; `domains` maps (topology key, value) to the pods there, for
    the preferred pod terms and soft spread constraints (`domain_pods`)."""
    score = 0
    labels = node.labels
    for weight, term in rules.preferred:
        if term.matches(node.name, labels):
            score += weight
    taints = [t for t in node.taints if t.get("effect") == PREFER_NO_SCHEDULE]
    while taints:
        taint = untolerated(taints, rules.tolerations, (PREFER_NO_SCHEDULE,))
        if taint is None:
            break
        score -= 100
        taints = taints[taints.index(taint) + 1 :]
    for weight, pod_term in rules.pods.preferred:
        value = labels.get(pod_term.topology_key)
        if value is not None and any(
            pod_term.matches(fp.namespace, fp.labels)
            for fp in domains.get((pod_term.topology_key, value), ())
        ):
            score += weight
    for constraint in rules.spread:
        if constraint.hard or constraint.selector is None:
            continue
        value = labels.get(constraint.topology_key)
        if value is not None:
            pods = domains.get((constraint.topology_key, value), ())
            score -= sum(
                1 for fp in pods if fp.namespace == rules.namespace and constraint.selector.matches(fp.labels)
            )
    return score


def domain_pods(rules: NodeRules, nodes) -> dict:
    """(topology key, value) -> the footprints in that domain, for the keys the pod's preferred
    pod terms and soft spread constraints name."""
    keys = {term.topology_key for _, term in rules.pods.preferred}
    keys |= {c.topology_key for c in rules.spread if not c.hard}
    domains: dict = {}
    if not keys:
        return domains
    for node in nodes:
        held = node.held
        if held is None or not held.pods:
            continue
        for key in keys:
            value = node.labels.get(key)
            if value is not None:
                domains.setdefault((key, value), []).extend(held.pods.values())
    return domains


def rank(rules: NodeRules, ranking: list[tuple[str, float]], by_name, nodes) -> list[tuple[str, float]]:
    """`ranking` (SPEC 7 order) re-ordered by preference score, stable: ties keep SPEC 7's order."""
    domains = domain_pods(rules, nodes)
    scored = [(-preference(rules, by_name[name], domains), i) for i, (name, _) in enumerate(ranking)]
    scored.sort()
    return [ranking[i] for _, i in scored]
