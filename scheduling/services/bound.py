"""Pods bound by others (`BoundPod`): the one validated writer the Kubernetes watcher feeds with
every pod another scheduler placed, in batches, and forgets them by when they end or go.

Their rows are locked by primary key, in their own table: no other write locks them, so the
lock order of `scheduling.services` is unchanged. A change that may free capacity (a pod
forgotten, or one that shrank, moved or ended) wakes the scheduler (`capacity_changed`).

Public API:
- `upsert_bound_pods(items) -> list[BoundWritten]`: one result per item, in order.
- `forget_bound_pods(items) -> int`: how many rows went.
- `BOUND_KEYS`: the keys an item of `upsert_bound_pods` may have.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from scheduling.dbretry import retry_on_conflict
from scheduling.engine import PodInvalid
from scheduling.engine.encoding import decode_allocation
from scheduling.engine.errors import ScenarioError
from scheduling.models import Allocation, BoundPod, Card
from scheduling.pipeline.rowlocks import lock_bound_pods, lock_cards

from .fields import checked_running_pod
from .pods import WriteOutcome, _named, capacity_changed, sort_out

#: The keys of an item of `upsert_bound_pods`: the pod as the watcher read it.
BOUND_KEYS = (
    "namespace",
    "name",
    "uid",
    "node",
    "labels",
    "affinity",
    "containers",
    "init_containers",
    "allocated",
    "mig_allocations",
    "phase",
)
#: The columns an item writes (`node` is `node_name`).
BOUND_COLUMNS = (
    "uid",
    "node_name",
    "labels",
    "affinity",
    "containers",
    "init_containers",
    "allocated",
    "mig_allocations",
    "phase",
)


@dataclass(slots=True)
class BoundWritten:
    """What became of item `index`: CREATED, UPDATED, UNCHANGED or REFUSED (`error` names
    the field)."""

    index: int
    outcome: WriteOutcome
    error: PodInvalid | None = None


def _text(item: dict, key: str, most: int, required: bool = False) -> str:
    value = item.get(key, "")
    value = "" if value is None else value
    if not isinstance(value, str) or "\x00" in value or len(value) > most:
        raise PodInvalid(key, f"must be a string of at most {most} characters, no NUL")
    if required and not value.strip():
        raise PodInvalid(key, "required: a non-empty string")
    return value


def _bound_item(item) -> dict:
    """An item of `upsert_bound_pods` as the columns of its row; PodInvalid naming the field."""
    if not isinstance(item, dict):
        raise PodInvalid("pod", f"must be an object of {', '.join(BOUND_KEYS)}")
    for key in item:
        if key not in BOUND_KEYS:
            raise PodInvalid(str(key), f"unknown field; an item takes {', '.join(BOUND_KEYS)}")
    labels = item.get("labels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise PodInvalid("labels", "must be an object of string values")
    affinity = item.get("affinity") or None
    containers, init_containers = item.get("containers") or [], item.get("init_containers") or []
    checked_running_pod(labels, affinity, containers, init_containers)
    return {
        "namespace": _text(item, "namespace", 63, required=True),
        "name": _text(item, "name", 253, required=True),
        "uid": _text(item, "uid", 64),
        "node_name": _text(item, "node", 253, required=True),
        "labels": labels,
        "affinity": affinity,
        "containers": containers,
        "init_containers": init_containers,
        "allocated": _text(item, "allocated", 100_000),
        "mig_allocations": _text(item, "mig_allocations", 100_000),
        "phase": _text(item, "phase", 16),
    }


def upsert_bound_pods(items: Iterable) -> list[BoundWritten]:
    """Store the pods others bound, as the watcher last saw them: one result per item, in order,
    every accepted item written in one transaction. A bad item (an unknown key, a malformed
    value, a pod an earlier item named) is REFUSED naming the field and never keeps the others
    out. A pod whose row changed in a way that may free capacity (anything but a new row)
    wakes the scheduler after the commit.

    Each item is an object of `BOUND_KEYS`: `namespace`, `name`, `uid`, `node` (the node it is
    bound to), `labels`, `affinity` (API form), `containers` and `init_containers` (API form:
    `resources`, `ports`, `restartPolicy`), `allocated` (HAMi's `hami.io/vgpu-devices-allocated`,
    for a pod HAMi placed; else empty) and `phase` (`Pending`, `Running`...; a pod that
    `Succeeded` or `Failed` holds nothing).

    Public API: `services.upsert_bound_pods(items)`."""
    results, accepted = sort_out(
        list(items), _bound_item, lambda index, exc: BoundWritten(index, WriteOutcome.REFUSED, exc)
    )
    if accepted:
        for done in _write_bound(accepted):
            results[done.index] = done
    return [done for done in results if done is not None]


@retry_on_conflict
def _write_bound(accepted: list[tuple[int, dict]]) -> list[BoundWritten]:
    keys = [(row["namespace"], row["name"]) for _, row in accepted]
    now = timezone.now()
    with transaction.atomic():
        existing = {
            (found.namespace, found.name): found
            for found in lock_bound_pods(BoundPod.objects.filter(_named(keys)))
        }
        done, fresh, changed = [], [], []
        for index, row in accepted:
            found = existing.get((row["namespace"], row["name"]))
            if found is None:
                fresh.append(BoundPod(**row))
                done.append(BoundWritten(index, WriteOutcome.CREATED))
                continue
            if all(getattr(found, name) == row[name] for name in BOUND_COLUMNS):
                done.append(BoundWritten(index, WriteOutcome.UNCHANGED))
                continue
            for name in BOUND_COLUMNS:
                setattr(found, name, row[name])
            found.updated_at = now  # bulk_update does not apply auto_now; the snapshot reads it
            changed.append(found)
            done.append(BoundWritten(index, WriteOutcome.UPDATED))
        if fresh:
            BoundPod.objects.bulk_create(fresh)
        if changed:
            BoundPod.objects.bulk_update(changed, [*BOUND_COLUMNS, "updated_at"])
            capacity_changed(f"{len(changed)} pods bound by others changed")
    return done


@retry_on_conflict
def assume_bound_pod(item: dict, seen: frozenset[int] | None) -> BoundWritten | None:
    """Store one pod a DRA pass placed (an item of `upsert_bound_pods`, its claims' devices in
    `allocated`), only if no allocation the pass did not count landed on its cards since it
    read them: the cards `allocated` names are locked first (step 4: a scheduling commit
    locks them too), then the active allocations on them are compared with `seen`, the ids
    the pass counted. None, nothing written, when one is new: a cycle's commit placed there
    after the pass read, and the pass takes its claims back. The row is locked after the
    cards here (pods others bound are otherwise locked alone). `seen` None: stored as
    `upsert_bound_pods` stores it. Raises PodInvalid naming the field of a malformed item."""
    row = _bound_item(item)
    with transaction.atomic():
        if seen is not None and row["allocated"]:
            try:
                uuids = sorted(
                    {uuid for container in decode_allocation(row["allocated"]) for uuid, _, _ in container}
                )
            except ScenarioError as exc:
                raise PodInvalid("allocated", str(exc)) from None
            cards = list(lock_cards(Card.objects.filter(uuid__in=uuids)).values_list("pk", flat=True))
            landed = Allocation.objects.filter(active=True, card_id__in=cards).values_list("pk", flat=True)
            if set(landed) - seen:
                return None
        return _write_bound([(0, row)])[0]


@retry_on_conflict
def forget_bound_pods(items: Iterable) -> int:
    """The pods others bound that ended or were deleted: their rows go, and what they held is
    free (the scheduler is woken). Each item is `{"namespace", "name"}` and optionally `uid`
    (then only that incarnation goes). Items naming no row change nothing. Raises PodInvalid
    naming the field of a malformed item (then nothing is written). How many rows went.

    Public API: `services.forget_bound_pods(items)`."""
    wanted: list[tuple[str, str, str]] = []
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise PodInvalid(f"pods[{position}]", "must be an object of namespace, name and uid")
        try:
            wanted.append(
                (_text(item, "namespace", 63, True), _text(item, "name", 253, True), _text(item, "uid", 64))
            )
        except PodInvalid as exc:
            raise PodInvalid(f"pods[{position}].{exc.field}", exc.message) from None
    if not wanted:
        return 0
    with transaction.atomic():
        rows = lock_bound_pods(
            BoundPod.objects.filter(_named([(namespace, name) for namespace, name, _ in wanted]))
        )
        uids = {(namespace, name): uid for namespace, name, uid in wanted}
        going = [
            pk
            for pk, namespace, name, uid in rows.order_by("pk").values_list("pk", "namespace", "name", "uid")
            if not uids[(namespace, name)] or uids[(namespace, name)] == uid
        ]
        if going:
            BoundPod.objects.filter(pk__in=going).delete()
            capacity_changed(f"{len(going)} pods bound by others ended")
    return len(going)
