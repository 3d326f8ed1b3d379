"""Preemption (within a queue, by priority) and reclaim (across queues, by fair share), card by card.

A job that does not fit may evict running tenants. Victims are chosen node by node with the
engine's own fit check (`evaluate_node`): take candidate tenants off the node's cards, run the
pod's whole chain on what is left, and keep the set only if the pod then fits. The node rules
(SPEC 10) are judged on what is left too, as kube-scheduler re-runs its filters with the
victims removed: their cpu, memory and ports are freed, and `PodTopologySpread` and
`InterPodAffinity` no longer count them (a victim's anti-affinity stops barring the pod; a
staying pod's still does). Among the sets
that work the cheapest wins: fewest evicted pods, then least evicted vGPU work (MiB), then the
node name. A set is made minimal before it is compared: singletons are tried first, then the
preferred victims are added one by one (lowest priority, then youngest) until the pod fits,
and each is dropped again when the pod still fits without it. So a pod never evicts more than
it needs on the node it lands on.

The cheapest plan is looked for over every node the pod failed on, without searching each:
a node's `Bound` (what any victim set there costs at least, read off its cards and the
tenants that may go) orders the nodes, and the search stops once no node left can beat the
plans kept. Bounds are kept per node until the node or its tenants change, so a cycle of
many pods of a few shapes computes them about once per node and shape.

Who may be a victim (`Rules`):
- never a tenant marked non-preemptible (`hami.io/preemptible: "false"`) or at or above
  `protect_priority`; never one younger than `min_runtime_seconds`; never one already being
  evicted, nor one whose eviction a disruption budget refused lately (`refused`);
- a gang member only within its gang's disruption budget (`Tenants.gang_budget`, the pod
  group's `max_evicted`): the members being evicted already and the ones this cycle evicts
  together never exceed it, so a set that would is not kept (`BUDGET_USED`);
- preempt: a tenant of the same leaf queue with lower priority than the job; or, for a gang
  member needed for its `min_member` (`minimum`), another gang's extra (a member beyond that
  gang's `min_member`) of equal or lower priority, never taking that gang below its minimum;
- reclaim: a tenant of another queue, when the job's queue stays at or below its fair share
  with the job placed, on every resource the job asks, and the victim's queue stays at or
  above its fair share without the victims. So a queue that was reclaimed from can never
  reclaim back what it lost (no flapping): fair shares meet in the middle. A queue within its
  guarantee (on every resource the guarantee names) may reclaim whatever its share; and no
  queue is reclaimed below its guarantee on a resource the guarantee names, whatever the
  other resources say (docs/queues.md, "Guarantees").
- a gang member only while the gang keeps `min_member` placed; else the whole gang goes
  (every member on every node) or none of it.

The evictions are applied in the job's `Statement`, so a gang that still does not reach
`min_member` takes them back with its placements. A cycle evicts at most `max_cards` cards.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from .. import reasons as R
from ..decision import PENDING, SCHEDULED, Decision, Hold, Preemption
from ..evaluate import evaluate_node
from ..fit import check_card
from ..model import TOUCHES
from ..noderules import PLAIN, NodeRules, OtherPods, accounting, other_pods
from ..pod import ParsedPod
from ..requests import WHOLE_CARD_CORES
from .queues import UNITS, QueueBook, Usage, zero

PREEMPTING = "Preempting"
NOMINATED = "Nominated"


class VictimKind(StrEnum):
    """Why a tenant gives way (`Victim.kind`, the eviction's `kind`): a higher priority in its
    own queue (preempt), its queue above its fair share (reclaim), or a move to a new home
    held for it (consolidate)."""

    PREEMPT = "preempt"
    RECLAIM = "reclaim"
    CONSOLIDATE = "consolidate"


#: The annotation that keeps a pod from ever being evicted by hamiadmin.
PREEMPTIBLE_ANNOTATION = "hami.io/preemptible"

# Why a tenant or node could not give way (counted for the pending pod's explanation).
NO_TENANTS = "no tenants"
NO_LOWER_PRIORITY = "no victims of lower priority"
NON_PREEMPTIBLE = "victims non-preemptible"
MIN_RUNTIME = "victims protected by min runtime"
PDB_REFUSED = "PDB refused"
#: A gang member whose pod group's disruption budget (`max_evicted`) is used up: the API
#: path's PodDisruptionBudget refusal, judged here before any eviction is asked.
BUDGET_USED = "gang disruption budget (max_evicted) used up"
GANG_PROTECTED = "gang members protected"
NOT_ENOUGH = "evicting every candidate would not free enough"
CAP_REACHED = "cap of evicted cards per cycle reached"
QUEUE_NOT_BELOW = "queue not below its fair share"
VICTIM_QUEUE_AT_SHARE = "victim queues at or below their fair share"
VICTIM_QUEUE_AT_GUARANTEE = "victim queues at their guarantee"
#: A node the pod's node rules refuse whoever leaves it (cordon, node name, taint, affinity,
#: volumes).
NODE_RULES_REFUSE = "node rules refuse the pod there"
#: The node rules (SPEC 10) that evicting pods cannot change. Resource fit and host ports
#: can change, and so can `PodTopologySpread` and `InterPodAffinity`, which read the pods.
_FIXED_RULES = frozenset(
    (R.NODE_UNSCHEDULABLE, R.NODE_NAME, R.TAINT_TOLERATION, R.NODE_AFFINITY, R.VOLUME_BINDING)
)

#: How many plans a search keeps: the cheapest and the alternatives it is shown beside.
KEEP = 6


def preemptible(annotations: dict | None) -> bool:
    """False only for `hami.io/preemptible: "false"` (any case); anything else may be evicted."""
    value = (annotations or {}).get(PREEMPTIBLE_ANNOTATION)
    return not (isinstance(value, str) and value.strip().lower() == "false")


@dataclass(eq=False)
class Tenant:
    """A running pod as a possible victim: what it holds, card by card, and what protects it."""

    key: str  # namespace/name
    namespace: str
    node: str
    priority: int = 0
    queue: str = "default"
    gang: str = ""  # its pod group's key, "" for a single pod
    runtime_seconds: float = 0.0
    preemptible: bool = True
    holdings: list[tuple[str, int, int]] = field(default_factory=list)  # (card uuid, MiB, cores) per vGPU
    ref: object = None  # the caller's handle (the pipeline's pod id)
    refused: str = ""  # why a recent eviction of it was refused (a disruption budget)
    part: str = ""  # its gang part (`Gang.subgroups`), "" for none

    @property
    def usage(self) -> Usage:
        used = zero()
        for _, memory, cores in self.holdings:
            used["vgpus"] += 1
            used["gpumem"] += memory
            used["gpucores"] += cores
        return used

    @property
    def work(self) -> int:
        return sum(memory for _, memory, _ in self.holdings)


@dataclass
class Rules:
    enabled: bool = True
    min_runtime_seconds: float = 0.0
    protect_priority: int | None = None
    max_cards: int = 64
    #: How many nodes that could work are compared per job at most (a safety stop: the
    #: bounds end the search long before on real clusters).
    candidate_nodes: int = 100
    reclaim: bool = True
    dry_run: bool = False


class Tenants:
    """Running tenants by node and by gang, with each gang's `min_member` and disruption
    budget: `gang_budget`, per gang with one, how many more members may be evicted (its
    `max_evicted` less those being evicted already). Each eviction the cycle applies
    (`remove`) uses one, and a rollback (`add`) gives it back."""

    def __init__(
        self,
        tenants: list[Tenant],
        gang_min: dict[str, int] | None = None,
        gang_budget: dict[str, int] | None = None,
        part_min: dict[tuple[str, str], int] | None = None,
    ):
        self.by_node: dict[str, list[Tenant]] = {}
        #: (gang, part) -> that part's own minimum: no member of it is an extra below it
        self.part_min = dict(part_min or {})
        self.by_gang: dict[str, list[Tenant]] = {}
        self.gang_min = dict(gang_min or {})
        self.gang_budget = dict(gang_budget or {})
        #: per gang, how many members this cycle has evicted so far
        self.evicting: dict[str, int] = {}
        #: per node, how often its tenants changed (what a cached `Bound` is checked against)
        self.changes: dict[str, int] = {}
        for tenant in tenants:
            self.add(tenant)

    def add(self, tenant: Tenant) -> None:
        self.by_node.setdefault(tenant.node, []).append(tenant)
        self.changes[tenant.node] = self.changes.get(tenant.node, 0) + 1
        if tenant.gang:
            self.by_gang.setdefault(tenant.gang, []).append(tenant)
            if self.evicting.get(tenant.gang, 0) > 0:  # an eviction taken back
                self.evicting[tenant.gang] -= 1

    def remove(self, tenant: Tenant) -> None:
        self.by_node[tenant.node].remove(tenant)
        self.changes[tenant.node] = self.changes.get(tenant.node, 0) + 1
        if tenant.gang:
            self.by_gang[tenant.gang].remove(tenant)
            self.evicting[tenant.gang] = self.evicting.get(tenant.gang, 0) + 1

    def budget_left(self, gang: str) -> int | None:
        """How many more of `gang`'s members may be evicted now; None: no budget."""
        budget = self.gang_budget.get(gang) if gang else None
        if budget is None:
            return None
        return max(0, budget - self.evicting.get(gang, 0))

    def over_budget(self, victims) -> str | None:
        """The first gang whose budget `victims` (tenants) would exceed together, else None."""
        count: dict[str, int] = {}
        for tenant in victims:
            if tenant.gang:
                count[tenant.gang] = count.get(tenant.gang, 0) + 1
        for gang, n in count.items():
            left = self.budget_left(gang)
            if left is not None and n > left:
                return gang
        return None


@dataclass
class Victim:
    """A tenant chosen to give way, of `kind` preempt, reclaim or consolidate, and why it may."""

    tenant: Tenant
    kind: VictimKind
    why: str

    @property
    def pod(self) -> str:
        return self.tenant.key

    @property
    def cards(self) -> list[str]:
        return sorted({uuid for uuid, _, _ in self.tenant.holdings})

    def as_dict(self) -> dict:
        tenant = self.tenant
        return {
            "pod": tenant.key,
            "node": tenant.node,
            "cards": self.cards,
            "priority": tenant.priority,
            "queue": tenant.queue,
            "gang": tenant.gang or None,
            "kind": self.kind,
            "why": self.why,
            "memory": tenant.work,
        }


@dataclass
class Plan:
    """The victims chosen for one member, and where it then lands."""

    node: str
    victims: list[Victim]
    alternatives: list[dict]  # other nodes compared, with why they lost

    @property
    def cost(self) -> tuple[int, int, str]:
        return (len(self.victims), sum(v.tenant.work for v in self.victims), self.node)


@dataclass(slots=True)
class Bound:
    """What any victim set that lets a pod fit one node costs at least, from the cards alone.

    Per card: the fewest tenants that must leave it (`k`), and the MiB they free there and
    their whole work at least, taking the biggest holders first (all of them for an exclusive
    or `mutex` ask). The pod needs `count` cards, so on the node at least the `count`-th
    smallest k go, and at least their sum over the widest victim's number of cards; the work
    is at least the sum of the smallest MiB per card (holdings on different cards are
    different MiB), and at least the `count`-th smallest whole work. The larger of these over
    the pod's containers is `(victims, work)`, never above what `_minimal` finds.
    """

    victims: int
    work: int
    #: per GPU container: (cards asked, how many usable cards need no victim, the uuids of
    #: the usable cards that do)
    cards: tuple[tuple[int, int, tuple[str, ...]], ...]
    #: the most cards one container asks
    most: int = 0

    def new_cards(self, evicted: set[str]) -> int:
        """The fewest cards not yet freed this cycle that victims here must hold: each card
        the pod takes that still has to lose a tenant is one of the victims' cards."""
        return max(count - free - len(evicted.intersection(busy)) for count, free, busy in self.cards)


def card_need(card, cores: int, memory: int, empty: bool, holders) -> tuple[int, int, int] | None:
    """(k, MiB, whole work) at least that `holders` (`holders_of`: per tenant on the card,
    (MiB, cores, slots, whole work)) must give up for an ask of `memory` MiB and `cores` to pass
    the card's checks; None when even all of them are not enough. `empty`: the ask takes the
    card alone."""
    if empty:
        if card.used_slots == 0:
            return 0, 0, 0
        if holders is None or holders.slots < card.used_slots:
            return None
        return len(holders.each), holders.memory, holders.work
    need_memory = memory - (card.memory - card.used_memory)
    need_cores = cores - (card.cores - card.used_cores)
    if cores == 0 and card.cores > 0:
        need_cores = max(need_cores, card.used_cores - card.cores + 1)
    needs = ((2, card.used_slots - card.slots + 1), (0, need_memory), (1, need_cores))
    each = holders.each if holders is not None else []
    k = 0
    for field_, need in needs:
        if need <= 0:
            continue
        got = count = 0
        for value in sorted((h[field_] for h in each), reverse=True):
            got += value
            count += 1
            if got >= need:
                break
        if got < need:
            return None
        k = max(k, count)
    if k == 0:
        return 0, 0, 0
    freed = max(need_memory, sum(sorted(h[0] for h in each)[:k]))
    return k, freed, max(freed, sum(sorted(h[3] for h in each)[:k]))


@dataclass(slots=True)
class Holders:
    """The tenants that may go, on one card: (MiB, cores, slots, whole work) each, and totals."""

    each: list[tuple[int, int, int, int]] = field(default_factory=list)
    memory: int = 0
    slots: int = 0
    work: int = 0


def holders_of(movable: list[Tenant]) -> tuple[dict[str, Holders], int]:
    """Per card uuid, the `Holders` among `movable`; and the most cards one of them holds (at
    least 1)."""
    holders: dict[str, Holders] = {}
    span = 1
    for tenant in movable:
        holdings = tenant.holdings
        work = sum(memory for _, memory, _ in holdings)
        uuids = {uuid for uuid, _, _ in holdings}
        if len(uuids) == len(holdings):  # one vGPU per card, the usual case
            on_card = [(uuid, memory, cores, 1) for uuid, memory, cores in holdings]
        else:
            merged: dict[str, list[int]] = {}
            for uuid, memory, cores in holdings:
                entry = merged.setdefault(uuid, [0, 0, 0])
                entry[0] += memory
                entry[1] += cores
                entry[2] += 1
            on_card = [(uuid, e[0], e[1], e[2]) for uuid, e in merged.items()]
        span = max(span, len(on_card))
        for uuid, memory, cores, slots in on_card:
            held = holders.get(uuid)
            if held is None:
                held = holders[uuid] = Holders()
            held.each.append((memory, cores, slots, work))
            held.memory += memory
            held.slots += slots
            held.work += work
    return holders, span


def node_bound(node, parsed: ParsedPod, holders: dict, span: int) -> Bound | None:
    """The `Bound` of `node` for `parsed` when only the tenants in `holders` (`holders_of`) may
    leave; None when the pod cannot fit even with all of them gone (a card check it fails
    regardless, or too few cards)."""
    policy = parsed.policy
    empties = any(f.empties_card for f in policy.active_filters)
    victims = work = 0
    cards = []
    for ask in (*parsed.gpu_inits, *(a for a in parsed.apps if a is not None)):
        n = ask.count
        empty = empties or ask.cores == WHOLE_CARD_CORES
        ks, freed, whole, busy = [], [], [], []
        for card in node.cards:
            memory = ask.memory_on(card.memory)
            if check_card(card, ask, memory, policy, (0, 0, 0)) is not None:
                continue
            need = card_need(card, ask.cores, memory, empty, holders.get(card.uuid))
            if need is not None:
                ks.append(need[0])
                freed.append(need[1])
                whole.append(need[2])
                if need[0]:
                    busy.append(card.uuid)
        if len(ks) < n:
            return None
        if n <= 0:
            continue
        ks.sort()
        freed.sort()
        whole.sort()
        least = (max(ks[n - 1], -(-sum(ks[:n]) // span)), max(sum(freed[:n]), whole[n - 1]))
        victims, work = max((victims, work), least)
        cards.append((n, len(ks) - len(busy), tuple(busy)))
    return Bound(victims, work, tuple(cards), max(count for count, _, _ in cards))


class Preemptor:
    """Finds, applies (in a Statement) and explains evictions for members that do not fit."""

    def __init__(
        self,
        scheduler,
        book: QueueBook,
        load: Callable[[], Tenants],
        rules: Rules | None = None,
    ):
        self.scheduler = scheduler
        self.book = book
        self._load = load
        self._tenants: Tenants | None = None
        self.rules = rules or Rules()
        self.cards_evicted: set[str] = set()
        #: (pod shape, priority, queue, may reclaim) -> node -> ((version, changes), Bound, misses)
        self._bounds: dict[tuple, dict[str, tuple]] = {}
        #: (node, priority, queue, may reclaim) -> (stamp, `holders_of` the tenants that may go)
        self._holders: dict[tuple, tuple] = {}
        #: the last search that found nothing per pod shape and job, with what it saw: while no
        #: node was touched and no card evicted since, the next such search finds nothing too
        self._nothing: dict[tuple, tuple] = {}
        #: (pod as read, its node rules) of the last pod asked about
        self._rules: tuple[ParsedPod, NodeRules] | None = None
        #: (pod as read, its rules, touch position, `OtherPods` or None) of the last pod asked
        self._other: tuple | None = None

    @property
    def tenants(self) -> Tenants:
        if self._tenants is None:
            self._tenants = self._load()
        return self._tenants

    # -- choosing ---------------------------------------------------------------------------

    def _eligible(
        self, tenant: Tenant, priority: int, queue: str, ask: Usage, removed: dict, minimum: bool = False
    ) -> tuple[VictimKind | None, str]:
        """(kind, why) when `tenant` may give way to a job of `priority` in `queue`, else (None,
        reason). `minimum`: the job is a gang member needed for its `min_member`."""
        rules = self.rules
        if not tenant.preemptible or (
            rules.protect_priority is not None and tenant.priority >= rules.protect_priority
        ):
            return None, NON_PREEMPTIBLE
        if tenant.refused:
            return None, PDB_REFUSED
        if tenant.gang and self.tenants.budget_left(tenant.gang) == 0:
            return None, BUDGET_USED
        if tenant.runtime_seconds < rules.min_runtime_seconds:
            return None, MIN_RUNTIME
        if tenant.queue == queue:
            if tenant.priority < priority:
                return VictimKind.PREEMPT, f"priority {tenant.priority} < {priority}"
            if minimum and tenant.gang and tenant.priority <= priority and self._spare_of(tenant) > 0:
                placed = len(self.tenants.by_gang.get(tenant.gang, []))
                least = self.tenants.gang_min.get(tenant.gang, 1)
                return VictimKind.PREEMPT, (
                    f"extra of gang {tenant.gang} ({placed} placed > min_member {least}), "
                    f"priority {tenant.priority} <= {priority}"
                )
            return None, NO_LOWER_PRIORITY
        if not rules.reclaim:
            return None, NO_LOWER_PRIORITY
        why = self._reclaimable(queue, ask, tenant, removed)
        if why is None:
            return None, VICTIM_QUEUE_AT_SHARE
        if self.book.below_guarantee(tenant.queue, tenant.usage, queue) is not None:
            return None, VICTIM_QUEUE_AT_GUARANTEE
        return VictimKind.RECLAIM, why

    def _spare(self, gang: str) -> int:
        """How many of `gang`'s placed members are beyond its `min_member` (its extras)."""
        return len(self.tenants.by_gang.get(gang, [])) - self.tenants.gang_min.get(gang, 1)

    def _part_spare(self, tenant: Tenant) -> int | None:
        """How many members of `tenant`'s gang part are beyond that part's own minimum; None
        when its part has none."""
        least = self.tenants.part_min.get((tenant.gang, tenant.part))
        if least is None:
            return None
        return sum(1 for t in self.tenants.by_gang.get(tenant.gang, []) if t.part == tenant.part) - least

    def _spare_of(self, tenant: Tenant) -> int:
        """How many of `tenant`'s gang may go and leave the gang and the tenant's part at their
        minimums: a master at its part's minimum is no extra, however many workers run."""
        part = self._part_spare(tenant)
        spare = self._spare(tenant.gang)
        return spare if part is None else min(spare, part)

    def _dominant(self, queue: str, delta: Usage, sign: int = 1) -> tuple[float, str]:
        """The queue's dominant share with `delta` added (or taken off): the largest, over the
        resources the cluster has that the queue is judged on (`QueueBook.judged_on`), of
        used / fair share; and that resource."""
        state, fair = self.book.queues[queue], self.book.fair.get(queue, {})
        best, which = 0.0, ""
        for r in self.book.judged_on(queue):
            if not self.book.capacity.get(r):
                continue
            used = state.used[r] + sign * delta.get(r, 0)
            share = fair.get(r, 0.0)
            ratio = used / share if share > 0 else (float("inf") if used > 0 else 0.0)
            if ratio > best or not which:
                best, which = ratio, r
        return best, which

    def _reclaimable(self, queue: str, ask: Usage, tenant: Tenant, removed: dict) -> str | None:
        """Why `tenant`'s queue may give way to `queue`: it stays at or above its fair share
        (dominant share >= 1) without the tenant and what was taken from it already; else None."""
        if not self.book.fair or tenant.queue not in self.book.queues:
            return None
        taken = dict(removed.get(tenant.queue, {}))
        for r, n in tenant.usage.items():
            taken[r] = taken.get(r, 0) + n
        share, resource = self._dominant(tenant.queue, taken, -1)
        if share < 1.0 - 1e-9:
            return None
        fair = self.book.fair.get(tenant.queue, {}).get(resource, 0.0)
        used = self.book.queues[tenant.queue].used[resource]
        unit = UNITS[resource]
        return (
            f"queue {tenant.queue} above its fair share: {resource} {used}{unit} > fair {fair:.0f}{unit} "
            f"(dominant share {share:.2f} after eviction)"
        )

    def _shares_hold(self, victims: list[Victim], ask: Usage, queue: str = "") -> bool:
        """Whether every queue reclaimed from (for a job of `queue`) stays at or above its fair
        share and its guarantee without all of its victims together (each was checked alone
        when it was picked)."""
        taken: dict[str, Usage] = {}
        for victim in victims:
            if victim.kind == VictimKind.RECLAIM:
                total = taken.setdefault(victim.tenant.queue, zero())
                for r, n in victim.tenant.usage.items():
                    total[r] += n
        return all(
            self._dominant(name, total, -1)[0] >= 1.0 - 1e-9
            and self.book.below_guarantee(name, total, queue) is None
            for name, total in taken.items()
        )

    def _below_share(self, queue: str, ask: Usage) -> str | None:
        """None when `queue` stays within its fair share (dominant share <= 1), or within its
        guarantee, with `ask` added; else why not."""
        if self.book.within_guarantee(queue, ask):
            return None
        if not self.book.fair.get(queue):
            return f"queue {queue} has no fair share this cycle"
        share, resource = self._dominant(queue, ask)
        if share <= 1.0 + 1e-9:
            return None
        fair = self.book.fair[queue].get(resource, 0.0)
        used = self.book.queues[queue].used[resource]
        unit = UNITS[resource]
        return f"queue {queue}: {resource} {used} + {ask.get(resource, 0)} > fair share {fair:.0f}{unit}"

    def _may_go(
        self, tenant: Tenant, priority: int, queue: str, reclaim_ok: bool, minimum: bool = False
    ) -> bool:
        """Whether `tenant` could be a victim of a job of `priority` in `queue` at all: what
        `_eligible` asks that does not change within a cycle (fair shares, guarantees and how
        many extras a gang has aside)."""
        rules = self.rules
        if not tenant.preemptible or tenant.refused or tenant.runtime_seconds < rules.min_runtime_seconds:
            return False
        if rules.protect_priority is not None and tenant.priority >= rules.protect_priority:
            return False
        if tenant.queue != queue:
            return reclaim_ok
        return tenant.priority < priority or (minimum and bool(tenant.gang) and tenant.priority <= priority)

    def _units(
        self,
        tenants: list[Tenant],
        priority: int,
        queue: str,
        ask: Usage,
        misses: dict,
        reclaim_ok: bool | None = None,
        minimum: bool = False,
    ):
        """Victim units on one node: [(tenants, kind, why)], a gang that cannot lose one member
        standing for all of its placed members. Units are in preference order."""
        units: list = []
        seen: set[int] = set()
        removed: dict[str, Usage] = {}
        if reclaim_ok is None:
            reclaim_ok = self.rules.reclaim and self._below_share(queue, ask) is None
        for tenant in sorted(tenants, key=lambda t: (t.priority, t.runtime_seconds, t.key)):
            if id(tenant) in seen:
                continue
            if tenant.queue != queue and not reclaim_ok:
                misses[QUEUE_NOT_BELOW] = misses.get(QUEUE_NOT_BELOW, 0) + 1
                continue
            kind, why = self._eligible(tenant, priority, queue, ask, removed, minimum)
            if not kind:
                misses[why] = misses.get(why, 0) + 1
                continue
            members = [tenant]
            if tenant.gang:
                placed = self.tenants.by_gang.get(tenant.gang, [])
                part = self._part_spare(tenant)
                if len(placed) - 1 < self.tenants.gang_min.get(tenant.gang, 1) or (
                    part is not None and part < 1
                ):
                    members = list(placed)
                    blocked = [
                        m
                        for m in members
                        if m is not tenant
                        and not self._eligible(m, priority, queue, ask, removed, minimum)[0]
                    ]
                    if blocked:
                        misses[GANG_PROTECTED] = misses.get(GANG_PROTECTED, 0) + 1
                        continue
                    if self.tenants.over_budget(members) is not None:
                        misses[BUDGET_USED] = misses.get(BUDGET_USED, 0) + 1
                        continue
                    why += f"; gang {tenant.gang} goes whole ({len(members)} members, min_member {self.tenants.gang_min.get(tenant.gang, 1)})"
            seen.update(id(m) for m in members)
            units.append((members, kind, why))
        return units

    def _node_rules(self, parsed: ParsedPod) -> NodeRules:
        """The node rules of the pod `parsed` was read from (SPEC 10), as its scheduler decided
        it; kept for that pod while others are decided meanwhile (consolidation decides the
        tenants it moves)."""
        kept = self._rules
        if kept is not None and kept[0] is parsed:
            return kept[1]
        rules_of = getattr(self.scheduler, "rules_of", None)
        rules = rules_of(parsed) if rules_of is not None else PLAIN
        self._rules = (parsed, rules)
        return rules

    def other_pods(self, parsed: ParsedPod) -> OtherPods | None:
        """What `PodTopologySpread` and `InterPodAffinity` count for the pod (SPEC 10), counted
        once while no node is touched; None when neither applies to it (no hard spread, no
        required pod (anti-)affinity, no existing pod's anti-affinity selecting it), so a pod
        without them pays nothing for them."""
        rules = self._node_rules(parsed)
        position = TOUCHES.position
        kept = self._other
        if kept is not None and kept[0] is parsed and kept[1] is rules and kept[2] == position:
            return kept[3]
        other = other_pods(rules, self.scheduler.cluster.nodes, self._barring(rules))
        self._other = (parsed, rules, position, other)
        return other

    def _barring(self, rules: NodeRules) -> list:
        """(node, footprint) of the pods whose required anti-affinity selects the pod (the
        scheduler keeps them up to date from the touch log)."""
        holders_for = getattr(self.scheduler, "holders_for", None)
        return holders_for(rules) if holders_for is not None else []

    def candidate_names(self, parsed: ParsedPod) -> list[str]:
        """The nodes where evicting may let the pod in: every node it failed on, and, when
        `PodTopologySpread` or `InterPodAffinity` apply to it, every other node too: of a
        pending pod, those are the nodes these rules alone refused (`failed_names` lists only
        what its cards and per-node rules refuse), where a pod that bars it may be a victim."""
        failed = self.scheduler.failed_names(parsed)
        if self.other_pods(parsed) is None:
            return failed
        known = set(failed)
        return failed + [node.name for node in self.scheduler.cluster.nodes if node.name not in known]

    def fits_without(self, node, parsed: ParsedPod, freed: list[Tenant]) -> bool:
        """Whether the pod fits `node` with `freed` tenants gone (restored after): their
        holdings off its cards, and their cpu, memory, pod slots and ports off the node, so the
        pod's node rules (SPEC 10) pass there too; and `PodTopologySpread` and
        `InterPodAffinity` with the freed tenants no longer counted, wherever they run (a
        victim's anti-affinity no longer bars the pod, a staying pod's still does)."""
        other = self.other_pods(parsed)  # counted before anyone is taken off
        here = [tenant for tenant in freed if tenant.node == node.name]
        footprints = [
            fp for fp in (accounting.remove(node, t.key, touch=False) for t in here) if fp is not None
        ]
        on_cards = {fp.key for fp in footprints if fp.holdings}  # their cards came off with them
        holdings = [holding for tenant in here if tenant.key not in on_cards for holding in tenant.holdings]
        node.shift(holdings, -1)
        try:
            if self._node_rules(parsed).refuse(node) is not None:
                return False
            if other is not None and other.refuse(node, self._leaving(node, footprints, freed)) is not None:
                return False
            return evaluate_node(node, parsed.gpu_inits, list(parsed.apps), parsed.policy).fits
        finally:
            node.shift(holdings, 1)
            for footprint in footprints:
                accounting.add(node, footprint, touch=False)

    def _leaving(self, node, footprints: list, freed: list[Tenant]) -> list[tuple]:
        """(node, footprint) of the `freed` tenants: `footprints`, those already taken off
        `node`, and those of the others, still on their nodes (elsewhere: a gang going whole)."""
        leaving = [(node, fp) for fp in footprints]
        taken = {fp.key for fp in footprints}
        by_name = self.scheduler.cluster.by_name
        for tenant in freed:
            if tenant.node == node.name and tenant.key in taken:
                continue
            where = node if tenant.node == node.name else by_name.get(tenant.node)
            fp = where.held.pods.get(tenant.key) if where is not None and where.held is not None else None
            if fp is not None:
                leaving.append((where, fp))
        return leaving

    def _minimal(self, node, parsed: ParsedPod, units, need: int = 0) -> list | None:
        """The cheapest set of units found on `node` that lets the pod fit, made minimal.
        `need` is how many tenants of the node must go at least (`Bound.victims`): a set with
        fewer cannot work, so it is not tried."""
        name = node.name

        def here(chosen) -> int:
            return sum(1 for members, _, _ in chosen for t in members if t.node == name)

        def freed(chosen) -> list[Tenant]:
            return [t for members, _, _ in chosen for t in members]

        if not units or not self.fits_without(node, parsed, freed(units)):
            return None
        best = None
        # one unit alone, cheapest first (ties in preference order): the first that works is the cheapest
        for unit in sorted(units, key=lambda u: (len(u[0]), sum(t.work for t in u[0]))):
            if here([unit]) >= need and self.fits_without(node, parsed, unit[0]):
                best = ((len(unit[0]), sum(t.work for t in unit[0])), [unit])
                break
        if best is not None and len(best[1][0][0]) == 1:
            return best[1]
        chosen: list = []
        alone: dict[str, int] = {}  # per gang, how many of its members go alone so far
        for unit in units:  # greedy in preference order, then drop what is not needed
            one = unit[0][0] if len(unit[0]) == 1 else None
            gang = one.gang if one is not None else ""
            if one is not None and gang and (spare := self._spare(gang)) > 0:
                left = self.tenants.budget_left(gang)
                if alone.get(gang, 0) >= (spare if left is None else min(spare, left)):
                    continue  # never below its min_member, nor past its disruption budget
                part = self._part_spare(one)
                if part is not None and alone.get(f"{gang}\0{one.part}", 0) >= part:
                    continue  # nor its part below that part's minimum
                alone[gang] = alone.get(gang, 0) + 1
                alone[f"{gang}\0{one.part}"] = alone.get(f"{gang}\0{one.part}", 0) + 1
            chosen.append(unit)
            if here(chosen) >= need and self.fits_without(node, parsed, freed(chosen)):
                break
        else:  # the gangs' minimums kept too many here
            return best[1] if best is not None else None
        for unit in list(reversed(chosen)):
            rest = [u for u in chosen if u is not unit]
            if rest and here(rest) >= need and self.fits_without(node, parsed, freed(rest)):
                chosen = rest
        greedy_cost = (sum(len(u[0]) for u in chosen), sum(t.work for u in chosen for t in u[0]))
        if best is not None and best[0] <= greedy_cost:
            return best[1]
        return chosen

    def _table(self, key: tuple) -> dict:
        """The cached node bounds for (pod shape, priority, queue, may reclaim): node ->
        ((node version, tenant changes), Bound, misses when hopeless)."""
        return self._bounds.setdefault(key, {})

    def _bound(
        self,
        table: dict,
        node,
        parsed: ParsedPod,
        priority: int,
        queue: str,
        reclaim_ok: bool,
        minimum: bool = False,
    ):
        """This node's `Bound` for the pod, kept while neither the node nor its tenants change
        (the node's version and `Tenants.changes`); None when evicting everyone who may go
        still leaves the pod out."""
        name = node.name
        stamp = (node.version, self.tenants.changes.get(name, 0))
        cached = table.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        key = (name, priority, queue, reclaim_ok, minimum)
        held = self._holders.get(key)
        if held is None or held[0] != stamp:
            movable = [
                t
                for t in self.tenants.by_node.get(name, [])
                if self._may_go(t, priority, queue, reclaim_ok, minimum)
            ]
            held = self._holders[key] = (stamp, *holders_of(movable))
        bound = node_bound(node, parsed, held[1], held[2])
        table[name] = (stamp, bound, None)
        return bound

    def _hopeless(
        self, table: dict, node, priority: int, queue: str, ask: Usage, reclaim_ok, misses, minimum=False
    ):
        """Count the misses of a node whose bound says no victim set works there, as a search
        would: each tenant's reason, and `NOT_ENOUGH` when some could go. Kept with the bound
        when no tenant that may go is in a gang or another queue (then nothing else moves them)."""
        stamp, bound, counted = table[node.name]
        if counted is None:
            counted = {}
            tenants = self.tenants.by_node.get(node.name, [])
            if self._units(tenants, priority, queue, ask, counted, reclaim_ok, minimum):
                counted[NOT_ENOUGH] = counted.get(NOT_ENOUGH, 0) + 1
            if not any(
                (t.gang or t.queue != queue) and self._may_go(t, priority, queue, reclaim_ok, minimum)
                for t in tenants
            ):
                table[node.name] = (stamp, bound, counted)
        for why, n in counted.items():
            misses[why] = misses.get(why, 0) + n

    def plan(
        self,
        parsed: ParsedPod,
        decision: Decision,
        priority: int,
        queue: str,
        ask: Usage,
        minimum: bool = False,
    ):
        """The cheapest victim set over the nodes the pod failed on, or (None, why, counts).
        `minimum`: the pod is a gang member needed for its `min_member` (it may take extras).

        Nodes are searched in the order of their `Bound` and the search stops once the next
        bound cannot beat the `KEEP`th cheapest plan found, so the plan and its alternatives
        are the cheapest over every node without each node being searched. A node whose bound
        needs more new cards than the cycle's cap has left counts under `CAP_REACHED`, unsearched."""
        misses: dict[str, int] = {}
        reclaim_why = self._below_share(queue, ask) if self.rules.reclaim else "reclaim is off"
        reclaim_ok = self.rules.reclaim and reclaim_why is None
        node_rules = self._node_rules(parsed)
        key: tuple = (parsed.shape, node_rules.key, priority, queue, reclaim_ok, minimum)
        if node_rules.dynamic or self._barring(node_rules):  # the rules reading other pods apply
            pods = (node_rules.namespace, tuple(sorted(node_rules.labels.items())))
            key += (pods, node_rules.spread, node_rules.pods)
        seen = (TOUCHES.position, len(self.cards_evicted), decision.nodes_failed)
        nothing = self._nothing.get(key)
        if nothing is not None and nothing[0] == seen:
            return None, nothing[1], dict(nothing[2])
        other = self.other_pods(parsed)
        # without required pod affinity (which evictions can break), a node these rules refuse
        # with every tenant gone is refused whoever goes
        barred = other if other is not None and not node_rules.pods.affinity else None
        nodes = self.scheduler.cluster.by_name
        left = self.rules.max_cards - len(self.cards_evicted)
        ranked: list[tuple[int, int, str]] = []
        hopeless = []
        table = self._table(key)
        by_node, changes = self.tenants.by_node, self.tenants.changes
        for name in self.candidate_names(parsed):  # all of them: the decision keeps a few
            if not by_node.get(name):
                misses[NO_TENANTS] = misses.get(NO_TENANTS, 0) + 1
                continue
            node = nodes.get(name)
            if node is None or not node.ready or node.reserved_for:
                continue
            refused = node_rules.refuse(node)
            if (refused is not None and refused.rule in _FIXED_RULES) or (
                barred is not None and barred.refuse(node, self._leaving(node, [], by_node[name])) is not None
            ):
                misses[NODE_RULES_REFUSE] = misses.get(NODE_RULES_REFUSE, 0) + 1
                continue
            cached = table.get(name)
            if cached is not None and cached[0] == (node.version, changes.get(name, 0)):
                bound = cached[1]
            else:
                bound = self._bound(table, node, parsed, priority, queue, reclaim_ok, minimum)
            if bound is None:
                hopeless.append(node)
            elif left < bound.most and bound.new_cards(self.cards_evicted) > left:
                misses[CAP_REACHED] = misses.get(CAP_REACHED, 0) + 1
            else:
                ranked.append((bound.victims, bound.work, name))
        ranked.sort()
        found: list[Plan] = []
        for need, work, name in ranked:
            if len(found) >= KEEP and (need, work, name) > found[KEEP - 1].cost:
                break  # no node left can beat the plans kept
            if found and len(found) >= self.rules.candidate_nodes:
                break
            node = nodes[name]
            units = self._units(self.tenants.by_node[name], priority, queue, ask, misses, reclaim_ok, minimum)
            chosen = self._minimal(node, parsed, units, need) if units else None
            if chosen is None:
                if units:  # the budget, when the pod fits with every unit gone but it forbids that
                    every = [t for u in units for t in u[0]]
                    capped = self.tenants.over_budget(every) and self.fits_without(node, parsed, every)
                    why = BUDGET_USED if capped else NOT_ENOUGH
                    misses[why] = misses.get(why, 0) + 1
                continue
            victims = [Victim(t, kind, why) for members, kind, why in chosen for t in members]
            if self.tenants.over_budget(v.tenant for v in victims) is not None:
                misses[BUDGET_USED] = misses.get(BUDGET_USED, 0) + 1
                continue
            if not self._shares_hold(victims, ask, queue):
                misses[VICTIM_QUEUE_AT_SHARE] = misses.get(VICTIM_QUEUE_AT_SHARE, 0) + 1
                continue
            cards = {uuid for v in victims for uuid, _, _ in v.tenant.holdings} - self.cards_evicted
            if len(cards) > left:
                misses[CAP_REACHED] = misses.get(CAP_REACHED, 0) + 1
                continue
            insort(found, Plan(name, victims, []), key=lambda p: p.cost)
        if not found:
            for node in hopeless:
                self._hopeless(table, node, priority, queue, ask, reclaim_ok, misses, minimum)
            why = _why_not(misses, reclaim_why)
            self._nothing[key] = (seen, why, dict(misses))
            return None, why, misses
        best = found[0]
        best.alternatives = [
            {
                "node": p.node,
                "victims": len(p.victims),
                "memory": p.cost[1],
                "why": _lost(p, best),
            }
            for p in found[1:KEEP]
        ]
        return best, "", misses

    # -- applying ---------------------------------------------------------------------------

    def evict(self, statement, plan: Plan) -> None:
        for victim in plan.victims:
            statement.evict(victim.tenant, self)
            self.cards_evicted.update(uuid for uuid, _, _ in victim.tenant.holdings)

    def explain(self, decision: Decision, plan: Plan, grants: list[tuple[str, int, int]]) -> None:
        """Turn the member's decision into a preemption: pending, nominated to `plan.node`."""
        victims = plan.victims
        names = ", ".join(v.pod for v in victims)
        cards = sorted({uuid for v in victims for uuid in v.cards})
        dry = self.rules.dry_run
        verb = "would evict" if dry else "evicting"
        message = f"{verb} {len(victims)} pod{'s' if len(victims) != 1 else ''} on {plan.node} ({', '.join(cards)}): {names}"
        decision.preemption = Preemption(
            node=plan.node,
            victims=tuple(victims),
            cards=tuple(cards),
            grants=tuple(grants),
            alternatives=tuple(plan.alternatives),
            dry_run=dry,
            message=message,
        )
        decision.status = PENDING
        decision.node = None
        decision.containers = []
        decision.init_containers = []
        decision.batch = Hold(PREEMPTING, message, would_fit_on=plan.node)


def grants_of(decision: Decision) -> list[tuple[str, int, int]]:
    """(card uuid, MiB, cores) per vGPU of a scheduled decision's app containers."""
    if decision.status != SCHEDULED:
        return []
    return [(d.uuid, d.memory, d.cores) for c in decision.containers for d in c.devices]


def _lost(plan: Plan, best: Plan) -> str:
    count, work, _ = plan.cost
    if count != best.cost[0]:
        return f"{count} victims > {best.cost[0]}"
    if work != best.cost[1]:
        return f"{work} MiB evicted > {best.cost[1]} MiB"
    return f"as cheap; {best.node} comes first by name"


def _why_not(misses: dict[str, int], reclaim_why: str | None) -> str:
    if not misses:
        return "no node could take the pod by evicting tenants"
    parts = [f"{why} ({n})" for why, n in sorted(misses.items(), key=lambda kv: (-kv[1], kv[0]))]
    text = "preemption did not help: " + ", ".join(parts)
    if reclaim_why and QUEUE_NOT_BELOW in misses:
        text += f"; {reclaim_why}"
    return text
