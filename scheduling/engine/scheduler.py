"""Deciding: card fit (SPEC 4), card score (5), chain selection (6), node choice (7).

`Scheduler` holds one cluster snapshot. Node verdicts are cached per pod *shape* (what
the pod asks and how it ranks) and per node version, so a stream of similar pods costs
one node re-evaluation per placement instead of a sweep over every card.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from . import reasons as R
from .annotations import (
    GPU_POLICY,
    NODE_POLICIES,
    NODE_POLICY,
    WEIGHTS,
    PodPolicy,
    parse_chain,
    parse_policy,
    parse_weights,
)
from .chain import FILTERS, TOLERANCE, rank, ranking_order
from .decision import PENDING, REJECTED, SCHEDULED, CardVerdict, ContainerPlacement, Decision, DeviceGrant
from .errors import PodInvalid
from .model import Card, Cluster, ClusterConfig, Node, PodSpec
from .requests import ContainerAsk, parse_containers


@dataclass(slots=True)
class CardEval:
    """One card checked for one container: the first failed check, and the predicted score."""

    card: Card
    position: int
    score: float
    memory: int
    reason: str | None
    stage: str | None

    @property
    def uuid(self) -> str:
        return self.card.uuid

    @property
    def index(self) -> int:
        return self.card.index

    @property
    def numa(self) -> int:
        return self.card.numa


def card_score(card: Card, ask_memory: int, ask_cores: int, used: tuple[int, int, int], weights) -> float:
    """SPEC 5: 10 x weighted predicted utilization after one more vGPU of this ask on the card."""
    used_slots, used_memory, used_cores = used
    score = 0.0
    if card.slots:
        score += weights.slot * (1 + used_slots) / card.slots
    if card.cores:
        score += weights.core * (ask_cores + used_cores) / card.cores
    if card.memory:
        score += weights.memory * (ask_memory + used_memory) / card.memory
    return 10 * score


def check_card(card: Card, ask: ContainerAsk, memory: int, policy: PodPolicy, used) -> tuple[str, str] | None:
    """SPEC 4 checks 1-10 in order; the first failure as (reason, stage), or None if the card fits."""
    used_slots, used_memory, used_cores = used
    if not card.health:
        return R.CARD_NOT_HEALTH, "health"
    if card.cordoned:
        return R.CARD_CORDONED, "cordon"
    if policy.use_types or policy.nouse_types:
        card_type = card.type.lower()
        if policy.use_types and not any(t in card_type for t in policy.use_types):
            return R.CARD_TYPE_MISMATCH, "type"
        if any(t in card_type for t in policy.nouse_types):
            return R.CARD_TYPE_MISMATCH, "type"
    if (policy.use_uuids and card.uuid not in policy.use_uuids) or card.uuid in policy.nouse_uuids:
        return R.CARD_UUID_MISMATCH, "uuid"
    if used_slots >= card.slots:
        return R.CARD_SLOTS_EXHAUSTED, "slots"
    if policy.mutex and FILTERS["mutex"].rejects(used_slots):
        return R.EXCLUSIVE_CONFLICT, "mutex"
    if card.memory - used_memory < memory:
        return R.CARD_INSUFFICIENT_MEMORY, "memory"
    if card.cores - used_cores < ask.cores:
        return R.CARD_INSUFFICIENT_CORE, "cores"
    if ask.cores == 100 and used_slots > 0:
        return R.EXCLUSIVE_CONFLICT, "exclusive"
    if ask.cores == 0 and card.cores > 0 and used_cores >= card.cores:
        return R.CARD_COMPUTE_EXHAUSTED, "compute"
    return None


@dataclass(slots=True)
class ContainerVerdict:
    evals: list[CardEval]
    chosen: list[CardEval]
    counts: dict[str, int]
    ranked: list[CardEval]
    decided_by: list[str | None]

    @property
    def fits(self) -> bool:
        return bool(self.chosen)


def evaluate_container(
    node: Node,
    ask: ContainerAsk,
    policy: PodPolicy,
    overlay: list[list[int]],
    explain: bool = False,
    need_choice: bool = True,
) -> ContainerVerdict:
    """Check every card (so the reason counts are complete), then let the chain pick `ask.count`.

    With `explain`, every card's evaluation is kept and the ranking records which key
    decided between neighbours; without it only what the choice needs is built.
    """
    cards = node.cards
    if len(cards) < ask.count:
        return ContainerVerdict([], [], {R.NODE_INSUFFICIENT_DEVICE: len(cards)}, [], [])
    weights = policy.weights
    fixed_memory, percentage, cores = ask.memory, ask.memory_percentage, ask.cores
    evals: list[CardEval] = []
    fitting: list[CardEval] = []
    counts: dict[str, int] = {}
    for position, card in enumerate(cards):
        extra = overlay[position]
        used = (card.used_slots + extra[0], card.used_memory + extra[1], card.used_cores + extra[2])
        memory = fixed_memory if fixed_memory is not None else card.memory * percentage // 100
        failed = check_card(card, ask, memory, policy, used)
        if failed is None:
            entry = CardEval(
                card, position, card_score(card, memory, cores, used, weights), memory, None, None
            )
            fitting.append(entry)
        else:
            counts[failed[0]] = counts.get(failed[0], 0) + 1
            if not explain:
                continue
            entry = CardEval(card, position, card_score(card, memory, cores, used, weights), memory, *failed)
        if explain:
            evals.append(entry)

    if policy.numa_bind and fitting:
        per_numa: dict[int, int] = {}
        for entry in fitting:
            per_numa[entry.card.numa] = per_numa.get(entry.card.numa, 0) + 1
        if max(per_numa.values()) < ask.count:
            for entry in fitting:
                entry.reason, entry.stage = R.NUMA_NOT_FIT, "numa"
            counts[R.NUMA_NOT_FIT] = len(fitting)
            fitting = []

    if len(fitting) < ask.count:
        if fitting:
            counts[R.ALLOCATED_INSUFFICIENT] = len(fitting)
        return ContainerVerdict(evals, [], counts, [], [])

    if not need_choice and not explain and len({entry.memory for entry in fitting}) == 1:
        # Every fitting card would take the same MiB, so which ones the chain picks cannot
        # change the node score: stand-ins suffice, the chosen node is re-explained anyway.
        return ContainerVerdict(evals, fitting[: ask.count], counts, [], [])
    if explain:
        ranked, decided_by = ranking_order(fitting, policy.sort_keys)
    else:
        ranked, decided_by = rank(fitting, policy.sort_keys), []
    candidates = ranked
    if policy.numa_bind:
        per_numa = {}
        for entry in ranked:
            per_numa[entry.card.numa] = per_numa.get(entry.card.numa, 0) + 1
        numa = next(entry.card.numa for entry in ranked if per_numa[entry.card.numa] >= ask.count)
        candidates = [entry for entry in ranked if entry.card.numa == numa]
    if policy.topology_aware:
        matrix = node.pair_matrix
        chosen = FILTERS["topology-aware"].select(
            candidates, ask.count, lambda a, b: matrix[a.position][b.position]
        )
    else:
        chosen = candidates[: ask.count]
    return ContainerVerdict(evals, chosen, counts, ranked, decided_by)


def failure_text(counts: dict[str, int], examined: int) -> str:
    """`N/M Reason, ...` sorted by reason code."""
    return ", ".join(f"{counts[reason]}/{examined} {reason}" for reason in sorted(counts))


@dataclass(slots=True)
class NodeVerdict:
    """A pod on one node: fits with a score and grants, or fails with per-reason counts."""

    fits: bool
    score: float = 0.0
    counts: dict | None = None
    text: str = ""
    # per app container: list of (position, memory, cores), or None (no GPU); only kept
    # when the cards were really chosen (an explaining or multi-container evaluation)
    grants: list | None = None
    containers: list | None = None  # per app container: ContainerVerdict (or None), kept for explaining


def node_score(node: Node, overlay: list[list[int]]) -> float:
    """SPEC 7: 10 x predicted utilization of the node's cards after the placement."""
    slots = cores = memory = 0
    used_slots = used_cores = used_memory = 0
    for card, extra in zip(node.cards, overlay, strict=True):
        slots += card.slots
        cores += card.cores
        memory += card.memory
        used_slots += card.used_slots + extra[0]
        used_memory += card.used_memory + extra[1]
        used_cores += card.used_cores + extra[2]
    score = 0.0
    if slots:
        score += used_slots / slots
    if cores:
        score += used_cores / cores
    if memory:
        score += used_memory / memory
    return 10 * score


def evaluate_node(
    node: Node,
    inits: list[ContainerAsk],
    apps: list[ContainerAsk | None],
    policy: PodPolicy,
    explain: bool = False,
) -> NodeVerdict:
    """Init containers one at a time against the node as it is, then the app containers
    accumulating usage; the first container that does not fit gives the node's text."""
    examined = len(node.cards)
    if not node.ready:
        counts = {R.NODE_NOT_READY: examined}
        return NodeVerdict(False, counts=counts, text=failure_text(counts, examined))
    empty = [[0, 0, 0] for _ in node.cards]
    for ask in inits:
        verdict = evaluate_container(node, ask, policy, empty)
        if not verdict.fits:
            return NodeVerdict(False, counts=verdict.counts, text=failure_text(verdict.counts, examined))
    overlay = [[0, 0, 0] for _ in node.cards]
    grants: list = []
    containers: list = []
    # With one GPU container, only its count and asks matter to the score, not its cards.
    need_choice = explain or sum(ask is not None for ask in apps) > 1
    for ask in apps:
        if ask is None:
            grants.append(None)
            containers.append(None)
            continue
        verdict = evaluate_container(node, ask, policy, overlay, explain, need_choice)
        if not verdict.fits:
            return NodeVerdict(False, counts=verdict.counts, text=failure_text(verdict.counts, examined))
        mine = []
        for entry in verdict.chosen:
            extra = overlay[entry.position]
            extra[0] += 1
            extra[1] += entry.memory
            extra[2] += ask.cores
            mine.append((entry.position, entry.memory, ask.cores))
        grants.append(mine)
        containers.append(verdict if explain else None)
    return NodeVerdict(
        True,
        score=node_score(node, overlay),
        grants=grants if need_choice else None,
        containers=containers if explain else None,
    )


def describe_policy(annotations: dict, config: ClusterConfig) -> dict:
    """The policy view of a pod whose annotations do not parse: as much as can be read."""
    annotations = annotations if isinstance(annotations, dict) else {}
    node_value = annotations.get(NODE_POLICY)
    node = node_value.strip().lower() if isinstance(node_value, str) else None
    chain_value = annotations.get(GPU_POLICY, config.gpu_scheduler_policy)
    chain, filters, sort_keys, ignored = parse_chain(chain_value if isinstance(chain_value, str) else "")
    try:
        weights = parse_weights(annotations[WEIGHTS]).as_dict() if WEIGHTS in annotations else None
    except PodInvalid:
        weights = None
    return {
        "node": node if node in NODE_POLICIES else config.node_scheduler_policy,
        "gpu": list(chain),
        "filters": list(filters),
        "sort_keys": list(sort_keys),
        "ignored": list(ignored),
        "weights": weights,
        "node_ignored": None if node in NODE_POLICIES or node_value is None else node_value,
        "numa_bind": False,
    }


@dataclass(frozen=True, slots=True)
class ParsedPod:
    """A pod read and validated: policy plus per-container asks."""

    policy: PodPolicy
    inits: tuple[ContainerAsk, ...]
    apps: tuple[ContainerAsk | None, ...]
    app_names: tuple[str, ...]

    @property
    def shape(self) -> tuple:
        """What decides a node verdict: the asks (without names) and how cards are filtered and ranked."""
        p = self.policy
        strip = lambda a: None if a is None else (a.count, a.memory, a.memory_percentage, a.cores)  # noqa: E731
        return (
            tuple(strip(a) for a in self.inits),
            tuple(strip(a) for a in self.apps),
            p.filters,
            p.sort_keys,
            p.weights,
            p.use_uuids,
            p.nouse_uuids,
            p.use_types,
            p.nouse_types,
            p.numa_bind,
        )

    @property
    def fit_shape(self) -> tuple:
        """The shape without what only ranks cards (sort keys, weights, topology): enough when
        which cards the chain picks cannot change the node's verdict (see `Scheduler`)."""
        p = self.policy
        strip = lambda a: None if a is None else (a.count, a.memory, a.memory_percentage, a.cores)  # noqa: E731
        return (
            "fit",
            tuple(strip(a) for a in self.inits),
            tuple(strip(a) for a in self.apps),
            p.mutex,
            p.use_uuids,
            p.nouse_uuids,
            p.use_types,
            p.nouse_types,
            p.numa_bind,
        )


def parse_pod(pod: PodSpec, config: ClusterConfig) -> ParsedPod:
    """Validate a pod (SPEC 2, 3, 5). Raises PodInvalid naming the field; also for a pod asking no GPU."""
    if not isinstance(pod.containers, list) or not pod.containers:
        raise PodInvalid("containers", "a pod needs at least one container")
    policy = parse_policy(pod.annotations, config)
    apps = parse_containers(pod.containers, "containers", config.resources)
    inits = [a for a in parse_containers(pod.init_containers, "initContainers", config.resources) if a]
    if not inits and not any(apps):
        raise PodInvalid(
            "containers", "asks for no GPU: none of its containers asks for nvidia.com resources"
        )
    names = tuple((c.get("name") or "") if isinstance(c, dict) else "" for c in pod.containers)
    return ParsedPod(policy, tuple(inits), tuple(apps), names)


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
        table = self._verdicts.get(shape)
        if table is None:
            table = self._verdicts[shape] = {}
            if len(self._verdicts) > self._cached_shapes:
                self._verdicts.popitem(last=False)
        else:
            self._verdicts.move_to_end(shape)
        return table

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
                duration_ms=(time.perf_counter() - started) * 1000,
            )
            return decision, None
        decision = self._decide_parsed(pod, parsed)
        decision.duration_ms = (time.perf_counter() - started) * 1000
        return decision, parsed

    def _decide_parsed(self, pod: PodSpec, parsed: ParsedPod) -> Decision:
        policy = parsed.policy
        table = self._verdicts_for(self._shape_key(parsed))
        inits, apps = list(parsed.inits), list(parsed.apps)
        sign = -1.0 if policy.node_policy == "binpack" else 1.0
        fitting: list[tuple[float, str, float]] = []
        failed: list[tuple[str, str]] = []
        texts: dict[str, int] = {}  # failure text -> how many nodes gave it
        counts_of: dict[str, dict[str, int]] = {}
        for node in self.cluster.nodes:
            cached = table.get(node.name)
            if cached is not None and cached[0] == node.version:
                verdict = cached[1]
            else:
                verdict = evaluate_node(node, inits, apps, policy)
                table[node.name] = (node.version, verdict)
            if verdict.fits:
                fitting.append((sign * verdict.score, node.name, verdict.score))
            else:
                text = verdict.text
                failed.append((node.name, text))
                if text in texts:
                    texts[text] += 1
                else:
                    texts[text] = 1
                    counts_of[text] = verdict.counts
        # Many nodes fail the same way: sum each distinct text's counts once, times its nodes.
        reasons: dict[str, int] = {}
        for text, nodes in texts.items():
            for reason, n in counts_of[text].items():
                reasons[reason] = reasons.get(reason, 0) + n * nodes
        ranking = _order_nodes(fitting)
        decision = Decision(
            name=pod.name,
            namespace=pod.namespace,
            status=PENDING,
            policy=policy.as_dict(),
            node_ranking=ranking,
            failed_nodes=failed,
            reasons=reasons,
        )
        if ranking:
            node = self.cluster.node(ranking[0][0])
            decision.status = SCHEDULED
            decision.node = node.name
            decision.containers = self._explain(node, parsed)
        return decision

    def _explain(self, node: Node, parsed: ParsedPod) -> list[ContainerPlacement]:
        """The chosen node's card tables, per app container, in the order the chain ranked them."""
        verdict = evaluate_node(node, list(parsed.inits), list(parsed.apps), parsed.policy, explain=True)
        placements = []
        for name, grants, container in zip(parsed.app_names, verdict.grants, verdict.containers, strict=True):
            if grants is None:
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
            devices = [
                DeviceGrant(
                    uuid=node.cards[pos].uuid, memory=memory, cores=cores, index=node.cards[pos].index
                )
                for pos, memory, cores in grants
            ]
            placements.append(ContainerPlacement(name=name, devices=devices, cards=cards))
        return placements

    def assume(self, decision: Decision) -> None:
        """Apply a scheduled decision's grants to the snapshot, so later pods see them."""
        if decision.status != SCHEDULED:
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

    def schedule(self, pod: PodSpec) -> Decision:
        decision = self.decide(pod)
        self.assume(decision)
        return decision
