"""Usage over time: one row per sample of the cluster, kept bounded by downsampling.

The beat housekeeping takes a sample every SAMPLE_SECONDS at most (`take_sample`); the
retention (`apply_retention`) folds raw samples older than RAW_HOURS into 5-minute rows,
those older than FIVE_MINUTE_DAYS into hourly rows, and drops the oldest beyond MAX_ROWS.
So the table holds at most about 720 + 2016 + the hourly rows up to MAX_ROWS, whatever
the cluster's size; per-node shares ride in one JSON column of each row, and per-queue usage
(at most MAX_QUEUES queues) in another.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import median

from django.db import models, transaction
from django.db.models.fields.json import KT
from django.utils import timezone

from scheduling.engine.batch.queues import DEFAULT_QUEUE

from .cluster import Node
from .history import Cycle, Decision
from .pods import Allocation, Pod

#: The least time between two samples, whatever calls `take_sample`.
SAMPLE_SECONDS = 30
#: Raw samples are kept this long, then folded into 5-minute rows.
RAW_HOURS = 6
#: 5-minute rows are kept this long, then folded into hourly rows.
FIVE_MINUTE_DAYS = 7
#: The table never holds more rows than this; the oldest go first.
MAX_ROWS = 5000
#: Pending reasons kept per sample: the largest few, so the JSON stays small.
TOP_REASONS = 5
#: Queues kept per sample: the busiest (most vGPUs held, then most pods pending), so a
#: cluster with many queues cannot grow the row without end.
MAX_QUEUES = 50
#: What each sample keeps per queue: vGPUs held, MiB held, pods pending.
QUEUE_FIGURES = ("vgpus", "memory", "pending")
#: Pending pods whose latest decision names no failed-node reason.
NOT_TRIED, INVALID, CONFLICT, NO_REASON = "not tried yet", "invalid spec", "lost a race", "no GPU node"


class UsageSample(models.Model):
    """The cluster at one time, or the average of `samples` raw samples over `span` seconds.

    Shares are 0..1 of what present cards offer; `nodes` is node name -> the node's fullest
    of slots, memory and cores, in whole percent. `placements` and `cycles` count what
    happened since the previous sample; the cycle times are of those cycles.
    """

    at = models.DateTimeField(db_index=True, help_text="start of the period this row stands for")
    span = models.PositiveIntegerField(
        default=0, help_text="seconds folded into this row; 0 = one raw sample"
    )
    samples = models.PositiveIntegerField(default=1, help_text="raw samples folded into this row")
    slots_share = models.FloatField(default=0)
    memory_share = models.FloatField(default=0)
    cores_share = models.FloatField(default=0)
    pending = models.FloatField(default=0, help_text="pending pods (the average when folded)")
    pending_reasons = models.JSONField(default=dict, blank=True, help_text="top reasons -> pods")
    placements = models.PositiveIntegerField(default=0)
    cycles = models.PositiveIntegerField(default=0)
    cycle_p50_ms = models.FloatField(null=True, blank=True)
    cycle_max_ms = models.FloatField(null=True, blank=True)
    nodes = models.JSONField(default=dict, blank=True, help_text="node -> fullest share, percent")
    queues = models.JSONField(
        default=dict,
        blank=True,
        help_text="queue -> {vgpus, memory (MiB), pending}: its own pods only, the busiest MAX_QUEUES",
    )

    class Meta:
        ordering = ["at"]

    def __str__(self) -> str:
        return f"sample at {self.at:%Y-%m-%d %H:%M:%S} ({self.span or 'raw'})"


def _share(used: int, total: int) -> float:
    return round(used / total, 4) if total else 0.0


def top_reason(
    error: str,
    outcome: str | None,
    failed_reasons,
    batch_reason: str | None = None,
    decisive: str | None = None,
) -> str:
    """What a pending pod waits on, as the Pending page's facets and the history count it: the
    decisive reason its decision stored (`engine.triage`: chosen by what would make it fit, so
    a pod that refused cards by its own type or UUID counts under what decides it, not under
    `CardTypeMismatch`); for a decision stored without one, the batch reason that held it
    (gang, queue limit, quota), else the reason code that turned away the most cards (summed
    over the failed nodes, ties by name); or a facet name for a pod without one."""
    if error:
        return INVALID
    if outcome is None:
        return NOT_TRIED
    if outcome == Decision.CONFLICT:
        return CONFLICT
    if decisive:
        return str(decisive)
    if batch_reason:
        return str(batch_reason)
    totals: Counter = Counter()
    for failed in (failed_reasons or {}).values():
        for code, count in ((failed or {}).get("reasons") or {}).items():
            totals[code] += count or 0
    if not totals:
        return NO_REASON
    return min(totals, key=lambda code: (-totals[code], code))


def latest_reasons(decision_ids: list[int]) -> dict[int, tuple[str, dict, str | None, str | None]]:
    """(outcome, failed_reasons, batch reason, decisive code) of these decisions by id, without
    the rest of their payload: what `top_reason` reads."""
    rows = Decision.objects.filter(pk__in=decision_ids).values_list(
        "id", "outcome", "payload__failed_reasons", "payload__batch__reason", "payload__verdict__code"
    )
    return {
        decision_id: (outcome, failed, batch, decisive)
        for decision_id, outcome, failed, batch, decisive in rows
    }


def pending_by_closest_node() -> dict[str, int]:
    """Pending pods by the node that came closest to taking them (the first of their latest
    decision's `closest_nodes`), by node name: the pods that node holds up. A pod that no node
    could ever take (`unschedulable`) is held up by none. One grouped query, whatever the
    number of pods or nodes."""
    latest = Pod.objects.filter(status=Pod.PENDING).with_latest_decision().values("latest_decision_id")
    rows = (
        Decision.objects.filter(pk__in=latest)
        .values_list(KT("payload__closest_nodes__0__node"), KT("payload__unschedulable"))
        .annotate(pods=models.Count("id"))
        .order_by()
    )
    counts: Counter = Counter()
    for node, unschedulable, pods in rows:
        if node and unschedulable != "true":
            counts[node] += pods
    return dict(counts)


def pending_by_reason() -> tuple[int, dict[str, int]]:
    """Pending pods, and their count by top reason (the TOP_REASONS largest)."""
    keyed = list(
        Pod.objects.filter(status=Pod.PENDING)
        .with_latest_decision()
        .values_list("error", "latest_decision_id")
    )
    latest = latest_reasons([pk for _, pk in keyed if pk])
    counts = Counter(top_reason(error, *(latest.get(pk) or (None,) * 4)) for error, pk in keyed)
    return len(keyed), dict(sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:TOP_REASONS])


def queue_figures() -> dict[str, dict[str, int]]:
    """Each queue's own pods now: vGPUs and MiB held (active allocations, one row per vGPU)
    and pods pending, by queue name (pods of no queue count for `default`); the MAX_QUEUES
    busiest. Two grouped queries, whatever the number of pods."""
    figures: dict[str, dict[str, int]] = {}

    def of(name: str | None) -> dict[str, int]:
        return figures.setdefault(name or DEFAULT_QUEUE, dict.fromkeys(QUEUE_FIGURES, 0))

    held = (
        Allocation.objects.filter(active=True)
        .values_list("pod__queue__name")
        .annotate(vgpus=models.Count("id"), memory=models.Sum("memory"))
        .order_by()
    )
    for name, vgpus, memory in held:
        mine = of(name)
        mine["vgpus"] += vgpus
        mine["memory"] += memory or 0
    waiting = (
        Pod.objects.filter(status=Pod.PENDING)
        .values_list("queue__name")
        .annotate(pods=models.Count("id"))
        .order_by()
    )
    for name, pods in waiting:
        of(name)["pending"] += pods
    busiest = sorted(figures, key=lambda name: (-figures[name]["vgpus"], -figures[name]["pending"], name))
    return {name: figures[name] for name in sorted(busiest[:MAX_QUEUES])}


def take_sample(now: datetime | None = None) -> UsageSample | None:
    """Record the cluster now, unless the last sample is younger than SAMPLE_SECONDS (then None)."""
    now = now or timezone.now()
    last = UsageSample.objects.filter(span=0).order_by("-at").first()
    if last is not None and (now - last.at).total_seconds() < SAMPLE_SECONDS * 0.9:
        return None
    totals = dict.fromkeys(("slots", "used_slots", "memory", "used_memory", "cores", "used_cores"), 0)
    nodes = {}
    for node in Node.objects.with_totals():
        usage = node.usage
        for key in totals:
            totals[key] += getattr(usage, key)
        nodes[node.name] = round(usage.peak * 100)
    cycles = Cycle.objects.filter(considered__gt=0, finished_at__isnull=False)
    if last is not None:
        cycles = cycles.filter(finished_at__gt=last.at)
    else:
        cycles = cycles.filter(finished_at__gt=now - timedelta(seconds=SAMPLE_SECONDS))
    timed = list(cycles.values_list("duration_ms", "placed"))
    durations = [duration for duration, _ in timed]
    pending, reasons = pending_by_reason()
    return UsageSample.objects.create(
        at=now,
        slots_share=_share(totals["used_slots"], totals["slots"]),
        memory_share=_share(totals["used_memory"], totals["memory"]),
        cores_share=_share(totals["used_cores"], totals["cores"]),
        pending=pending,
        pending_reasons=reasons,
        placements=sum(placed for _, placed in timed),
        cycles=len(timed),
        cycle_p50_ms=round(median(durations), 2) if durations else None,
        cycle_max_ms=round(max(durations), 2) if durations else None,
        nodes=nodes,
        queues=queue_figures(),
    )


@dataclass
class _Fold:
    """Rows of one period being folded into one."""

    rows: list[UsageSample]

    def weighted(self, name: str) -> float:
        weight = sum(row.samples for row in self.rows)
        return sum(getattr(row, name) * row.samples for row in self.rows) / weight

    def row(self, at: datetime, span: int) -> UsageSample:
        """Shares and pending averaged by raw samples, counts summed, the median of the cycle
        times averaged by cycles (an estimate), the worst cycle kept, node shares averaged."""
        rows, weight = self.rows, sum(row.samples for row in self.rows)
        timed = [row for row in rows if row.cycle_p50_ms is not None and row.cycles]
        reasons: Counter = Counter()
        nodes: Counter = Counter()
        queues: dict[str, Counter] = {}
        for row in rows:
            for queue, figures in (row.queues or {}).items():
                mine = queues.setdefault(queue, Counter())
                for figure in QUEUE_FIGURES:
                    mine[figure] += (figures or {}).get(figure, 0) * row.samples
            for reason, count in row.pending_reasons.items():
                reasons[reason] += count * row.samples
            for node, share in row.nodes.items():
                nodes[node] += share * row.samples
        return UsageSample(
            at=at,
            span=span,
            samples=weight,
            slots_share=round(self.weighted("slots_share"), 4),
            memory_share=round(self.weighted("memory_share"), 4),
            cores_share=round(self.weighted("cores_share"), 4),
            pending=round(self.weighted("pending"), 2),
            pending_reasons={
                reason: round(total / weight, 2)
                for reason, total in sorted(reasons.items(), key=lambda item: (-item[1], item[0]))[
                    :TOP_REASONS
                ]
            },
            placements=sum(row.placements for row in rows),
            cycles=sum(row.cycles for row in rows),
            cycle_p50_ms=(
                round(
                    sum((row.cycle_p50_ms or 0.0) * row.cycles for row in timed)
                    / sum(row.cycles for row in timed),
                    2,
                )
                if timed
                else None
            ),
            cycle_max_ms=max(
                (row.cycle_max_ms for row in rows if row.cycle_max_ms is not None), default=None
            ),
            nodes={node: round(total / weight) for node, total in sorted(nodes.items())},
            queues=_busiest(
                {
                    queue: {figure: round(totals[figure] / weight, 2) for figure in QUEUE_FIGURES}
                    for queue, totals in queues.items()
                }
            ),
        )


def _busiest(queues: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The MAX_QUEUES busiest of a folded row's queues (a queue present in only some of the
    rows folded counts as idle in the others), by name."""
    ranked = sorted(queues, key=lambda name: (-queues[name]["vgpus"], -queues[name]["pending"], name))
    return {name: queues[name] for name in sorted(ranked[:MAX_QUEUES])}


def _fold_older(cutoff: datetime, span: int) -> int:
    """Fold rows finer than `span` in whole periods ending before `cutoff` into one row each."""
    seconds = int(cutoff.timestamp()) // span * span
    boundary = datetime.fromtimestamp(seconds, tz=cutoff.tzinfo or timezone.get_current_timezone())
    rows = list(UsageSample.objects.filter(span__lt=span, at__lt=boundary).order_by("at"))
    periods: dict[int, list[UsageSample]] = {}
    for row in rows:
        periods.setdefault(int(row.at.timestamp()) // span * span, []).append(row)
    if not periods:
        return 0
    folded = [
        _Fold(members).row(datetime.fromtimestamp(start, tz=boundary.tzinfo), span)
        for start, members in periods.items()
    ]
    with transaction.atomic():
        UsageSample.objects.filter(pk__in=[row.pk for row in rows]).delete()
        UsageSample.objects.bulk_create(folded)
    return len(rows) - len(folded)


def apply_retention(now: datetime | None = None, max_rows: int = MAX_ROWS) -> int:
    """Downsample and cap the table; the number of rows it removed."""
    now = now or timezone.now()
    removed = _fold_older(now - timedelta(hours=RAW_HOURS), 300)
    removed += _fold_older(now - timedelta(days=FIVE_MINUTE_DAYS), 3600)
    boundary = (
        UsageSample.objects.order_by("-at").values_list("at", flat=True)[max_rows : max_rows + 1].first()
    )
    if boundary is not None:
        removed += UsageSample.objects.filter(at__lte=boundary).delete()[0]
    return removed
