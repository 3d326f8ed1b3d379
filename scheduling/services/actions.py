"""What an operator does from the dashboard: cordon or uncordon a card or a whole node,
requeue or delete a pod. Each is the same write as the API's and the admin's (`cordon_card`,
`requeue_pod`, `release_pod`) plus an audit record: an Event of kind `operator_action`
saying who did what, counted when done again.

Cordoning a node locks the node, then its cards by primary key, in one transaction (the lock
order of docs/architecture.md); uncordoning asks for a cycle, as `cordon_card` does.
"""

from __future__ import annotations

from django.db import transaction

from scheduling.dbretry import retry_on_conflict
from scheduling.models import Card, Event, Node, Pod, record_event

from .inventory import cordon_card
from .pods import capacity_changed, release_pod, requeue_pod

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


@retry_on_conflict
def cordon_node(node_name: str, on: bool, by: str) -> int:
    """Cordon (or uncordon) every card of the node; tenants stay. The number of cards that
    changed. Raises Node.DoesNotExist."""
    with transaction.atomic():
        node = Node.objects.select_for_update(no_key=True).get(name=node_name)
        cards = list(Card.objects.select_for_update(no_key=True).filter(node=node).order_by("pk"))
        changed = [card for card in cards if card.cordoned != bool(on)]
        for card in changed:
            card.cordoned = bool(on)
            card.save(update_fields=["cordoned", "updated_at"])
        if changed and not on:
            capacity_changed(f"uncordon node {node_name}")
    verb = "cordoned" if on else "uncordoned"
    _audit(
        f"node/{node_name}",
        "Cordon" if on else "Uncordon",
        f"{len(changed)} of {len(cards)} cards of {node_name} {verb} by {by}",
        by,
    )
    return len(changed)


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
