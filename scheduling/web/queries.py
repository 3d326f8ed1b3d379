"""What the dashboard pages read: every query of the web pages, in one place.

Views stay thin: they pass request parameters here and render what comes back. Filters
are the shared filtersets of the REST API, so "cards of type T4" means the same on both.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field

from django.contrib.staticfiles import finders
from django.core.paginator import Paginator
from django.db.models import Count, Max, Q, Sum
from django.shortcuts import get_object_or_404
from django.utils import timezone

from scheduling.engine import ScenarioError, explain, triage
from scheduling.engine.budget import OverBudget
from scheduling.engine.encoding import links_to_pairs, pair_key
from scheduling.engine.scenario import read_scenario_text
from scheduling.engine.whatif import apply_edits, decide_all, parse_whatif
from scheduling.filtersets import (
    CardFilterSet,
    EventFilterSet,
    NodeTableFilterSet,
    PendingFilterSet,
    PodFilterSet,
)
from scheduling.models import Allocation, Card, CardUsage, Cycle, Decision, Event, Eviction, Node, Pod
from scheduling.models.pods import SCHEDULING_GATED, decisive_reason, waiting_verdict
from scheduling.models.samples import NOT_TRIED, latest_reasons, top_reason
from scheduling.pipeline.snapshot import card_tenants, load_snapshot
from scheduling.services import simulations
from scheduling.web import heatmap, tables
from scheduling.web.preemption import preemption_panel

#: The Cluster page draws full card tiles (tenants and all) when the filters leave at most this many.
TILE_CARDS = 64
#: Cycles shown on the Cycles page and its charts.
CYCLE_ROWS = 120
#: Node scores and failed nodes kept per simulated pod (SPEC 9 `--top`).
SIMULATOR_TOP = 12
#: Largest scenario the Simulator accepts, in bytes.
SIMULATOR_MAX_BYTES = 2 * 1024 * 1024
#: Scenario files offered by the Simulator's "load example" links (static/scheduling/examples/).
EXAMPLES = (
    "chain-mutex-binpack-t4",
    "story1-node-binpack",
    "story2-node-spread",
    "story3-gpu-binpack",
    "story4-gpu-spread",
    "k8s-selector-taint-cordon-cpu",
    "k8s-spread-anti-affinity",
    "k8s-gated",
    "k8s-running-hami",
    "k8s-volumes",
)


@dataclass
class Tenant:
    """One pod's hold on one card: summed over its vGPUs there."""

    pod: Pod
    containers: list[str]
    memory: int
    cores: int
    vgpus: int


@dataclass
class CardTile:
    card: Card
    tenants: list[Tenant]
    usage: CardUsage


@dataclass
class NodePanel:
    node: Node
    tiles: list[CardTile]
    usage: CardUsage = field(default_factory=CardUsage)
    types: list[str] = field(default_factory=list)


def tenants_by_card(card_ids) -> dict[int, list[Tenant]]:
    """Active allocations of these cards, grouped per card and pod (one query)."""
    grouped: dict[tuple[int, int], Tenant] = {}
    rows = (
        Allocation.objects.filter(active=True, card_id__in=card_ids)
        .select_related("pod")
        .order_by("card_id", "pod__namespace", "pod__name", "container_index")
    )
    for allocation in rows:
        key = (allocation.card_id, allocation.pod_id)
        tenant = grouped.get(key)
        if tenant is None:
            tenant = grouped[key] = Tenant(allocation.pod, [], 0, 0, 0)
        if allocation.container_name not in tenant.containers:
            tenant.containers.append(allocation.container_name)
        tenant.memory += allocation.memory
        tenant.cores += allocation.cores
        tenant.vgpus += 1
    per_card: dict[int, list[Tenant]] = {}
    for (card_id, _), tenant in grouped.items():
        per_card.setdefault(card_id, []).append(tenant)
    return per_card


def _tile(card: Card, tenants: dict[int, list[Tenant]]) -> CardTile:
    return CardTile(card, tenants.get(card.pk, []), card.usage)


def node_panels(cards) -> list[NodePanel]:
    """Cards grouped into their nodes (in name order), with per-node totals."""
    cards = list(cards)
    tenants = tenants_by_card([card.pk for card in cards])
    panels: dict[int, NodePanel] = {}
    for card in cards:
        panel = panels.get(card.node_id)
        if panel is None:
            panel = panels[card.node_id] = NodePanel(card.node, [])
        panel.tiles.append(_tile(card, tenants))
        if card.present:
            panel.usage.add(card)
        if card.type not in panel.types:
            panel.types.append(card.type)
    return sorted(panels.values(), key=lambda panel: panel.node.name)


def cluster_page(request) -> dict:
    """The whole cluster at a glance, at any size: totals, a heatmap of every card, a paged
    node table; card tiles (tenants and all) only when the filters leave a few cards.

    Filters: `type` (card type), `node` (one node), `q` (part of a node name), `ready`; the
    table also reads `sort` and `page`.
    """
    params = request.GET
    cards = Card.objects.all()
    filterset = CardFilterSet(params, queryset=cards)
    chosen = filterset.qs if filterset.is_valid() else cards
    nodes = NodeTableFilterSet(params, queryset=Node.objects.all())
    node_rows = nodes.qs if nodes.is_valid() else Node.objects.all()
    if params.get("node"):
        node_rows = node_rows.filter(name=params["node"])
    chosen = chosen.filter(node__in=node_rows.values("pk"))
    totals = CardUsage(
        **{
            key: value or 0
            for key, value in chosen.filter(present=True)
            .aggregate(
                slots=Sum("slots"),
                used_slots=Sum("used_slots"),
                memory=Sum("memory"),
                used_memory=Sum("used_memory"),
                cores=Sum("cores"),
                used_cores=Sum("used_cores"),
                cards=Count("id"),
            )
            .items()
        }
    )
    shown = chosen.count()
    panels = (
        node_panels(chosen.select_related("node").order_by("node__name", "index"))
        if shown <= TILE_CARDS
        else []
    )
    pods = dict(Pod.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    filters = {key: params.get(key, "") for key in ("type", "node", "q", "ready")}
    return {
        "heatmap": heatmap.build(chosen),
        "table": tables.node_table(node_rows, request),
        "panels": panels,
        "shown_cards": shown,
        "tile_cards": TILE_CARDS,
        "totals": totals,
        "filters": filters,
        "filtered": any(filters.values()),
        "filter_errors": {**(filterset.errors or {}), **(nodes.errors or {})},
        "types": list(Card.objects.order_by("type").values_list("type", flat=True).distinct()),
        "node_count": Node.objects.count(),
        "ready_count": Node.objects.filter(ready=True).count(),
        "pod_counts": pods,
        "pending_count": pods.get(Pod.PENDING, 0),
        "placed_count": pods.get(Pod.SCHEDULED, 0) + pods.get(Pod.RUNNING, 0),
        "last_cycle": Cycle.objects.order_by("-id").first(),
    }


@dataclass
class PendingRow:
    pod: Pod
    decision: Decision | None
    dominant: str = ""

    @property
    def payload(self) -> dict:
        return self.decision.payload if self.decision else {}

    @property
    def decisive(self) -> triage.Triage | None:
        """The row's first line: its verdict class and the fact that decides it."""
        return decisive_reason(self.pod, self.payload)

    @property
    def chain(self) -> list[str]:
        return explain.chain_of(explain.policy_of(self.payload))


#: Facet names for pending pods whose latest decision names no failed-node reason.


def pending_page(params) -> dict:
    """Pending pods, oldest first, a page at a time, each with its latest decision (the reasons
    in words); a facet list counts them by dominant reason, and `dominant` narrows to one.

    The facets read every pending pod's latest decision, but only its `failed_reasons`; the
    rows read full decisions for one page.
    """
    pods = Pod.objects.filter(status=Pod.PENDING).order_by("submitted_at", "id")
    unclassed = params.copy()
    unclassed.pop("verdict", None)  # the verdict facet counts every class the other filters leave
    filterset = PendingFilterSet(unclassed, queryset=pods)
    pods = filterset.qs if filterset.is_valid() else pods
    keyed = list(
        pods.with_latest_decision().values_list("id", "error", "latest_decision_id", "gated", "verdict")
    )
    classes = {
        pod_id: waiting_verdict(verdict, gated, error) or NOT_TRIED
        for pod_id, error, _, gated, verdict in keyed
    }
    verdicts = Counter(classes.values())
    verdict_facets = [(value, words, verdicts[value]) for value, words in Pod.VERDICTS if verdicts[value]] + (
        [(NOT_TRIED, NOT_TRIED, verdicts[NOT_TRIED])] if verdicts[NOT_TRIED] else []
    )
    verdict = params.get("verdict", "")
    if verdict:
        keyed = [row for row in keyed if classes[row[0]] == verdict]
    latest = latest_reasons([decision_id for _, _, decision_id, _, _ in keyed if decision_id])
    dominant = {
        pod_id: SCHEDULING_GATED  # never tried while gated: no decision says why
        if gated
        else top_reason(error, *(latest.get(decision_id) or (None,) * 4))
        for pod_id, error, decision_id, gated, _ in keyed
    }
    facets = sorted(Counter(dominant.values()).items(), key=lambda item: (-item[1], item[0]))
    chosen = params.get("dominant", "")
    ids = [pod_id for pod_id, *_ in keyed if not chosen or dominant[pod_id] == chosen]
    page = Paginator(ids, tables.PODS_PER_PAGE).get_page(params.get("page"))
    listed = list(
        Pod.objects.filter(pk__in=list(page.object_list))
        .with_latest_decision()
        .order_by("submitted_at", "id")
    )
    decisions = Pod.objects.latest_decisions(listed)
    rejected = list(
        Pod.objects.filter(status=Pod.REJECTED).with_latest_decision().order_by("-updated_at")[:50]
    )
    rejected_decisions = Pod.objects.latest_decisions(rejected)
    return {
        "rows": [PendingRow(pod, decisions.get(pod.pk), dominant.get(pod.pk, "")) for pod in listed],
        "total": len(keyed),
        "matching": len(ids),
        "page": page,
        "facets": facets,
        "verdict_facets": verdict_facets,
        "classed": sum(verdicts.values()),
        "rejected": [PendingRow(pod, rejected_decisions.get(pod.pk)) for pod in rejected],
        "filters": {
            key: params.get(key, "") for key in ("namespace", "name", "reason", "dominant", "verdict")
        },
        "filter_errors": _verdict_errors(verdict, filterset),
        "query": _query_without(params, "page"),
        "facet_query": _query_without(params, "page", "dominant"),
        "verdict_query": _query_without(params, "page", "dominant", "verdict"),
    }


def _verdict_errors(verdict: str, filterset: PendingFilterSet) -> dict:
    """The filters' errors, with an unknown `verdict` named as the API names it."""
    errors = dict(filterset.errors) if not filterset.is_valid() else {}
    if verdict and verdict not in {value for value, _ in Pod.VERDICTS} | {NOT_TRIED}:
        errors["verdict"] = [f"{verdict!r} is not one of {', '.join(v for v, _ in Pod.VERDICTS)}"]
    return errors


def _query_without(params, *names: str) -> str:
    """The query string of `params` without `names`, to build page and facet links on."""
    kept = params.copy()
    for name in names:
        kept.pop(name, None)
    return kept.urlencode()


def pods_page(request) -> dict:
    """Every pod, newest first, a page at a time: by status, namespace, node, part of a name."""
    params = request.GET
    pods = Pod.objects.all()
    filterset = PodFilterSet(params, queryset=pods)
    pods = filterset.qs if filterset.is_valid() else pods
    if params.get("q"):
        pods = pods.filter(name__icontains=params["q"])
    counts = dict(Pod.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    return {
        "table": tables.pod_table(pods, request),
        "statuses": [(value, label, counts.get(value, 0)) for value, label in Pod.STATUSES],
        "namespaces": list(
            Pod.objects.order_by("namespace").values_list("namespace", flat=True).distinct()[:200]
        ),
        "filters": {
            "status": params.getlist("status"),
            **{k: params.get(k, "") for k in ("namespace", "node", "q")},
        },
        "filter_errors": filterset.errors if not filterset.is_valid() else {},
    }


def pod_page(namespace: str, name: str, decision_id=None) -> dict:
    """One pod: its asks, allocations, every kept decision, the one to draw (latest by default),
    and its part in preemption (victims, preemptor, nominated cards)."""
    pod = get_object_or_404(Pod.objects.select_related("node"), namespace=namespace, name=name)
    decisions = list(pod.decisions.select_related("cycle").order_by("-id"))
    shown = decisions[0] if decisions else None
    if decision_id:
        shown = next((d for d in decisions if str(d.pk) == str(decision_id)), shown)
    allocations = list(
        pod.allocations.select_related("card", "card__node").order_by("-active", "container_index", "id")
    )
    latest = decisions[0].payload if decisions and pod.status in (Pod.PENDING, Pod.REJECTED) else None
    decisive = decisive_reason(pod, latest) if pod.status in (Pod.PENDING, Pod.REJECTED) else None
    screen = explain.first_screen(latest, card_tenants(explain.card_tenant_uuids(latest or {})))
    return {
        "pod": pod,
        "decisions": decisions,
        "attempts": fold_attempts(decisions),
        "shown": shown,
        "allocations": allocations,
        "asks": container_asks(pod),
        "preemption": preemption_panel(pod, shown, timezone.now()),
        "decisive": decisive,
        "actions": screen.actions if decisive is not None and screen.triage is not None else [],
        "excluded": screen.excluded,
    }


@dataclass
class AttemptRun:
    """Consecutive attempts that said the same thing (outcome, node, reason): one row, counted."""

    newest: Decision
    oldest: Decision
    count: int


def fold_attempts(decisions: list[Decision]) -> list[AttemptRun]:
    """`decisions` (newest first) with each run of identical attempts folded into one row."""
    runs: list[AttemptRun] = []
    for decision in decisions:
        last = runs[-1] if runs else None
        same = last is not None and (last.oldest.outcome, last.oldest.node, last.oldest.reason) == (
            decision.outcome,
            decision.node,
            decision.reason,
        )
        if last is not None and same:
            last.oldest, last.count = decision, last.count + 1
        else:
            runs.append(AttemptRun(decision, decision, 1))
    return runs


def container_asks(pod: Pod) -> list[dict]:
    """What each container asks for, read from limits then requests (SPEC 2), as written."""
    rows = []
    for kind, containers in (("init", pod.init_containers or []), ("app", pod.containers or [])):
        for container in containers:
            if not isinstance(container, dict):
                continue
            resources = container.get("resources") or {}
            asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
            gpu = {
                key.split("/", 1)[1]: value
                for key, value in asked.items()
                if str(key).startswith("nvidia.com/")
            }
            rows.append({"kind": kind, "name": container.get("name", ""), "asks": gpu})
    return rows


def pair_matrix(cards: list[Card]) -> list[dict]:
    """The node's pair scores as rows of (card, [score to each card]); a pair given on one
    side only counts for both, and the higher wins if the two sides disagree."""
    score = links_to_pairs((card.uuid, card.links) for card in cards)
    return [
        {
            "card": a,
            "cells": [None if a.pk == b.pk else score.get(pair_key(a.uuid, b.uuid), 0) for b in cards],
        }
        for a in cards
    ]


def node_page(name: str) -> dict:
    node = get_object_or_404(Node, name=name)
    cards = list(node.cards.select_related("node").order_by("index"))
    panel = node_panels(cards)[0] if cards else None
    recent = (
        Pod.objects.filter(node=node, status__in=Pod.BOUND).with_latest_decision().order_by("-scheduled_at")
    )
    return {
        "node": node,
        "panel": panel,
        "matrix": pair_matrix(cards),
        "cards": cards,
        "has_links": any(card.links for card in cards),
        "pods": list(recent[:200]),
        "node_actions": node_actions(cards, recent.exists()),
    }


def node_actions(cards, has_pods: bool) -> dict[str, bool]:
    """Which node actions apply: cordon while a present card takes pods, uncordon while a card
    is cordoned, drain while a card takes pods or pods still run there (to move them off)."""
    open_cards = any(card.present and not card.cordoned for card in cards)
    return {
        "cordon": open_cards,
        "uncordon": any(card.cordoned for card in cards),
        "drain": open_cards or has_pods,
    }


def cycles_page() -> dict:
    cycles = list(Cycle.objects.order_by("-id")[:CYCLE_ROWS])
    oldest_first = list(reversed(cycles))
    return {
        "cycles": cycles,
        "placed_points": [(f"#{c.pk}", c.placed) for c in oldest_first],
        "duration_points": [(f"#{c.pk}", round(c.duration_ms, 1)) for c in oldest_first],
        "total": Cycle.objects.count(),
        "placed_total": sum(c.placed for c in cycles),
    }


#: Events listed on the Events page, newest first.
EVENT_ROWS = 200


@dataclass
class EventRow:
    """One Event, and the page of what it is about when hamiadmin has one (a refused pod has
    no row: its subject is not a link)."""

    event: Event
    pod: tuple[str, str] | None = None
    node: str | None = None


def events_page(params) -> dict:
    """The latest refusals and repairs, filtered like `GET /api/v1/events/`."""
    events = Event.objects.order_by("-last_seen", "-id")
    filterset = EventFilterSet(params, queryset=events)
    events = filterset.qs if filterset.is_valid() else events
    listed = list(events[:EVENT_ROWS])
    pods, nodes = set(), set()
    for event in listed:
        what, _, rest = event.subject.partition("/")
        if what == "pod" and "/" in rest:
            pods.add(tuple(rest.split("/", 1)))
        elif what == "node" and rest:
            nodes.add(rest)
    known_pods = {
        key
        for key in Pod.objects.filter(name__in={name for _, name in pods}).values_list("namespace", "name")
    } & pods
    known_nodes = set(Node.objects.filter(name__in=nodes).values_list("name", flat=True))
    rows = []
    for event in listed:
        what, _, rest = event.subject.partition("/")
        key = tuple(rest.split("/", 1)) if what == "pod" and "/" in rest else None
        rows.append(
            EventRow(
                event,
                pod=key if key in known_pods else None,
                node=rest if what == "node" and rest in known_nodes else None,
            )
        )
    return {
        "rows": rows,
        "total": events.count(),
        "kinds": Event.KINDS,
        "filters": {"kind": params.get("kind", ""), "subject": params.get("subject", "")},
    }


def fingerprint() -> str:
    """Changes whenever anything a page shows changes: pods, allocations, cards, nodes, cycles,
    evictions.

    Pages poll it and re-render only when it moves. Agent heartbeats alone do not move it.
    """
    parts = [
        Pod.objects.aggregate(n=Count("id"), at=Max("updated_at"), revisions=Sum("revision")),
        Allocation.objects.aggregate(
            last=Max("id"), released=Max("released_at"), active=Count("id", filter=Q(active=True))
        ),
        Card.objects.aggregate(
            n=Count("id"),
            at=Max("updated_at"),
            cordoned=Count("id", filter=Q(cordoned=True)),
            healthy=Count("id", filter=Q(health=True)),
        ),
        Node.objects.aggregate(n=Count("id"), ready=Count("id", filter=Q(ready=True))),
        Cycle.objects.aggregate(last=Max("id")),
        Decision.objects.aggregate(last=Max("id")),
        Eviction.objects.aggregate(n=Count("id"), at=Max("updated_at")),
    ]
    return hashlib.sha1(json.dumps(parts, default=str, sort_keys=True).encode()).hexdigest()[:16]


# --- Simulator -----------------------------------------------------------------------------


@dataclass
class Simulation:
    text: str = ""
    result: dict | None = None
    error: str = ""
    live: bool = False  # against the live cluster (`simulate_live`), not a pasted one
    #: Every problem of a malformed scenario or what-if, `field: message`, in input order.
    problems: list[str] = field(default_factory=list)


def _refused(text: str, exc: ScenarioError, live: bool = False) -> Simulation:
    """The input refused: `error` the first problem (and how many more), `problems` every one
    the reader names (`ScenarioProblems`), so the page lists them all at once."""
    found = getattr(exc, "problems", [exc])
    problems = [f"{each.where}: {each.message}" if each.where else each.message for each in found]
    total = getattr(exc, "total", len(problems))
    if total > len(problems):
        problems.append(f"and {total - len(problems)} more problems")
    return Simulation(text=text, live=live, error=str(exc), problems=problems)


def simulate(text: str, upload=None) -> Simulation:
    """Run a pasted or uploaded scenario (SPEC 9) through the engine; no database involved."""
    if upload is not None:
        if upload.size > SIMULATOR_MAX_BYTES:
            return Simulation(error=f"scenario file: larger than {SIMULATOR_MAX_BYTES // 1024} KiB")
        try:
            text = upload.read().decode("utf-8")
        except UnicodeDecodeError:
            return Simulation(error="scenario file: not UTF-8 text")
    text = text or ""
    if not text.strip():
        return Simulation(text=text, error="scenario: paste a scenario or choose a file")
    if len(text.encode("utf-8")) > SIMULATOR_MAX_BYTES:
        return Simulation(text=text, error=f"scenario: larger than {SIMULATOR_MAX_BYTES // 1024} KiB")
    try:
        scenario = read_scenario_text(text)
        limit = simulations.option("SIMULATE_SYNC_MAX_WORK")
        work = simulations.measure(scenario)
        if work.units <= limit:  # cheap first; then with topology-aware's combinations (`engine.cost`)
            work = simulations.weigh(scenario)
        if work.units > limit:
            return Simulation(
                text=text,
                error=(
                    f"scenario: {work}, more than this page runs (HAMI_SIMULATE_SYNC_MAX_WORK = {limit}); "
                    "POST it to /api/v1/simulate/, which runs it in the background"
                ),
            )
        result = simulations.run_now(scenario, SIMULATOR_TOP)
    except ScenarioError as exc:
        return _refused(text, exc)
    except OverBudget as exc:
        return Simulation(
            text=text,
            error=f"scenario: {exc}, longer than a request may run",
        )
    except simulations.SimulationsBusy as exc:
        return Simulation(text=text, error=f"scenario: not run, {exc}")
    return Simulation(text=text, result=result)


def simulate_live(text: str) -> Simulation:
    """Pasted pods (and edits), `{"pods": [...], "edits": {...}}` as `POST /api/v1/whatif/`
    takes them, decided against the live cluster as the next cycle would see it. Reads the
    database, writes nothing."""
    text = text or ""
    if not text.strip():
        return Simulation(
            text=text, live=True, error='pods: paste {"pods": [...]} to try them on the cluster'
        )
    if len(text.encode("utf-8")) > SIMULATOR_MAX_BYTES:
        return Simulation(text=text, live=True, error=f"pods: larger than {SIMULATOR_MAX_BYTES // 1024} KiB")
    try:
        pods, edits = parse_whatif(read_scenario_text(text, "pods"))
        snapshot = load_snapshot()
        cluster, config = apply_edits(snapshot.cluster, snapshot.config, edits)
        decisions = decide_all(cluster, config, pods)
    except ScenarioError as exc:
        return _refused(text, exc, live=True)
    return Simulation(
        text=text, live=True, result={"pods": [d.as_dict(top=SIMULATOR_TOP) for d in decisions]}
    )


def simulate_example(name: str) -> Simulation:
    """Run one of the bundled examples; only the names in EXAMPLES are read."""
    path = finders.find(f"scheduling/examples/{name}.json") if name in EXAMPLES else None
    if not path:
        return Simulation(error=f"example: no example named {name!r}; try one of {', '.join(EXAMPLES)}")
    with open(path, encoding="utf-8") as handle:
        return simulate(handle.read())
