"""Repairing drift between the counters, the allocations and the pods.

`scheduling.pipeline.consistency.check()` finds the drift; this is the write path that
fixes it, in the global lock order (docs/architecture.md, "Lock order"): the pods whose
allocations are ghosts first, by primary key, then every card involved, by primary key.
Under the card locks no commit or release can be half-way through those cards (they lock
them before they write allocations or counters), so the counters are set to exactly what
the committed active allocations hold, with the released ones whose decrement is still owed
(`pipeline.settle`): their settle lowers the counters by them later, once, so the repair
counts them as held and leaves their flags alone.

Against Kubernetes (when the check was handed its pods, `kube.reconcile`): a pod placed here
that Kubernetes no longer has is released as deleted, that incarnation only; a pod bound in
Kubernetes that is not placed here is reported and left alone: its usage is only known from
its annotation, and hamiadmin does not adopt pods (docs/kubernetes.md, Limits); an operator
deletes or drains it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from scheduling.dbretry import retry_on_conflict
from scheduling.models import Allocation, Card, Event, Pod, record_event
from scheduling.models.cluster import over_capacity_text
from scheduling.ops import metrics
from scheduling.pipeline import consistency
from scheduling.pipeline.rowlocks import lock_cards, lock_pods

from .pods import capacity_changed, release_pod, requeue_placed_pod


@dataclass
class Repair:
    """What `repair_consistency` changed: card UUIDs whose counters were set, ghost
    allocations released (pod key -> card UUIDs), placed pods put back in the queue, and
    running pods holding no card (left alone: Kubernetes runs them; an operator decides)."""

    counters_fixed: list[str] = field(default_factory=list)
    ghosts_released: dict[str, list[str]] = field(default_factory=dict)
    requeued: list[str] = field(default_factory=list)
    left_alone: list[str] = field(default_factory=list)
    #: Pods placed here that Kubernetes no longer has, released as deleted.
    vanished_released: list[str] = field(default_factory=list)
    #: Pods bound in Kubernetes not placed here: reported, not adopted.
    unknown_left: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.counters_fixed or self.ghosts_released or self.requeued or self.vanished_released)


@retry_on_conflict
def _release_ghosts_and_fix_counters(actor: str) -> tuple[list[str], dict[str, list[str]]]:
    """One transaction: pods of ghost allocations locked, then the cards, then the ghosts
    released and the counters of every locked card set from its active (and owed) allocations."""
    now = timezone.now()
    with transaction.atomic():
        ghost_pods = sorted({ghost["pod_id"] for ghost in consistency.ghost_allocations()})
        pods = list(lock_pods(Pod.objects.filter(pk__in=ghost_pods)))
        not_placed = [pod.pk for pod in pods if pod.status not in Pod.BOUND]
        ghosts = list(
            Allocation.objects.filter(active=True, pod_id__in=not_placed).values_list(
                "pk", "card_id", "pod__namespace", "pod__name", "card__uuid"
            )
        )
        drifting = {card["id"] for card in consistency.counter_drift()}
        card_ids = sorted(drifting | {card_id for _, card_id, *_ in ghosts})
        if not card_ids:
            return [], {}
        cards = list(lock_cards(Card.objects.filter(pk__in=card_ids)))
        released: dict[str, list[str]] = {}
        if ghosts:
            Allocation.objects.filter(pk__in=[pk for pk, *_ in ghosts]).update(active=False, released_at=now)
            for _, _, namespace, name, uuid in ghosts:
                released.setdefault(f"{namespace}/{name}", []).append(uuid)
        # owed decrements count (`consistency.COUNTED`): their settle lowers them, once
        held = {
            row["pk"]: row
            for row in consistency.held(Card.objects.filter(pk__in=card_ids)).values(
                "pk", "held_slots", "held_memory", "held_cores"
            )
        }
        fixed = []
        for card in cards:
            row = held[card.pk]
            truth = (row["held_slots"], row["held_memory"], row["held_cores"])
            if (card.used_slots, card.used_memory, card.used_cores) == truth:
                continue
            said = f"{card.used_slots} slots, {card.used_memory} MiB, {card.used_cores} cores"
            card.used_slots, card.used_memory, card.used_cores = truth
            card.over_capacity = over_capacity_text(*truth, card.slots, card.memory, card.cores)
            fixed.append(card)
            record_event(
                consistency.EVENT_KIND,
                f"card/{card.uuid}",
                "CountersRepaired",
                f"counters said {said}; set to {truth[0]} slots, {truth[1]} MiB, {truth[2]} cores,"
                " what its active allocations hold",
                actor=actor,
                severity=Event.NORMAL,
            )
        Card.objects.bulk_update(fixed, ["used_slots", "used_memory", "used_cores", "over_capacity"])
        for key, uuids in released.items():
            record_event(
                consistency.EVENT_KIND,
                f"pod/{key}",
                "GhostReleased",
                f"released its allocations on {', '.join(uuids)}: the pod is not placed",
                actor=actor,
                severity=Event.NORMAL,
            )
        if released or fixed:
            capacity_changed("consistency repair")
        return [card.uuid for card in fixed], released


def release_vanished(found: consistency.ConsistencyReport, actor: str) -> list[str]:
    """Release, as deleted, each placed pod Kubernetes was found not to have (the very
    incarnation found: a pod created again meanwhile under that name is left alone)."""
    released = []
    for pod in found.vanished_pods:
        try:
            after = release_pod(pod["pod_id"], Pod.DELETED, expected_uid=pod["uid"])
        except Pod.DoesNotExist:
            continue
        if after is None or after.status != Pod.DELETED:
            continue
        released.append(pod["pod"])
        record_event(
            consistency.EVENT_KIND,
            f"pod/{pod['pod']}",
            "VanishedReleased",
            f"released as deleted: Kubernetes no longer has uid {pod['uid']}",
            actor=actor,
            severity=Event.NORMAL,
        )
    metrics.consistency_repaired(consistency.VANISHED_POD, len(released))
    return released


def repair_consistency(
    actor: str = "check_consistency", kubernetes: consistency.ConsistencyReport | None = None
) -> Repair:
    """Fix what `pipeline.consistency.check()` finds: ghost allocations released, counters
    set to the sum of the active allocations, placed-but-unbound pods holding no card put
    back in the queue (through `requeue_placed_pod`, their own transactions). Running pods
    with no card are only reported. With `kubernetes` (a check that compared Kubernetes'
    pods), vanished pods are released first; unknown bound pods are only reported.
    Records events and `hamiadmin_consistency_repairs`."""
    vanished, unknown = [], []
    if kubernetes is not None and kubernetes.kubernetes_checked:
        vanished = release_vanished(kubernetes, actor)
        unknown = [pod["pod"] for pod in kubernetes.unknown_bound_pods]
    fixed, released = _release_ghosts_and_fix_counters(actor)
    repair = Repair(
        counters_fixed=fixed, ghosts_released=released, vanished_released=vanished, unknown_left=unknown
    )
    for pod in consistency.unbacked_placements():
        if pod["status"] != Pod.SCHEDULED:
            repair.left_alone.append(pod["pod"])
            continue
        after = requeue_placed_pod(pod["pod_id"], reason="placed but held no card (consistency repair)")
        if after is not None and after.status == Pod.PENDING:
            repair.requeued.append(pod["pod"])
    metrics.consistency_repaired(consistency.COUNTER_DRIFT, len(fixed))
    metrics.consistency_repaired(consistency.GHOST_ALLOCATION, sum(len(uuids) for uuids in released.values()))
    metrics.consistency_repaired(consistency.UNBACKED_PLACEMENT, len(repair.requeued))
    return repair
