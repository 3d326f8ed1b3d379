"""kube-scheduler's filters as node-level rules of the engine (SPEC 10).

Public API:
- `NodeRules.read(pod)`: a pod's rules, validated (PodInvalid naming the field); `refuse(node)`
  the first per-node rule failing (`RuleFailure`), `key` for the shape cache, `PLAIN` for a pod
  without any of the fields.
- `refusals(rules, cluster, candidates, holders)`: `PodTopologySpread` and `InterPodAffinity`
  for one decision (they read other nodes); `other_pods(...)`: what they count, to judge a
  node again with some pods gone (preemption).
- `account_running(cluster)`: apply `Cluster.running` to the nodes (idempotent).
- `accounting.footprint_of`, `add`, `remove`: what a pod holds of a node, put on and taken off.
- `prefer.rank`: preferences order the fitting nodes before SPEC 7's order.
- `ORDER`, the rule names; `SCHEDULING_GATED`; `RuleFailure`.
"""

from __future__ import annotations

from ..reasons import SCHEDULING_GATED
from .accounting import Footprint, account_running, add, footprint_of, remove
from .interpod import OtherPods
from .rules import ORDER, PLAIN, RULES, NodeRules, RuleFailure, rule_failure

__all__ = [
    "ORDER",
    "PLAIN",
    "RULES",
    "SCHEDULING_GATED",
    "Footprint",
    "NodeRules",
    "OtherPods",
    "RuleFailure",
    "account_running",
    "add",
    "footprint_of",
    "other_pods",
    "refusals",
    "remove",
]


def other_pods(rules: NodeRules, nodes: list, holders: list) -> OtherPods | None:
    """`PodTopologySpread` and `InterPodAffinity` for one decision of the pod with `rules`,
    counted over `nodes` (every node of the cluster); `holders`: (node, footprint) of the pods
    whose required anti-affinity selects the pod. None when neither applies (no hard spread,
    no required pod (anti-)affinity, no holder): then they refuse no node."""
    if not (rules.dynamic or holders):
        return None
    return OtherPods(
        nodes, rules.namespace, rules.labels, rules.spread, rules.pods, holders, rules.counts_for_spread
    )


def refusals(rules: NodeRules, nodes: list, candidates: list, holders: list) -> dict[str, RuleFailure]:
    """Of `candidates` (nodes that passed the per-node rules), those `PodTopologySpread` or
    `InterPodAffinity` refuse, in that order, each as a `RuleFailure` (`other_pods`)."""
    other = other_pods(rules, nodes, holders)
    out: dict[str, RuleFailure] = {}
    if other is not None:
        for node in candidates:
            refused = other.refuse(node)
            if refused is not None:
                out[node.name] = rule_failure(refused[0], (refused[1],))
    return out
