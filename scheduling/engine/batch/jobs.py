"""Placing jobs (single pods and gangs) from queues within one cycle: Volcano's gang and
proportion ideas on hamiadmin's engine.

Order: the leaf queue that is furthest below its share goes next (`QueueBook.order_key`,
re-read after every job, so placements move a queue back), and inside a queue jobs go by
priority, then age. A job that does not fit does not block the jobs behind it (backfill);
one that has waited `reserve_after_seconds` and still does not fit holds the nodes it came
closest on for the rest of the cycle (`Scheduler.reserve`: every later job reads
`NodeReserved` there, with a warning naming them; the nodes stay ready), so smaller jobs
cannot keep taking what it needs (no starvation). The runner releases them when it is done.

A gang is tried only when at least `min_member` of its pods are known; its members are
placed in a `Statement` until the ones already placed plus the ones placed now reach
`min_member`, and kept only if they do; otherwise every placement of it in this cycle is
rolled back. Members beyond `min_member` (extras, elastic) wait for a second round, after
every job had its try at its minimum, and never evict: so two elastic gangs on a cluster too
small for both whole each get their minimum, and a gang short of its minimum may take
another gang's extras back (`Preemptor.plan`, `minimum`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..decision import PENDING, SCHEDULED, Decision, Hold, Preemption
from ..model import PodSpec
from ..pod import ParsedPod, describe_policy
from .consolidate import CONSOLIDATING, Consolidation, Consolidator
from .preempt import NO_LOWER_PRIORITY, NO_TENANTS, NOMINATED, PREEMPTING, Plan, Preemptor, Tenant, grants_of
from .queues import NamespaceBook, QueueBook, Usage, decision_usage, zero
from .statement import Statement, hold_back

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


@dataclass
class Nominated:
    """A pod that evicted tenants and holds their cards until they are gone: `grants` are the
    (card uuid, MiB, cores) it will take on `node`; `waiting` the victims still holding cards."""

    node: str
    grants: list[tuple[str, int, int]]
    waiting: int = 0
    since_seconds: float = 0.0
    grace_seconds: float = 0.0

    def message(self) -> str:
        cards = ", ".join(sorted({uuid for uuid, _, _ in self.grants}))
        text = f"nominated to {self.node} ({cards})"
        if self.waiting:
            text += f"; waiting for {self.waiting} victim{'s' if self.waiting != 1 else ''} to release"
        return text + f" ({self.since_seconds:.0f} s of {self.grace_seconds:.0f} s grace)"


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
            node.shift(nominated.grants, sign)
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
        """Give back the nodes this runner holds (`_reserve`): a reservation lasts one run.
        `reserved` keeps saying which they were."""
        for name in self.reserved:
            self.scheduler.release(name)

    def place(self, job: Job) -> tuple[list[Outcome], list[Member], int]:
        """Decide a job up to its minimum: (outcomes, the members left for the extras round,
        how many placements of this cycle the gang needs). A gang's members are tried until
        `min_member` are placed, and kept only if they get there; a gang already at
        `min_member` leaves every member to the extras round."""
        gang, config = job.gang, self.scheduler.config
        needed = max(0, gang.min_member - gang.placed) if gang is not None else 0
        if gang is not None and needed == 0:
            return [], list(job.members), 0
        if gang is not None:
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
        mark = self.statement.mark()
        outcomes: list[Outcome] = []
        placed: list[Decision] = []
        first_miss: tuple[Member, Decision] | None = None
        rest: list[Member] = []
        for i, member in enumerate(job.members):
            if gang is not None and len(placed) >= needed:
                rest = job.members[i:]
                break
            outcome, kept = self._try(job, member, minimum=gang is not None)
            if kept is not None:
                placed.append(kept)
            elif outcome.decision.status != SCHEDULED and not outcome.victims and first_miss is None:
                first_miss = (member, outcome.decision)
            outcomes.append(outcome)
        if gang is not None:
            if len(placed) < needed:
                self.statement.rollback(mark)
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
                placed = []
            else:
                for outcome in outcomes:
                    outcome.gang_needed = needed
        if not placed and self.reserve_after is not None and job.waited_seconds >= self.reserve_after:
            self._reserve(job, outcomes)
        return outcomes, rest, needed

    def _place_extras(self, job: Job, members: list[Member], needed: int) -> list[Outcome]:
        """A gang's members beyond `min_member`, each kept if it fits as things are: extras
        never evict or move anybody. They are committed with the gang's minimum (`needed`)."""
        outcomes = []
        for member in members:
            outcome, _ = self._try(job, member, preempt=False)
            outcome.gang_needed = needed
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
                    if isinstance(plan, Consolidation):
                        assert self.consolidator is not None
                        plan = self.consolidator.explain(decision, plan.moves, plan.node, grants_of(assumed))
                    else:
                        self.preemptor.explain(decision, plan, grants_of(assumed))
                    if self.preemptor.rules.dry_run:
                        assert before is not None
                        self.statement.rollback(before)
                    else:
                        kept = assumed
                        victims = [victim.tenant for victim in plan.victims]
                else:
                    self.statement.assume(decision, job.queue, gang_key)
                    kept = decision
        if self.reserved and decision.status in (SCHEDULED, PENDING):
            decision.warnings.append(self._reserved_warning())
        return Outcome(member, job, decision, parsed, victims=victims), kept

    def _decide_member(self, job: Job, member: Member, minimum: bool = False, preempt: bool = True):
        """(decision, parsed, plan, mark): the member decided, taking its own nomination off the
        snapshot first; when it does not fit and may preempt (`preempt`), decided again after the
        cheapest evictions (`plan`), which the Statement holds from `mark` on. `minimum`: the
        member is needed for its gang's `min_member`."""
        key = member.spec.key
        nominated = self.nominations.get(key)
        if nominated is not None:
            self._hold_nominations(-1, key)
        decision, parsed = self.decide(member.spec)
        if nominated is not None:
            if decision.status == SCHEDULED:
                del self.nominations[key]  # used: the placement takes its cards
            else:
                self._hold_nominations(1, key)
                if decision.batch is None:
                    decision.batch = Hold(NOMINATED, nominated.message(), would_fit_on=nominated.node)
            return decision, parsed, None, None
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
        if gang.known < gang.min_member:
            return NOT_ENOUGH_PODS, f"gang {gang.key}: {gang.known}/{gang.min_member} members known"
        if gang.min_resources:
            why = self.book.over_limit(job.queue, gang.min_resources)
            if why is not None:
                return QUEUE_LIMIT, f"gang {gang.key} minResources: {why}"
        return None

    @staticmethod
    def _gang_message(gang: Gang, placeable: int, needed: int, miss: tuple[Member, Decision] | None) -> str:
        text = f"{gang.placed + placeable}/{gang.min_member} members placeable"
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

    def _reserved_warning(self) -> str:
        held = ", ".join(f"{node} (job {who})" for node, who in sorted(self.reserved.items()))
        return f"reservation: held this cycle for the jobs waiting longest: {held}"
