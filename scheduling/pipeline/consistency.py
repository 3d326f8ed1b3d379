"""Checks that the counters tell the truth: what tests, operators and the housekeeping run
to trust a card.

Four kinds of drift, each of which should never be found:

- `counter_drift`: a card's `used_*` differ from the sum of its active allocations and of
  the released ones whose decrement is still owed (`pipeline.settle`);
- `over_capacity`: a card holds more than it has (counted from the counters);
- `ghost_allocation`: an active allocation whose pod is not placed (finished, deleted,
  pending again): the card stays held by nobody (HAMi #2923 lost a node's 8 H100s so);
- `unbacked_placement`: a pod shown placed or running that holds no active allocation.

And two kinds against Kubernetes, when the caller hands `check()` what the API server lists
(a `KubernetesView`, read by `kube.reconcile`: the kube agent on every resync, or
`manage.py check_consistency --kubeconfig`); this module never talks to Kubernetes:

- `unknown_bound_pod`: a pod bound in Kubernetes by HAMi's rules (our scheduler name, a
  node, HAMi's allocation annotation, not ended) that is not placed here on that node: its
  cards are used but counted free here;
- `vanished_pod`: a pod placed here as a Kubernetes pod that the API server no longer has
  (or has as another incarnation): its cards are held for nothing.

`check()` only reads; `report()` turns findings into metrics and events. The repair is a
write path, `scheduling.services.repair_consistency`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, Sum
from django.db.models.functions import Coalesce

from ..models import Allocation, Card, Event, Pod, record_event
from ..models.cluster import overcommitted_cards
from ..ops import metrics

COUNTER_DRIFT = "counter_drift"
OVER_CAPACITY = "over_capacity"
GHOST_ALLOCATION = "ghost_allocation"
UNBACKED_PLACEMENT = "unbacked_placement"
UNKNOWN_BOUND_POD = "unknown_bound_pod"
VANISHED_POD = "vanished_pod"
KINDS = (COUNTER_DRIFT, OVER_CAPACITY, GHOST_ALLOCATION, UNBACKED_PLACEMENT)
KUBERNETES_KINDS = (UNKNOWN_BOUND_POD, VANISHED_POD)
#: The kind of the events the check records (one per subject and drift kind, counted again).
EVENT_KIND = Event.CONSISTENCY
_REASONS = {
    COUNTER_DRIFT: "CounterDrift",
    OVER_CAPACITY: "OverCapacity",
    GHOST_ALLOCATION: "GhostAllocation",
    UNBACKED_PLACEMENT: "UnbackedPlacement",
    UNKNOWN_BOUND_POD: "BoundUnknownHere",
    VANISHED_POD: "VanishedFromKubernetes",
}


#: The allocations a card's counters count: the active ones, and the released ones whose
#: decrement is owed (`pipeline.settle`: the card was held when they were released).
COUNTED = Q(allocations__active=True) | Q(allocations__owed=True)


def held(cards):
    """`cards` with what their counted allocations (`COUNTED`) hold: `held_slots`,
    `held_memory`, `held_cores`, what their counters should read (the check and the repair)."""
    return cards.annotate(
        held_slots=Count("allocations", filter=COUNTED),
        held_memory=Coalesce(Sum("allocations__memory", filter=COUNTED), 0),
        held_cores=Coalesce(Sum("allocations__cores", filter=COUNTED), 0),
    )


def counter_drift(card_ids=None) -> list[dict[str, Any]]:
    """Cards whose `used_*` differ from the sum of their active allocations and the owed ones
    (should be none). `card_ids` narrows the look to those cards."""
    cards = Card.objects.all() if card_ids is None else Card.objects.filter(pk__in=card_ids)
    rows = held(cards).values(
        "id", "uuid", "used_slots", "used_memory", "used_cores", "held_slots", "held_memory", "held_cores"
    )
    return [
        dict(card)
        for card in rows
        if (card["used_slots"], card["used_memory"], card["used_cores"])
        != (card["held_slots"], card["held_memory"], card["held_cores"])
    ]


def overcommitted() -> list[str]:
    """UUIDs of cards holding more than their capacity (should be none)."""
    return list(overcommitted_cards().values_list("uuid", flat=True))


def ghost_allocations() -> list[dict[str, Any]]:
    """Active allocations whose pod is not placed: not `scheduled` nor `running`."""
    rows = (
        Allocation.objects.filter(active=True)
        .exclude(pod__status__in=Pod.BOUND)
        .order_by("pod_id", "pk")
        .values("id", "pod_id", "pod__namespace", "pod__name", "pod__status", "card_id", "card__uuid")
    )
    return [
        {
            "allocation": row["id"],
            "pod_id": row["pod_id"],
            "pod": f"{row['pod__namespace']}/{row['pod__name']}",
            "status": row["pod__status"],
            "card_id": row["card_id"],
            "card": row["card__uuid"],
        }
        for row in rows
    ]


def unbacked_placements() -> list[dict[str, Any]]:
    """Pods shown placed or running that hold no active allocation."""
    held = Allocation.objects.filter(pod=OuterRef("pk"), active=True)
    rows = (
        Pod.objects.filter(status__in=Pod.BOUND)
        .exclude(Exists(held))
        .order_by("pk")
        .values("id", "namespace", "name", "status")
    )
    return [
        {"pod_id": row["id"], "pod": f"{row['namespace']}/{row['name']}", "status": row["status"]}
        for row in rows
    ]


@dataclass(frozen=True)
class SeenPod:
    """A pod as the API server lists it, cut down to what the comparison needs.
    `hami_bound`: our scheduler name, a node, HAMi's allocation annotation, not ended."""

    namespace: str
    name: str
    uid: str
    node: str = ""
    hami_bound: bool = False


@dataclass(frozen=True)
class KubernetesView:
    """One full list of the pods the kube agent watches. `origins`: the rows such a list
    covers (`kubernetes` for the watcher's scheduler-name selector; `extender` too when
    every pod is listed), so a pod outside the selector is never called vanished."""

    pods: tuple[SeenPod, ...]
    origins: tuple[str, ...] = (Pod.KUBERNETES,)


def unknown_bound_pods(view: KubernetesView) -> list[dict[str, Any]]:
    """Pods HAMi-bound in Kubernetes that are not placed here on that node, this very uid."""
    bound = [pod for pod in view.pods if pod.hami_bound]
    rows = {
        (row["namespace"], row["name"]): row
        for row in Pod.objects.filter(namespace__in={pod.namespace for pod in bound})
        .filter(name__in={pod.name for pod in bound})
        .values("id", "namespace", "name", "uid", "status", "node__name")
    }
    found = []
    for pod in bound:
        row = rows.get((pod.namespace, pod.name))
        if row is None:
            why = "unknown here"
        elif row["uid"] and pod.uid and row["uid"] != pod.uid:
            why = f"here is another incarnation ({row['uid']})"
        elif row["status"] not in Pod.BOUND:
            why = f"{row['status']} here"
        elif row["node__name"] != pod.node:
            why = f"placed on {row['node__name']} here"
        else:
            continue
        found.append(
            {
                "pod_id": row["id"] if row else None,
                "pod": f"{pod.namespace}/{pod.name}",
                "uid": pod.uid,
                "node": pod.node,
                "why": why,
            }
        )
    return found


def vanished_pods(view: KubernetesView, pod_ids=None) -> list[dict[str, Any]]:
    """Placed rows of Kubernetes pods (of the view's origins) the list does not hold, or
    holds as another uid. `pod_ids` narrows the look to those rows."""
    listed = {(pod.namespace, pod.name, pod.uid) for pod in view.pods}
    placed = Pod.objects.filter(status__in=Pod.BOUND, origin__in=view.origins)
    if pod_ids is not None:
        placed = placed.filter(pk__in=pod_ids)
    rows = (
        placed.exclude(uid="").order_by("pk").values("id", "namespace", "name", "uid", "status", "node__name")
    )
    return [
        {
            "pod_id": row["id"],
            "pod": f"{row['namespace']}/{row['name']}",
            "uid": row["uid"],
            "status": row["status"],
            "node": row["node__name"],
        }
        for row in rows
        if (row["namespace"], row["name"], row["uid"]) not in listed
    ]


@dataclass
class ConsistencyReport:
    """What one check found, by kind; empty lists when the counters tell the truth."""

    counter_drift: list[dict[str, Any]] = field(default_factory=list)
    over_capacity: list[str] = field(default_factory=list)
    ghost_allocations: list[dict[str, Any]] = field(default_factory=list)
    unbacked_placements: list[dict[str, Any]] = field(default_factory=list)
    #: Whether Kubernetes was compared at all (else the two lists below say nothing).
    kubernetes_checked: bool = False
    unknown_bound_pods: list[dict[str, Any]] = field(default_factory=list)
    vanished_pods: list[dict[str, Any]] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not any(self.counts().values())

    def counts(self) -> dict[str, int]:
        counts = {
            COUNTER_DRIFT: len(self.counter_drift),
            OVER_CAPACITY: len(self.over_capacity),
            GHOST_ALLOCATION: len(self.ghost_allocations),
            UNBACKED_PLACEMENT: len(self.unbacked_placements),
        }
        if self.kubernetes_checked:
            counts[UNKNOWN_BOUND_POD] = len(self.unknown_bound_pods)
            counts[VANISHED_POD] = len(self.vanished_pods)
        return counts

    def lines(self) -> list[str]:
        """One operator line per finding."""
        out = []
        for card in self.counter_drift:
            out.append(
                f"card/{card['uuid']}: counters say {card['used_slots']} slots, {card['used_memory']} MiB,"
                f" {card['used_cores']} cores; active allocations hold {card['held_slots']} slots,"
                f" {card['held_memory']} MiB, {card['held_cores']} cores"
            )
        for uuid in self.over_capacity:
            out.append(f"card/{uuid}: holds more than its capacity")
        for ghost in self.ghost_allocations:
            out.append(
                f"pod/{ghost['pod']}: {ghost['status']} but still holds card {ghost['card']}"
                f" (allocation {ghost['allocation']})"
            )
        for pod in self.unbacked_placements:
            out.append(f"pod/{pod['pod']}: {pod['status']} but holds no card")
        for pod in self.unknown_bound_pods:
            out.append(
                f"pod/{pod['pod']}: bound to {pod['node']} in Kubernetes with HAMi's allocation,"
                f" {pod['why']}: its cards are counted free here"
            )
        for pod in self.vanished_pods:
            out.append(
                f"pod/{pod['pod']}: {pod['status']} on {pod['node']} here, but Kubernetes no longer"
                f" has it (uid {pod['uid']})"
            )
        return out

    def subjects(self) -> list[tuple[str, str]]:
        """(kind, subject) of each finding, in the order of `lines()`."""
        return (
            [(COUNTER_DRIFT, f"card/{card['uuid']}") for card in self.counter_drift]
            + [(OVER_CAPACITY, f"card/{uuid}") for uuid in self.over_capacity]
            + [(GHOST_ALLOCATION, f"pod/{ghost['pod']}") for ghost in self.ghost_allocations]
            + [(UNBACKED_PLACEMENT, f"pod/{pod['pod']}") for pod in self.unbacked_placements]
            + [(UNKNOWN_BOUND_POD, f"pod/{pod['pod']}") for pod in self.unknown_bound_pods]
            + [(VANISHED_POD, f"pod/{pod['pod']}") for pod in self.vanished_pods]
        )


def check(kubernetes: KubernetesView | None = None) -> ConsistencyReport:
    """Read the four kinds of drift, and the two against Kubernetes when a list of its pods
    is given (no locks, no writes)."""
    found = ConsistencyReport(
        counter_drift=counter_drift(),
        over_capacity=overcommitted(),
        ghost_allocations=ghost_allocations(),
        unbacked_placements=unbacked_placements(),
    )
    if kubernetes is not None:
        found.kubernetes_checked = True
        found.unknown_bound_pods = unknown_bound_pods(kubernetes)
        found.vanished_pods = vanished_pods(kubernetes)
    return found


def kubernetes_only(view: KubernetesView) -> ConsistencyReport:
    """Only the two kinds against Kubernetes (the kube agent's check on each resync; the
    housekeeping reads the other four)."""
    return ConsistencyReport(
        kubernetes_checked=True,
        unknown_bound_pods=unknown_bound_pods(view),
        vanished_pods=vanished_pods(view),
    )


def report(found: ConsistencyReport, actor: str = "housekeeping") -> None:
    """Findings as metrics (`hamiadmin_consistency_findings{kind}`) and events (kind
    `consistency`, one per subject and kind, counted again on each check that finds it)."""
    for kind, count in found.counts().items():
        metrics.consistency_found(kind, count)
    for (kind, subject), line in zip(found.subjects(), found.lines(), strict=True):
        record_event(EVENT_KIND, subject, _REASONS[kind], line, actor=actor, severity=Event.WARNING)
