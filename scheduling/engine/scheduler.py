"""Deciding pods against one cluster snapshot: the node order of SPEC 7, and the explanation.

`Scheduler` holds one cluster snapshot. Node verdicts (`evaluate.evaluate_node`) are cached
per pod *shape* (what the pod asks and how it ranks) and per node version, so a stream of
similar pods costs one node re-evaluation per placement instead of a sweep over every card.
Among the nodes where the pod fits, binpack takes the highest node score, spread the lowest,
scores within 1e-9 tie and go by node name; the chosen node is evaluated once more to
explain its cards. A pod that fits nowhere keeps the `config.closest_nodes` nodes that came
closest (`engine.closeness`), with their card tables; their closeness is cached like the
verdicts, per pod shape and node version, so explaining costs one explaining evaluation per
changed node, not a sweep.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict

from .chain import TOLERANCE, ranking_order
from .closeness import NodeCloseness, cluster_never, node_closeness
from .decision import PENDING, REJECTED, SCHEDULED, CardVerdict, ContainerPlacement, Decision, DeviceGrant
from .errors import PodInvalid
from .evaluate import NodeVerdict, evaluate_node
from .fit import NodeFailure
from .model import Cluster, ClusterConfig, Node, PodSpec
from .pod import ParsedPod, describe_policy, parse_pod


def _order_nodes(keyed: list[tuple[float, str, float]]) -> list[tuple[str, float]]:
    """Policy order from `(sign x score, name, score)` entries (sign -1 for binpack: high first);
    scores within 1e-9 tie and go by name.

    Sorting on exact values is right unless two neighbours differ by less than the
    tolerance without being equal; only such runs are re-sorted by name.
    """
    keyed.sort()
    near = [i for i in range(1, len(keyed)) if 0 < keyed[i][0] - keyed[i - 1][0] < TOLERANCE]
    if near:
        start = 0
        out: list[tuple[float, str, float]] = []
        for i in range(1, len(keyed) + 1):
            if i == len(keyed) or keyed[i][0] - keyed[start][0] >= TOLERANCE:
                out.extend(sorted(keyed[start:i], key=lambda item: item[1]))
                start = i
        keyed = out
    return [(name, score) for _, name, score in keyed]


class Scheduler:
    """Decides pods against one snapshot; `schedule` also applies each placement to it."""

    #: Cached node verdicts kept across all shapes (bounds memory: ~150 bytes each).
    CACHE_ENTRIES = 500_000

    def __init__(
        self, cluster: Cluster, config: ClusterConfig | None = None, cached_shapes: int | None = None
    ):
        self.cluster = cluster
        self.config = config or ClusterConfig()
        self._verdicts: OrderedDict[tuple, dict[str, tuple[int, NodeVerdict]]] = OrderedDict()
        self._closeness: OrderedDict[tuple, dict[str, tuple[int, NodeCloseness]]] = OrderedDict()
        self._never: dict[tuple, dict] = {}
        if cached_shapes is None:
            cached_shapes = max(16, self.CACHE_ENTRIES // max(1, len(cluster.nodes)))
        self._cached_shapes = cached_shapes
        self._uniform_memory = all(len({card.memory for card in node.cards}) <= 1 for node in cluster.nodes)

    def _shape_key(self, parsed: ParsedPod) -> tuple:
        """With one GPU container whose MiB per card is the same on every card of a node, the
        node's verdict (fit and score) does not depend on which cards are picked, so pods that
        differ only in how they rank cards share cached verdicts."""
        gpu = [ask for ask in parsed.apps if ask is not None]
        if len(gpu) == 1 and (gpu[0].memory is not None or self._uniform_memory):
            return parsed.fit_shape
        return parsed.shape

    def _verdicts_for(self, shape: tuple) -> dict[str, tuple[int, NodeVerdict]]:
        return self._cached(self._verdicts, shape)

    def _cached(self, tables: OrderedDict, shape: tuple) -> dict:
        table = tables.get(shape)
        if table is None:
            table = tables[shape] = {}
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
        measured = []
        for name in names:
            node = self.cluster.node(name)
            cached = table.get(name)
            if cached is not None and cached[0] == node.version:
                closeness = cached[1]
            else:
                # whether it never fits depends on capacities only: kept across versions
                never = cached[1].never if cached is not None else None
                closeness = node_closeness(node, inits, apps, parsed.policy, never)
                table[name] = (node.version, closeness)
            measured.append(closeness)
        never = None
        if measured and all(c.never for c in measured):
            # capacities only, so once per shape and set of nodes
            never_key = (shape, len(measured))
            never = self._never.get(never_key)
            if never is None:
                asks = [*inits, *(ask for ask in apps if ask is not None)]
                never = self._never[never_key] = cluster_never(
                    [c.node for c in measured], asks, parsed.policy
                )
        keep = max(0, self.config.closest_nodes)
        return [c.detail() for c in heapq.nsmallest(keep, measured, key=lambda c: c.key)], never

    def decide(self, pod: PodSpec) -> Decision:
        """Where `pod` would go on the snapshot as it is now. Does not change the snapshot."""
        return self.decide_parsed(pod)[0]

    def decide_parsed(self, pod: PodSpec) -> tuple[Decision, ParsedPod | None]:
        """`decide`, plus the pod as read (None when it is invalid), for callers that
        re-check the placement later with the same asks (the pipeline's commit)."""
        started = time.perf_counter()
        try:
            parsed = parse_pod(pod, self.config)
        except PodInvalid as exc:
            decision = Decision(
                name=pod.name,
                namespace=pod.namespace,
                status=REJECTED,
                policy=describe_policy(pod.annotations, self.config),
                error=str(exc),
                error_field=exc.field,
                error_code=exc.code,
                duration_ms=(time.perf_counter() - started) * 1000,
            )
            return decision, None
        decision = self._decide_parsed(pod, parsed)
        decision.duration_ms = (time.perf_counter() - started) * 1000
        return decision, parsed

    def _decide_parsed(self, pod: PodSpec, parsed: ParsedPod) -> Decision:
        policy = parsed.policy
        table = self._verdicts_for(self._shape_key(parsed))
        inits, apps = parsed.gpu_inits, list(parsed.apps)
        sign = -1.0 if policy.node_policy == "binpack" else 1.0
        fitting: list[tuple[float, str, float]] = []
        failed: list[tuple[str, NodeFailure]] = []
        texts: dict[str, int] = {}  # failure text -> how many nodes gave it
        first: dict[str, NodeFailure] = {}  # failure text -> the first node's failure
        for node in self.cluster.nodes:
            cached = table.get(node.name)
            if cached is not None and cached[0] == node.version:
                verdict = cached[1]
            else:
                verdict = evaluate_node(node, inits, apps, policy)
                table[node.name] = (node.version, verdict)
            failure = verdict.failure
            if failure is None:
                fitting.append((sign * verdict.score, node.name, verdict.score))
            else:
                failed.append((node.name, failure))
                text = failure.text
                if text in texts:
                    texts[text] += 1
                else:
                    texts[text] = 1
                    first[text] = failure
        # Many nodes fail the same way: sum each distinct text's counts once, times its nodes.
        reasons: dict[str, int] = {}
        for text, nodes in texts.items():
            for reason, n in first[text].reasons.items():
                reasons[reason] = reasons.get(reason, 0) + n * nodes
        ranking = _order_nodes(fitting)
        decision = Decision(
            name=pod.name,
            namespace=pod.namespace,
            status=PENDING,
            policy=policy.as_dict(),
            node_ranking=ranking,
            node_failures=failed,
            reasons=reasons,
            warnings=[
                f"{where}: {message}" for where, messages in parsed.warnings().items() for message in messages
            ],
        )
        if ranking:
            node = self.cluster.node(ranking[0][0])
            decision.status = SCHEDULED
            decision.node = node.name
            decision.containers, decision.init_containers = self._explain(node, parsed)
        elif failed:
            decision.closest, decision.never = self.closest(parsed, [name for name, _ in failed])
        return decision

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
            rest_ranked, _ = ranking_order(rest, parsed.policy.sort_keys)
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
    def _devices(node: Node, grants: list[tuple[int, int, int]]) -> list[DeviceGrant]:
        return [
            DeviceGrant(uuid=node.cards[pos].uuid, memory=memory, cores=cores, index=node.cards[pos].index)
            for pos, memory, cores in grants
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
        node.touch()

    def schedule(self, pod: PodSpec) -> Decision:
        decision = self.decide(pod)
        self.assume(decision)
        return decision
