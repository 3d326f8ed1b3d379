"""What a scenario costs the engine beyond checking every card: the chain's choices.

Checking a pod against every node and card is pods x (nodes + cards) steps, counted from the
raw scenario (`services.simulations.measure`). A filter that chooses among the fitting cards
may cost far more: topology-aware weighs up to `max_combinations` card combinations per
node for a multi-card container, each summing its pairs. `choice_work` adds, per pod and per
GPU container, what each active filter's `choice_work` says its choice may take on every
node with enough cards (the choice can run on each fitting node, and once more to explain
the chosen one). An upper bound: a node that does not fit costs less.
"""

from __future__ import annotations

from collections import Counter

from .errors import PodInvalid
from .model import Cluster, ClusterConfig, PodSpec
from .pod import parse_pod


def choice_work(cluster: Cluster, config: ClusterConfig, pods: list[PodSpec]) -> int:
    """Steps the active filters' choices may take for `pods` on `cluster` (invalid pods: 0)."""
    nodes_by_cards = Counter(len(node.cards) for node in cluster.nodes)
    per_ask: dict[tuple[str, int], int] = {}
    total = 0
    for pod in pods:
        try:
            parsed = parse_pod(pod, config)
        except PodInvalid:
            continue
        for ask in (*parsed.gpu_inits, *(a for a in parsed.apps if a is not None)):
            for chooser in parsed.policy.active_filters:
                key = (chooser.name, ask.count)
                if key not in per_ask:
                    steps = {cards: chooser.choice_work(cards, ask.count) for cards in nodes_by_cards}
                    every_node = sum(steps[cards] * nodes for cards, nodes in nodes_by_cards.items())
                    per_ask[key] = every_node + max(steps.values(), default=0)
                total += per_ask[key]
    return total
