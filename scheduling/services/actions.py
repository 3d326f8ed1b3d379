"""What an operator does from the dashboard: cordon or uncordon a card or a whole node,
drain a node, requeue or delete a pod. Each is the same write as the API's and the admin's (`cordon_card`,
`requeue_pod`, `release_pod`) plus an audit record: an Event of kind `operator_action`
saying who did what, counted when done again.

Cordoning a node locks the node, then its cards by primary key, in one transaction (the lock
order of docs/architecture.md); uncordoning asks for a cycle, as `cordon_card` does.

Draining a node is cordoning it and listing what runs there; optionally the pods hamiadmin
runs itself (submitted through the API, not Kubernetes or extender pods, whose kubelet or
kube-scheduler owns them) go back to pending, each in its own transaction (pod first, then
its cards), so the next cycle places them elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from scheduling.dbretry import retry_on_conflict
from scheduling.models import Card, Event, Node, Pod, record_event
from scheduling.pipeline.rowlocks import lock_cards, lock_node

from .inventory import cordon_card
from .pods import (
    _pod_for_update,
    _release_allocations,
    back_to_pending,
    capacity_changed,
    group_after_release,
    release_pod,
    requeue_pod,
)

#: The Event kind of the dashboard's audit records.
OPERATOR_ACTION = Event.OPERATOR_ACTION


def _audit(subject: str, reason: str, message: str, by: str) -> None:
    record_event(OPERATOR_ACTION, subject, reason, message, actor=by, severity=Event.NORMAL)


def cordon_card_by(uuid: str, on: bool, by: str) -> Card:
    """`cordon_card`, audited. Raises Card.DoesNotExist."""
    card = cordon_card(uuid, on, by=by)
    verb = "cordoned" if on else "uncordoned"
    _audit(
        f"card/{uuid}", "Cordon" if on else "Uncordon", f"card {uuid} on {card.node.name} {verb} by {by}", by
    )
    return card


def cordon_node(node_name: str, on: bool, by: str) -> int:
    """Cordon (or uncordon) every card of the node; tenants stay. The number of cards that
    changed. Raises Node.DoesNotExist."""
    changed, total = _cordon_node_cards(node_name, on)
    verb = "cordoned" if on else "uncordoned"
    _audit(
        f"node/{node_name}",
        "Cordon" if on else "Uncordon",
        f"{changed} of {total} cards of {node_name} {verb} by {by}",
        by,
    )
    return changed


@retry_on_conflict
def _cordon_node_cards(node_name: str, on: bool) -> tuple[int, int]:
    """(cards changed, cards of the node), in one transaction: the node, then its cards."""
    with transaction.atomic():
        node = lock_node(Node.objects.filter(name=node_name)).get()
        cards = list(lock_cards(Card.objects.filter(node=node)))
        changed = [card for card in cards if card.cordoned != bool(on)]
        for card in changed:
            card.cordoned = bool(on)
            card.save(update_fields=["cordoned", "updated_at"])
        if changed and not on:
            capacity_changed(f"uncordon node {node_name}")
    return len(changed), len(cards)


def running_on(node: Node) -> list[Pod]:
    """What runs on the node: its placed pods (scheduled or running), by name."""
    return list(Pod.objects.filter(node=node, status__in=Pod.BOUND).order_by("namespace", "name"))


def requeueable(pods: list[Pod]) -> list[Pod]:
    """The pods a drain may requeue: those hamiadmin runs itself (submitted through its API)."""
    return [pod for pod in pods if pod.origin == Pod.API]


@dataclass
class Drain:
    """What a drain did: cards cordoned now (of all the node's), the pods that stay (by key)
    and those sent back to pending."""

    node: str
    cordoned: int
    cards: int
    staying: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        """In one line, naming at most NAMED pods of each list."""
        parts = [f"{self.cordoned} of {self.cards} cards of {self.node} cordoned"]
        if self.requeued:
            parts.append(f"requeued {len(self.requeued)}: {_named(self.requeued)}")
        if self.staying:
            parts.append(f"still running {len(self.staying)}: {_named(self.staying)}")
        else:
            parts.append("nothing runs there")
        return "; ".join(parts)


#: Pods named per list in a drain's message and audit record; the rest are counted.
NAMED = 20


def _named(keys: list[str]) -> str:
    more = len(keys) - NAMED
    return ", ".join(keys[:NAMED]) + (f" and {more} more" if more > 0 else "")


def drain_node(node_name: str, by: str, requeue_own: bool = False) -> Drain:
    """Cordon every card of the node (no new placements) and list what runs there; with
    `requeue_own`, the pods hamiadmin runs itself go back to pending (their cards given back),
    so the next cycle places them on another node. Kubernetes and extender pods stay: their
    owners move them. Audited as one `Drain` record. Raises Node.DoesNotExist."""
    cordoned, cards = _cordon_node_cards(node_name, True)
    node = Node.objects.get(name=node_name)
    placed = running_on(node)
    requeued = []
    if requeue_own:
        for pod in requeueable(placed):
            if _requeue_off(pod.pk, node, f"node {node_name} drained by {by}"):
                requeued.append(pod.key)
    drain = Drain(
        node_name, cordoned, cards, [pod.key for pod in placed if pod.key not in requeued], requeued
    )
    _audit(f"node/{node_name}", "Drain", f"{drain.message}; by {by}", by)
    return drain


@retry_on_conflict
def _requeue_off(pod_id: int, node: Node, reason: str) -> bool:
    """Send a placed pod back to pending, if it is still placed on `node`: its cards given back,
    tried again in the next cycle. Whether it was."""
    now = timezone.now()
    with transaction.atomic():
        pod = _pod_for_update(pod_id)
        if pod.status not in Pod.BOUND or pod.node_id != node.pk:
            return False
        _release_allocations(pod, now)
        back_to_pending(pod, reason)
        if pod.group_id is not None:
            group_after_release(pod.group_id, now)
        capacity_changed(f"requeue {pod.key}")
    return True


def requeue_pod_by(pod: Pod, by: str) -> Pod:
    """`requeue_pod`, audited. Raises ValueError for a pod that does not wait."""
    pod = requeue_pod(pod)
    _audit(f"pod/{pod.key}", "Requeue", f"{pod.key} requeued by {by}", by)
    return pod


def delete_pod_by(pod: Pod, by: str) -> Pod | None:
    """`release_pod(pod, DELETED)`, audited: its cards are given back."""
    released = release_pod(pod, Pod.DELETED)
    _audit(f"pod/{pod.key}", "Delete", f"{pod.key} deleted by {by}; its cards given back", by)
    return released
