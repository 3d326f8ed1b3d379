"""Nodes and cards: what the agents report, and what operators change by hand (cordon,
reassign). Locks the node, then its cards by primary key (docs/architecture.md, "Lock order").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from dataclasses import field as default

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from scheduling.dbretry import retry_on_conflict
from scheduling.engine import ScenarioError
from scheduling.engine.encoding import pairs_to_links
from scheduling.engine.scenario import parse_node
from scheduling.models import INT32_MAX, Card, Event, Node, record_event
from scheduling.models.cluster import over_capacity_text
from scheduling.ops.metrics import count_claim_refused
from scheduling.pipeline.commit import update_rows
from scheduling.pipeline.rowlocks import lock_cards, lock_node
from scheduling.statements import Statement

from .fields import checked_node_fields
from .pods import capacity_changed

log = logging.getLogger("scheduling.services")

CAPACITY_FIELDS = (
    "type",
    "slots",
    "memory",
    "cores",
    "numa",
    "health",
    "mode",
    "index",
    "links",
    "mig_profiles",
)

#: A card's optional `observed` measurements: report key -> (Card field, kind, least, most).
OBSERVED = {
    "memory": ("observed_memory", int, 0, INT32_MAX),
    "utilization": ("utilization", int, 0, 100),
    "temperature": ("temperature", int, 0, 200),
    "power": ("power", float, 0, 100000),
    "ecc_errors": ("ecc_errors", int, 0, INT32_MAX),
    "xid": ("last_xid", int, 0, INT32_MAX),
}
OBSERVED_FIELDS = (*(field for field, *_ in OBSERVED.values()), "observed_at")


def _observed(device: dict, where: str) -> dict | None:
    """The card's measurements as Card fields, or None when the report has none. A field the
    agent did not send is stored as null (not measured), never as 0."""
    raw = device.get("observed")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}.observed", "must be an object")
    unknown = sorted(str(key) for key in raw if key not in OBSERVED)
    if unknown:
        raise ScenarioError(f"{where}.observed.{unknown[0]}", f"unknown; one of {', '.join(OBSERVED)}")
    values = {}
    for key, (field, kind, least, most) in OBSERVED.items():
        value = raw.get(key)
        if value is not None:
            number_ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not number_ok or not least <= value <= most or (kind is int and value != int(value)):
                number = "a whole number" if kind is int else "a number"
                raise ScenarioError(
                    f"{where}.observed.{key}", f"must be {number} from {least} to {most}, got {value!r}"
                )
            value = kind(value)
        values[field] = value
    return values


def _parse_report(node_name, labels, annotations, devices):
    """The report as an engine Node, validated by the engine's scenario rules (SPEC 9),
    and each card's position in `devices` (for error messages)."""
    if not isinstance(devices, list):
        raise ScenarioError("devices", "must be a list of cards")
    for position, device in enumerate(devices):
        if isinstance(device, dict) and "used" in device:
            raise ScenarioError(
                f"devices[{position}].used", "usage is kept by the scheduler; do not report it"
            )
    raw = {"name": node_name, "labels": labels or {}, "annotations": annotations or {}, "devices": devices}
    try:
        parsed = parse_node(raw, "")
    except ScenarioError as exc:
        raise ScenarioError(exc.where.lstrip("."), exc.message) from None
    if len(parsed.name) > 253:
        raise ScenarioError("name", "at most 253 characters")
    positions: dict[str, int] = {}
    for position, device in enumerate(devices):
        uuid = device["uuid"].strip()
        if uuid in positions:
            raise ScenarioError(f"devices[{position}].uuid", f"{uuid!r} repeats devices[{positions[uuid]}]")
        if len(uuid) > 128 or len(device.get("type") or "") > 128:
            raise ScenarioError(f"devices[{position}]", "uuid and type are at most 128 characters")
        for name in ("index", "slots", "memory", "cores", "numa"):
            value = device.get(name)
            if isinstance(value, int) and not -(2**31) <= value <= INT32_MAX:
                raise ScenarioError(f"devices[{position}].{name}", f"at most {INT32_MAX}, got {value}")
        _observed(device, f"devices[{position}]")
        positions[uuid] = position
    return parsed, positions


@retry_on_conflict
def report_inventory(
    node_name: str,
    labels=None,
    annotations=None,
    devices=None,
    *,
    taints=None,
    unschedulable=None,
    allocatable=None,
    dra=None,
) -> Node:
    """An agent's report of its node: upsert the node and its cards, and beat its heart.

    `dra`: the watcher's DRA devices (card UUID -> driver, pool, device, shareable,
    capacity names; `kube.drastate`), stored as `Card.dra`; agents never send it.

    `taints`, `unschedulable` and `allocatable` are the Kubernetes Node's (SPEC 10, API forms:
    `spec.taints`, `spec.unschedulable`, `status.allocatable`); each left as stored when None
    (`set_node_fields` changes them alone).

    `devices` are SPEC 9 cards without `used` (usage is the scheduler's). Cards missing from
    the report are kept, marked absent: their tenants and history stay, they take no new pods.
    A card's `cordoned` is changed only when the report names it (else `cordon_card` rules).
    Raises ScenarioError naming the field; then nothing is written. A valid report makes the
    node ready and clears `not_ready_reason`. Asks for a cycle when anything but the
    heartbeat changed.

    A card belongs to the node that first reported it, ready or not, until an operator
    moves it (`reassign_card`). A report naming another node's card is refused for that
    card only: the rest of the report is taken, the claim is recorded as an Event and
    listed on the returned node as `refused` ([{"field", "uuid", "message"}]), so a token
    of one node can never take another's cards, nor lock the rightful agent out.

    A report that shrinks a card below what its tenants hold keeps the tenants (they run),
    sets `Card.over_capacity` saying by how much, and records an Event; the card takes no
    new pods until it fits again (`over_capacity` is cleared then).

    A card's optional `observed` object carries what the agent measured (memory in use,
    utilization, temperature, power, ECC errors, the latest XID); it is stored beside the
    grants, and a report without it leaves the last measurements as they were.
    """
    devices = [] if devices is None else devices
    parsed, positions = _parse_report(node_name, labels, annotations, devices)
    kube_fields = checked_node_fields(taints, unschedulable, allocatable)
    now = timezone.now()
    refused: list[dict] = []
    with transaction.atomic():
        node = _NODE_LOCKED.first(parsed.name)
        if node is None:
            changed = True
            node = Node.objects.create(
                name=parsed.name,
                labels=parsed.labels,
                annotations=parsed.annotations,
                ready=True,
                last_heartbeat=now,
                **kube_fields,
            )
        else:
            changed = not node.ready or node.annotations != parsed.annotations or node.labels != parsed.labels
            changed = changed or any(getattr(node, name) != value for name, value in kube_fields.items())
            node.labels, node.annotations, node.ready = parsed.labels, parsed.annotations, True
            node.not_ready_reason, node.last_heartbeat = "", now
            for name, value in kube_fields.items():
                setattr(node, name, value)
            node.save(
                update_fields=[
                    "labels",
                    "annotations",
                    "ready",
                    "not_ready_reason",
                    "last_heartbeat",
                    *kube_fields,
                    "updated_at",
                ]
            )
        existing = {card.uuid: card for card in _CARDS_LOCKED.rows(node.pk, list(positions))}
        foreign = {uuid for uuid, row in existing.items() if row.node_id != node.id}
        # Each taken card's pair scores, both ways, leaving out the cards whose claim is refused.
        links = pairs_to_links((card.uuid for card in parsed.cards if card.uuid not in foreign), parsed.links)
        creates, updates, shrunk, measured = [], [], [], []
        for card in parsed.cards:
            device = devices[positions[card.uuid]]
            row = existing.get(card.uuid)
            if card.uuid in foreign:
                refused.append(_refuse_claim(node.name, existing[card.uuid], positions[card.uuid]))
                continue
            values = {
                "index": card.index,
                "type": card.type,
                "slots": card.slots,
                "memory": card.memory,
                "cores": card.cores,
                "numa": card.numa,
                "health": card.health,
                "mode": card.mode[:64],
                "links": links[card.uuid],
                # a MIG card's profiles (`migProfiles` of the device, HAMi's wire form)
                "mig_profiles": card.partition.as_wire() if card.partition else [],
                "present": True,
            }
            if dra is not None:
                values["dra"] = dict(dra.get(card.uuid) or {})
            if "cordoned" in device:
                values["cordoned"] = device["cordoned"]
            observed = _observed(device, f"devices[{positions[card.uuid]}]")
            if row is None:
                creates.append(Card(uuid=card.uuid, node=node, **values, **_measured(observed, now)))
                continue
            if observed is not None:
                for name, value in _measured(observed, now).items():
                    setattr(row, name, value)
                measured.append(row)
            values["over_capacity"] = over_capacity_text(
                row.used_slots, row.used_memory, row.used_cores, card.slots, card.memory, card.cores
            )
            if values["over_capacity"] and values["over_capacity"] != row.over_capacity:
                shrunk.append((row, values["over_capacity"]))
            differs = {name: value for name, value in values.items() if getattr(row, name) != value}
            if differs:
                for name, value in differs.items():
                    setattr(row, name, value)
                row.updated_at = now  # `auto_now` is applied by save() only
                updates.append(row)
        for uuid, row in existing.items():
            if uuid not in positions and row.node_id == node.id and row.present:
                row.present, row.updated_at = False, now
                updates.append(row)
        if creates:
            Card.objects.bulk_create(creates)
        if updates:
            _write_cards(
                updates, ("present", "cordoned", "over_capacity", "dra", *CAPACITY_FIELDS, "updated_at")
            )
        if measured:
            # Apart from `updated_at`: measurements move on every report, and the pages'
            # live token must not (it follows what scheduling changes).
            _write_cards(measured, OBSERVED_FIELDS)
        for row, text in shrunk:
            log.warning("card %s of %s reported smaller than its tenants hold: %s", row.uuid, node.name, text)
            record_event(
                Event.CARD_OVERCOMMITTED,
                f"card/{row.uuid}",
                "ShrunkUnderTenants",
                f"node {node.name} reported card {row.uuid} smaller than its tenants hold: {text}; "
                "the tenants keep running, the card takes no new pods until it fits again",
                actor=f"agent:{node.name}",
            )
        if changed or creates or updates:
            capacity_changed(f"inventory {node.name}")
    node.refused = refused
    return node


#: An agent report's locks, compiled once (per number of cards): the node by name, then the
#: node's cards and those the report names, with their nodes read, not locked.
_NODE_LOCKED = Statement(lambda name: lock_node(Node.objects.filter(name=name))[:1])
_CARDS_LOCKED = Statement(
    lambda node, uuids: lock_cards(
        Card.objects.select_related("node").filter(Q(node=node) | Q(uuid__in=uuids)), of_self=True
    )
)


def _write_cards(rows: list[Card], names: tuple[str, ...]) -> None:
    """Write these columns of these card rows as they stand in memory, in one statement
    (`update_rows`):
    `bulk_update`'s CASE per column and row was two thirds of an agent report's CPU (~20 ms
    for a report of 8 cards that changes nothing but their measurements)."""
    update_rows(
        Card, list(names), [{"id": row.pk, **{name: getattr(row, name) for name in names}} for row in rows]
    )


@dataclass
class Measured:
    """What `record_measurements` did: cards written, UUIDs not of the node, cards refused
    (uuid -> the field at fault and why)."""

    written: list[str] = default(default_factory=list)
    unknown: list[str] = default(default_factory=list)
    refused: dict[str, str] = default(default_factory=dict)


@retry_on_conflict
def record_measurements(node_name: str, observed: dict[str, dict]) -> Measured:
    """Measurements of a node's cards read from elsewhere than its own agent (HAMi's vGPU
    monitor, kube/vgpumonitor.py): card UUID -> the report's `observed` object.

    Only the measurement fields change, as a report's `observed` changes them (a key left
    out is stored as not measured). The node's heartbeat, capacity and grants are not
    touched: its inventory stays its register's. A UUID that is not one of the node's cards
    is left out (`unknown`), and a card whose values fail the report's ranges is left out
    (`refused`); the other cards are written.
    """
    result = Measured()
    values: dict[str, dict] = {}
    for uuid, raw in observed.items():
        try:
            checked = _observed({"observed": raw}, uuid)
        except ScenarioError as exc:
            result.refused[uuid] = f"{exc.where}: {exc.message}"
            continue
        values[uuid] = checked or {}
    now = timezone.now()
    with transaction.atomic():
        node = lock_node(Node.objects.filter(name=node_name)).first()
        cards = (
            {}
            if node is None
            else {
                card.uuid: card for card in lock_cards(Card.objects.filter(node=node, uuid__in=list(values)))
            }
        )
        for uuid, fields in values.items():
            card = cards.get(uuid)
            if card is None:
                result.unknown.append(uuid)
                continue
            for name, value in _measured(fields, now).items():
                setattr(card, name, value)
            result.written.append(uuid)
        if result.written:
            _write_cards([cards[uuid] for uuid in result.written], OBSERVED_FIELDS)
    return result


def _measured(observed: dict | None, now) -> dict:
    """Card fields for a report's measurements, stamped with the report's time."""
    return {} if observed is None else {**observed, "observed_at": now}


def _refuse_claim(claimant: str, row: Card, position: int) -> dict:
    """Record a refused claim on another node's card, and say it to the reporter."""
    message = (
        f"card {row.uuid} belongs to node {row.node.name}; this report of node {claimant} is refused for "
        "this card only (an operator can reassign it)"
    )
    log.warning("%s", message)
    record_event(
        Event.CARD_CLAIM_REFUSED,
        f"card/{row.uuid}",
        "ClaimedByAnotherNode",
        message,
        actor=f"agent:{claimant}",
    )
    count_claim_refused()
    return {"field": f"devices[{position}].uuid", "uuid": row.uuid, "message": message}


@retry_on_conflict
def set_node_fields(node_name: str, *, taints=None, unschedulable=None, allocatable=None) -> Node | None:
    """The Kubernetes Node's scheduling fields changed (SPEC 10, API forms): `taints`
    (`[{key, value, effect}]`), `unschedulable` (`spec.unschedulable`, a cordon) and
    `allocatable` (resource name -> quantity as given). Each None is left as stored. A change
    wakes the scheduler (an untaint, uncordon or larger allocatable may let pods in). None
    for a node hamiadmin does not know (an agent's first report creates it, with these
    fields). Raises ScenarioError naming the field; then nothing is written.

    Public API: `services.set_node_fields(node_name, taints=..., unschedulable=..., allocatable=...)`.
    """
    fields = checked_node_fields(taints, unschedulable, allocatable)
    with transaction.atomic():
        node = lock_node(Node.objects.filter(name=node_name)).first()
        if node is None:
            return None
        differs = [name for name, value in fields.items() if getattr(node, name) != value]
        if differs:
            for name in differs:
                setattr(node, name, fields[name])
            node.save(update_fields=[*differs, "updated_at"])
            capacity_changed(f"node fields of {node_name}")
    return node


@retry_on_conflict
def reassign_card(uuid: str, node_name: str, by: str = "") -> Card:
    """An operator moves a card to another node (it was physically moved, or its node was
    rebuilt under another name). Refused while the card has tenants: release them first.
    Audited as an Event. Raises Card.DoesNotExist, Node.DoesNotExist, ValueError."""
    with transaction.atomic():
        target = lock_node(Node.objects.filter(name=node_name)).get()
        card = lock_cards(Card.objects.select_related("node").filter(uuid=uuid)).get()
        if card.node_id == target.id:
            return card
        if card.used_slots:
            raise ValueError(
                f"card {uuid} has {card.used_slots} tenant(s) on {card.node.name}; release them first"
            )
        before = card.node.name
        card.node, card.present = target, False  # until the new node's agent reports it
        card.links = {}
        card.save(update_fields=["node", "present", "links", "updated_at"])
        record_event(
            Event.CARD_REASSIGNED,
            f"card/{uuid}",
            "Reassigned",
            f"card {uuid} moved from node {before} to node {node_name}",
            actor=by or "operator",
            severity=Event.NORMAL,
        )
    return card


@retry_on_conflict
def cordon_card(uuid: str, on: bool, by: str = "") -> Card:
    """Keep a card from new allocations (on) or give it back (off). Tenants are untouched.
    Raises Card.DoesNotExist for an unknown UUID."""
    with transaction.atomic():
        card = lock_cards(Card.objects.filter(uuid=uuid)).get()
        if card.cordoned != bool(on):
            card.cordoned = bool(on)
            card.save(update_fields=["cordoned", "updated_at"])
            if not on:
                capacity_changed(f"uncordon {uuid}")
    return card


@retry_on_conflict
def mark_node_not_ready(node_name: str, reason: str) -> Node:
    """An agent cannot vouch for the node now (unreadable inventory, Kubernetes says NotReady,
    node deleted): it takes no new pods (`NodeNotReady`), its tenants stay. The reason is kept
    in `not_ready_reason`; the next valid `report_inventory` makes the node ready again and
    clears it. A node never seen before is created, not ready."""
    reason = str(reason)[:1000]
    with transaction.atomic():
        node = lock_node(Node.objects.filter(name=node_name)).first()
        if node is None:
            return Node.objects.create(name=node_name, ready=False, not_ready_reason=reason)
        if node.ready or node.not_ready_reason != reason:
            node.ready, node.not_ready_reason = False, reason
            node.save(update_fields=["ready", "not_ready_reason", "updated_at"])
    return node
