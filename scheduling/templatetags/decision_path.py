"""The decision path of one pod, drawn from a SPEC 9 pod object (an engine `Decision.as_dict`).

The Pod page, the Simulator and the admin's Decision page all render `{% pod_decision payload %}`,
so an operator reads one picture of the chain everywhere: the parsed chain, the cards each
filter removed, the ranking with the key that decided between neighbours, the chosen cards,
the node scores and, for a pod that waits, each node's reasons in words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from django import template

from scheduling.engine.reasons import explain

register = template.Library()

#: What each chain name does, in the words shown next to its chip.
CHAIN_WORDS = {
    "mutex": "only cards without tenants pass",
    "topology-aware": "picks among fitting cards by NVLink/PCIe pair scores",
    "binpack": "fuller card first (higher score)",
    "spread": "emptier card first (lower score)",
    "numa": "lower NUMA node first",
}

#: Why one card was removed, by the engine's `stage` (the SPEC 4 check that failed).
STAGE_WORDS = {
    "health": "card is unhealthy",
    "cordon": "card is cordoned",
    "type": "type excluded by use/nouse-gputype",
    "uuid": "UUID excluded by use/nouse-gpuuuid",
    "slots": "every vGPU slot is taken",
    "mutex": "has tenants and the chain has mutex",
    "memory": "not enough free memory",
    "cores": "not enough free cores",
    "exclusive": "has tenants and the container asks for the whole card",
    "compute": "all compute is taken",
    "numa": "no NUMA node holds all the cards asked (numa-bind)",
}

_NODE_REASON = re.compile(r"(\d+)/(\d+) (\w+)")


@dataclass
class ReasonLine:
    """One `N/M Reason` of a node's failure text, with the operator's words for it."""

    node: str
    n: int
    m: int
    code: str
    mutex: bool = False  # the pod's chain has mutex: it, not a whole-card ask, removed busy cards

    @property
    def words(self) -> str:
        return explain(self.code, self.n, self.m, self.node, self.mutex)


def node_reasons(node: str, text: str, mutex: bool = False) -> list[ReasonLine]:
    """Parse `2/4 CardInsufficientMemory, 2/4 ExclusiveDeviceAllocateConflict` for one node."""
    return [ReasonLine(node, int(n), int(m), code, mutex) for n, m, code in _NODE_REASON.findall(text or "")]


#: Reasons that only say the pod itself excluded the card; listed after the ones about capacity.
SELF_EXCLUDED = {"CardTypeMismatch", "CardUuidMismatch"}


def waiting_reasons(payload: dict) -> list[ReasonLine]:
    """Every failed node's reasons: first what blocks the cards the pod could use (capacity,
    mutex, health), then the cards it excluded itself; by node name within each (JSON objects
    lose their order in PostgreSQL)."""
    failed = payload.get("failed_nodes") or {}
    mutex = "mutex" in ((payload.get("policy") or {}).get("filters") or [])
    lines = [line for node in sorted(failed) for line in node_reasons(node, failed[node], mutex)]
    return sorted(lines, key=lambda line: line.code in SELF_EXCLUDED)


@dataclass
class ChainStep:
    name: str
    role: str  # "filter", "sort key", "ignored", "default", "tiebreak"
    words: str


def chain_steps(policy: dict) -> list[ChainStep]:
    """The chain as parsed, in written order, then the effective sort keys and the index tiebreak."""
    filters = set(policy.get("filters") or [])
    steps = []
    for name in policy.get("gpu") or []:
        role = "filter" if name in filters else "sort key"
        steps.append(ChainStep(name, role, CHAIN_WORDS.get(name, "")))
    written_keys = [name for name in policy.get("gpu") or [] if name not in filters]
    if not written_keys:
        for name in policy.get("sort_keys") or ["spread"]:
            steps.append(ChainStep(name, "default", f"no sort key written: {CHAIN_WORDS.get(name, '')}"))
    steps.append(ChainStep("index", "tiebreak", "equal on every key: lower card index first"))
    return steps


def _key_value(key: str, card: dict) -> float:
    return card.get("numa", 0) if key == "numa" else card.get("score", 0.0)


def _fmt(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def _comparison(prev: dict, card: dict, decided_by: str | None, sort_keys: list[str]) -> tuple[list, str]:
    """(keys tied between the two neighbours, the sentence saying what put `card` after `prev`)."""
    if decided_by is None:
        return [], ""
    tied = []
    for key in sort_keys:
        if key == decided_by:
            break
        tied.append(key)
    if decided_by == "index":
        tied = list(sort_keys)
        values = ", ".join(f"{key} {_fmt(_key_value(key, card))}" for key in tied)
        return tied, f"tied on {values}; index {prev.get('index')} before {card.get('index')}"
    a, b = _key_value(decided_by, prev), _key_value(decided_by, card)
    order = {"binpack": "higher score first", "spread": "lower score first", "numa": "lower NUMA first"}
    lead = f"tied on {', '.join(tied)}; " if tied else ""
    return tied, f"{lead}{decided_by}: {_fmt(a)} before {_fmt(b)} ({order.get(decided_by, '')})"


@dataclass
class RankedCard:
    rank: int
    card: dict
    decided_by: str | None
    tied_on: list
    comparison: str
    bar: float  # 0-100, score against the node's highest card score


@dataclass
class RemovedCard:
    card: dict
    words: str
    bar: float


@dataclass
class ContainerPath:
    name: str
    devices: list
    ranked: list[RankedCard] = field(default_factory=list)
    removed: list[RemovedCard] = field(default_factory=list)
    removed_by_stage: list[tuple[str, list[str]]] = field(default_factory=list)
    picked_by_topology: bool = False


def container_path(container: dict, policy: dict) -> ContainerPath:
    """Split the engine's card table into what the filters removed and how the rest was ranked."""
    cards = container.get("cards") or []
    sort_keys = policy.get("sort_keys") or ["spread"]
    top = max((abs(c.get("score") or 0.0) for c in cards), default=0.0) or 1.0
    path = ContainerPath(name=container.get("name", ""), devices=container.get("devices") or [])
    eligible = [c for c in cards if c.get("eligible")]
    prev = None
    for rank, card in enumerate(eligible, start=1):
        by = card.get("decided_by") if prev is not None else None
        tied, sentence = _comparison(prev, card, by, sort_keys) if prev is not None else ([], "")
        path.ranked.append(RankedCard(rank, card, by, tied, sentence, 100 * (card.get("score") or 0) / top))
        prev = card
    stages: dict[str, list[str]] = {}
    for card in sorted((c for c in cards if not c.get("eligible")), key=lambda c: c.get("index", 0)):
        stage = card.get("stage") or ""
        path.removed.append(
            RemovedCard(card, STAGE_WORDS.get(stage, card.get("reason") or ""), 100 * (card.get("score") or 0) / top)
        )
        stages.setdefault(stage, []).append(card.get("uuid", ""))
    path.removed_by_stage = list(stages.items())
    chosen_ranks = [r.rank for r in path.ranked if r.card.get("chosen")]
    path.picked_by_topology = "topology-aware" in (policy.get("filters") or []) and chosen_ranks != list(
        range(1, len(chosen_ranks) + 1)
    )
    return path


@dataclass
class NodeBar:
    node: str
    score: float
    chosen: bool


def node_bars(payload: dict) -> list[NodeBar]:
    """Node scores in policy order (binpack: high first; spread: low first; ties by name).

    Scores in a payload are rounded to 6 decimals, so equal scores compare equal here.
    """
    scores = payload.get("node_scores") or {}
    sign = 1.0 if (payload.get("policy") or {}).get("node") == "spread" else -1.0
    ordered = sorted(scores.items(), key=lambda item: (sign * item[1], item[0]))
    return [NodeBar(node, score, node == payload.get("node")) for node, score in ordered]


def decision_path(payload: dict) -> dict:
    """Everything `includes/pod_decision.html` draws, computed once from the payload."""
    payload = payload or {}
    policy = payload.get("policy") or {}
    status = payload.get("status") or "unknown"
    return {
        "pod": payload,
        "status": status,
        "policy": policy,
        "steps": chain_steps(policy) if policy else [],
        "containers": [container_path(c, policy) for c in payload.get("containers") or []],
        "node_rows": [(bar.node, bar.score, bar.chosen) for bar in node_bars(payload)],
        "waiting": waiting_reasons(payload),
        "reasons": sorted((payload.get("reasons") or {}).items()),
        "more_failed": max(0, (payload.get("nodes_failed") or 0) - len(payload.get("failed_nodes") or {})),
        "more_fit": max(0, (payload.get("nodes_fit") or 0) - len(payload.get("node_scores") or {})),
    }


@register.inclusion_tag("scheduling/includes/pod_decision.html")
def pod_decision(payload, heading=True):
    """`{% pod_decision payload %}`: one pod's decision path, the same on every page."""
    context = decision_path(payload if isinstance(payload, dict) else {})
    context["heading"] = heading
    return context


@register.filter
def reason_lines(payload) -> list[ReasonLine]:
    """Failed-node reasons in words for a pending pod's list row."""
    return waiting_reasons(payload if isinstance(payload, dict) else {})


@register.filter
def stage_words(stage: str) -> str:
    return STAGE_WORDS.get(stage or "", "")
