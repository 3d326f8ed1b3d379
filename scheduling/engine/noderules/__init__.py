"""kube-scheduler's filters as node-level rules of the engine (SPEC 10).

Public API:
- `NodeRules.read(pod)`: a pod's rules, validated (PodInvalid naming the field); `refuse(node)`
  the first per-node rule failing (`RuleFailure`), `key` for the shape cache, `PLAIN` for a pod
  without any of the fields.
- `refusals(rules, cluster, candidates, holders)`: `PodTopologySpread` and `InterPodAffinity`
  for one decision (they read other nodes).
- `account_running(cluster)`: apply `Cluster.running` to the nodes (idempotent).
- `accounting.footprint_of`, `add`, `remove`: what a pod holds of a node, put on and taken off.
- `prefer.rank`: preferences order the fitting nodes before SPEC 7's order.
- `ORDER`, the rule names; `SCHEDULING_GATED`; `RuleFailure`.
"""

from __future__ import annotations

from ..reasons import INTER_POD_AFFINITY, POD_TOPOLOGY_SPREAD, SCHEDULING_GATED
from .accounting import Footprint, account_running, add, footprint_of, remove
from .interpod import affinity_refusals, spread_refusals
from .rules import ORDER, PLAIN, RULES, NodeRules, RuleFailure, rule_failure

__all__ = [
    "ORDER",
    "PLAIN",
    "RULES",
    "SCHEDULING_GATED",
    "Footprint",
    "NodeRules",
    "RuleFailure",
    "account_running",
    "add",
    "footprint_of",
    "refusals",
    "remove",
]


def refusals(rules: NodeRules, nodes: list, candidates: list, holders: list) -> dict[str, RuleFailure]:
    """Of `candidates` (nodes that passed the per-node rules), those `PodTopologySpread` or
    `InterPodAffinity` refuse, in that order, each as a `RuleFailure`. `nodes`: every node of the
    cluster; `holders`: (node, footprint) of the pods with required anti-affinity."""
    out: dict[str, RuleFailure] = {}
    if any(c.hard for c in rules.spread):
        for name, message in spread_refusals(
            candidates, nodes, rules.namespace, rules.labels, rules.spread, rules.counts_for_spread
        ).items():
            out[name] = rule_failure(POD_TOPOLOGY_SPREAD, (message,))
    rest = [node for node in candidates if node.name not in out]
    if rest and (rules.pods.affinity or rules.pods.anti_affinity or holders):
        for name, message in affinity_refusals(
            rest, nodes, rules.namespace, rules.labels, rules.pods, holders
        ).items():
            out[name] = rule_failure(INTER_POD_AFFINITY, (message,))
    return out
