"""`{% pod_decision payload %}` and its filters: thin wrappers over `scheduling.engine.explain`.

The Pod page, the Simulator and the admin's Decision page all render the same component, so
an operator reads one picture of the chain everywhere: the parsed chain, the cards each
filter removed, the ranking with the key that decided between neighbours, the chosen cards,
the node scores and, for a pod that waits, each node's reasons in words.
"""

from __future__ import annotations

from django import template

from scheduling.engine import explain

register = template.Library()

TEMPLATE = "scheduling/includes/pod_decision.html"


@register.inclusion_tag(TEMPLATE)
def pod_decision(payload, heading=True) -> dict:
    """`{% pod_decision payload %}`: one pod's decision path, the same on every page."""
    context = explain.decision_path(payload if isinstance(payload, dict) else {})
    context["heading"] = heading
    return context


@register.filter
def reason_lines(payload) -> list[explain.ReasonLine]:
    """Failed-node reasons in words for a pending pod's list row."""
    return explain.waiting_reasons(payload if isinstance(payload, dict) else {})


@register.filter
def stage_words(stage: str) -> str:
    return explain.STAGE_WORDS.get(stage or "", "")
