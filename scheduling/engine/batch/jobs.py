"""Placing jobs (single pods and gangs) from queues within one cycle: Volcano's gang and
proportion ideas on hamiadmin's engine.

Order: the leaf queue that is furthest below its share goes next (`QueueBook.order_key`,
re-read after every job, so placements move a queue back), and inside a queue jobs go by
priority, then age. A job that does not fit does not block the jobs behind it (backfill);
one that has waited `reserve_after_seconds` and still does not fit holds the nodes it came
closest on for the rest of the cycle (`Scheduler.reserve`: every later job reads
`NodeReserved` there, with a warning naming them; the nodes stay ready), so smaller jobs
cannot keep taking what it needs (no starvation). The runner releases them when it is done.

A gang is tried only when at least `min_member` of its pods are known (and of each of its
parts, `Gang.subgroups`, that part's minimum); its members are placed in a `Statement` until
the ones already placed plus the ones placed now reach `min_member` and every part its own
minimum, and kept only if they do; otherwise every placement of it in this cycle is rolled
back. Members beyond `min_member` (extras, elastic) wait for a second round, after
every job had its try at its minimum, and never evict: so two elastic gangs on a cluster too
small for both whole each get their minimum, and a gang short of its minimum may take
another gang's extras back (`Preemptor.plan`, `minimum`). A gang with a topology key is kept
within one value of that node label (`_place_in_domain`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..annotations import group_ref, queue_ref, subgroup_of
from ..decision import PENDING, REJECTED, SCHEDULED, Decision, Hold, Preemption
from ..errors import PodInvalid
from ..model import PodSpec
from ..pod import ParsedPod, describe_policy
from ..requests import WHOLE_CARD_CORES
from .consolidate import CONSOLIDATING, Consolidation, Consolidator
from .preempt import NO_LOWER_PRIORITY, NO_TENANTS, NOMINATED, PREEMPTING, Plan, Preemptor, Tenant, grants_of
from .queues import NamespaceBook, QueueBook, Usage, decision_usage, zero
from .statement import Fill, Statement, fill_cards, hold_back, unfill_cards

#: Preemption misses too common to repeat on a pending pod's reason line.
QUIET_MISSES = frozenset({NO_TENANTS, NO_LOWER_PRIORITY})

NOT_ENOUGH_PODS = "NotEnoughPods"
GANG_UNSCHEDULABLE = "GangUnschedulable"
QUEUE_LIMIT = "QueueLimitExceeded"
NAMESPACE_QUOTA = "NamespaceQuotaExceeded"
QUEUE_NOT_FOUND = "QueueNotFound"
#: The error code of a member rejected because its gang timed out (`on_timeout: reject`).
GANG_TIMED_OUT = "GangTimedOut"
BATCH_REASONS = (NOT_ENOUGH_PODS, GANG_UNSCHEDULABLE, QUEUE_LIMIT, NAMESPACE_QUOTA, QUEUE_NOT_FOUND)


@dataclass
class Member:
    """One pod of a job; `ref` is the caller's handle on it (the pipeline's row)."""

    spec: PodSpec
    ref: object = None


@dataclass
class Gang:
    """What the job runner needs of a pod group: its size rule and how far it has got."""

    key: str
    min_member: int
    known: int  # members neither finished nor rejected
    placed: int = 0  # members already holding cards
    min_resources: Usage = field(default_factory=dict)
    #: A node label whose one value must hold every member (the Workload API's
    #: `schedulingConstraints.topology[].key`), "" for none; `domain` is that value where
    #: members are placed already ("" when none are, or it is not known: every value is tried).
    topology_key: str = ""
    domain: str = ""
    #: The gang's parts, each with its own minimum (a JobSet's jobs, an LWS group's leader and
    #: workers, Kubeflow replica types, Volcano's `minTaskMember`, KAI's subgroups): each must
    #: reach it for the gang to start (`min_member` is at least their sum). A pod's part is
    #: read from its labels (`annotations.subgroup_of`).
    subgroups: dict[str, int] = field(default_factory=dict)
    #: Per part, its members already holding cards, and those known (neither finished nor
    #: rejected); `parts_known` None: the job's members and `parts_placed` are all there are.
    parts_placed: dict[str, int] = field(default_factory=dict)
    parts_known: dict[str, int] | None = None
    #: Members that ended already (succeeded, failed, deleted): they count no more, so a gang
    #: whose others ran to their end waits for resubmitted members, and says so.
    finished: int = 0

    def __post_init__(self):
        self.subgroups = {name: least for name, least in self.subgroups.items() if least > 0}
        self.min_member = max(self.min_member, sum(self.subgroups.values()))

    def part_of(self, member: Member) -> str:
        """The member's part ("" for none of them)."""
        spec = member.spec
        return subgroup_of(spec.annotations, spec.labels, self.subgroups)

    def known_parts(self, members) -> dict[str, int]:
        """Per part, its members known: `parts_known`, else `members` and the ones placed."""
        if self.parts_known is not None:
            return self.parts_known
        known = dict(self.parts_placed)
        for member in members:
            part = self.part_of(member)
            known[part] = known.get(part, 0) + 1
        return known

    def unnamed_parts(self, members) -> bool:
        """Whether none of the gang's members names a part (no operator label read): then its
        parts cannot be told apart and only `min_member` holds (`subgroups` set aside)."""
        if self.subgroups and not any(self.known_parts(members).get(name) for name in self.subgroups):
            self.subgroups = {}
            return True
        return False

    def short_parts(self) -> dict[str, int]:
        """Per part, how many more members it needs placed to reach its minimum."""
        return {
            name: least - self.parts_placed.get(name, 0)
            for name, least in self.subgroups.items()
            if self.parts_placed.get(name, 0) < least
        }

    @property
    def at_minimum(self) -> bool:
        """`min_member` placed, and every part its own minimum."""
        return self.placed >= self.min_member and not self.short_parts()


@dataclass
class Job:
    queue: str
    priority: int
    age: tuple  # sortable: older first (submission time, then id)
    members: list[Member]
    gang: Gang | None = None
    waited_seconds: float = 0.0

    @property
    def key(self) -> str:
        """The job's `ns/name`: its gang's, or its one pod's."""
        return self.gang.key if self.gang is not None else self.members[0].spec.key


@dataclass
class Outcome:
    """One member decided: what the commit writes. `gang_needed` is how many of the gang's
    placements in this cycle the commit must keep (0 for single pods)."""

    member: Member
    job: Job
    decision: Decision
    parsed: ParsedPod | None
    gang_needed: int = 0
    #: The tenants this member evicts (its decision's `preemption` says why and where).
    victims: list[Tenant] = field(default_factory=list)
    #: Its gang part ("" for none), and per part short of its minimum how many of this
    #: cycle's placements the commit must keep of it, as `gang_needed` for the whole.
    part: str = ""
    parts_needed: dict[str, int] = field(default_factory=dict)


@dataclass
class Nominated:
    """A pod that evicted tenants and holds their cards until they are gone: `grants` are the
    (card uuid, MiB, cores) it will take on `node`; `waiting` the victims still holding cards;
    `whole` the cards it holds whole (an exclusive ask: `held_whole`), which no other pod may
    share meanwhile, whatever it asks."""

    node: str
    grants: list[tuple[str, int, int]]
    waiting: int = 0
    since_seconds: float = 0.0
    grace_seconds: float = 0.0
    whole: tuple[str, ...] = ()
    #: what holding `whole` took on the snapshot's cards, given back with the grants
    filled: Fill = ()

    def message(self, key: str = "", why: str = "") -> str:
        """The reason line of the nominated pod `key`; `why` its ask's exclusivity."""
        cards = ", ".join(sorted({uuid for uuid, _, _ in self.grants}))
        text = f"nominated to {self.node} ({cards})"
        if self.whole:
            text += "; " + whole_words(self.whole, key, why)
        if self.waiting:
            text += f"; waiting for {self.waiting} victim{'s' if self.waiting != 1 else ''} to release"
        return text + f" ({self.since_seconds:.0f} s of {self.grace_seconds:.0f} s grace)"


def held_whole(parsed: ParsedPod | None, grants: list[tuple[str, int, int]]) -> tuple[tuple[str, ...], str]:
    """(the cards a preemptor's nomination holds whole, why): an exclusive ask does not share
    its cards, so its nomination keeps every other pod off them until it lands or gives up.
    Exclusive: a chain with a filter that empties the card (`mutex`: all its cards), or a vGPU
    granted all of a card's compute (`gpucores: 100`, the default of an ask for whole cards:
    that vGPU's card). A whole-memory ask with fewer cores shares its card with 0 MiB pods at
    placement, so its nomination holds only its grants, as every other one does."""
    if parsed is None or not grants:
        return (), ""
    if any(f.empties_card for f in parsed.policy.active_filters):
        return tuple(sorted({uuid for uuid, _, _ in grants})), "mutex"
    whole = sorted({uuid for uuid, _, cores in grants if cores >= WHOLE_CARD_CORES})
    return (tuple(whole), "whole card") if whole else ((), "")


def whole_words(uuids, key: str, why: str) -> str:
    """`card GPU-0 held whole for preemptor ns/p (mutex)`: what a nomination's whole cards say."""
    cards = ", ".join(sorted(uuids))
    text = f"card{'s' if len(uuids) != 1 else ''} {cards} held whole"
    if key:
        text += f" for preemptor {key}"
    return text + (f" ({why})" if why else "")


def ask_usage(parsed: ParsedPod | None) -> Usage:
    """What a pod asks in vGPU units before it is placed (percentage memory counts 0 MiB: it
    is only known per card)."""
    used = zero()
    for ask in parsed.apps if parsed is not None else ():
        if ask is None:
            continue
        used["vgpus"] += ask.count
        used["gpumem"] += ask.count * (ask.memory or 0)
        used["gpucores"] += ask.count * ask.cores
    if used["gpumem"] == 0 and used["vgpus"]:
        used["gpumem"] = 1  # asks memory: a share of a card still counts on the memory axis
    return used


def held_decision(
    spec: PodSpec, config, reason: str, message: str, group: str | None = None, queue: str | None = None
) -> Decision:
    """A member left pending by a batch rule before the engine looked at its cards."""
    return Decision(
        name=spec.name,
        namespace=spec.namespace,
        status=PENDING,
        policy=describe_policy(spec.annotations, config),
        batch=Hold(reason, message, group=group, queue=queue),
    )


def invalid_decision(spec: PodSpec, config, exc: PodInvalid) -> Decision:
    """A pod whose group or queue reference is malformed: rejected, naming the field."""
    return Decision(
        name=spec.name,
        namespace=spec.namespace,
        status=REJECTED,
        policy=describe_policy(spec.annotations, config),
        error=str(exc),
        error_field=exc.field,
        error_code=exc.code,
    )


@dataclass
class GangTerms:
    """What a pod group brings to its job: the gang itself, the queue it names (None: its
    members' own), its priority and age (older first), how long it has waited."""

    gang: Gang
    queue: str | None = None
    priority: int = 0
    age: tuple = ()
    waited_seconds: float = 0.0


@dataclass
class Pending:
    """A due pod as `assemble_jobs` reads it, from the database (a cycle) or a scenario
    (`simulate`): one reading for both, so they order and hold pods alike."""

    member: Member
    priority: int = 0
    age: tuple = ()
    waited_seconds: float = 0.0
    group: GangTerms | None = None  # one object per gang, shared by its members


def assemble_jobs(pending, book: QueueBook, config) -> tuple[list[Job], list[tuple[Member, Decision]]]:
    """Jobs from due pods: one per single pod, one per gang (its priority the highest of its
    group's and its members'); and (member, decision) for pods refused before any card is
    looked at: a malformed group or queue reference (rejected), a queue that does not exist
    or is a parent (`QueueNotFound`, pending)."""
    jobs: list[Job] = []
    by_gang: dict[int, Job] = {}
    held: list[tuple[Member, Decision]] = []
    for entry in pending:
        spec = entry.member.spec
        try:
            group_ref(spec.annotations, spec.labels)
            named = queue_ref(spec.annotations, spec.labels)
        except PodInvalid as exc:
            held.append((entry.member, invalid_decision(spec, config, exc)))
            continue
        terms = entry.group
        if terms is not None and terms.queue:
            queue, why = book.join(terms.queue, spec.namespace, f"pod group {terms.gang.key}")
        else:
            queue, why = book.join(named, spec.namespace)
        if queue is None:
            held.append((entry.member, held_decision(spec, config, QUEUE_NOT_FOUND, why)))
            continue
        if terms is None:
            jobs.append(Job(queue, entry.priority, entry.age, [entry.member], None, entry.waited_seconds))
            continue
        job = by_gang.get(id(terms))
        if job is None:
            job = by_gang[id(terms)] = Job(
                queue, terms.priority, terms.age, [], terms.gang, terms.waited_seconds
            )
            jobs.append(job)
        job.priority = max(job.priority, entry.priority)
        job.members.append(entry.member)
    return jobs, held


Decide = Callable[[PodSpec], tuple[Decision, "ParsedPod | None"]]


class JobRunner:
    """Decides jobs against one scheduler's snapshot, queue book and namespace quotas."""

    def __init__(
        self,
        scheduler,
        book: QueueBook,
        namespaces: NamespaceBook | None = None,
        reserve_after_seconds: float | None = None,
        decide: Decide | None = None,
        preemptor: Preemptor | None = None,
        nominations: dict[str, Nominated] | None = None,
        consolidator: Consolidator | None = None,
    ):
        self.scheduler = scheduler
        self.book = book
        self.namespaces = namespaces or NamespaceBook()
        self.statement = Statement(scheduler, book, self.namespaces)
        self.reserve_after = reserve_after_seconds
        self.decide = decide or scheduler.decide_parsed
        self.reserved: dict[str, str] = {}  # node -> the job (key) it holds this cycle
        self.preemptor = preemptor
        self.consolidator = consolidator
        self.nominations = nominations or {}
        #: per gang placed to its minimum this run, its parts' needs (`Outcome.parts_needed`)
        self._parts_needed: dict[str, dict[str, int]] = {}
        self._nominated_whole = any(n.whole for n in self.nominations.values())
        self._hold_nominations(1)

    def _hold_nominations(self, sign: int, only: str | None = None) -> None:
        """Put nominated cards' grants on the snapshot (+1) or take them off (-1), so no other
        job takes what a preemptor's victims free; `only` one pod's."""
        for key, nominated in self.nominations.items():
            if only is not None and key != only:
                continue
            node = self.scheduler.cluster.by_name.get(nominated.node)
            if node is None:
                continue
            if sign < 0:
                unfill_cards(node, nominated.filled)
                nominated.filled = ()
            node.shift(nominated.grants, sign)
            if sign > 0 and nominated.whole:
                nominated.filled = fill_cards(node, set(nominated.whole))
            node.touch()

    def run(self, jobs: list[Job]) -> list[Outcome]:
        """Decide `jobs` in two rounds, each in queue order: first every job up to its
        minimum (a single pod, or a gang's `min_member`), then the gangs' extras (members
        beyond `min_member`), which never evict anybody. So every gang reaches its minimum
        before any gang takes extras (docs/queues.md, "Elastic gangs")."""
        queues: dict[str, deque[Job]] = {}
        for job in sorted(jobs, key=lambda j: (-j.priority, j.age)):
            queues.setdefault(job.queue, deque()).append(job)
        self.book.fair_shares(set(queues))
        outcomes: list[Outcome] = []
        extras: dict[str, deque[tuple[Job, list[Member], int]]] = {}
        try:
            while queues:
                name = min(queues, key=self.book.order_key)
                job = queues[name].popleft()
                if not queues[name]:
                    del queues[name]
                decided, rest, needed = self.place(job)
                outcomes.extend(decided)
                if rest:
                    extras.setdefault(name, deque()).append((job, rest, needed))
            while extras:
                name = min(extras, key=self.book.order_key)
                job, rest, needed = extras[name].popleft()
                if not extras[name]:
                    del extras[name]
                outcomes.extend(self._place_extras(job, rest, needed))
        finally:
            self.release()
        return outcomes

    def release(self) -> None:
        """Give back the nodes this runner holds (`_reserve`) and the cards it held whole for
        exclusive preemptors (`Statement.let_go_whole`): both last one run. `reserved` keeps
        saying which nodes they were."""
        for name in self.reserved:
            self.scheduler.release(name)
        self.statement.let_go_whole()

    def place(self, job: Job) -> tuple[list[Outcome], list[Member], int]:
        """Decide a job up to its minimum (`_place`); a gang with a topology key within one
        value of that node label (`_place_in_domain`), its extras in the value its placed
        members hold when that is known."""
        gang = job.gang
        if gang is not None:
            gang.unnamed_parts(job.members)
        if gang is None or not gang.topology_key:
            return self._place(job)
        if gang.at_minimum and gang.domain:
            pinned, apart = self._pinned(job, gang.topology_key, gang.domain)
            outcomes, rest, needed = self._place(pinned)
            return [*outcomes, *apart], rest, needed
        if not gang.at_minimum and not self._gate(job, gang):
            return self._place_in_domain(job, gang)
        return self._place(job)

    def _pinned(self, job: Job, key: str, value: str) -> tuple[Job, list[Outcome]]:
        """The job with its members held to `key=value` as by a nodeSelector, and the members
        whose own nodeSelector names another value, held back saying so."""
        kept: list[Member] = []
        apart: list[Outcome] = []
        for m in job.members:
            own = m.spec.node_selector.get(key, value)
            if own == value:
                kept.append(
                    Member(replace(m.spec, node_selector={**m.spec.node_selector, key: value}), m.ref)
                )
                continue
            why = f"gang {job.key} is in {key}={value}; this member's nodeSelector names {key}={own}"
            decision = held_decision(m.spec, self.scheduler.config, GANG_UNSCHEDULABLE, why, group=job.key)
            apart.append(Outcome(m, job, decision, None))
        return replace(job, members=kept), apart

    def _place_in_domain(self, job: Job, gang: Gang) -> tuple[list[Outcome], list[Member], int]:
        """A gang whose members must share one value of the node label `topology_key` (rack,
        zone, NVLink domain): the values are tried in order (the one its placed members hold,
        when known), each member pinned to it as by a nodeSelector, and the first where
        `min_member` fit is kept, extras pinned there too. When none does, the gang waits with
        `GangUnschedulable` naming the key and what each value could hold."""
        key = gang.topology_key
        values = (
            [gang.domain]
            if gang.domain
            else sorted({node.labels[key] for node in self.scheduler.cluster.nodes if key in node.labels})
        )
        tried: list[str] = []
        first: tuple[list[Outcome], list[Member], int] | None = None
        for value in values:
            if any(m.spec.node_selector.get(key, value) != value for m in job.members):
                tried.append(f"{value}: a member's nodeSelector names another {key}")
                continue
            decided = self._place(self._pinned(job, key, value)[0])
            outcomes = decided[0]
            if any(o.decision.status == SCHEDULED for o in outcomes) or not outcomes:
                return decided
            held = next((o.decision.batch for o in outcomes if o.decision.batch is not None), None)
            text = held.message.removeprefix(f"gang {gang.key}: ") if held is not None else "not placeable"
            tried.append(f"{value}: {text}")
            first = first or decided
        shown = "; ".join(tried[:3]) + (f"; +{len(tried) - 3} more" if len(tried) > 3 else "")
        message = (
            f"gang {gang.key}: no value of node label {key} holds {gang.min_member} members ({shown})"
            if tried
            else f"gang {gang.key}: no node has the label {key}"
        )
        if first is None:
            config = self.scheduler.config
            needed = gang.min_member - gang.placed
            first = (
                [
                    Outcome(
                        m,
                        job,
                        held_decision(m.spec, config, GANG_UNSCHEDULABLE, message, group=gang.key),
                        None,
                    )
                    for m in job.members
                ],
                [],
                needed,
            )
        for outcome in first[0]:
            if outcome.decision.batch is not None and outcome.decision.batch.reason == GANG_UNSCHEDULABLE:
                outcome.decision.batch = Hold(GANG_UNSCHEDULABLE, message, group=gang.key)
        return first

    def _place(self, job: Job) -> tuple[list[Outcome], list[Member], int]:
        """Decide a job up to its minimum: (outcomes, the members left for the extras round,
        how many placements of this cycle the gang needs). A gang's members are tried until
        `min_member` are placed and every part (`Gang.subgroups`) has its own minimum, the
        members of a part still short first, and kept only if they get there; a member of a
        part at its minimum is tried only while the gang still needs members beyond what the
        short parts will bring. A gang at its minimum leaves every member to the extras round."""
        gang, config = job.gang, self.scheduler.config
        if gang is None:
            return self._place_single(job)
        short = gang.short_parts()
        needed = max(gang.min_member - gang.placed, sum(short.values()), 0)
        if needed == 0:
            return [], list(job.members), 0
        held = self._gate(job, gang)
        if held is not None:
            return (
                [
                    Outcome(m, job, held_decision(m.spec, config, *held, group=gang.key), None)
                    for m in job.members
                ],
                [],
                needed,
            )
        part_of = {id(m): gang.part_of(m) for m in job.members}
        ordered = sorted(job.members, key=lambda m: part_of[id(m)] not in short)
        mark = self.statement.mark()
        outcomes: list[Outcome] = []
        placed: list[Decision] = []
        by_part: dict[str, int] = {}
        first_miss: tuple[Member, Decision] | None = None
        part_miss: dict[str, tuple[Member, Decision]] = {}
        rest: list[Member] = []

        def still_short() -> dict[str, int]:
            return {name: n - by_part.get(name, 0) for name, n in short.items() if by_part.get(name, 0) < n}

        for i, member in enumerate(ordered):
            open_parts = still_short()
            if len(placed) >= needed and not open_parts:
                rest.extend(ordered[i:])
                break
            part = part_of[id(member)]
            if part not in open_parts and needed - len(placed) - sum(open_parts.values()) <= 0:
                rest.append(member)  # its part is at its minimum: an extra
                continue
            outcome, kept = self._try(job, member, minimum=True)
            if kept is not None:
                placed.append(kept)
                by_part[part] = by_part.get(part, 0) + 1
            elif outcome.decision.status != SCHEDULED and not outcome.victims:
                first_miss = first_miss or (member, outcome.decision)
                part_miss.setdefault(part, (member, outcome.decision))
            outcomes.append(outcome)
        unmet = still_short()
        if len(placed) < needed or unmet:
            self.statement.rollback(mark)
            if unmet:
                name = next(iter(unmet))
                message = self._gang_message(
                    gang,
                    len(placed),
                    needed,
                    part_miss.get(name, first_miss),
                    (name, short[name] - unmet[name]),
                )
            else:
                message = self._gang_message(gang, len(placed), needed, first_miss)
            for outcome in outcomes:
                decision = outcome.decision
                if decision.status == SCHEDULED:
                    hold_back(decision, GANG_UNSCHEDULABLE, message, group=gang.key)
                elif decision.status == PENDING and (
                    decision.batch is None or decision.batch.reason in (PREEMPTING, CONSOLIDATING)
                ):
                    if outcome.victims:
                        decision.preemption = Preemption.failed(f"gang rolled back: {message}")
                        outcome.victims = []
                    decision.batch = Hold(GANG_UNSCHEDULABLE, message, group=gang.key)
            rest_outcomes = [
                Outcome(
                    m, job, held_decision(m.spec, config, GANG_UNSCHEDULABLE, message, group=gang.key), None
                )
                for m in rest
            ]
            outcomes.extend(rest_outcomes)
            rest = []
            if self.reserve_after is not None and job.waited_seconds >= self.reserve_after:
                self._reserve(job, outcomes)
        else:
            self._parts_needed[gang.key] = short
            for outcome in outcomes:
                outcome.gang_needed, outcome.parts_needed = needed, short
                outcome.part = part_of[id(outcome.member)]
        return outcomes, rest, needed

    def _place_single(self, job: Job) -> tuple[list[Outcome], list[Member], int]:
        """A job of one pod (or a few without a gang): each member decided on its own."""
        outcomes: list[Outcome] = []
        placed = False
        for member in job.members:
            outcome, kept = self._try(job, member)
            placed = placed or kept is not None
            outcomes.append(outcome)
        if not placed and self.reserve_after is not None and job.waited_seconds >= self.reserve_after:
            self._reserve(job, outcomes)
        return outcomes, [], 0

    def _place_extras(self, job: Job, members: list[Member], needed: int) -> list[Outcome]:
        """A gang's members beyond `min_member`, each kept if it fits as things are: extras
        never evict or move anybody. They are committed with the gang's minimum (`needed`)."""
        outcomes = []
        gang = job.gang
        for member in members:
            outcome, _ = self._try(job, member, preempt=False)
            outcome.gang_needed = needed
            if gang is not None and gang.subgroups:
                outcome.part = gang.part_of(member)
                outcome.parts_needed = self._parts_needed.get(gang.key, {})
            outcomes.append(outcome)
        return outcomes

    def _try(
        self, job: Job, member: Member, minimum: bool = False, preempt: bool = True
    ) -> tuple[Outcome, Decision | None]:
        """Decide one member and, when it is placed within its queue's limits, its namespace
        quota and the guarantees other queues keep, assume it in the Statement: (outcome, the
        decision assumed, else None). `minimum`: it is needed for its gang's `min_member`, so
        it may take other gangs' extras (`Preemptor.plan`); `preempt`: it may evict at all."""
        gang = job.gang
        decision, parsed, plan, before = self._decide_member(job, member, minimum, preempt)
        # a nominated member placed in planning was decided with its nomination off its cards
        key = member.spec.key
        spending = decision.status == SCHEDULED and key in self.nominations
        victims: list[Tenant] = []  # evicted for this member: only a kept, real preemption
        kept: Decision | None = None
        if decision.status == SCHEDULED:
            used = decision_usage(decision)
            why = self.book.over_limit(job.queue, used) or self.book.over_kept(job.queue, used)
            code = QUEUE_LIMIT
            if why is None:
                why, code = self.namespaces.over(member.spec.namespace, used), NAMESPACE_QUOTA
            if why is not None:
                if before is not None:
                    self.statement.rollback(before)  # its evictions go with it
                    plan = None
                hold_back(decision, code, why, queue=job.queue)
            else:
                gang_key = gang.key if gang is not None else ""
                if plan is not None:  # holds the freed cards this cycle, placed once they are free
                    assumed = replace(decision)
                    self.statement.assume(assumed, job.queue, gang_key)
                    assert self.preemptor is not None
                    grants = grants_of(assumed)
                    if isinstance(plan, Consolidation):
                        assert self.consolidator is not None
                        plan = self.consolidator.explain(decision, plan.moves, plan.node, grants)
                    else:
                        self.preemptor.explain(decision, plan, grants)
                    whole, exclusive = held_whole(parsed, grants)
                    if whole and not self.preemptor.rules.dry_run:
                        self._say_whole(decision, whole, member.spec.key, exclusive)
                    if self.preemptor.rules.dry_run:
                        assert before is not None
                        self.statement.rollback(before)
                    else:
                        if whole:  # rolled back with the preemption (a gang short of its minimum)
                            self.statement.hold_whole(plan.node, whole, member.spec.key)
                        kept = assumed
                        victims = [victim.tenant for victim in plan.victims]
                else:
                    self.statement.assume(decision, job.queue, gang_key)
                    kept = decision
        if spending:
            self._spend(key, kept is not None)
        if self.reserved and decision.status in (SCHEDULED, PENDING):
            decision.warnings.append(self._reserved_warning())
        if decision.status == PENDING and not victims:
            held = self._held_whole_warning(decision)
            if held:
                decision.warnings.append(held)
        return Outcome(member, job, decision, parsed, victims=victims), kept

    def _spend(self, key: str, placed: bool) -> None:
        """The nomination of member `key`, taken off the cards to decide it (`_decide_member`):
        spent by its placement, and held again if that placement is rolled back (a
        gang short of its minimum); held again at once when it was not placed after all (a
        limit held it back). A nomination dropped with a placement that never commits would
        let the rest of the cycle plan onto its cards, which the commit refuses, every cycle
        until it expires."""
        if not placed:
            self._hold_nominations(1, key)
            return
        nominated = self.nominations.pop(key)

        def hold_again() -> None:
            self.nominations[key] = nominated
            self._hold_nominations(1, key)

        self.statement.on_rollback(hold_again)

    def _decide_member(self, job: Job, member: Member, minimum: bool = False, preempt: bool = True):
        """(decision, parsed, plan, mark): the member decided, taking its own nomination off the
        snapshot first; when it does not fit and may preempt (`preempt`), decided again after the
        cheapest evictions (`plan`), which the Statement holds from `mark` on. `minimum`: the
        member is needed for its gang's `min_member`. A nominated member placed leaves its
        nomination off the cards, for `_try` to spend (`_spend`)."""
        key = member.spec.key
        nominated = self.nominations.get(key)
        if nominated is not None:
            self._hold_nominations(-1, key)
        decision, parsed = self.decide(member.spec)
        if nominated is not None:
            if decision.status != SCHEDULED:
                self._hold_nominations(1, key)
                if decision.batch is None:
                    why = held_whole(parsed, nominated.grants)[1] if nominated.whole else ""
                    decision.batch = Hold(NOMINATED, nominated.message(key, why), would_fit_on=nominated.node)
            return decision, parsed, None, None
        self._limit_first(job, member, decision, parsed)
        if not preempt or not self._may_preempt(decision, parsed):
            return decision, parsed, None, None
        assert self.preemptor is not None and parsed is not None
        plan: Plan | None
        plan, why, misses = self.preemptor.plan(
            parsed, decision, job.priority, job.queue, ask_usage(parsed), minimum=minimum
        )
        if plan is None and self.consolidator is not None:
            moved = self._consolidate(member, decision, parsed)
            if moved is not None:
                return moved
        if plan is None:
            # The reason line says why only when some tenant could have given way but was
            # protected or not enough; "nothing of lower priority runs" stays in the payload.
            say = bool(set(misses) - QUIET_MISSES)
            decision.preemption = Preemption.failed(why, misses, say)
            return decision, parsed, None, None
        before = self.statement.mark()
        self.preemptor.evict(self.statement, plan)
        again, parsed_again = self.decide(member.spec)
        if again.status != SCHEDULED or again.node != plan.node:
            self.statement.rollback(before)
            decision.preemption = Preemption.failed(f"evicting on {plan.node} did not place the pod there")
            return decision, parsed, None, None
        again.warnings.extend(decision.warnings[len(again.warnings) :])
        return again, parsed_again, plan, before

    @staticmethod
    def _say_whole(decision: Decision, whole: tuple[str, ...], key: str, why: str) -> None:
        """Write on an exclusive preemptor's decision that its nomination holds `whole`."""
        preemption, batch = decision.preemption, decision.batch
        if preemption is None or batch is None:
            return
        words = whole_words(whole, key, why)
        decision.preemption = replace(preemption, whole=whole, message=f"{preemption.message}; {words}")
        decision.batch = replace(batch, message=f"{batch.message}; {words}")

    def _consolidate(self, member: Member, decision: Decision, parsed: ParsedPod):
        """(decision, parsed, Consolidation, mark) when moving one or two tenants elsewhere lets
        the member fit where they were; None (nothing changed) otherwise."""
        assert self.consolidator is not None
        before = self.statement.mark()
        found = self.consolidator.plan(parsed, decision, self.statement)
        if found is None:
            return None
        moves, node = found
        again, parsed_again = self.decide(member.spec)
        if again.status != SCHEDULED or again.node != node:
            self.statement.rollback(before)
            return None
        again.warnings.extend(decision.warnings[len(again.warnings) :])
        return again, parsed_again, Consolidation(node, moves), before

    def _limit_first(self, job: Job, member: Member, decision: Decision, parsed: ParsedPod | None) -> None:
        """A pod that does not fit, whose queue (or namespace quota) could not take it even if
        it did, says so first (`QueueLimitExceeded`, `NamespaceQuotaExceeded`): no card freeing
        up would place it, so neither eviction nor the cards' reasons are the answer. A pod
        that can never fit keeps that verdict."""
        if decision.status != PENDING or decision.batch is not None or decision.never is not None:
            return
        if parsed is None:
            return
        ask = ask_usage(parsed)
        why, code = self.book.over_limit(job.queue, ask), QUEUE_LIMIT
        if why is None:
            why, code = self.namespaces.over(member.spec.namespace, ask), NAMESPACE_QUOTA
        if why is not None:
            decision.batch = Hold(code, why, queue=job.queue)

    def _may_preempt(self, decision: Decision, parsed: ParsedPod | None) -> bool:
        return (
            self.preemptor is not None
            and self.preemptor.rules.enabled
            and parsed is not None
            and decision.status == PENDING
            and decision.batch is None
            and decision.never is None
            and decision.nodes_failed > 0
        )

    def _gate(self, job: Job, gang: Gang) -> tuple[str, str] | None:
        """(reason, message) when the gang cannot be tried this cycle: too few of its members,
        or of one part's, are known, or its `minResources` exceed its queue's limit."""
        if gang.known < gang.min_member:
            text = f"gang {gang.key}: {gang.known}/{gang.min_member} members known"
            if gang.finished:
                missing = gang.min_member - gang.known
                text += (
                    f"; {gang.finished} ended already and count no more: it starts only once "
                    f"{missing} more member{'s are' if missing > 1 else ' is'} submitted"
                )
            return NOT_ENOUGH_PODS, text
        known = gang.known_parts(job.members)
        for name, least in gang.subgroups.items():
            if known.get(name, 0) < least:
                return (
                    NOT_ENOUGH_PODS,
                    f"gang {gang.key}: subgroup {name}: {known.get(name, 0)}/{least} members known",
                )
        if gang.min_resources:
            why = self.book.over_limit(job.queue, gang.min_resources)
            if why is not None:
                return QUEUE_LIMIT, f"gang {gang.key} minResources: {why}"
        return None

    @staticmethod
    def _gang_message(
        gang: Gang,
        placeable: int,
        needed: int,
        miss: tuple[Member, Decision] | None,
        part: tuple[str, int] | None = None,
    ) -> str:
        """`gang ns/x: [subgroup worker: 2/3 placeable; ]5/8 members placeable[ (n already
        placed)][; pod: why]`; `part` the first part short of its minimum and how many of it
        were placeable."""
        text = f"{gang.placed + placeable}/{gang.min_member} members placeable"
        if part is not None:
            name, fit = part
            done = gang.parts_placed.get(name, 0)
            text = f"subgroup {name}: {done + fit}/{gang.subgroups[name]} placeable; {text}"
        if gang.placed:
            text += f" ({gang.placed} already placed)"
        if miss is not None:
            member, decision = miss
            text += f"; {member.spec.name}: {decision.reason_text()}"
        return f"gang {gang.key}: {text}"

    def _reserve(self, job: Job, outcomes: list[Outcome]) -> None:
        """Hold, for the rest of the cycle, the node each unplaced member came closest on."""
        for outcome in outcomes:
            decision = outcome.decision
            if decision.unschedulable or not decision.closest:
                continue
            name = decision.closest[0].get("node")
            if not name or name in self.reserved or name not in self.scheduler.cluster.by_name:
                continue
            if self.scheduler.cluster.node(name).ready and self.scheduler.reserve(name, job.key):
                self.reserved[name] = job.key

    def _held_whole_warning(self, decision: Decision) -> str:
        """`nomination: ...` for a pending pod refused on a node where an exclusive preemptor
        holds cards whole (its nomination, or its preemption in this cycle): why a card that
        looks free beside the preemptor's own ask takes nobody. "" when none is."""
        if not (self._nominated_whole or self.statement.whole):
            return ""
        held = {key: (n.node, n.whole) for key, n in self.nominations.items() if n.whole}
        held.update(self.statement.whole)
        failed = {name for name, _ in decision.node_failures}
        parts = [
            f"{node} ({', '.join(sorted(uuids))}) for preemptor {key}"
            for key, (node, uuids) in sorted(held.items())
            if node in failed and key != f"{decision.namespace}/{decision.name}"
        ]
        return f"nomination: cards held whole: {'; '.join(parts)}" if parts else ""

    def _reserved_warning(self) -> str:
        held = ", ".join(f"{node} (job {who})" for node, who in sorted(self.reserved.items()))
        return f"reservation: held this cycle for the jobs waiting longest: {held}"
