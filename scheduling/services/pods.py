"""Pods: submission (one, or many in one transaction: `submit_pods`), release (one, or many
in one transaction: `release_pods`), binding marks and requeues, and what follows a change
of capacity (`capacity_changed`: wake the backed-off pods after the commit, ask for a cycle).
Locks the pod first, then the cards its allocations hold, by primary key
(docs/architecture.md, "Lock order"); a release never waits for a card another writer holds
(`pipeline.settle`: its decrement there is owed, and settled soon after).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from functools import cache, partial
from typing import Any

from django.db import DataError, IntegrityError, connection, transaction
from django.db.models import Field, Q, QuerySet
from django.utils import timezone

from scheduling.dbretry import retry_on_conflict
from scheduling.engine import ClusterConfig, PodInvalid, PodSpec
from scheduling.engine.annotations import GroupRef, group_ref, queue_ref
from scheduling.engine.encoding import decode_allocation
from scheduling.engine.errors import ScenarioError
from scheduling.engine.families.dra import refuse_own_names
from scheduling.engine.pod import ParsedPod, parse_pod
from scheduling.models import (
    INT32_MAX,
    Allocation,
    CapacityVersion,
    Card,
    Pod,
    PodGroup,
    Queue,
    SchedulerConfig,
)
from scheduling.models.pods import gate_names, gated_reason, spec_fields
from scheduling.pipeline import pools
from scheduling.pipeline.rowlocks import lock_cards, lock_pod_groups, lock_pods, share_queues
from scheduling.pipeline.settle import add_up, lower
from scheduling.pipeline.triggers import request_cycle
from scheduling.statements import Statement

from .fields import checked_scheduling

ORIGIN_VALUES = tuple(value for value, _ in Pod.ORIGINS)
FINAL_STATUSES = (Pod.DELETED, Pod.SUCCEEDED, Pod.FAILED)


@retry_on_conflict
def wake_pending_pods(but: int | None = None) -> int:
    """Every backed-off pending pod may be tried at once (an operator's "try them all now";
    a change of capacity wakes only what it lets in: `pipeline.wake`).

    First the capacity version is moved in a transaction of its own (a cycle planning now then
    backs off none of its pods, `CapacityVersion`), then the pods are locked in primary-key
    order, as the cycle commit locks them, so a wake and a commit wait for each other at worst
    and no other bump waits behind either."""
    bump_capacity()
    with transaction.atomic():
        backed_off = Pod.objects.filter(status=Pod.PENDING, parked=False, next_attempt_at__isnull=False)
        if but is not None:
            backed_off = backed_off.exclude(pk=but)
        pks = list(lock_pods(backed_off).values_list("pk", flat=True))
        if not pks:
            return 0
        return backed_off.filter(pk__in=pks).update(next_attempt_at=None)


def bump_capacity() -> None:
    """Move the capacity version in a transaction of its own (one row): the next cycle wakes
    the backed-off pods it lets in (`pipeline.wake`), and a cycle planning now backs off none
    of its pods (`CapacityVersion`). Called outside any transaction (after the writer's commit):
    one autocommitted UPDATE, one round trip where BEGIN, UPDATE, COMMIT were three."""
    CapacityVersion.bump()


def capacity_changed(reason: str) -> None:
    """After the commit: move the capacity version, then ask for a cycle, which wakes the
    backed-off pods the change lets in (`pipeline.wake`: off the request path, and only those).
    Never inside the writer's transaction, which holds card or node locks (the lock order:
    `scheduling.services`)."""
    transaction.on_commit(bump_capacity, robust=True)
    request_cycle(reason)


def spec_hash(annotations, containers, init_containers, priority, labels=None, scheduling=None) -> str:
    """What a submission asks, as a digest: the same spec again changes nothing. Labels and
    scheduling fields count only when there are some, so older digests stay valid."""
    fields = [annotations, containers, init_containers, priority]
    if labels or scheduling:
        fields.append(labels or {})
    if scheduling:
        fields.append(scheduling)
    body = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def _columns(names) -> list[tuple[Field, str]]:
    """Pod's fields of these names with their column names; each must be a column (`get_field`
    also answers the reverse side of a relation)."""
    found = []
    for name in names:
        field = Pod._meta.get_field(name)
        if not isinstance(field, Field) or field.column is None:
            raise TypeError(f"Pod.{name} is not a column")
        found.append((field, field.column))
    return found


def _max_length(field: str) -> int:
    ((column, _),) = _columns([field])
    if column.max_length is None:
        raise TypeError(f"Pod.{field} has no maximum length")
    return column.max_length


def _check_envelope(namespace, name, annotations, containers, init_containers, priority, uid) -> None:
    """The envelope of a submission, for callers without the API's serializer (Kubernetes):
    the limits are the columns'."""
    for field, value in (("namespace", namespace), ("name", name)):
        if not isinstance(value, str) or not value.strip():
            raise PodInvalid(field, "required: a non-empty string")
        if len(value) > _max_length(field):
            raise PodInvalid(field, f"at most {_max_length(field)} characters")
    if not isinstance(uid, str) or len(uid) > _max_length("uid"):
        raise PodInvalid("uid", f"must be a string of at most {_max_length('uid')} characters")
    if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > INT32_MAX:
        raise PodInvalid("priority", f"must be a 32-bit integer, got {priority!r}")
    if not isinstance(annotations, dict):
        raise PodInvalid("annotations", "must be an object of string values")
    if not isinstance(containers, list) or not containers:
        raise PodInvalid("containers", "a pod needs at least one container")
    if not isinstance(init_containers, list):
        raise PodInvalid("initContainers", "must be a list of containers")
    try:
        json.dumps([annotations, containers, init_containers])
    except (TypeError, ValueError) as exc:
        raise PodInvalid("containers", f"must be plain JSON: {exc}") from None


class WriteOutcome(StrEnum):
    """What became of one item of a bulk pod write (`Submitted`, `Released`, `BoundWritten`):
    the API's `outcome` values. REFUSED: the item's `error` names the field; RELEASED and,
    for a pod that had finished already, UNCHANGED answer `release_pods`."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    REFUSED = "refused"
    RELEASED = "released"


#: The keys an item of `submit_pods` may have: `submit_pod`'s arguments of one pod.
SUBMISSION_KEYS = (
    "namespace",
    "name",
    "annotations",
    "containers",
    "init_containers",
    "priority",
    "uid",
    "labels",
    "scheduling",
)
#: The columns a pod that waits again rewrites: all but its key (`Pod.save()` writes the same).
REQUEUED_FIELDS = tuple(
    f.name for f in Pod._meta.concrete_fields if f.name not in ("id", "namespace", "name")
)


@dataclass(frozen=True, slots=True)
class Submission:
    """One pod as asked, checked and digested: what `submit_pod` and `submit_pods` write.
    `parsed` is the engine's reading (its warnings), None when not validated."""

    namespace: str
    name: str
    uid: str
    origin: str
    annotations: dict
    labels: dict
    containers: list
    init_containers: list
    priority: int
    digest: str
    group: GroupRef | None
    queue: str | None
    parsed: ParsedPod | None
    scheduling: dict = dataclasses.field(default_factory=dict)
    #: Not validated (`validate=False`) and its scheduling fields are malformed: stored parked,
    #: naming the field, so it is never tried (let alone bound) until its spec changes.
    problem: PodInvalid | None = None

    @property
    def gates(self) -> list[str]:
        return gate_names(self.scheduling)

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


@dataclass(slots=True)
class Submitted:
    """What became of item `index` of `submit_pods`: CREATED (a new row, or a finished pod's
    new incarnation), UPDATED, UNCHANGED or REFUSED (`error` names the field). `previous_uid`
    is the row's uid before this write ("" for a new row); `inserted`: the row is new (it has
    no history: no decisions, evictions or nominations)."""

    index: int
    outcome: WriteOutcome
    pod: Pod | None = None
    error: PodInvalid | None = None
    previous_uid: str = ""
    submission: Submission | None = None
    inserted: bool = False

    @property
    def warnings(self) -> dict[str, list[str]]:
        """What the engine accepted but ignores (unknown chain names...), by field."""
        parsed = self.submission.parsed if self.submission is not None else None
        return parsed.warnings() if parsed is not None and self.outcome != WriteOutcome.REFUSED else {}


def _checked(
    namespace,
    name,
    annotations=None,
    containers=None,
    init_containers=None,
    priority=0,
    uid="",
    *,
    validate: bool,
    origin: str,
    labels=None,
    config: ClusterConfig | None = None,
    scheduling=None,
    group: GroupRef | None = None,
) -> Submission:
    """`submit_pod`'s checks of one pod, before anything is written: raises PodInvalid naming
    the field (ValueError for an unknown `origin`). `config` is read once per batch. `group`:
    the gang the caller found for the pod (the Kubernetes agent: a Workload's pod group, the
    pod's owner), used when its annotations and labels name none."""
    annotations = {} if annotations is None else annotations
    containers = [] if containers is None else containers
    init_containers = [] if init_containers is None else init_containers
    labels = {} if labels is None else labels
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise PodInvalid("labels", "must be an object of string values")
    if origin not in ORIGIN_VALUES:
        raise ValueError(f"origin must be one of {', '.join(ORIGIN_VALUES)}, got {origin!r}")
    _check_envelope(namespace, name, annotations, containers, init_containers, priority, uid)
    if validate:  # the DRA family's names are the Kubernetes watcher's own (`families.dra`)
        refuse_own_names(containers, "containers")
        refuse_own_names(init_containers, "initContainers")
    problem = None
    try:
        scheduling = checked_scheduling(scheduling, containers, init_containers, labels)
    except PodInvalid as exc:
        if validate or not isinstance(scheduling, dict | None):
            raise
        problem = exc  # read from Kubernetes: stored parked, naming the field
        scheduling = {key: value for key, value in (scheduling or {}).items() if value is not None}
    spec = PodSpec(
        name=name,
        namespace=namespace,
        annotations=annotations,
        containers=containers,
        init_containers=init_containers,
        uid=uid,
        labels=labels,
        **spec_fields(scheduling),
    )
    parsed = parse_pod(spec, config or SchedulerConfig.current()) if validate else None
    try:
        ref = _named_or_found(group_ref(annotations, labels), group)
        named_queue = queue_ref(annotations, labels)
    except PodInvalid:
        if validate:
            raise
        ref = named_queue = None  # stored as written: the cycle rejects it naming the field
    return Submission(
        namespace=namespace,
        name=name,
        uid=uid,
        origin=origin,
        annotations=annotations,
        labels=labels,
        containers=containers,
        init_containers=init_containers,
        priority=priority,
        digest=spec_hash(annotations, containers, init_containers, priority, labels, scheduling),
        group=ref,
        queue=named_queue,
        parsed=parsed,
        scheduling=scheduling,
        problem=problem,
    )


@retry_on_conflict
def submit_pod(
    namespace: str,
    name: str,
    annotations=None,
    containers=None,
    init_containers=None,
    priority: int = 0,
    uid: str = "",
    *,
    validate: bool = True,
    origin: str = Pod.API,
    labels=None,
    scheduling=None,
    group: GroupRef | None = None,
) -> Pod:
    """Queue a pod, or update a queued one.

    Validated like SPEC 2, 3 and 5 with the engine's `parse_pod`; raises PodInvalid naming
    the field. `validate=False` is for pods that exist anyway (read from Kubernetes): an
    invalid one is stored, and the next cycle parks it with the error shown.

    The same spec again changes nothing. A new spec re-queues a pod that waits (pending or
    rejected); a finished pod, or one with a new uid, starts over as a new incarnation. A
    new uid means the earlier pod of this name is gone (deleted and created again, unseen):
    its active allocations are released in the same transaction, so its cards never leak.
    A placed pod keeps its placement: new annotations are stored, new containers refused.

    `origin` (`Pod.ORIGINS`) records who submitted the incarnation: pipeline cycles never
    place `extender` pods, and the kube agent's cleanup never touches `api` ones.

    `labels` (and annotations) may name a pod group (`engine.batch.group_ref`), created here
    when it is new, and a queue (`engine.batch.queue_ref`); a group's queue wins. A name the
    cycle cannot use (an unknown queue) is stored, and the cycle says so. `group` is a gang the
    caller found itself (a Workload's pod group, the pod's owner: `GroupRef`), taken when the
    annotations and labels name none.

    `scheduling` holds the Kubernetes scheduling fields (SPEC 10) by their API names
    (`nodeName`, `nodeSelector`, `affinity`, `tolerations`, `topologySpreadConstraints`,
    `schedulingGates`), stored as given in `Pod.scheduling`; containers keep their cpu, memory
    and extended requests and `ports`. The engine's rules judge them and the labels
    (`engine.kubefields`): malformed values are refused, FieldProblems naming every field;
    with `validate=False` the pod is stored parked, naming the first. `scheduling` may also
    hold `ownerReferences` (`[{apiVersion, kind, name, uid, controller}]`), stored, not used
    for scheduling yet. A pod with `schedulingGates` is never tried (`Pod.gated`, reason
    `SchedulingGated`) until they go (`set_scheduling_gates`, or a submission without them).

    `submit_pods` is the same for many pods in one transaction.
    """
    submission = _checked(
        namespace,
        name,
        annotations,
        containers,
        init_containers,
        priority,
        uid,
        validate=validate,
        origin=origin,
        labels=labels,
        scheduling=scheduling,
        group=group,
    )
    (done,) = _write_atomically([(0, submission)])
    if done.error is not None:
        raise done.error  # judged before anything was written: no group was made for it
    assert done.pod is not None  # written, since nothing was refused
    return done.pod


def submit_pods(items: Iterable, *, validate: bool = True, origin: str = Pod.API) -> list[Submitted]:
    """`submit_pod` for many pods: one result per item, in order, and every accepted pod
    written in one transaction (bulk inserts and updates, one cycle asked for).

    Each item is an object of `submit_pod`'s arguments for one pod (`SUBMISSION_KEYS`),
    checked as `submit_pod` checks it, and ends as `submit_pod` would leave it, one item
    after another. A bad item is REFUSED with the PodInvalid naming its field and never
    keeps the others out: an unknown key, a pod an earlier item named already (whatever
    became of that one: naming `name`), new containers for a placed pod. Should the
    database refuse the batch (what the checks missed, a DataError), each pod is written
    alone and the one it refuses is REFUSED naming `pod`."""
    if origin not in ORIGIN_VALUES:
        raise ValueError(f"origin must be one of {', '.join(ORIGIN_VALUES)}, got {origin!r}")
    config = SchedulerConfig.current() if validate else None
    results, accepted = sort_out(
        list(items),
        lambda item: _checked(**_arguments(item), validate=validate, origin=origin, config=config),
        lambda index, exc: Submitted(index, WriteOutcome.REFUSED, error=exc),
    )
    for done in _write_apart_if_refused(accepted):
        results[done.index] = done
    return [done for done in results if done is not None]


def sort_out(items: list, check, refused) -> tuple[list, list[tuple[int, Any]]]:
    """The items of a batch checked one by one (`check` returns the item as the writer takes
    it or raises PodInvalid naming the field) and refused when an earlier item named the same
    pod: a list with `refused(index, exc)` for each bad item and None for each good one (its
    result comes from the write), and the good ones as (index, checked item)."""
    again = named_again(items)
    results: list = []
    accepted: list[tuple[int, Any]] = []
    for index, item in enumerate(items):
        try:
            checked = check(item)
            if index in again:
                raise again[index]
        except PodInvalid as exc:
            results.append(refused(index, exc))
            continue
        results.append(None)
        accepted.append((index, checked))
    return results, accepted


def named_again(items: list) -> dict[int, PodInvalid]:
    """The items (by index) naming a pod that an earlier item named, whatever became of that
    one: `submit_pods` refuses them naming `name`. An item names a pod by its string
    `namespace` and `name`."""
    first_of: dict[tuple[str, str], int] = {}
    again = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        namespace, name = item.get("namespace"), item.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str):
            continue
        key = (namespace, name)
        first = first_of.setdefault(key, index)
        if first != index:
            again[index] = PodInvalid("name", f"{'/'.join(key)} is item {first} of this batch already")
    return again


def _arguments(item) -> dict:
    """An item of `submit_pods` as `_checked`'s arguments; PodInvalid naming a stray key."""
    if not isinstance(item, dict):
        raise PodInvalid("pod", f"must be an object of {', '.join(SUBMISSION_KEYS)}")
    for key in item:
        if key == GROUP_KEY and isinstance(item[key], GroupRef | None):
            continue  # a gang the caller found (never JSON: a GroupRef or None)
        if key not in SUBMISSION_KEYS:
            raise PodInvalid(str(key), f"unknown field; an item takes {', '.join(SUBMISSION_KEYS)}")
    return {"namespace": None, "name": None, **item}


#: The item key of `submit_pods` that carries a gang the caller found (`submit_pod`'s `group`).
GROUP_KEY = "group"


def _write_apart_if_refused(accepted: list[tuple[int, Submission]]) -> list[Submitted]:
    """All in one transaction; if the database refuses it (DataError), each pod alone."""
    if not accepted:
        return []
    try:
        return _write_together(accepted)
    except DataError:
        return [_write_alone(index, submission) for index, submission in accepted]


def _write_alone(index: int, submission: Submission) -> Submitted:
    try:
        return _write_together([(index, submission)])[0]
    except DataError as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Submitted(
            index,
            WriteOutcome.REFUSED,
            error=PodInvalid("pod", f"the database refused the pod: {why}"),
            submission=submission,
        )


class _InsertRefused(Exception):
    """The insert of these pods broke a constraint: a race (a concurrent submission inserted
    one of them after `_write` found no row for it) if one of them exists once the
    transaction is rolled back, else the database's own error (`cause`)."""

    def __init__(self, keys: list[tuple[str, str]], cause: IntegrityError):
        super().__init__(str(cause))
        self.keys, self.cause = keys, cause


#: How many times `_write_atomically` starts again after losing an insert race.
RACE_ATTEMPTS = 5


def _write_atomically(accepted: list[tuple[int, Submission]]) -> list[Submitted]:
    """`_write` in a transaction (a savepoint inside the caller's), started again from the
    top when a concurrent submission inserted one of the pods first: what was written is
    undone (groups, released cards) and the rows, now there, are judged as resubmissions."""
    for attempt in range(RACE_ATTEMPTS):
        try:
            with transaction.atomic():
                return _write(accepted, timezone.now())
        except _InsertRefused as refused:
            if not Pod.objects.filter(_named(refused.keys)).exists():
                raise refused.cause from None
            if attempt == RACE_ATTEMPTS - 1:
                raise IntegrityError("pods kept being created concurrently; gave up") from None
    raise AssertionError("unreachable")


_write_together = retry_on_conflict(_write_atomically)

#: How a submission of a pod with a row is applied (`_judge`).
KEEP, TAKE_UID, RELABEL, REQUEUE = "keep", "take uid", "relabel", "requeue"


def _write(accepted: list[tuple[int, Submission]], now) -> list[Submitted]:
    """Write checked submissions of distinct pods in the caller's transaction, in the lock
    order (docs/architecture.md): the existing rows locked by primary key and judged (a
    placed pod asked for new containers is REFUSED, before anything is written), the cards
    of replaced incarnations given back, then the groups (`_group_for`, as `release_pod`
    and the commit write them last), then new rows inserted together and changed rows
    updated together. One cycle is asked for after the commit. Raises _InsertRefused."""
    rows = _locked_rows([submission.key for _, submission in accepted])
    done: dict[int, Submitted] = {}
    judged: list[tuple[int, Submission, str]] = []
    frees: set[int] = set()
    for index, submission in accepted:
        pod = rows.get(submission.key)
        if pod is None:
            judged.append((index, submission, ""))
            continue
        try:
            how, free = _judge(pod, submission)
        except PodInvalid as exc:
            done[index] = Submitted(index, WriteOutcome.REFUSED, pod, exc, pod.uid, submission)
            continue
        judged.append((index, submission, how))
        if free:
            frees.add(index)
    queues, gone = _shared_queues([submission for _, submission, how in judged if how in ("", REQUEUE)])
    for index, submission, _ in judged:
        name = gone.get(submission.key)
        if name is not None:
            pod = rows.get(submission.key)
            error = QueueGone(name)
            done[index] = Submitted(
                index, WriteOutcome.REFUSED, pod, error, pod.uid if pod else "", submission
            )
    judged = [(index, submission, how) for index, submission, how in judged if index not in done]
    replaced = [rows[submission.key] for index, submission, _ in judged if index in frees]
    freed = _release_allocations_of(replaced, now)
    placements = _placements([(index, submission) for index, submission, _ in judged], queues)
    fresh = [(index, submission) for index, submission, how in judged if not how]
    for result in _insert(fresh, placements, now):
        done[result.index] = result
    changed: dict[tuple[str, ...], list[Pod]] = {}
    for index, submission, how in judged:
        if not how:
            continue
        pod = rows[submission.key]
        previous_uid = pod.uid
        outcome, fields = _apply(pod, submission, how, *placements[index], now)
        if fields:
            changed.setdefault(fields, []).append(pod)
        done[index] = Submitted(index, outcome, pod, None, previous_uid, submission)
    _save(changed, now)
    if freed.lowered:
        transaction.on_commit(bump_capacity, robust=True)  # capacity changed: `capacity_changed`
    inserted, requeued = len(fresh), len(changed.get(REQUEUED_FIELDS, ()))
    if inserted or requeued:
        # only their planners (node pools), unless replaced incarnations gave cards back
        asked = [submission for _, submission, _ in judged]
        planners = None if freed.lowered else set().union(*(_planners(item) for item in asked))
        request_cycle(_cycle_reason(inserted, requeued, replaced if freed else []), planners)
    return [done[index] for index, _ in accepted]


def _planners(submission: Submission) -> set[str]:
    """The node pools' planners that plan a submitted pod (`pools.planners_of`)."""
    return pools.planners_of(submission.scheduling, submission.group is not None)


def _judge(pod: Pod, asked: Submission) -> tuple[str, bool]:
    """`submit_pod`'s rule for a pod that has a row: how it is applied (KEEP, TAKE_UID,
    RELABEL, REQUEUE), and whether the replaced incarnation's cards are to be given back.
    Raises PodInvalid for new containers of a placed pod."""
    replaced = bool(asked.uid and pod.uid and asked.uid != pod.uid)
    if pod.status in Pod.FINISHED or replaced:
        return REQUEUE, pod.status not in Pod.FINISHED
    if pod.spec_hash == asked.digest:
        return (TAKE_UID if asked.uid and not pod.uid else KEEP), False
    if pod.status in Pod.BOUND:
        kept = (pod.containers, pod.init_containers, pod.priority)
        if kept != (asked.containers, asked.init_containers, asked.priority):
            raise PodInvalid("containers", f"the pod is placed on {pod.node}; its containers cannot change")
        return RELABEL, False
    return REQUEUE, False


def _apply(
    pod: Pod, asked: Submission, how: str, group: PodGroup | None, queue: Queue | None, now
) -> tuple[WriteOutcome, tuple[str, ...]]:
    """The judged submission applied to the locked row in memory: the outcome and the
    columns to write."""
    if how == KEEP:
        return WriteOutcome.UNCHANGED, ()
    if how == TAKE_UID:
        pod.uid = asked.uid
        return WriteOutcome.UPDATED, ("uid", "updated_at")
    if how == RELABEL:
        pod.annotations, pod.labels, pod.spec_hash = asked.annotations, asked.labels, asked.digest
        pod.scheduling = asked.scheduling
        pod.revision += 1
        changed = ("annotations", "labels", "scheduling", "spec_hash", "revision", "updated_at")
        return WriteOutcome.UPDATED, changed
    replaced = bool(asked.uid and pod.uid and asked.uid != pod.uid)
    outcome = WriteOutcome.CREATED if pod.status in Pod.FINISHED else WriteOutcome.UPDATED
    if pod.status in Pod.FINISHED or replaced:  # a new incarnation
        pod.submitted_at, pod.attempts, pod.node, pod.origin = now, 0, None, asked.origin
        pod.scheduled_at = pod.bound_at = pod.finished_at = None
        pod.allocated = ""
    pod.uid = asked.uid or pod.uid
    pod.annotations, pod.labels = asked.annotations, asked.labels
    pod.containers, pod.init_containers = asked.containers, asked.init_containers
    pod.group, pod.queue = group, queue
    pod.priority, pod.spec_hash = asked.priority, asked.digest
    pod.status, pod.next_attempt_at = Pod.PENDING, None
    pod.scheduling, pod.gated = asked.scheduling, bool(asked.gates)
    pod.parked, pod.error, pod.error_field, pod.reason = _waiting(asked)
    pod.revision += 1
    return outcome, REQUEUED_FIELDS


def _waiting(asked: Submission) -> tuple[bool, str, str, str]:
    """(parked, error, error_field, reason) of a pod that waits as `asked`: parked naming the
    field when its scheduling fields are malformed, saying which gates hold it when gated."""
    if asked.problem is not None:
        return True, str(asked.problem), asked.problem.field[:300], str(asked.problem)[:1000]
    return False, "", "", gated_reason(asked.gates) if asked.gates else ""


def _placements(
    accepted: list[tuple[int, Submission]], shared: dict[str, Queue]
) -> dict[int, tuple[PodGroup | None, Queue | None]]:
    """Each submission's group and queue, resolved in item order as `_group_for` would one
    pod after another (an ask is applied again only when another ask of that group came in
    between); a group's queue wins. `shared`: the queues the submissions name, held
    (`_shared_queues`); another name is read once."""
    groups: dict[tuple, PodGroup | None] = {}
    last_ask: dict[tuple[str, str], tuple] = {}
    queues: dict[str | None, Queue | None] = {name: queue for name, queue in shared.items()}
    found = {}
    for index, submission in accepted:
        ask = (submission.namespace, submission.group, submission.queue)
        named = (submission.namespace, submission.group.name) if submission.group else None
        if ask not in groups or (named is not None and last_ask.get(named) != ask):
            groups[ask] = _group_for(*ask, shared)
        if named is not None:
            last_ask[named] = ask
        group = groups[ask]
        queue_name = group.queue.name if group and group.queue else submission.queue
        if queue_name not in queues:
            queues[queue_name] = _queue_named(queue_name)
        found[index] = (group, queues[queue_name])
    return found


def _named(keys: list[tuple[str, str]]) -> Q:
    """The pods of these (namespace, name) keys, as one filter."""
    names: dict[str, list[str]] = defaultdict(list)
    for namespace, name in keys:
        names[namespace].append(name)
    where = Q()
    for namespace, in_namespace in names.items():
        where |= Q(namespace=namespace, name__in=in_namespace)
    return where


def _locked_rows(keys: list[tuple[str, str]], *, with_node: bool = False) -> dict[tuple[str, str], Pod]:
    """The existing rows of these pods, locked in primary-key order (the lock order);
    `with_node` reads their nodes in the same query without locking them."""
    if not keys:
        return {}
    statement = _LOCKED_WITH_NODE if with_node else _LOCKED
    return {(pod.namespace, pod.name): pod for pod in statement.rows(keys)}


def _locked(keys: list[tuple[str, str]], with_node: bool = False) -> QuerySet[Pod]:
    rows = Pod.objects.filter(_named(keys))
    if with_node:
        rows = rows.select_related("node")
    return lock_pods(rows, of_self=with_node)


#: Up to this many pods or cards, a request's locks run statements compiled once for their
#: number; a larger batch compiles its own (a pod's key is two values).
FEW = 8
_LOCKED = Statement(_locked, most=2 * FEW)
_LOCKED_WITH_NODE = Statement(partial(_locked, with_node=True), most=2 * FEW)


def _insert(
    fresh: list[tuple[int, Submission]], placements: dict[int, tuple[PodGroup | None, Queue | None]], now
) -> list[Submitted]:
    """Insert the pods that had no row, together. Raises _InsertRefused when the database
    refuses them (a concurrent submission created one meanwhile: the unique name), judged by
    `_write_atomically` once the transaction is rolled back: no savepoint around the insert,
    two round trips less for every submission."""
    if not fresh:
        return []
    pods = [_new_pod(submission, *placements[index], now) for index, submission in fresh]
    try:
        if len(pods) == 1:
            _insert_one(pods[0])
        else:
            Pod.objects.bulk_create(pods)
    except IntegrityError as exc:
        raise _InsertRefused([submission.key for _, submission in fresh], exc) from exc
    return [
        Submitted(index, WriteOutcome.CREATED, pod, submission=submission, inserted=True)
        for (index, submission), pod in zip(fresh, pods, strict=True)
    ]


def _insert_one(pod: Pod) -> None:
    """INSERT one new pod as `bulk_create` would (every column but the key, each value as
    the field prepares it to be saved; the key read back), from an INSERT written once:
    `bulk_create` compiles its statement anew for every call, a fifth of a one-pod
    submission's CPU."""
    returning = connection.features.can_return_columns_from_insert
    statement, fields = _insert_statement(connection.vendor, returning)
    values = [field.get_db_prep_save(field.pre_save(pod, True), connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(statement, values)
        if returning:
            (pod.pk,) = cursor.fetchone()
        else:
            pod.pk = connection.ops.last_insert_id(cursor, str(Pod._meta.db_table), str(Pod._meta.pk.column))
    pod._state.adding, pod._state.db = False, connection.alias


@cache
def _insert_statement(vendor: str, returning: bool) -> tuple[str, list[Field]]:
    """`_insert_one`'s INSERT for this database, and the fields whose values it takes."""
    quote = connection.ops.quote_name
    fields = [field for field in Pod._meta.concrete_fields if not field.primary_key]
    columns = ", ".join(quote(str(field.column)) for field in fields)
    marks = ", ".join(["%s"] * len(fields))
    statement = f"INSERT INTO {quote(str(Pod._meta.db_table))} ({columns}) VALUES ({marks})"  # noqa: S608
    return statement + (f" RETURNING {quote(str(Pod._meta.pk.column))}" if returning else ""), fields


def _new_pod(submission: Submission, group: PodGroup | None, queue: Queue | None, now) -> Pod:
    return Pod(
        namespace=submission.namespace,
        name=submission.name,
        uid=submission.uid,
        origin=submission.origin,
        annotations=submission.annotations,
        labels=submission.labels,
        group=group,
        queue=queue,
        containers=submission.containers,
        init_containers=submission.init_containers,
        scheduling=submission.scheduling,
        gated=bool(submission.gates),
        priority=submission.priority,
        spec_hash=submission.digest,
        submitted_at=now,
        **dict(zip(("parked", "error", "error_field", "reason"), _waiting(submission), strict=True)),
    )


def _save(changed: dict[tuple[str, ...], list[Pod]], now) -> None:
    """Write the changed rows, one parametrised UPDATE per set of columns, run for each row
    (executemany, pipelined on PostgreSQL): `bulk_update` builds a CASE per column and row,
    some milliseconds of Python per pod, and a lone row's `save()` compiles its UPDATE anew
    each time (pods have no save signals)."""
    quote = connection.ops.quote_name
    for names, pods in changed.items():
        fields = _columns(names)
        assignments = ", ".join(f"{quote(column)} = %s" for _, column in fields)
        ((_, key),) = _columns(["id"])
        statement = f"UPDATE {quote(Pod._meta.db_table)} SET {assignments} WHERE {quote(key)} = %s"
        for pod in pods:
            pod.updated_at = now  # auto_now is applied by save() only
        rows = [
            [field.get_db_prep_save(getattr(pod, field.attname), connection) for field, _ in fields]
            + [pod.pk]
            for pod in pods
        ]
        with connection.cursor() as cursor:
            cursor.executemany(statement, rows)


def _cycle_reason(inserted: int, requeued: int, replaced: list[Pod]) -> str:
    if len(replaced) == 1 and (inserted, requeued) == (0, 1):
        return f"released the replaced incarnation of {replaced[0].key}"
    if (inserted, requeued) == (1, 0):
        return "pod submitted"
    if (inserted, requeued) == (0, 1):
        return "pod updated"
    return f"{inserted} pods submitted, {requeued} updated" + (
        f", {len(replaced)} replaced incarnations released" if replaced else ""
    )


def _queue_named(name: str | None) -> Queue | None:
    """The queue a name stands for now, if it exists (the cycle re-resolves it on every try)."""
    if not name:
        return None
    return Queue.objects.filter(name=name).first()


class QueueGone(PodInvalid):
    """A submission named a queue (itself or through its group) that was deleted while the
    submission was written: refused, naming the queue; the API answers 409. A name that was
    unknown before the submission began is stored instead (the cycle says `QueueNotFound`)."""

    def __init__(self, name: str):
        super().__init__("queue", f"queue {name} was deleted while this pod was submitted", QUEUE_GONE)
        self.queue = name


#: `PodInvalid.code` of `QueueGone`.
QUEUE_GONE = "queue-gone"


def _shared_queues(submissions: list[Submission]) -> tuple[dict[str, Queue], dict[tuple[str, str], str]]:
    """The queues these submissions will point at (the one each names, its existing group's),
    held `FOR KEY SHARE` until the commit (step 2 of the lock order, after their pods), so none
    is deleted under them; and, by pod, the queue that existed when this began but was deleted
    before it was held (the submission races a delete: `QueueGone`)."""
    grouped = [submission for submission in submissions if submission.group is not None]
    groups: dict[tuple[str, str], str] = {}
    if grouped:
        rows = PodGroup.objects.filter(_group_keys(grouped)).exclude(queue=None)
        groups = {
            (ns, name): queue for ns, name, queue in rows.values_list("namespace", "name", "queue__name")
        }
    wanted: dict[tuple[str, str], str] = {}
    for submission in submissions:
        group = groups.get((submission.namespace, submission.group.name)) if submission.group else None
        named = group or submission.queue
        if named:
            wanted[submission.key] = named
    if not wanted:
        return {}, {}
    names = sorted(set(wanted.values()))
    existed = set(Queue.objects.filter(name__in=names).values_list("name", flat=True))
    held = share_queues(names)
    gone = {key: name for key, name in wanted.items() if name in existed and name not in held}
    return held, gone


def _group_keys(submissions: list[Submission]) -> Q:
    """The groups these submissions name, as one filter."""
    where = Q(pk__in=[])
    for submission in submissions:
        if submission.group is not None:
            where |= Q(namespace=submission.namespace, name=submission.group.name)
    return where


#: The size a group of unknown size is created with (`GroupRef.unknown_size`): it holds its
#: pods until its object says how many it needs.
UNKNOWN_SIZE = 1_000_000


def _group_for(
    namespace: str, ref: GroupRef | None, named_queue: str | None, shared: dict[str, Queue] | None = None
) -> PodGroup | None:
    """The pod group a pod names, created on first sight (from the annotation's `min_member`,
    else 1, and the pod's queue, as held in `shared` when there); an annotation's
    `min_member` or timeout updates it, and so does an owner's (`_owner_fields`)."""
    if ref is None:
        return None
    held = shared or {}
    defaults = {
        "min_member": ref.min_member or (UNKNOWN_SIZE if ref.unknown_size else 1),
        "schedule_timeout_seconds": ref.timeout_seconds,
        "source": ref.source,
        "queue": held[named_queue] if named_queue in held else _queue_named(named_queue),
        **_owner_fields(ref),
    }
    group, created = PodGroup.objects.get_or_create(namespace=namespace, name=ref.name, defaults=defaults)
    if not created:
        asked = _asked_of(ref)
        if any(getattr(group, name) != value for name, value in asked.items()):
            # read again locked before it is changed: a commit or release writing its phase
            # and conditions meanwhile takes turns with this write (`rowlocks`, step 6)
            group = lock_pod_groups(PodGroup.objects.filter(pk=group.pk)).get()
        before = group.min_member
        changed = [name for name, value in asked.items() if getattr(group, name) != value]
        for name in changed:
            setattr(group, name, asked[name])
        resized = "min_member" in changed or "subgroups" in changed
        if resized and ref.owner_kind:
            # the owner's new size reached the gang through a pod read after the owner's
            # cache went stale, before the resync's rescale (kube/rescale.py) did: said alike
            group.owner_scaled(before, f"{ref.owner_kind} {ref.owner_name} scaled")
            changed.append("conditions")
        if changed:
            group.save(update_fields=[*changed, "updated_at"])
        if resized:
            # its backed-off members may start now: tried at once, after this commit (pods are
            # never locked after a group: the lock order), as `rescale_owner_gang` does
            transaction.on_commit(partial(members_due, group.pk), robust=True)
    return group


def members_due(group_id: int) -> None:
    """The group's backed-off pending members tried at once (its size or parts changed). Its
    own statement, after the group's transaction: pods are never locked after a group."""
    Pod.objects.filter(group_id=group_id, status=Pod.PENDING, next_attempt_at__isnull=False).update(
        next_attempt_at=None
    )


def _named_or_found(named: GroupRef | None, found: GroupRef | None) -> GroupRef | None:
    """The group the pod's metadata names wins; the caller's group fills in its figures when
    it is that very group and the metadata gives no `min_member` (KAI's `pod-group-name`
    names the gang; its size is read from the pods' owner)."""
    if named is None:
        return found
    if found is not None and found.name == named.name and named.min_member is None:
        return found
    return named


def _owner_fields(ref: GroupRef) -> dict:
    """The owner a gang found from the pods' top controller names (kube/owners.py), and its
    parts; nothing for a gang named otherwise."""
    if not ref.owner_kind:
        return {}
    return {
        "owner_kind": ref.owner_kind,
        "owner_name": ref.owner_name,
        "subgroups": [{"name": name, "min_member": least} for name, least in ref.subgroups],
    }


def _pod_for_update(pod) -> Pod:
    """`pod` as a Pod, a primary key, or "namespace/name"; locked, its node read in the same
    query (not locked: the lock order takes no node after a pod)."""
    queryset = lock_pods(Pod.objects.select_related("node"), of_self=True)
    if isinstance(pod, Pod):
        return queryset.get(pk=pod.pk)
    if isinstance(pod, str):
        namespace, name = Pod.split_key(pod)
        return queryset.get(namespace=namespace, name=name)
    return queryset.get(pk=pod)


#: The columns `back_to_pending` writes.
BACK_TO_PENDING_FIELDS = (
    "status",
    "node",
    "allocated",
    "scheduled_at",
    "bound_at",
    "next_attempt_at",
    "held_until",
    "reason",
    "revision",
    "updated_at",
)


def back_to_pending(pod: Pod, reason: str, next_attempt_at=None) -> None:
    """A placed pod, its cards already given back (`_release_allocations`), waits again as the
    same incarnation: pending, no node, saying why. The caller holds the pod row's lock. A
    `next_attempt_at` is a hold: no change of capacity wakes it sooner (`pipeline.wake`; its
    own freed cards would, at once)."""
    pod.status, pod.node, pod.allocated = Pod.PENDING, None, ""
    pod.scheduled_at = pod.bound_at = None
    pod.next_attempt_at = pod.held_until = next_attempt_at
    pod.reason = reason[:1000]
    pod.revision += 1
    pod.save(update_fields=list(BACK_TO_PENDING_FIELDS))


@dataclass(frozen=True, slots=True)
class GivenBack:
    """What a release gave back of its pods' allocations: `lowered`, cards whose counters it
    lowered (capacity visible at its commit); `owed`, allocations released on cards another
    writer held, their decrements owed (settled soon after: `pipeline.settle`). True when the
    pods held anything."""

    lowered: bool = False
    owed: bool = False

    def __bool__(self) -> bool:
        return self.lowered or self.owed


def after_release(given: GivenBack, reason: str) -> None:
    """Once the release commits: capacity it made visible moves the version and asks for a
    cycle (`capacity_changed`); a decrement it only owes asks for a cycle, whose worker settles
    it before planning and moves the version then."""
    if given.lowered:
        capacity_changed(reason)
    elif given.owed:
        request_cycle(reason)


def _release_allocations(pod: Pod, now) -> GivenBack:
    """Give back the cards of `pod`'s active allocations (`_release_allocations_of`)."""
    return _release_allocations_of([pod], now)


def _release_allocations_of(pods: list[Pod], now) -> GivenBack:
    """Give back the cards of these pods' active allocations, never waiting for a card: the
    caller holds the pod rows' locks (taken first); their cards (named by the pods'
    allocation strings) are locked together, in primary-key order, `SKIP LOCKED`
    (`pipeline.settle`). The allocations are marked released;
    on the cards had, the counters are lowered by them and by whatever earlier releases owed
    there; on a card another writer holds (a scheduling commit), they are marked owed and its
    counters left as they are, for the next settler."""
    if not pods:
        return GivenBack()
    uuids = sorted({uuid for pod in pods for uuid in _cards_named(pod.allocated)})
    cards = _CARDS_HAD.rows(uuids) if uuids else []
    released = _deactivate_allocations([pod.pk for pod in pods], sorted(card.pk for card in cards), now)
    if not released:
        return GivenBack()
    freed = add_up((card_id, memory, cores) for card_id, memory, cores, owed in released if not owed)
    return GivenBack(lowered=lower(cards, freed), owed=any(owed for *_, owed in released))


def _cards_had(uuids: list[str]) -> QuerySet[Card]:
    return lock_cards(Card.objects.filter(uuid__in=uuids), skip_locked=True)


_CARDS_HAD = Statement(_cards_had, most=FEW)


def _cards_named(allocated: str) -> list[str]:
    """The UUIDs of the cards a placed pod's allocation string names (SPEC 8, the commit
    writes it with the allocation rows): the cards its allocations hold, found without reading
    them. A string that does not parse names none: its allocations' decrements are then owed
    (settled later), never lost."""
    try:
        return [uuid for container in decode_allocation(allocated) for uuid, _, _ in container]
    except ScenarioError:
        return []


def _deactivate_allocations(pod_ids: list[int], had: list[int], now) -> list[tuple[int, int, int, bool]]:
    """One statement: the pods' active allocations marked released (owed where their card is
    not in `had`), and the decrements earlier releases owe to the cards in `had` taken
    (`settle.take_owed`); each row as (card, memory, cores, owed now). The rows not owed now
    are what the counters of `had` are to be lowered by. The caller holds the pods' and the
    `had` cards' locks: no writer holds an active allocation of a placed pod without its pod's
    lock, nor an owed one without its card's, so this waits for nobody."""
    quote = connection.ops.quote_name
    fields = {field.name: field for field in Allocation._meta.concrete_fields}
    column = {
        name: quote(str(fields[name].column))
        for name in ("card", "memory", "cores", "active", "owed", "pod", "released_at")
    }
    active, owed, card = column["active"], column["owed"], column["card"]
    pods = f"{column['pod']} IN ({', '.join(['%s'] * len(pod_ids))})"
    cards = f"{card} IN ({', '.join(['%s'] * len(had))})" if had else ""
    released_at = fields["released_at"].get_db_prep_save(now, connection)
    if cards:
        owed_now = f"CASE WHEN {active} THEN NOT ({cards}) ELSE %s END"
        which = f"({active} AND {pods}) OR ({owed} AND {cards})"
        params = [False, released_at, *had, False, *pod_ids, *had]
    else:
        owed_now, which = "%s", f"{active} AND {pods}"
        params = [False, released_at, True, *pod_ids]
    statement = (
        f"UPDATE {quote(Allocation._meta.db_table)} SET {active} = %s,"
        f" {column['released_at']} = CASE WHEN {active} THEN %s ELSE {column['released_at']} END,"
        f" {owed} = {owed_now} WHERE {which}"
        f" RETURNING {card}, {column['memory']}, {column['cores']}, {owed}"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return [(card, memory, cores, bool(owed)) for card, memory, cores, owed in cursor.fetchall()]


#: The columns a release writes on the pod (`_finish`).
RELEASED_FIELDS = ("status", "finished_at", "next_attempt_at", "reason", "revision", "updated_at")


def _finish(pod: Pod, final_status: str, now) -> None:
    """The pod's row as a release leaves it, in memory: `final_status`, finished now, saying
    where it ran. Its node is read already (`_pod_for_update`, `_locked_rows`)."""
    pod.status, pod.finished_at, pod.next_attempt_at = final_status, now, None
    pod.reason = (
        f"{final_status} after {'running on ' + pod.node.name if pod.node is not None else 'no placement'}"
    )
    pod.revision += 1


def _check_final_status(final_status: str) -> None:
    if final_status not in FINAL_STATUSES:
        raise ValueError(f"final_status must be one of {', '.join(FINAL_STATUSES)}, got {final_status!r}")


@retry_on_conflict
def release_pod(pod, final_status: str = Pod.DELETED, expected_uid: str | None = None) -> Pod | None:
    """The pod finished, failed or was deleted: give back its cards and wake the scheduler.
    Releasing a finished pod again changes nothing.

    `expected_uid`: release only that incarnation. When the row now holds another uid (the
    pod was deleted and created again meanwhile), nothing is written and None is returned,
    so a late release meant for the old pod can never hit the new one.
    `release_pods` is the same for many pods in one transaction.
    Raises Pod.DoesNotExist, ValueError."""
    _check_final_status(final_status)
    now = timezone.now()
    with transaction.atomic():
        pod = _pod_for_update(pod)
        if expected_uid is not None and pod.uid != expected_uid:
            return None
        if pod.status in Pod.FINISHED:
            return pod
        freed = _release_allocations(pod, now)
        _finish(pod, final_status, now)
        pod.save(update_fields=list(RELEASED_FIELDS))
        if pod.group_id is not None:
            group_after_release(pod.group_id, now)
        after_release(freed, f"released {pod.key}")
    return pod


#: The keys an item of `release_pods` may have: `uid` (optional) releases only that incarnation.
RELEASE_KEYS = ("namespace", "name", "uid")


@dataclass(slots=True)
class Released:
    """What became of item `index` of `release_pods`: RELEASED, UNCHANGED or REFUSED (`error`
    names the field; `pod` is the row when there is one, as it is now)."""

    index: int
    outcome: WriteOutcome
    pod: Pod | None = None
    error: PodInvalid | None = None


def release_pods(
    items: Iterable, final_status: str = Pod.DELETED, *, placed_only: bool = False
) -> list[Released]:
    """`release_pod` for many pods: one result per item, in order, all written in one
    transaction (pods, then cards, then groups: the lock order), one cycle asked for.

    Each item is an object of `RELEASE_KEYS`: the pod's `namespace` and `name`, and `uid` to
    release only that incarnation. Each pod ends as `release_pod` would leave it, one item
    after another: a finished pod is UNCHANGED. REFUSED, naming the field and writing
    nothing for that item: an unknown key or a malformed value, a pod an earlier item named
    (`name`), no such pod (`name`), another incarnation than `uid` (`uid`), and with
    `placed_only` (the rule of `POST pods/<ns>/<name>/complete/`) a pod that is not scheduled
    or running (`status`), judged under the pod's lock. Raises ValueError for `final_status`."""
    _check_final_status(final_status)
    results, wanted = sort_out(
        list(items), _release_item, lambda index, exc: Released(index, WriteOutcome.REFUSED, error=exc)
    )
    if wanted:
        for done in _release_together(wanted, final_status, placed_only):
            results[done.index] = done
    return [done for done in results if done is not None]


def _release_item(item) -> dict:
    """An item of `release_pods`, checked; PodInvalid naming the field."""
    if not isinstance(item, dict):
        raise PodInvalid("pod", f"must be an object of {', '.join(RELEASE_KEYS)}")
    for key in item:
        if key not in RELEASE_KEYS:
            raise PodInvalid(str(key), f"unknown field; an item takes {', '.join(RELEASE_KEYS)}")
    for field in RELEASE_KEYS:
        value = item.get(field, "")
        if field != "uid" and (not isinstance(value, str) or not value.strip()):
            raise PodInvalid(field, "required: a non-empty string")
        if not isinstance(value, str) or "\x00" in value or len(value) > _max_length(field):
            raise PodInvalid(field, f"must be a string of at most {_max_length(field)} characters, no NUL")
    return {"namespace": item["namespace"], "name": item["name"], "uid": item.get("uid") or None}


@retry_on_conflict
def _release_together(wanted: list[tuple[int, dict]], final_status: str, placed_only: bool) -> list[Released]:
    """The checked items released in one transaction: the pods locked by primary key and
    judged, their cards given back together, the rows written together, then their groups
    judged member by member in item order, as `group_after_release` after each pod."""
    now = timezone.now()
    with transaction.atomic():
        rows = _locked_rows([(asked["namespace"], asked["name"]) for _, asked in wanted], with_node=True)
        done: list[Released] = []
        releasing: list[Pod] = []
        for index, asked in wanted:
            pod = rows.get((asked["namespace"], asked["name"]))
            if pod is None:
                done.append(
                    Released(
                        index,
                        WriteOutcome.REFUSED,
                        error=PodInvalid("name", f"no pod {asked['namespace']}/{asked['name']}"),
                    )
                )
            elif asked["uid"] is not None and pod.uid != asked["uid"]:
                why = f"{pod.key} is another incarnation now (uid {pod.uid!r}); nothing released"
                done.append(Released(index, WriteOutcome.REFUSED, pod, PodInvalid("uid", why)))
            elif placed_only and pod.status not in Pod.BOUND:
                why = f"pod {pod.key} is {pod.status}: only a scheduled or running pod can end {final_status}"
                done.append(Released(index, WriteOutcome.REFUSED, pod, PodInvalid("status", why)))
            elif pod.status in Pod.FINISHED:
                done.append(Released(index, WriteOutcome.UNCHANGED, pod))
            else:
                releasing.append(pod)
                done.append(Released(index, WriteOutcome.RELEASED, pod))
        if not releasing:
            return done
        freed = _release_allocations_of(releasing, now)
        for pod in releasing:
            _finish(pod, final_status, now)
        groups = _groups_after_release(releasing, now)
        _save({RELEASED_FIELDS: releasing}, now)
        for group in groups:
            group.save(update_fields=list(GROUP_PHASE_FIELDS))
        after_release(
            freed,
            f"released {releasing[0].key}" if len(releasing) == 1 else f"released {len(releasing)} pods",
        )
    return done


def _groups_after_release(released: list[Pod], now) -> list[PodGroup]:
    """`group_after_release` for each released member, in order, over the members' statuses
    read once, before the released rows are written: each group is judged as it stood after
    that member ended. The groups that changed, to be written after the pods and cards."""
    group_ids = {pod.group_id for pod in released if pod.group_id is not None}
    if not group_ids:
        return []
    # locked before their members are read (`rowlocks`, step 6: after the pods and cards)
    groups = {group.pk: group for group in lock_pod_groups(PodGroup.objects.filter(pk__in=group_ids))}
    members: dict[int, dict[int, str]] = defaultdict(dict)
    for group_id, pk, status in Pod.objects.filter(group_id__in=groups).values_list(
        "group_id", "pk", "status"
    ):
        members[group_id][pk] = status
    changed: dict[int, PodGroup] = {}
    for pod in released:
        group = groups.get(pod.group_id) if pod.group_id is not None else None
        if group is None:
            continue
        members[group.pk][pod.pk] = pod.status
        if _judge_group(group, list(members[group.pk].values()), now):
            changed[group.pk] = group
    return [changed[pk] for pk in sorted(changed)]


#: The columns `group_after_release` writes.
GROUP_PHASE_FIELDS = ("phase", "reason", "conditions", "running_at", "finished_at", "updated_at")


def group_after_release(group_id: int, now) -> None:
    """A member ended: the group completes when every member that was not deleted succeeded,
    fails when all ended and one of them did not, and goes back in the queue when it fell below
    `min_member` (`_judge_group`). Written last, after the pod and cards (the lock order)."""
    # locked before its members are read: a commit writing its phase meanwhile takes turns
    group = lock_pod_groups(PodGroup.objects.filter(pk=group_id)).first()
    if group is None:
        return
    if _judge_group(group, list(group.pods.values_list("status", flat=True)), now):
        group.save(update_fields=list(GROUP_PHASE_FIELDS))


def _asked_of(ref: GroupRef) -> dict:
    """What a submission's gang reference sets on its existing group (`_group_for`): the
    owner's fields, and `min_member` and the timeout where the pod says them."""
    asked = dict(_owner_fields(ref))
    if ref.min_member is not None:
        asked["min_member"] = ref.min_member
    if ref.timeout_seconds is not None:
        asked["schedule_timeout_seconds"] = ref.timeout_seconds
    return asked


def _judge_group(group: PodGroup, statuses: list[str], now) -> bool:
    """The group's phase after a member ended, given its members' statuses, set in memory;
    whether anything changed. Once no member is live the gang is judged by the members that
    ran to an end: a deleted member is not judged (Kubernetes controllers delete and recreate
    pods under new names, and the replacement is judged instead), so the gang completes when
    every member that was not deleted succeeded, and fails when one did not, or when every
    member was deleted."""
    live = [status for status in statuses if status not in Pod.FINISHED and status != Pod.REJECTED]
    placed = sum(status in Pod.BOUND for status in statuses)
    if not live:
        judged = [status for status in statuses if status != Pod.DELETED]
        succeeded = judged.count(Pod.SUCCEEDED)
        deleted = len(statuses) - len(judged)
        also = f" ({deleted} deleted)" if deleted else ""
        if judged and succeeded == len(judged):
            return group.set_phase(
                PodGroup.COMPLETED, "Completed", f"{succeeded} members succeeded{also}", now
            )
        if not judged:
            return group.set_phase(
                PodGroup.FAILED, "MembersDeleted", f"all {deleted} members were deleted", now
            )
        return group.set_phase(
            PodGroup.FAILED, "MembersEnded", f"{succeeded}/{len(judged)} members succeeded{also}", now
        )
    if group.phase == PodGroup.RUNNING and placed < group.min_member:
        return group.set_phase(
            PodGroup.INQUEUE,
            "BelowMinMember",
            f"{placed}/{group.min_member} members placed after one ended",
            now,
        )
    return False


@retry_on_conflict
def mark_bound(pod, node: str, expected_uid: str | None = None) -> Pod | None:
    """Kubernetes accepted the pod's Binding to `node` (or shows it there): scheduled ->
    running, `bound_at` set. This is not the kubelet starting it; hamiadmin does not follow
    that. A row that is not scheduled on `node` is left alone (already bound, released, or
    placed again meanwhile). None when `expected_uid` is given and the row holds another
    incarnation. Raises Pod.DoesNotExist."""
    with transaction.atomic():
        pod = _pod_for_update(pod)
        if expected_uid is not None and pod.uid != expected_uid:
            return None
        if pod.status == Pod.SCHEDULED and pod.node_id is not None and pod.node.name == node:
            pod.status, pod.bound_at = Pod.RUNNING, timezone.now()
            pod.revision += 1
            pod.save(update_fields=["status", "bound_at", "revision", "updated_at"])
    return pod


@retry_on_conflict
def requeue_pod(pod) -> Pod:
    """Try a waiting pod in the next cycle: clear its back-off and un-park it, so an invalid
    spec is read again (it parks again if still invalid). Placed and finished pods are left
    alone: raises ValueError naming the status. Raises Pod.DoesNotExist."""
    with transaction.atomic():
        pod = _pod_for_update(pod)
        if pod.status not in (Pod.PENDING, Pod.REJECTED):
            raise ValueError(f"only a waiting pod can be requeued; {pod.key} is {pod.status}")
        pod.status, pod.parked, pod.next_attempt_at = Pod.PENDING, False, None
        pod.revision += 1
        pod.save(update_fields=["status", "parked", "next_attempt_at", "revision", "updated_at"])
        request_cycle(f"requeue {pod.key}")
    return pod


@retry_on_conflict
def requeue_placed_pod(
    pod, retry_after: float = 0.0, reason: str = "", expected_uid: str | None = None
) -> Pod | None:
    """A placement that cannot be used (Kubernetes refused the Binding; kube-scheduler now
    offers other nodes): give the cards back and put the same incarnation back in the queue,
    not before `retry_after` seconds. Attempts, submission time (its place in the queue) and
    origin are kept; the pod goes straight from `scheduled` to `pending`, never `failed`.

    Only a `scheduled` pod is requeued; any other row is returned unchanged (a bound pod
    keeps its cards). None when `expected_uid` is given and the row holds another
    incarnation. Raises Pod.DoesNotExist."""
    now = timezone.now()
    with transaction.atomic():
        pod = _pod_for_update(pod)
        if expected_uid is not None and pod.uid != expected_uid:
            return None
        if pod.status != Pod.SCHEDULED:
            return pod
        if _release_allocations(pod, now).lowered:  # an owed one: the cycle asked for settles it
            transaction.on_commit(bump_capacity, robust=True)  # the others; this pod backs off
        back_to_pending(
            pod,
            reason or "placement given back",
            now + timedelta(seconds=retry_after) if retry_after > 0 else None,
        )
        request_cycle(f"requeue {pod.key}")
    return pod


@retry_on_conflict
def set_scheduling_gates(pod, gates, expected_uid: str | None = None) -> Pod | None:
    """A pod's scheduling gates are now `gates` (`[{name}]`, as `spec.schedulingGates`; empty:
    all gone). Kubernetes only ever removes gates, and the watcher calls this when it sees them
    go; a pod whose gates all went is due at once (its back-off cleared, a cycle asked for).
    A gated pod is never tried: pending, reason `SchedulingGated` (`Pod.gated`). The stored
    digest follows, so the same spec submitted again changes nothing.

    Only a pending pod changes (a placed or finished one is returned as it is). None when
    `expected_uid` is given and the row holds another incarnation. Raises PodInvalid naming
    `schedulingGates`, Pod.DoesNotExist.

    Public API: `services.set_scheduling_gates(pod, gates, expected_uid=None)`; `pod` as a Pod,
    a primary key or "namespace/name".
    """
    gates = [] if gates is None else gates
    checked = checked_scheduling({"schedulingGates": gates}).get("schedulingGates", [])
    with transaction.atomic():
        pod = _pod_for_update(pod)
        if expected_uid is not None and pod.uid != expected_uid:
            return None
        if pod.status != Pod.PENDING:
            return pod
        scheduling = dict(pod.scheduling) if isinstance(pod.scheduling, dict) else {}
        if checked:
            scheduling["schedulingGates"] = checked
        else:
            scheduling.pop("schedulingGates", None)
        names = gate_names(scheduling)
        if scheduling == pod.scheduling and pod.gated == bool(names):
            return pod
        pod.scheduling, pod.gated = scheduling, bool(names)
        pod.spec_hash = spec_hash(
            pod.annotations, pod.containers, pod.init_containers, pod.priority, pod.labels, scheduling
        )
        if names:
            pod.reason = gated_reason(names)
        elif pod.reason.startswith(gated_reason([])):
            pod.reason = ""
        pod.next_attempt_at = None
        pod.revision += 1
        pod.save(
            update_fields=[
                "scheduling",
                "gated",
                "spec_hash",
                "reason",
                "next_attempt_at",
                "revision",
                "updated_at",
            ]
        )
        if not names:
            request_cycle(f"scheduling gates of {pod.key} removed")
    return pod
