"""The `Statement` that lets a cycle try a gang on its snapshot and take it back, and
`hold_back`, how a batch rule keeps a decided pod pending."""

from __future__ import annotations

from dataclasses import dataclass

from ..decision import PENDING, SCHEDULED, Decision, Hold
from ..noderules import Footprint, accounting
from .queues import NamespaceBook, QueueBook, decision_usage

#: A card's usage taken up to its capacity, per card: (card uuid, slots, MiB, cores).
Fill = tuple[tuple[str, int, int, int], ...]


def fill_cards(node, uuids) -> Fill:
    """Take up what is left of each card `uuids` on `node` (slots, MiB, cores), so no other
    pod fits there, whatever it asks: a card held whole for an exclusive preemptor. What was
    taken, for `unfill_cards`; the caller touches the node."""
    taken = []
    for card in node.cards:
        if card.uuid in uuids:
            slots = max(0, card.slots - card.used_slots)
            memory = max(0, card.memory - card.used_memory)
            cores = max(0, card.cores - card.used_cores)
            card.used_slots += slots
            card.used_memory += memory
            card.used_cores += cores
            taken.append((card.uuid, slots, memory, cores))
    return tuple(taken)


def unfill_cards(node, taken: Fill) -> None:
    """Give back exactly what `fill_cards` took."""
    by_uuid = {card.uuid: card for card in node.cards}
    for uuid, slots, memory, cores in taken:
        card = by_uuid[uuid]
        card.used_slots -= slots
        card.used_memory -= memory
        card.used_cores -= cores


#: The first item of a Statement's log entry for a card held whole (`hold_whole`).
WHOLE = "whole"
#: A log entry undone by calling what it holds (`on_rollback`).
UNDO = "undo"


@dataclass(frozen=True, slots=True)
class Mark:
    """A point of a Statement to roll back to."""

    at: int


class Statement:
    """The placements a cycle has assumed on its snapshot, in order, so a gang that does not
    reach `min_member` can be taken back exactly (Volcano's statement, in our words).

    `assume` applies a scheduled decision to the scheduler's snapshot and to the queue book;
    `rollback(mark)` undoes everything assumed after `mark`, newest first. The scheduler's
    node versions only move forward, so no verdict cached for an assumed state is read again.
    """

    def __init__(self, scheduler, book: QueueBook | None = None, namespaces: NamespaceBook | None = None):
        self.scheduler = scheduler
        self.book = book
        self.namespaces = namespaces
        #: placements as (decision, queue, usage, gang); evictions as (None, preemptor, tenant,
        #: unmarked); cards held whole as (WHOLE, node, Fill, preemptor); anything else the
        #: planner changed beside them as (UNDO, what undoes it, None, "")
        self.log: list[tuple] = []
        #: what each evicted tenant held of its node beside its cards (cpu, memory, pod slot,
        #: ports: SPEC 10), by the tenant's id, given back with it on rollback
        self.lifted: dict[int, Footprint] = {}
        #: the cards held whole (`hold_whole`) by preemptor (`ns/name`): (node, card uuids)
        self.whole: dict[str, tuple[str, tuple[str, ...]]] = {}

    def mark(self) -> Mark:
        return Mark(len(self.log))

    def assume(self, decision: Decision, queue: str | None = None, gang: str = "") -> None:
        """Apply `decision` (scheduled) to the snapshot, the books, and with `gang` (the pod's
        group) to the cards' `gangs`, which `gang-spread` reads."""
        if decision.status != SCHEDULED:
            return
        used = decision_usage(decision)
        if gang:
            self._mark(decision, gang, 1)
        self.scheduler.assume(decision)
        if self.book is not None and queue is not None:
            self.book.add(queue, used)
        if self.namespaces is not None:
            self.namespaces.add(decision.namespace, used)
        self.log.append((decision, queue, used, gang))

    def rollback(self, mark: Mark) -> list[Decision]:
        """Undo what was assumed after `mark`; the decisions taken back, oldest first."""
        undone = []
        while len(self.log) > mark.at:
            decision, queue, used, gang = self.log.pop()
            if decision is None:
                self._give_back(queue, used, gang)
                continue
            if decision is UNDO:
                queue()
                continue
            if decision is WHOLE:
                unfill_cards(queue, used)
                queue.touch()
                self.whole.pop(gang, None)
                continue
            if gang:
                self._mark(decision, gang, -1)
            self.scheduler.unassume(decision)
            if self.book is not None and queue is not None:
                self.book.add(queue, used, -1)
            if self.namespaces is not None:
                self.namespaces.add(decision.namespace, used, -1)
            undone.append(decision)
        undone.reverse()
        return undone

    def on_rollback(self, undo) -> None:
        """Call `undo` when what is assumed from here on is rolled back (a planner's own state
        that goes with the placements: a nomination the placement spent)."""
        self.log.append((UNDO, undo, None, ""))

    def evict(self, tenant, preemptor) -> None:
        """Take a running tenant (`preempt.Tenant`) off its cards, its queue and namespace, and
        out of the preemptor's tenants, so later members see the freed cards."""
        node = self.scheduler.cluster.node(tenant.node)
        footprint = accounting.remove(node, tenant.key, touch=False)
        if footprint is not None:
            if footprint.holdings:  # one of `Cluster.running`: its cards are its own holdings
                accounting.add(node, footprint, touch=False)
            else:
                self.lifted[id(tenant)] = footprint
        unmarked = self._holdings(tenant, -1, ())
        preemptor.tenants.remove(tenant)
        self.log.append((None, preemptor, tenant, unmarked))

    def hold_whole(self, node_name: str, uuids, preemptor: str) -> None:
        """Hold cards `uuids` of `node_name` whole (`fill_cards`) for `preemptor` until rolled
        back: an exclusive preemptor's cards, which no later pod of the cycle may share."""
        node = self.scheduler.cluster.node(node_name)
        taken = fill_cards(node, set(uuids))
        node.touch()
        self.whole[preemptor] = (node_name, tuple(sorted(uuids)))
        self.log.append((WHOLE, node, taken, preemptor))

    def let_go_whole(self) -> None:
        """Give back every card held whole (`hold_whole`) at the end of a run: the holds were
        for this cycle's later pods; from the next cycle on the preemptors' nominations hold
        the cards (`Nominated.whole`), and the snapshot must not keep them full meanwhile."""
        for entry in self.log:
            if entry[0] is WHOLE:
                unfill_cards(entry[1], entry[2])
                entry[1].touch()
        self.log = [entry for entry in self.log if entry[0] is not WHOLE]
        self.whole.clear()

    def evicted(self, since: Mark | None = None) -> list:
        """The tenants evicted (after `since`), oldest first."""
        return [entry[2] for entry in self.log[since.at if since else 0 :] if entry[0] is None]

    def _give_back(self, preemptor, tenant, unmarked) -> None:
        footprint = self.lifted.pop(id(tenant), None)
        if footprint is not None:
            accounting.add(self.scheduler.cluster.node(tenant.node), footprint, touch=False)
        self._holdings(tenant, 1, unmarked)
        preemptor.tenants.add(tenant)

    def _holdings(self, tenant, sign: int, unmarked) -> tuple[str, ...]:
        """Move a tenant's holdings off (-1) or back on (+1) its cards; its gang's `gang-spread`
        marks go with them (the cards unmarked on the way off are marked again on the way back)."""
        node = self.scheduler.cluster.node(tenant.node)
        node.shift(tenant.holdings, sign)
        by_uuid = {card.uuid: card for card in node.cards}
        removed = []
        for uuid, _, _ in tenant.holdings:
            card = by_uuid.get(uuid)
            if card is None:
                continue
            if sign < 0 and tenant.gang and tenant.gang in card.gangs:
                held = list(card.gangs)
                held.remove(tenant.gang)
                card.gangs = tuple(held)
                removed.append(uuid)
        for uuid in unmarked if sign > 0 else ():
            by_uuid[uuid].gangs = (*by_uuid[uuid].gangs, tenant.gang)
        node.touch()
        used = tenant.usage
        if self.book is not None:
            self.book.add(tenant.queue, used, sign)
        if self.namespaces is not None:
            self.namespaces.add(tenant.namespace, used, sign)
        return tuple(removed)

    def _mark(self, decision: Decision, gang: str, sign: int) -> None:
        node = self.scheduler.cluster.node(decision.node)
        by_uuid = {card.uuid: card for card in node.cards}
        for container in decision.containers:
            for device in container.devices:
                card = by_uuid[device.uuid]
                if sign > 0:
                    card.gangs = (*card.gangs, gang)
                else:
                    held = list(card.gangs)
                    held.remove(gang)
                    card.gangs = tuple(held)


def hold_back(
    decision: Decision, reason: str, message: str, group: str | None = None, queue: str | None = None
) -> None:
    """Turn a decision pending for a batch reason (gang, queue, quota): the card verdicts stay,
    the placement goes; `batch` says why, with the node it would have had."""
    would = decision.node if decision.status == SCHEDULED else None
    decision.status = PENDING
    decision.node = None
    decision.containers = []
    decision.init_containers = []
    decision.batch = Hold(reason, message, would_fit_on=would, group=group, queue=queue)
