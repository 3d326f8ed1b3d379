"""`{% pod_decision payload %}` and its filters: thin wrappers over `scheduling.engine.explain`.

The Pod page, the Simulator and the admin's Decision page all render the same component, so
an operator reads one picture of the chain everywhere: the parsed chain, the cards each
filter removed, the ranking with the key that decided between neighbours, the chosen cards,
the node scores and, for a pod that waits, each node's reasons in words.
"""

from __future__ import annotations

from django import template

from scheduling.engine import explain
from scheduling.pipeline.snapshot import card_tenants

register = template.Library()

TEMPLATE = "scheduling/includes/pod_decision.html"


def live_tenants(payload) -> explain.Tenants:
    """Who holds the cards a pending pod's `free` hints name, now (one query, none if none)."""
    return card_tenants(explain.card_tenant_uuids(payload if isinstance(payload, dict) else {}))


@register.inclusion_tag(TEMPLATE)
def pod_decision(payload, heading=True, live=False) -> dict:
    """`{% pod_decision payload %}`: one pod's decision path, the same on every page. `live`:
    the payload is about this cluster, so the hints name the close cards' tenants, read now
    (the pod page and the Simulator's live mode; a scenario's decisions are not)."""
    payload = payload if isinstance(payload, dict) else {}
    context = explain.decision_path(payload, live_tenants(payload) if live else None)
    context["heading"] = heading
    return context


@register.filter
def reason_lines(payload) -> list[explain.ReasonLine]:
    """Failed-node reasons in words for a pending pod's list row."""
    return explain.waiting_reasons(payload if isinstance(payload, dict) else {})


#: The card grid's colour per reason class (`explain.CARD_CLASSES`), inline until
#: static/scheduling/dashboard.css styles the `reason-*` classes itself.
REASON_COLOURS = {
    "fits": "#2e7d32",
    "capacity": "#e65100",
    "unavailable": "#616161",
    "excluded": "#9e9e9e",
    "numa": "#6a1b9a",
}


@register.filter
def closest_node(payload) -> explain.CloseNode | None:
    """The node that came closest for a pending pod's list row (its card grid), or None."""
    nodes = explain.closest_nodes(payload if isinstance(payload, dict) else {})
    return nodes[0] if nodes else None


@register.filter
def would_fit(payload) -> list[str]:
    """ "What would make it fit" for a list row; tenants are named on the pod page only
    (reading them for every row would be a query per row)."""
    return explain.what_would_fit(payload if isinstance(payload, dict) else {})


@register.filter
def reason_colour(css: str) -> str:
    return REASON_COLOURS.get(css or "", "#e65100")


@register.filter
def stage_words(stage: str) -> str:
    return explain.stage_words(stage)
