"""Triage: what kind of wait a decision is, and the one fact that decides it.

Every decision that leaves a pod waiting gets one verdict class, computed once with the
decision (`Decision.as_dict` stores it as `verdict`, the pipeline copies the class onto the
pod):

- `never`: no node could ever take the pod as it asks (`Decision.never`); the fact is read
  over the cards the pod's own ask lets in (`closeness.ask_scope`): "60,000 MiB > the
  largest T4 (15,360 MiB)", not over an 80 GB card it refuses by type;
- `capacity`: it fits once capacity frees: the closest node's shortfall (which card, how
  much), or what the node rules say cannot be had now (cpu, ports, spread);
- `rule`: a rule holds it whatever the cards say: queue, gang, quota, preemption under way,
  nomination, scheduling gates, a node held for another job, a node's taint or selector;
- `invalid`: rejected; it waits for a fixed spec.

`code` is the decisive reason as a code, what the Pending page's facet counts: chosen by what
would make the pod fit, not by node name or by which code turned away the most cards (a pod
that asks for T4s is not counted under `CardTypeMismatch` when memory decides). `actions` are
the one or two changes that would make it fit, with the figure and where.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import reasons as R
from .families.mig import shortfall_words
from .outcomes import PENDING, REJECTED

#: A `decision.Decision` (not imported: the decision imports this module to explain itself).
Decision = Any

NEVER, CAPACITY, RULE, INVALID = "never", "capacity", "rule", "invalid"
VERDICTS = (NEVER, CAPACITY, RULE, INVALID)
#: The words an operator reads for each class.
VERDICT_WORDS = {
    NEVER: "never fits here",
    CAPACITY: "waits for capacity",
    RULE: "held by a rule",
    INVALID: "invalid",
}
#: A gang with fewer members than its minimum (`batch.jobs.NOT_ENOUGH_PODS`), and what helps.
GANG_SHORT = "NotEnoughPods"
_GANG_SHORT_ACTIONS: tuple[str, ...] = (
    "submit the missing members (same hami.io/group-name), or lower hami.io/group-min-member",
    "or delete the members left if the job is over",
)
#: The code of a rejected pod, and of one that found no node at all.
INVALID_CODE, NO_NODES = "Invalid", "NoGpuNodes"

#: Node rules (SPEC 10) whose refusal clears when other pods leave: capacity, not a rule.
_RULES_OF_CAPACITY = frozenset(
    {R.NODE_RESOURCES_FIT, R.NODE_PORTS, R.POD_TOPOLOGY_SPREAD, R.INTER_POD_AFFINITY, R.NODE_NOT_READY}
)
#: The code a `never` reason's `why` stands for.
_NEVER_CODES = {
    "memory": R.CARD_INSUFFICIENT_MEMORY,
    "cards": R.NODE_INSUFFICIENT_DEVICE,
    "numa": R.NUMA_NOT_FIT,
    "combined": R.ALLOCATED_INSUFFICIENT,
}
#: The code of a card a `free` hint needs freed, by the stage that refused it.
_STAGE_CODES = {
    "memory": R.CARD_INSUFFICIENT_MEMORY,
    "cores": R.CARD_INSUFFICIENT_CORE,
    "slots": R.CARD_SLOTS_EXHAUSTED,
    "exclusive": R.EXCLUSIVE_CONFLICT,
    "compute": R.CARD_COMPUTE_EXHAUSTED,
    "mig": R.CARD_MIG_INFEASIBLE,
}
_BLOCKED_CODES = {"health": R.CARD_NOT_HEALTH, "cordon": R.CARD_CORDONED}


@dataclass(frozen=True, slots=True)
class Triage:
    """A waiting decision's verdict class, decisive reason code, deciding fact and actions."""

    verdict: str
    code: str
    fact: str
    actions: tuple[str, ...] = ()
    node: str | None = None  # where the fact holds, when one node decides it

    @property
    def words(self) -> str:
        return VERDICT_WORDS.get(self.verdict, self.verdict)

    def as_dict(self) -> dict:
        return {
            "class": self.verdict,
            "code": self.code,
            "fact": self.fact,
            "actions": list(self.actions),
            "node": self.node,
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any] | None) -> Triage | None:
        if not isinstance(payload, Mapping) or payload.get("class") not in VERDICTS:
            return None
        return cls(
            verdict=str(payload["class"]),
            code=str(payload.get("code") or ""),
            fact=str(payload.get("fact") or ""),
            actions=tuple(str(a) for a in payload.get("actions") or ()),
            node=payload.get("node"),
        )


def mib(value: int | None) -> str:
    return f"{value or 0:,} MiB"


def _kinds(types: list[str]) -> str:
    """`T4`, `T4 or A10`, the card types a pod lets in, for a sentence."""
    return " or ".join(types) if types else "card"


def never_fact(never: Mapping[str, Any]) -> str:
    """The one fact why no node could ever take the pod (`closeness.never_reason`), over the
    cards its own ask lets in (`scope`) when it narrows them."""
    why, count = never.get("why"), never.get("count") or 0
    scope = never.get("scope")
    if scope is not None:
        kinds = _kinds(list(scope.get("types") or ()))
        if not scope.get("cards"):
            return "no card in this cluster is of the type, mode or UUID the pod asks for"
        if why == "memory":
            return f"{mib(never.get('memory'))} > the largest {kinds} ({mib(scope.get('largest_memory'))})"
        if why == "cards":
            return (
                f"{count} cards asked > the most {kinds} cards on one node ({scope.get('most_cards') or 0})"
            )
        if why == "numa":
            return f"no NUMA node has {count} {kinds} cards that could take it (numa-bind)"
        return f"no {kinds} card has the cores asked"
    if why == "memory":
        return f"{mib(never.get('memory'))} > the largest card ({mib(never.get('largest_memory'))})"
    if why == "cards":
        return f"{count} cards asked > the most on one node ({never.get('most_cards') or 0})"
    if why == "numa":
        return f"no NUMA node has {count} cards that could take it (numa-bind)"
    if why == "combined":
        return "no node could take every container at once"
    return "no card of the type, mode, UUID and capacity asked"


def _never_actions(never: Mapping[str, Any]) -> tuple[str, ...]:
    why, scope = never.get("why"), never.get("scope")
    largest, most = never.get("largest_memory") or 0, never.get("most_cards") or 0
    actions: list[str] = []
    if scope is not None and not scope.get("cards"):
        return ("ask for a card type, mode or UUID the cluster has (nvidia.com/use-gputype, use-gpuuuid)",)
    if why == "memory":
        fit = (scope or never).get("largest_memory") or 0
        actions.append(f"ask at most {mib(fit)} (nvidia.com/gpumem)")
        if scope is not None and largest >= (never.get("memory") or 0):
            actions.append(f"or let in other card types: the cluster's largest card has {mib(largest)}")
    elif why == "cards":
        fit = (scope or never).get("most_cards") or 0
        actions.append(f"ask at most {fit} cards (nvidia.com/gpu)")
        if scope is not None and most >= (never.get("count") or 0):
            actions.append(f"or let in other card types: a node has {most} cards")
    elif why == "numa":
        actions.append("drop numa-bind (hami.io/gpu-scheduler-policy) or ask fewer cards")
    return tuple(actions)


def _needs(card: Mapping[str, Any]) -> str:
    """What one card of a `free` hint must give up: `2,640 MiB`, `30% cores`, `every tenant`."""
    needs = []
    if card.get("memory"):
        needs.append(mib(card.get("memory")))
    if card.get("cores"):
        needs.append(f"{card.get('cores')}% cores")
    if card.get("slots"):
        needs.append("a vGPU slot")
    if card.get("tenants_needed") and not needs:
        needs.append("every tenant" if card.get("stage") != "exclusive" else "the whole card")
    return " and ".join(needs) or "its tenants"


def _free_fact(hint: Mapping[str, Any]) -> tuple[str, str, tuple[str, ...]]:
    """(code, fact, actions) of the closest node's `free` hint: which cards, how much."""
    node = hint.get("node", "")
    cards = list(hint.get("cards") or ())
    first = cards[0] if cards else {}
    if first.get("slots"):
        code = R.CARD_SLOTS_EXHAUSTED
    elif first.get("memory"):
        code = R.CARD_INSUFFICIENT_MEMORY
    elif first.get("cores"):
        code = R.CARD_INSUFFICIENT_CORE
    else:
        code = _STAGE_CODES.get(str(first.get("stage") or ""), R.EXCLUSIVE_CONFLICT)
    actions = tuple(f"free {_needs(card)} on {card.get('uuid')} ({node})" for card in cards[:2])
    more = len(cards) - 1
    also = f" (and {more} more card{'s' if more > 1 else ''})" if more > 0 else ""
    fact = f"closest node {node} needs {_needs(first)} freed on {first.get('uuid')}{also}"
    return code, fact, actions


def _closest_fact(close: Mapping[str, Any]) -> tuple[str, str, str, tuple[str, ...]] | None:
    """(class, code, fact, actions) read off the closest node's hints, or None."""
    node = close.get("node", "")
    for hint in close.get("hints") or ():
        kind = hint.get("kind")
        if kind == "not-ready":
            return (
                CAPACITY,
                R.NODE_NOT_READY,
                f"closest node {node} is not ready",
                (f"bring {node}'s agent back",),
            )
        if kind == "reserved":
            return (
                RULE,
                R.NODE_RESERVED,
                f"closest node {node} is held this cycle for job {hint.get('job')}",
                (),
            )
        if kind == "free":
            return CAPACITY, *_free_fact(hint)
    for hint in close.get("hints") or ():
        kind = hint.get("kind")
        if kind == "mutex":
            busy = hint.get("busy") or 0
            fact = f"{busy} of {hint.get('cards')} cards on {node} have tenants (mutex)"
            return (
                CAPACITY,
                R.EXCLUSIVE_CONFLICT,
                fact,
                (f"free {hint.get('count')} card(s) on {node} whole",),
            )
        if kind == "mig":
            cards = list(hint.get("cards") or ())
            fact = f"closest node {node}: {cards[0].get('uuid')} {shortfall_words(cards[0])}" if cards else ""
            return CAPACITY, R.CARD_MIG_INFEASIBLE, fact, ()
        if kind == "numa":
            fact = (
                f"{node} fits {hint.get('fit')} cards, but numa-bind needs {hint.get('count')} on one NUMA "
                f"node (best {hint.get('best')})"
            )
            return CAPACITY, R.NUMA_NOT_FIT, fact, ()
        if kind == "blocked":
            stages = dict(hint.get("stages") or {})
            stage = max(sorted(stages), key=lambda s: stages[s]) if stages else ""
            code = _BLOCKED_CODES.get(stage, R.ALLOCATED_INSUFFICIENT)
            fact = f"{node} needs {hint.get('missing')} more card(s); the rest are unavailable ({stage})"
            return CAPACITY, code, fact, ()
    return None


def triage(decision: Decision) -> Triage | None:
    """The verdict of a decision that leaves its pod waiting (None once placed)."""
    if decision.status == REJECTED:
        return Triage(INVALID, INVALID_CODE, decision.error or "rejected", ("fix the pod's spec",))
    if decision.status != PENDING:
        return None
    if decision.batch is not None:
        hold = decision.batch
        where = f" (its cards fit on {hold.would_fit_on})" if hold.would_fit_on else ""
        actions: tuple[str, ...] = _GANG_SHORT_ACTIONS if hold.reason == GANG_SHORT else ()
        return Triage(RULE, hold.reason, f"{hold.message}{where}", actions, hold.would_fit_on)
    if decision.never is not None:
        return Triage(
            NEVER,
            _never_code(decision.never),
            never_fact(decision.never),
            _never_actions(decision.never),
        )
    if decision.reasons.get(R.SCHEDULING_GATED) and not decision.nodes_failed:
        return Triage(RULE, R.SCHEDULING_GATED, "scheduling gates hold it", ("remove its scheduling gates",))
    for close in decision.closest:
        if close.get("never"):
            continue  # a node that could never take it (its ask keeps it out, or too small): no hint
        found = _closest_fact(close)
        if found is not None:
            verdict, code, fact, actions = found
            return Triage(verdict, code, fact, actions, close.get("node"))
    return _by_counts(decision)


def _never_code(never: Mapping[str, Any]) -> str:
    why = never.get("why")
    if why in _NEVER_CODES:
        return _NEVER_CODES[str(why)]
    return R.CARD_TYPE_MISMATCH


def _by_counts(decision: Decision) -> Triage:
    """No close node says what would fit: the reason most nodes give, node rules first
    (they refuse a node before its cards are read)."""
    if not decision.nodes_failed:
        return Triage(CAPACITY, NO_NODES, "no GPU node is available", ("add a GPU node",))
    counts = decision.reasons
    rules = {code: n for code, n in counts.items() if code in R.NODE_RULES or code == R.NODE_RESERVED}
    chosen = rules or {code: n for code, n in counts.items() if code in R.CODES}
    if not chosen:
        return Triage(CAPACITY, "", f"0/{decision.nodes_failed} nodes are available", ())
    code = min(chosen, key=lambda c: (-chosen[c], c))
    words = next(
        (
            said
            for said, n in sorted(decision.node_reasons.items())
            if said not in R.CODES and n == chosen[code]
        ),
        code,
    )
    verdict = CAPACITY if code in _RULES_OF_CAPACITY or code not in rules else RULE
    return Triage(verdict, code, f"{chosen[code]} of {decision.nodes_failed} nodes: {words}", ())
