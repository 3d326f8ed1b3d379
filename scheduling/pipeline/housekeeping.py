"""Periodic upkeep: decrements releases owe are settled, silent nodes go not-ready, history
stays bounded, drift is looked for, and usage is sampled for the charts (bounded by its own
retention)."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from ..models import Cycle, Decision, Node, Pod, apply_retention, take_sample
from . import consistency, preemption
from .options import option
from .settle import settle_owed


def mark_silent_nodes_not_ready(now=None) -> int:
    """Nodes whose agent has not reported for HEARTBEAT_TIMEOUT_SECONDS take no new pods
    (`NodeNotReady`); their tenants stay. Nodes never heard from (made by hand) are left alone."""
    now = now or timezone.now()
    timeout = option("HEARTBEAT_TIMEOUT_SECONDS")
    cutoff = now - timedelta(seconds=timeout)
    return Node.objects.filter(ready=True, last_heartbeat__lt=cutoff).update(
        ready=False, not_ready_reason=f"no report for {timeout:g} s", updated_at=now
    )


def prune_decisions(keep: int | None = None) -> int:
    """Keep the last `keep` decisions of each pod (DECISIONS_PER_POD)."""
    keep = keep if keep is not None else option("DECISIONS_PER_POD")
    table = connection.ops.quote_name(Decision._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE id IN ("
            f" SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY pod_id ORDER BY id DESC) AS newer"
            f" FROM {table}) ranked WHERE newer > %s)",
            [keep],
        )
        return cursor.rowcount


def prune_cycles(keep: int | None = None) -> int:
    """Keep the last CYCLES_KEPT cycles; their decisions stay (with no cycle)."""
    keep = keep if keep is not None else option("CYCLES_KEPT")
    boundary = Cycle.objects.order_by("-id").values_list("id", flat=True)[keep : keep + 1].first()
    if boundary is None:
        return 0
    return Cycle.objects.filter(id__lte=boundary).delete()[0]


def prune_finished_pods(now=None, hours: float | None = None) -> int:
    """Pods finished longer ago than FINISHED_PODS_KEPT_HOURS go, with their history; not one
    whose decrement is still owed (`settle`): its allocation rows are what the counters owe."""
    now = now or timezone.now()
    hours = hours if hours is not None else option("FINISHED_PODS_KEPT_HOURS")
    cutoff = now - timedelta(hours=hours)
    with transaction.atomic():
        finished = Pod.objects.filter(status__in=Pod.FINISHED, finished_at__lt=cutoff)
        return finished.exclude(allocations__owed=True).delete()[0]


def check_consistency() -> consistency.ConsistencyReport:
    """Look for drift (counters, ghosts, unbacked placements, over capacity) and report it
    as metrics and events; the repair is `manage.py check_consistency --repair`
    (`services.repair_consistency`), a write path the pipeline does not import."""
    found = consistency.check()
    consistency.report(found, actor="housekeeping")
    return found


def sample_usage(now=None) -> int:
    """A usage sample for the charts (at most one per SAMPLE_SECONDS), then the samples'
    retention; the rows the retention folded or dropped."""
    take_sample(now)
    return apply_retention(now)


def housekeeping(now=None) -> dict[str, int]:
    """What it did; a `drift_<kind>` entry for each kind of drift found (none when clean), and
    `samples_folded` when the usage history was downsampled."""
    owed = settle_owed(ask_for_cycle=True)  # owed decrements no cycle or release settled yet
    found = check_consistency()
    folded = sample_usage(now)
    settled = preemption.hooks.settle() if preemption.hooks.settle is not None else {}
    return {
        "nodes_not_ready": mark_silent_nodes_not_ready(now),
        "decisions_pruned": prune_decisions(),
        "cycles_pruned": prune_cycles(),
        "pods_pruned": prune_finished_pods(now),
        **{f"drift_{kind}": count for kind, count in found.counts().items() if count},
        **({"samples_folded": folded} if folded else {}),
        **({"owed_cards_settled": owed} if owed else {}),
        **{f"evictions_{what}": n for what, n in (settled or {}).items() if n},
    }
