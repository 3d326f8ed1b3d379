"""Placing jobs (single pods and gangs) from queues within one cycle: Volcano's gang and
proportion ideas on hamiadmin's engine.

Order: the leaf queue that is furthest below its share goes next (`QueueBook.order_key`,
re-read after every job, so placements move a queue back), and inside a queue jobs go by
priority, then age. A job that does not fit does not block the jobs behind it (backfill);
one that has waited `reserve_after_seconds` and still does not fit holds the nodes it came
closest on for the rest of the cycle (they read as not ready to every later job, with a
warning saying so), so smaller jobs cannot keep taking what it needs (no starvation).

A gang is tried only when at least `min_member` of its pods are known; its members are
placed in a `Statement`, and kept only if the ones already placed plus the ones placed now
reach `min_member`; otherwise every placement of it in this cycle is rolled back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .batch import NamespaceBook, QueueBook, Statement, Usage, decision_usage, hold_back
from .decision import PENDING, SCHEDULED, Decision
from .model import PodSpec
from .pod import ParsedPod, describe_policy

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
    def label(self) -> str:
        return f"gang {self.gang.key}" if self.gang is not None else self.members[0].spec.key


@dataclass
class Outcome:
    """One member decided: what the commit writes. `gang_needed` is how many of the gang's
    placements in this cycle the commit must keep (0 for single pods)."""

    member: Member
    job: Job
    decision: Decision
    parsed: ParsedPod | None
    gang_needed: int = 0


def held_decision(spec: PodSpec, config, reason: str, message: str, **figures) -> Decision:
    """A member left pending by a batch rule before the engine looked at its cards."""
    return Decision(
        name=spec.name,
        namespace=spec.namespace,
        status=PENDING,
        policy=describe_policy(spec.annotations, config),
        batch={"reason": reason, "message": message, "would_fit_on": None, **figures},
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
    ):
        self.scheduler = scheduler
        self.book = book
        self.namespaces = namespaces or NamespaceBook()
        self.statement = Statement(scheduler, book, self.namespaces)
        self.reserve_after = reserve_after_seconds
        self.decide = decide or scheduler.decide_parsed
        self.reserved: dict[str, str] = {}  # node -> the job holding it this cycle

    def run(self, jobs: list[Job]) -> list[Outcome]:
        queues: dict[str, deque[Job]] = {}
        for job in sorted(jobs, key=lambda j: (-j.priority, j.age)):
            queues.setdefault(job.queue, deque()).append(job)
        self.book.fair_shares(set(queues))
        outcomes: list[Outcome] = []
        while queues:
            name = min(queues, key=self.book.order_key)
            job = queues[name].popleft()
            if not queues[name]:
                del queues[name]
            outcomes.extend(self.place(job))
        return outcomes

    def place(self, job: Job) -> list[Outcome]:
        gang, config = job.gang, self.scheduler.config
        if gang is not None and gang.placed < gang.min_member:
            held = self._gate(job, gang)
            if held is not None:
                return [
                    Outcome(m, job, held_decision(m.spec, config, *held, group=gang.key), None)
                    for m in job.members
                ]
        mark = self.statement.mark()
        outcomes, placed = [], []
        first_miss: tuple[Member, Decision] | None = None
        for member in job.members:
            decision, parsed = self.decide(member.spec)
            if decision.status == SCHEDULED:
                used = decision_usage(decision)
                why = self.book.over_limit(job.queue, used)
                code = QUEUE_LIMIT
                if why is None:
                    why, code = self.namespaces.over(member.spec.namespace, used), NAMESPACE_QUOTA
                if why is not None:
                    hold_back(decision, code, why, queue=job.queue)
                else:
                    self.statement.assume(decision, job.queue, gang.key if gang is not None else "")
                    placed.append(decision)
            if decision.status != SCHEDULED and first_miss is None:
                first_miss = (member, decision)
            if self.reserved and decision.status in (SCHEDULED, PENDING):
                decision.warnings.append(self._reserved_warning())
            outcomes.append(Outcome(member, job, decision, parsed))
        if gang is not None:
            needed = max(0, gang.min_member - gang.placed)
            if len(placed) < needed:
                self.statement.rollback(mark)
                message = self._gang_message(gang, len(placed), needed, first_miss)
                for outcome in outcomes:
                    decision = outcome.decision
                    if decision.status == SCHEDULED:
                        hold_back(decision, GANG_UNSCHEDULABLE, message, group=gang.key)
                    elif decision.status == PENDING and decision.batch is None:
                        decision.batch = {
                            "reason": GANG_UNSCHEDULABLE,
                            "message": message,
                            "would_fit_on": None,
                            "group": gang.key,
                        }
                placed = []
            else:
                for outcome in outcomes:
                    outcome.gang_needed = needed
        if not placed and self.reserve_after is not None and job.waited_seconds >= self.reserve_after:
            self._reserve(job, outcomes)
        return outcomes

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
            node = self.scheduler.cluster.node(name)
            if node.ready:
                node.ready = False
                node.touch()
                self.reserved[name] = job.label

    def _reserved_warning(self) -> str:
        held = ", ".join(f"{node} ({who})" for node, who in sorted(self.reserved.items()))
        return f"reservation: held this cycle for jobs waiting longest, read as not ready: {held}"
