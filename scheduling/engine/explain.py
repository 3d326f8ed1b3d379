"""Operator words for a Decision: the one reader of a SPEC 9 pod object (`Decision.as_dict`).

Pages, the admin, the API, the log lines and the Kubernetes events all read a stored or
fresh decision through these functions, so each face shows the same chain with the same
defaults, the same reasons in the same words and the same node order. Pure: dicts in,
dataclasses and strings out; reasons travel as data (`failed_reasons`, `node_order`) and
become text only here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import reasons as R
from .chain import DEFAULT_SORT_KEYS, FILTERS, SORT_KEYS
from .chain import reason_words as filter_reason_words
from .chain import stage_words as filter_stage_words
from .decision import Decision, verdict
from .families.mig import shortfall_words
from .triage import Triage, never_fact

Payload = Mapping[str, Any]

#: SPEC 6: a chain that names filters only (or nothing) ranks by spread.

#: What each chain name does, in the words shown next to its chip (each class carries its own).
CHAIN_WORDS = {
    **{name: key.words for name, key in SORT_KEYS.items()},
    **{name: f.words for name, f in FILTERS.items() if f.in_chain},
}

#: Which way each sort key ranks, for the sentence saying what put one card after another.
KEY_ORDER = {"binpack": "higher score first", "spread": "lower score first", "numa": "lower NUMA first"}

#: Why one card was removed, by the engine's `stage` (the SPEC 4 check that failed); a filter's
#: card hook brings its own (`Filter.stage_words`, read by `stage_words`).
STAGE_WORDS = {
    "health": "card is unhealthy",
    "cordon": "card is cordoned",
    "type": "type excluded by use/nouse-gputype",
    "mode": "mode not asked by nvidia.com/vgpu-mode",
    "uuid": "UUID excluded by use/nouse-gpuuuid",
    "slots": "every vGPU slot is taken",
    "memory": "not enough free memory",
    "cores": "not enough free cores",
    "exclusive": "has tenants and the container asks for the whole card",
    "compute": "all compute is taken",
    "mig": "no free MIG slices hold a profile big enough",
    "numa": "no NUMA node holds all the cards asked (numa-bind)",
}

#: Words an operator understands, for pages and events. `{n}`/`{m}` are counts, `{node}` the node.
EXPLANATIONS = {
    R.CARD_NOT_HEALTH: "{n} of {m} cards on {node} are unhealthy",
    R.CARD_CORDONED: "{n} of {m} cards on {node} are cordoned",
    R.CARD_TYPE_MISMATCH: "{n} of {m} cards on {node} are not of the type the pod asks for (use/nouse-gputype)",
    R.CARD_MODE_MISMATCH: (
        "{n} of {m} cards on {node} run in a mode the pod does not ask for (nvidia.com/vgpu-mode)"
    ),
    R.CARD_UUID_MISMATCH: "{n} of {m} cards on {node} are excluded by UUID (use/nouse-gpuuuid)",
    R.CARD_SLOTS_EXHAUSTED: "{n} of {m} cards on {node} have every vGPU slot taken",
    R.EXCLUSIVE_CONFLICT: (
        "{n} of {m} cards on {node} already have tenants and the pod asks for whole cards (100 cores)"
    ),
    R.CARD_INSUFFICIENT_MEMORY: "{n} of {m} cards on {node} lack the free memory asked",
    R.CARD_INSUFFICIENT_CORE: "{n} of {m} cards on {node} lack the free cores asked",
    R.CARD_COMPUTE_EXHAUSTED: "{n} of {m} cards on {node} have all compute taken",
    R.CARD_MIG_INFEASIBLE: (
        "{n} of {m} cards on {node} are MIG cards whose free slices hold no instance big enough"
    ),
    R.NUMA_NOT_FIT: "{n} of {m} cards on {node} fit, but no NUMA node holds all the cards asked (numa-bind)",
    R.NODE_INSUFFICIENT_DEVICE: "{node} has fewer cards ({m}) than a container asks for",
    R.ALLOCATED_INSUFFICIENT: "only {n} of {m} cards on {node} fit, fewer than asked",
    R.NODE_NOT_READY: "{node} is not ready (its agent stopped reporting)",
    R.NODE_RESERVED: "{node} is held this cycle for a job that has waited longer (ready, reserved)",
    # SPEC 10: kube-scheduler's filters; a node refused by one counts once, its cards unchecked
    R.NODE_UNSCHEDULABLE: "{node} is cordoned (spec.unschedulable) and the pod does not tolerate it",
    R.NODE_NAME: "{node} is not the node the pod names (nodeName)",
    R.TAINT_TOLERATION: "{node} has a NoSchedule/NoExecute taint the pod does not tolerate",
    R.NODE_AFFINITY: "{node} does not match the pod's node selector or required node affinity",
    R.NODE_PORTS: "{node} already has a pod on a host port the pod asks for",
    R.NODE_RESOURCES_FIT: "{node} lacks the cpu, memory, pod slot or extended resource the pod requests",
    R.VOLUME_BINDING: "{node} cannot mount one of the pod's persistent volume claims",
    R.POD_TOPOLOGY_SPREAD: "{node} would break the pod's topology spread constraints (maxSkew)",
    R.INTER_POD_AFFINITY: "{node} breaks a required pod affinity or anti-affinity rule",
    R.SCHEDULING_GATED: "the pod has scheduling gates: it is not tried until they are removed",
}

#: Check 6 (mutex) runs before check 9 (whole-card ask), so with `mutex` in the chain every
#: ExclusiveDeviceAllocateConflict comes from mutex, and without it none does.
MUTEX_EXPLANATION = "{n} of {m} cards on {node} already have tenants (mutex)"

#: Reasons that only say the pod itself excluded the card; listed after the ones about capacity.
SELF_EXCLUDED = frozenset({R.CARD_TYPE_MISMATCH, R.CARD_MODE_MISMATCH, R.CARD_UUID_MISMATCH})


# --- The policy as parsed ----------------------------------------------------------------


def policy_of(payload: Payload | None) -> dict:
    """The pod's parsed policy (SPEC 9 `policy`); empty for a pod rejected before parsing."""
    return dict((payload or {}).get("policy") or {})


def chain_of(policy: Payload | None) -> list[str]:
    """The GPU chain as parsed, in written order (unknown names dropped); empty if none."""
    return list((policy or {}).get("gpu") or [])


def filters_of(policy: Payload | None) -> list[str]:
    return list((policy or {}).get("filters") or [])


def sort_keys_of(policy: Payload | None) -> list[str]:
    """The keys that rank the cards, before the index tiebreak: the written ones, else spread."""
    return list((policy or {}).get("sort_keys") or DEFAULT_SORT_KEYS)


def has_mutex(policy: Payload | None) -> bool:
    """Whether the chain has a filter refusing cards with tenants (`Filter.empties_card`: mutex)."""
    return any(FILTERS[name].empties_card for name in filters_of(policy) if name in FILTERS)


def stage_words(stage: str | None, otherwise: str = "") -> str:
    """Why one card was removed at `stage`: SPEC 4's words, else its filter's; else `otherwise`."""
    return STAGE_WORDS.get(stage or "") or filter_stage_words(stage or "") or otherwise


# --- Why nodes did not fit ---------------------------------------------------------------


def reason_words(code: str, n: int, m: int, node: str, mutex: bool = False) -> str:
    """Operator words for `n` of the `m` cards on `node` failing with `code`; `mutex`: the
    pod's chain has mutex, so a busy-card conflict comes from it, not from a whole-card ask."""
    if code == R.EXCLUSIVE_CONFLICT and mutex:
        return MUTEX_EXPLANATION.format(n=n, m=m, node=node)
    template = EXPLANATIONS.get(code) or filter_reason_words(code)
    if not template:
        return f"{n} of {m} cards on {node}: {code}"
    return template.format(n=n, m=m, node=node)


@dataclass
class ReasonLine:
    """One reason of one failed node (`n` of its `m` cards), with the operator's words for it."""

    node: str
    n: int
    m: int
    code: str
    mutex: bool = False

    @property
    def words(self) -> str:
        return reason_words(self.code, self.n, self.m, self.node, self.mutex)


def node_reasons(node: str, failed: Payload, mutex: bool = False) -> list[ReasonLine]:
    """One failed node's `{"cards": M, "reasons": {code: n}}`, by reason code."""
    counts = failed.get("reasons") or {}
    cards = failed.get("cards") or 0
    return [ReasonLine(node, counts[code], cards, code, mutex) for code in sorted(counts)]


def waiting_reasons(payload: Payload) -> list[ReasonLine]:
    """Every failed node's reasons: first what blocks the cards the pod could use (capacity,
    mutex, health), then the cards it excluded itself; by node name within each (JSON objects
    lose their order in PostgreSQL)."""
    failed = payload.get("failed_reasons") or {}
    mutex = has_mutex(payload.get("policy"))
    lines = [line for node in sorted(failed) for line in node_reasons(node, failed[node], mutex)]
    return sorted(lines, key=lambda line: line.code in SELF_EXCLUDED)


# --- The chain, step by step ---------------------------------------------------------------


@dataclass
class ChainStep:
    name: str
    role: str  # "filter", "sort key", "default", "tiebreak"
    words: str


def chain_steps(policy: Payload) -> list[ChainStep]:
    """The chain as parsed, in written order, then the effective sort keys and the index tiebreak."""
    filters = set(filters_of(policy))
    chain = chain_of(policy)
    steps = [
        ChainStep(name, "filter" if name in filters else "sort key", CHAIN_WORDS.get(name, ""))
        for name in chain
    ]
    if all(name in filters for name in chain):
        for name in sort_keys_of(policy):
            steps.append(ChainStep(name, "default", f"no sort key written: {CHAIN_WORDS.get(name, '')}"))
    steps.append(ChainStep("index", "tiebreak", "equal on every key: lower card index first"))
    return steps


def _key_value(key: str, card: Payload) -> float:
    return card.get("numa", 0) if key == "numa" else card.get("score", 0.0)


def _fmt(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def comparison(
    prev: Payload, card: Payload, decided_by: str | None, sort_keys: list[str]
) -> tuple[list[str], str]:
    """(keys tied between two ranked neighbours, the sentence saying what put `card` after `prev`)."""
    if decided_by is None:
        return [], ""
    if decided_by == "index":
        values = ", ".join(f"{key} {_fmt(_key_value(key, card))}" for key in sort_keys)
        return list(sort_keys), f"tied on {values}; index {prev.get('index')} before {card.get('index')}"
    tied = []
    for key in sort_keys:
        if key == decided_by:
            break
        tied.append(key)
    a, b = _key_value(decided_by, prev), _key_value(decided_by, card)
    lead = f"tied on {', '.join(tied)}; " if tied else ""
    return tied, f"{lead}{decided_by}: {_fmt(a)} before {_fmt(b)} ({KEY_ORDER.get(decided_by, '')})"


@dataclass
class RankedCard:
    rank: int
    card: dict
    decided_by: str | None
    tied_on: list[str]
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


def container_path(container: Payload, policy: Payload) -> ContainerPath:
    """Split the engine's card table into what the filters removed and how the rest was ranked."""
    cards = container.get("cards") or []
    sort_keys = sort_keys_of(policy)
    top = max((abs(c.get("score") or 0.0) for c in cards), default=0.0) or 1.0
    path = ContainerPath(name=container.get("name", ""), devices=container.get("devices") or [])
    eligible = [c for c in cards if c.get("eligible")]
    for rank, card in enumerate(eligible, start=1):
        by: str | None = None
        tied: list[str] = []
        sentence = ""
        if rank > 1:
            by = card.get("decided_by")
            tied, sentence = comparison(eligible[rank - 2], card, by, sort_keys)
        path.ranked.append(RankedCard(rank, card, by, tied, sentence, 100 * (card.get("score") or 0) / top))
    stages: dict[str, list[str]] = {}
    for card in sorted((c for c in cards if not c.get("eligible")), key=lambda c: c.get("index", 0)):
        stage = card.get("stage") or ""
        words = stage_words(stage, card.get("reason") or "")
        path.removed.append(RemovedCard(card, words, 100 * (card.get("score") or 0) / top))
        stages.setdefault(stage, []).append(card.get("uuid", ""))
    path.removed_by_stage = list(stages.items())
    chosen_ranks = [r.rank for r in path.ranked if r.card.get("chosen")]
    shows_choice = any(FILTERS[name].shows_choice for name in filters_of(policy) if name in FILTERS)
    path.picked_by_topology = shows_choice and chosen_ranks != list(range(1, len(chosen_ranks) + 1))
    return path


# --- Nodes ---------------------------------------------------------------------------------


@dataclass
class NodeBar:
    node: str
    score: float
    chosen: bool


def node_bars(payload: Payload) -> list[NodeBar]:
    """The fitting nodes' scores in the engine's policy order (`node_order`, best first)."""
    chosen = payload.get("node")
    return [NodeBar(node, score, node == chosen) for node, score in payload.get("node_order") or []]


# --- The closest nodes of a pending pod, and what would make it fit ----------------------

#: Tenants of one card, as the pages and events name them: (pod `ns/name`, MiB, cores).
Tenants = Mapping[str, list[tuple[str, int, int]]]

#: How a card that a close node's table shows is coloured: by the stage that removed it.
CARD_CLASSES = {
    None: "fits",
    "health": "unavailable",
    "cordon": "unavailable",
    "type": "excluded",
    "mode": "excluded",
    "uuid": "excluded",
    "numa": "numa",
}

#: The stages where the pod's own ask (use/nouse-gputype, vgpu-mode, use/nouse-gpuuuid) refused a card.
ASK_STAGES = frozenset({"type", "mode", "uuid"})

#: What an unavailable card is, for the `blocked` hint.
EXCLUDED_WORDS = {
    "health": "unhealthy",
    "cordon": "cordoned",
    "type": "of another type",
    "mode": "of another mode",
    "uuid": "excluded by UUID",
}


def _mib(value: int | None) -> str:
    return f"{value or 0:,} MiB"


def tenants_words(uuid: str, tenants: Tenants | None) -> str:
    """` (tenants: ns/p1 1,000 MiB, ns/p2 1,500 MiB)`, or nothing when none are known."""
    held = (tenants or {}).get(uuid) or []
    if not held:
        return ""
    return " (tenants: " + ", ".join(f"{pod} {_mib(memory)}" for pod, memory, _ in held) + ")"


def _card_needs(card: Payload) -> str:
    needs = []
    if card.get("tenants_needed"):
        stage = card.get("stage")
        needs.append("no tenants" + (" (whole-card ask)" if stage == "exclusive" else f" ({stage})"))
    if card.get("slots"):
        needs.append("a free vGPU slot")
    if card.get("memory"):
        needs.append(f"{_mib(card.get('memory'))} more free")
    if card.get("cores"):
        needs.append(f"{card.get('cores')}% more cores free")
    return " and ".join(needs) or "its tenants' usage freed"


def never_words(hint: Payload, where: str) -> str:
    """Why a container never fits `where` (a node's name, or `this cluster`). Cluster-wide for
    a pod that narrows its cards by type, mode or UUID, the fact over the cards it lets in
    (`triage.never_fact`), not over cards it refuses."""
    why = hint.get("why")
    if where == "this cluster" and hint.get("scope") is not None:
        return f"{never_fact(hint)}: never fits here"
    count = hint.get("count") or 0
    if why == "memory":
        largest = hint.get("largest_memory") or 0
        on = "every card" if where == "this cluster" else f"every card on {where}"
        return f"gpumem {_mib(hint.get('memory'))} exceeds {on} (largest {_mib(largest)}): never fits here"
    if why == "cards":
        if where == "this cluster":
            return f"asks {count} cards, no node has more than {hint.get('most_cards') or 0}: never fits here"
        return f"{where} has {hint.get('cards')} cards, the container asks {count}: never fits here"
    if why == "numa":
        return f"{where}: no NUMA node has {count} cards that could take it (numa-bind): never fits here"
    if why == "combined":
        return f"{where}: no node could take every container at once: never fits here"
    if not hint.get("able"):
        return f"{where}: no card of the type, mode, UUID and capacity asked: never fits here"
    return (
        f"{where}: only {hint.get('able')} cards of the type, mode, UUID and capacity asked, "
        f"{count} needed: never fits here"
    )


def hint_words(hint: Payload, tenants: Tenants | None = None) -> str:
    """One hint of `closeness.hints` (the smallest change on one node) in plain words."""
    kind, node = hint.get("kind"), hint.get("node", "")
    if kind == "not-ready":
        return f"{node} is not ready: nothing fits there until its agent reports"
    if kind == "reserved":
        return f"{node} is held this cycle for job {hint.get('job')}: it takes other pods again next cycle"
    if kind == "never":
        return never_words(hint, node)
    if kind == "numa":
        return (
            f"{node}: fits {hint.get('fit')} of {hint.get('cards')} cards; numa-bind needs {hint.get('count')}"
            f" on one NUMA node, best has {hint.get('best')}"
        )
    if kind == "mutex":
        busy = (
            "every card has tenants"
            if hint.get("every")
            else f"{hint.get('busy')} of {hint.get('cards')} cards have tenants"
        )
        would = hint.get("would_fit") or 0
        return f"{node}: mutex: {busy}; {would} card{'s' if would != 1 else ''} would fit without mutex"
    if kind == "free":
        parts = [
            f"{card.get('uuid')} had {_card_needs(card)}{tenants_words(card.get('uuid', ''), tenants)}"
            for card in hint.get("cards") or []
        ]
        return f"{node}: fits if " + "; ".join(parts)
    if kind == "mig":
        parts = [f"{card.get('uuid')} {shortfall_words(card)}" for card in hint.get("cards") or []]
        return f"{node}: " + "; ".join(parts)
    if kind == "blocked":
        stages = hint.get("stages") or {}
        unavailable = ", ".join(
            f"{n} {EXCLUDED_WORDS.get(stage, stage)}" for stage, n in sorted(stages.items())
        )
        return (
            f"{node}: {hint.get('missing')} more card(s) needed and the rest are unavailable ({unavailable})"
        )
    return f"{node}: {kind}"


@dataclass
class CardCell:
    """One card of a close node's grid: the engine's row, its colour class and words."""

    card: dict
    css: str
    words: str


@dataclass
class CloseNode:
    """One node that came close, as the pod page, the API and the event show it."""

    node: str
    rank: int
    container: str
    count: int
    missing: int
    never: bool
    ready: bool
    cells: list[CardCell]
    hints: list[str]
    hint_data: list[dict]
    cards_total: int

    @property
    def excluded(self) -> bool:
        """The pod's own ask (type, mode, UUID) keeps out every card of the node shown: it is
        no hint of what would fit, and the pod page groups it as "excluded by your ask"."""
        return bool(self.cells) and all(cell.card.get("stage") in ASK_STAGES for cell in self.cells)


def card_words(card: Payload) -> str:
    """One card of a close node: its reason, or that it fits, with free against asked."""
    free, ask = card.get("free") or {}, card.get("ask") or {}
    facts = (
        f"free {free.get('slots', 0)} slots, {_mib(free.get('memory'))}, {free.get('cores', 0)}% cores;"
        f" asks {_mib(ask.get('memory'))}, {ask.get('cores', 0)}% cores"
    )
    stage = card.get("stage")
    if card.get("reason") is None:
        return f"fits alone ({facts})"
    return f"{stage_words(stage, card.get('reason') or '')} ({facts})"


def closest_nodes(payload: Payload | None, tenants: Tenants | None = None) -> list[CloseNode]:
    """A pending pod's closest nodes (`closest_nodes`, closest first) with card grids and hints."""
    out = []
    for rank, close in enumerate((payload or {}).get("closest_nodes") or [], start=1):
        cells = [
            CardCell(dict(card), CARD_CLASSES.get(card.get("stage"), "capacity"), card_words(card))
            for card in close.get("cards") or []
        ]
        hints = list(close.get("hints") or [])
        out.append(
            CloseNode(
                node=close.get("node", ""),
                rank=rank,
                container=close.get("container", ""),
                count=close.get("count") or 0,
                missing=close.get("missing") or 0,
                never=bool(close.get("never")),
                ready=bool(close.get("ready", True)),
                cells=cells,
                hints=[hint_words(hint, tenants) for hint in hints],
                hint_data=hints,
                cards_total=close.get("cards_total") or len(cells),
            )
        )
    return out


def unschedulable_words(payload: Payload | None) -> str | None:
    """For a pod no node could ever take (`unschedulable`), why, in words; else None."""
    payload = payload or {}
    if not payload.get("unschedulable"):
        return None
    return never_words(payload.get("unschedulable_reason") or {}, "this cluster")


def what_would_fit(payload: Payload | None, tenants: Tenants | None = None) -> list[str]:
    """What would make a pending pod fit, in words: cluster-wide first (it never fits), then
    the smallest change on each close node, closest first."""
    lines = []
    never = unschedulable_words(payload)
    if never:
        lines.append(never)
    for close in closest_nodes(payload, tenants):
        if close.excluded or (never and close.never):
            continue  # the pod's own ask keeps it out, or the cluster-wide line says it already
        lines.extend(close.hints)
    lines.extend(rule_hints(payload))
    return lines


#: How many node-rule hints `what_would_fit` says at most (the failed nodes may be thousands).
RULE_HINTS = 5


def rule_hints(payload: Payload | None) -> list[str]:
    """What would make nodes the node rules refused pass them (SPEC 10: "tolerate
    dedicated=team-b", "free 2 cpu on node-3"), from the kept failed nodes by name, each said
    once, at most `RULE_HINTS`."""
    failed = (payload or {}).get("failed_reasons") or {}
    said: list[str] = []
    for node in sorted(failed):
        for hint in failed[node].get("hints") or ():
            if hint not in said:
                said.append(hint)
                if len(said) >= RULE_HINTS:
                    return said
    return said


def card_tenant_uuids(payload: Payload | None) -> list[str]:
    """The cards of the close nodes whose tenants the words name (the `free` hints' cards)."""
    uuids: list[str] = []
    for close in (payload or {}).get("closest_nodes") or []:
        for hint in close.get("hints") or []:
            if hint.get("kind") == "free":
                uuids.extend(card.get("uuid", "") for card in hint.get("cards") or [])
    return list(dict.fromkeys(uuids))


def failed_scheduling_message(
    payload: Payload | None, summary: str, limit: int, tenants: Tenants | None = None
) -> str:
    """The Kubernetes `FailedScheduling` message: the one-line `summary` (kubectl-describe
    style, a sentence as kube-scheduler's), then as following sentences the closest node's
    card reasons (a node the pod's own ask keeps out is none), what would make it fit and the
    verdict class (`Never fits here.` said by the never line, `Waits for capacity.`), cut
    card by card so the whole stays within `limit` characters."""
    payload = payload or {}
    head = as_sentence(summary)
    never = unschedulable_words(payload)
    if never:
        head = f"{head} {as_sentence(never)}"
    close = [node for node in closest_nodes(payload, tenants) if not node.excluded]
    if not close or (never and not close[0].cells):
        return head[:limit]
    first = close[0]
    tail = "" if never else as_sentence("; ".join(first.hints))  # when it never fits, the hints repeat it
    found = Triage.from_dict(payload.get("verdict"))
    if found is not None and not never and found.verdict != "rule":
        tail = f"{tail} {as_sentence(found.words.capitalize())}".strip()  # the class, after what frees
    cards = [f"{cell.card.get('uuid')} {cell.card.get('reason') or 'fits'}" for cell in first.cells]
    for shown in range(len(cards), -1, -1):
        more = f", +{len(cards) - shown} more" if shown < len(cards) else ""
        part = f" closest {first.node}: " + ", ".join(cards[:shown]) + more + "." if cards else ""
        candidate = f"{head}{part}" + (f" {tail}" if tail else "")
        if len(candidate) <= limit:
            return candidate
    for candidate in (f"{head}{part}", head):
        if len(candidate) <= limit:
            return candidate
    return head[:limit]


def condition_message(reason: str, verdict: Payload | None) -> str:
    """The `PodScheduled=False` condition's message: the one-line `reason`, then the verdict
    class and the fact that decides it (`Never fits here: 60,000 MiB > the largest T4
    (15,360 MiB).`), unless the line says it already (a rule's hold, an error)."""
    found = Triage.from_dict(verdict)
    if found is None or not found.fact or found.fact in reason or found.verdict in ("rule", "invalid"):
        return reason
    return f"{as_sentence(reason)} {as_sentence(f'{found.words.capitalize()}: {found.fact}')}"


def as_sentence(text: str) -> str:
    """`text` ending in a full stop, as the sentences of an event message do."""
    text = text.rstrip()
    return text if not text or text.endswith(".") else f"{text}."


def summary_of(payload: Payload | None) -> str:
    """The one line an operator reads for a stored decision: `decision.verdict` of the decision
    the payload was written from, so it says what `Pod.reason` says."""
    return verdict(Decision.read_back(payload))


def explained(payload: Payload | None, tenants: Tenants | None = None) -> dict:
    """A decision as the API gives it: the payload and its words, plain JSON (`summary`,
    `unschedulable`, `would_fit`, the close nodes' card grids, every kept node's reasons)."""
    payload = payload or {}
    closest = [
        {
            "node": close.node,
            "rank": close.rank,
            "container": close.container,
            "count": close.count,
            "missing": close.missing,
            "never": close.never,
            "ready": close.ready,
            "cards_total": close.cards_total,
            "cards": [{**cell.card, "css": cell.css, "words": cell.words} for cell in close.cells],
            "hints": close.hints,
            "hint_data": close.hint_data,
        }
        for close in closest_nodes(payload, tenants)
    ]
    return {
        "summary": summary_of(payload),
        "unschedulable": bool(payload.get("unschedulable")),
        "unschedulable_words": unschedulable_words(payload),
        "would_fit": what_would_fit(payload, tenants),
        "closest_nodes": closest,
        "waiting": [
            {"node": line.node, "code": line.code, "n": line.n, "m": line.m, "words": line.words}
            for line in waiting_reasons(payload)
        ],
        "payload": dict(payload),
    }


def decision_path(payload: Payload | None, tenants: Tenants | None = None) -> dict:
    """Everything `includes/pod_decision.html` draws, computed once from the payload;
    `tenants` (card UUID -> tenants) lets the words name who holds the close cards."""
    payload = payload or {}
    policy = policy_of(payload)
    return {
        "pod": payload,
        "status": payload.get("status") or "unknown",
        "summary": summary_of(payload) if payload else "",
        "policy": policy,
        "steps": chain_steps(policy) if policy else [],
        "containers": [container_path(c, policy) for c in payload.get("containers") or []],
        "node_rows": [(bar.node, bar.score, bar.chosen) for bar in node_bars(payload)],
        "waiting": waiting_reasons(payload),
        "reasons": sorted((payload.get("reasons") or {}).items()),
        "more_failed": max(0, (payload.get("nodes_failed") or 0) - len(payload.get("failed_reasons") or {})),
        "more_fit": max(0, (payload.get("nodes_fit") or 0) - len(payload.get("node_order") or [])),
        "closest": closest_nodes(payload, tenants),
        "would_fit": what_would_fit(payload, tenants),
        "unschedulable": unschedulable_words(payload),
    }


@dataclass
class FirstScreen:
    """What the pod page answers before any detail: the verdict class, the deciding fact, the
    one or two changes that would make the pod fit (naming who holds the cards to free), and
    the close nodes the pod's own ask keeps out, named but never offered as hints."""

    triage: Triage | None
    actions: list[str]
    excluded: list[str]


def first_screen(payload: Payload | None, tenants: Tenants | None = None) -> FirstScreen:
    """The pod page's first screen, from the stored decision (`verdict`, `closest_nodes`)."""
    payload = payload or {}
    found = Triage.from_dict(payload.get("verdict"))
    close = closest_nodes(payload, tenants)
    actions = list(found.actions) if found is not None else []
    if found is not None and found.node:
        freed = [
            card.get("uuid", "")
            for node in close
            if node.node == found.node
            for hint in node.hint_data
            if hint.get("kind") == "free"
            for card in hint.get("cards") or ()
        ]
        actions = [
            f"{action}{tenants_words(uuid, tenants)}" for action, uuid in zip(actions, freed, strict=False)
        ] + actions[len(freed) :]
    return FirstScreen(found, actions[:2], [node.node for node in close if node.excluded])
