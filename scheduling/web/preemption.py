"""The Pod page's Preemption panel: a preemptor's victims (the engine's choice, with how far
each eviction got), the alternatives it compared, and the cards it holds while it waits; a
victim's preemptor; and, for a pod that tried, why preemption did not help.

Everything is read from the preemptor's decision payload (`preemption`) and the `Eviction`
and `Nomination` rows the commit wrote, the same data as `GET /api/v1/evictions/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import models

from scheduling.filtersets import EvictionFilterSet
from scheduling.models import Decision, Eviction, Nomination, Pod

#: Evictions listed each way on a pod's page, newest first.
EVICTION_ROWS = 50


@dataclass
class VictimRow:
    """One victim the shown decision chose, with its eviction's state once the row exists."""

    key: str
    namespace: str
    name: str
    node: str
    cards: list[str]
    priority: int | None
    queue: str
    gang: str
    kind: str
    why: str
    memory: int | None
    eviction: Eviction | None = None

    @property
    def linkable(self) -> bool:
        """A pod page exists for NAMESPACE/NAME only (a name never holds a slash)."""
        return bool(self.name) and self.key.count("/") == 1


@dataclass
class PreemptionPanel:
    plan: dict | None = None  # the shown decision's `preemption` when it chose victims
    victims: list[VictimRow] = field(default_factory=list)
    alternatives: list[dict] = field(default_factory=list)
    tried_why: str = ""  # the shown decision tried and nothing helped: why
    caused: list[Eviction] = field(default_factory=list)  # this pod's victims of other attempts
    nominations: list[Nomination] = field(default_factory=list)
    evicted_by: list[Eviction] = field(default_factory=list)  # this pod as a victim

    @property
    def nominated_since(self) -> datetime | None:
        return min((n.created_at for n in self.nominations), default=None)

    @property
    def nominated_until(self) -> datetime | None:
        return max((n.expires_at for n in self.nominations), default=None)

    @property
    def nominated_memory(self) -> int:
        return sum(n.memory for n in self.nominations)

    def __bool__(self) -> bool:
        return bool(self.plan or self.tried_why or self.caused or self.nominations or self.evicted_by)


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _number(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _victim(raw: dict, evictions: dict[str, Eviction]) -> VictimRow:
    key = _text(raw.get("pod"))
    namespace, name = Pod.split_key(key)
    cards = raw.get("cards")
    return VictimRow(
        key=key,
        namespace=namespace,
        name=name,
        node=_text(raw.get("node")),
        cards=[str(card) for card in cards] if isinstance(cards, list) else [],
        priority=_number(raw.get("priority")),
        queue=_text(raw.get("queue")),
        gang=_text(raw.get("gang")),
        kind=_text(raw.get("kind")),
        why=_text(raw.get("why")),
        memory=_number(raw.get("memory")),
        eviction=evictions.get(key),
    )


def preemption_panel(pod: Pod, shown: Decision | None, now: datetime) -> PreemptionPanel:
    """The panel for `pod`, explaining the decision `shown` (three queries, four with victims)."""
    panel = PreemptionPanel()
    explained = (shown.payload or {}).get("preemption") if shown is not None else None
    chosen: set[int] = set()
    if isinstance(explained, dict) and explained.get("tried"):
        panel.tried_why = _text(explained.get("why")) or "preemption did not help"
    elif isinstance(explained, dict):
        panel.plan = explained
        rows = {e.victim.key: e for e in shown.evictions.select_related("victim")}
        chosen = {e.pk for e in rows.values()}
        victims = explained.get("victims")
        panel.victims = (
            [_victim(v, rows) for v in victims if isinstance(v, dict)] if isinstance(victims, list) else []
        )
        alternatives = explained.get("alternatives")
        panel.alternatives = (
            [a for a in alternatives if isinstance(a, dict)] if isinstance(alternatives, list) else []
        )
    panel.caused = [
        e
        for e in pod.preemptions.select_related("victim").order_by("-created_at", "-id")[:EVICTION_ROWS]
        if e.pk not in chosen
    ]
    panel.nominations = list(
        Nomination.objects.filter(pod=pod, expires_at__gt=now)
        .select_related("card", "card__node")
        .order_by("id")
    )
    panel.evicted_by = list(
        Eviction.objects.filter(victim=pod)
        .select_related("preemptor")
        .order_by("-created_at", "-id")[:EVICTION_ROWS]
    )
    return panel


#: Evictions listed on the Evictions page, newest first.
EVICTION_PAGE_ROWS = 200


def evictions_page(params) -> dict:
    """Every eviction, newest first, filtered like `GET /api/v1/evictions/` (the same
    filterset): state, kind, node, victim, preemptor. Active ones (requested, evicting) first
    when no state is asked for, so what is still under way is never below the fold."""
    evictions = Eviction.objects.select_related("victim", "preemptor")
    filterset = EvictionFilterSet(params, queryset=evictions)
    valid = filterset.is_valid()
    chosen = filterset.qs if valid else evictions
    total = Eviction.objects.count()
    matching = chosen.count()
    rows = list(chosen.order_by("-created_at", "-id")[:EVICTION_PAGE_ROWS])
    states = dict(
        Eviction.objects.values_list("state")
        .annotate(n=models.Count("id"))
        .order_by()
        .values_list("state", "n")
    )
    return {
        "rows": rows,
        "total": total,
        "matching": matching,
        "states": [(value, label, states.get(value, 0)) for value, label in Eviction.STATES],
        "kinds": Eviction.KINDS,
        "filters": {
            "state": params.getlist("state") if hasattr(params, "getlist") else [],
            **{key: params.get(key, "") for key in ("kind", "node", "victim", "preemptor")},
        },
        "filtered": any(params.get(key) for key in ("state", "kind", "node", "victim", "preemptor")),
        "filter_errors": {} if valid else filterset.errors,
    }
