"""Preemption in the pipeline: what a cycle reads for it, and the hooks that carry it out.

- `load_tenants`: the running pods as the engine's `preempt.Tenant`s, read only when a job
  first needs victims (a few queries over the active allocations and their pods). Victims
  already being evicted, and pods placed through the extender (no eviction path), are left
  out; ones whose eviction was refused or timed out lately are marked. Each pod group with a
  disruption budget (`max_evicted`) gets what is left of it: the budget less its members
  being evicted already.
- `load_nominations`: the cards preemptors hold until their victims are gone.
- `rules`: the PREEMPT_* options as the engine's `Rules`.
- `hooks`: the write side (`services.evictions`) registers itself at start-up, since the
  pipeline does not import the services: `carry_out` runs after a commit that chose victims
  hamiadmin evicts itself, `settle` after every commit and in housekeeping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from scheduling.engine import PodSpec
from scheduling.engine.annotations import subgroup_of
from scheduling.engine.batch.jobs import Nominated
from scheduling.engine.batch.preempt import Rules, Tenant, Tenants, preemptible
from scheduling.models.pods import spec_fields

from ..models import Allocation, Eviction, Nomination, Pod, PodGroup
from .batch import subgroup_minimums
from .options import option

#: How long a refused victim is left out of later victim sets (seconds).
REFUSED_COOLDOWN_SECONDS = 300.0


@dataclass
class Hooks:
    settle: Callable[[], dict[str, int]] | None = None
    carry_out: Callable[[list[int]], object] | None = None


hooks = Hooks()


def rules() -> Rules:
    return Rules(
        enabled=bool(option("PREEMPTION")),
        reclaim=bool(option("RECLAIM")),
        dry_run=bool(option("PREEMPT_DRY_RUN")),
        min_runtime_seconds=float(option("PREEMPT_MIN_RUNTIME_SECONDS")),
        protect_priority=option("PREEMPT_PROTECT_PRIORITY"),
        max_cards=int(option("PREEMPT_MAX_CARDS_PER_CYCLE")),
    )


def scenario_settings() -> dict:
    """The preemption options as `run_scenario` takes them, so `simulate` on the server
    decides as the live cycle does (a scenario's `preemption` overrides them)."""
    return {"rules": rules(), "consolidation": bool(option("CONSOLIDATION"))}


def load_tenants(now=None) -> Tenants:
    """Every pod holding cards, with what it holds and what protects it; by node and gang."""
    now = now or timezone.now()
    holdings: dict[int, list[tuple[str, int, int]]] = {}
    for pod_id, uuid, memory, cores in Allocation.objects.filter(active=True, card__present=True).values_list(
        "pod_id", "card__uuid", "memory", "cores"
    ):
        holdings.setdefault(pod_id, []).append((uuid, memory, cores))
    going = set(
        Eviction.objects.filter(state__in=Eviction.ACTIVE, victim_id__in=list(holdings)).values_list(
            "victim_id", flat=True
        )
    )
    since = now - timedelta(seconds=REFUSED_COOLDOWN_SECONDS)
    refused = dict(
        Eviction.objects.filter(state__in=(Eviction.REFUSED, Eviction.TIMED_OUT), finished_at__gte=since)
        .order_by("finished_at")
        .values_list("victim_id", "message")
    )
    tenants, gang_min = [], {}
    gang_budget = gang_budgets()
    # Pods placed through kube-scheduler's extender have no eviction path here: never victims.
    rows = (
        Pod.objects.filter(pk__in=[pk for pk in holdings if pk not in going], status__in=Pod.BOUND)
        .exclude(origin=Pod.EXTENDER)
        .values_list(
            "pk",
            "namespace",
            "name",
            "priority",
            "queue__name",
            "group__namespace",
            "group__name",
            "group__min_member",
            "scheduled_at",
            "annotations",
            "node__name",
            "labels",
            "group__subgroups",
        )
    )
    part_min: dict[tuple[str, str], int] = {}
    for (
        pk,
        namespace,
        name,
        priority,
        queue,
        g_ns,
        g_name,
        g_min,
        scheduled_at,
        notes,
        node,
        labels,
        parts,
    ) in rows:
        if node is None:
            continue
        gang = f"{g_ns}/{g_name}" if g_name else ""
        part = ""
        if gang:
            minimums = subgroup_minimums(parts)
            gang_min[gang] = max(g_min or 1, sum(minimums.values()))
            part = subgroup_of(notes if isinstance(notes, dict) else {}, labels, minimums)
            if part:
                part_min[(gang, part)] = minimums[part]
        tenants.append(
            Tenant(
                key=f"{namespace}/{name}",
                namespace=namespace,
                node=node,
                priority=priority,
                queue=queue or "default",
                gang=gang,
                runtime_seconds=(now - scheduled_at).total_seconds() if scheduled_at else 0.0,
                preemptible=preemptible(notes if isinstance(notes, dict) else {}),
                holdings=holdings[pk],
                ref=pk,
                refused=(refused.get(pk) or "refused")[:200] if pk in refused else "",
                part=part,
            )
        )
    return Tenants(tenants, gang_min, gang_budget, part_min)


def gang_budgets() -> dict[str, int]:
    """Per pod group with a disruption budget (`max_evicted`), by key: how many more members
    may be evicted, the budget less its members with an active eviction (requested or
    evicting) that still hold their cards, never below 0."""
    budgets: dict[int, tuple[str, int]] = {
        pk: (f"{namespace}/{name}", budget or 0)
        for pk, namespace, name, budget in PodGroup.objects.filter(max_evicted__isnull=False).values_list(
            "pk", "namespace", "name", "max_evicted"
        )
    }
    if not budgets:
        return {}
    going: dict[int, int] = {}
    for group_id in Eviction.objects.filter(
        state__in=Eviction.ACTIVE, victim__group_id__in=list(budgets), victim__status__in=Pod.BOUND
    ).values_list("victim__group_id", flat=True):
        going[group_id] = going.get(group_id, 0) + 1
    return {key: max(0, budget - going.get(pk, 0)) for pk, (key, budget) in budgets.items()}


def movable_specs() -> Callable[[Tenant], PodSpec | None]:
    """A tenant's spec when hamiadmin can place it again itself (not a Kubernetes pod, whose
    controller would create a new pod), for consolidation; read once, when first asked."""
    specs: dict[object, PodSpec] | None = None

    def spec_of(tenant: Tenant) -> PodSpec | None:
        nonlocal specs
        if specs is None:
            specs = {
                pk: PodSpec(
                    name=name,
                    namespace=namespace,
                    annotations=annotations if isinstance(annotations, dict) else {},
                    containers=containers if isinstance(containers, list) else [],
                    init_containers=inits if isinstance(inits, list) else [],
                    labels=labels if isinstance(labels, dict) else {},
                    **spec_fields(scheduling),
                )
                for pk, namespace, name, annotations, containers, inits, labels, scheduling in Pod.objects.filter(
                    status__in=Pod.BOUND
                )
                .exclude(origin=Pod.KUBERNETES)
                .values_list(
                    "pk",
                    "namespace",
                    "name",
                    "annotations",
                    "containers",
                    "init_containers",
                    "labels",
                    "scheduling",
                )
            }
        return specs.get(tenant.ref)

    return spec_of


def load_nominations(now=None) -> dict[str, Nominated]:
    """Pod key -> the cards it is nominated to (and holds whole), for nominations not yet expired."""
    now = now or timezone.now()
    grace = float(option("PREEMPT_GRACE_SECONDS"))
    found: dict[int, Nominated] = {}
    keys: dict[int, str] = {}
    rows = (
        Nomination.objects.filter(expires_at__gt=now)
        .order_by("pod_id", "id")
        .values_list(
            "pod_id",
            "pod__namespace",
            "pod__name",
            "card__uuid",
            "card__node__name",
            "memory",
            "cores",
            "created_at",
            "whole",
        )
    )
    for pod_id, namespace, name, uuid, node, memory, cores, created, whole in rows:
        entry = found.get(pod_id)
        if entry is None:
            entry = found[pod_id] = Nominated(
                node=node or "", grants=[], since_seconds=(now - created).total_seconds(), grace_seconds=grace
            )
            keys[pod_id] = f"{namespace}/{name}"
        entry.grants.append((uuid, memory, cores))
        if whole and uuid not in entry.whole:
            entry.whole = (*entry.whole, uuid)
    if found:
        waiting: dict[int, int] = {}
        for preemptor in Eviction.objects.filter(
            state__in=Eviction.ACTIVE, preemptor_id__in=list(found)
        ).values_list("preemptor_id", flat=True):
            waiting[preemptor] = waiting.get(preemptor, 0) + 1
        for pod_id, entry in found.items():
            entry.waiting = waiting.get(pod_id, 0)
    return {keys[pod_id]: entry for pod_id, entry in found.items()}


def nominated_usage(card_ids: list[int], now=None) -> dict[int, list[tuple[int, int, int]]]:
    """Card pk -> (pod id, MiB, cores) per nominated vGPU, for the commit's re-check."""
    now = now or timezone.now()
    out: dict[int, list[tuple[int, int, int]]] = {}
    for card_id, pod_id, memory, cores in Nomination.objects.filter(
        card_id__in=card_ids, expires_at__gt=now
    ).values_list("card_id", "pod_id", "memory", "cores"):
        out.setdefault(card_id, []).append((pod_id, memory, cores))
    return out


def held_whole(card_ids: list[int], now=None) -> dict[int, tuple[int, str]]:
    """Card pk -> (pod id, `ns/name`) of the exclusive preemptor holding it whole, for the
    commit's re-check: nothing else is placed there until it lands or its nomination expires."""
    now = now or timezone.now()
    return {
        card_id: (pod_id, f"{namespace}/{name}")
        for card_id, pod_id, namespace, name in Nomination.objects.filter(
            card_id__in=card_ids, expires_at__gt=now, whole=True
        ).values_list("card_id", "pod_id", "pod__namespace", "pod__name")
    }


def victims_gangs(victim_ids) -> list[int]:
    """The placed members of the pod groups the victims `victim_ids` belong to (their pks):
    the commit locks them with its pods, so two commits evicting from one gang take turns
    and the second sees the first's evictions (`thinned_gangs`). One query; none without
    victims."""
    if not victim_ids:
        return []
    groups = Pod.objects.filter(pk__in=sorted(victim_ids), group__isnull=False).values("group_id")
    return list(Pod.objects.filter(group_id__in=groups, status__in=Pod.BOUND).values_list("pk", flat=True))


def thinned_gangs(attempts) -> dict[int, str]:
    """id(attempt) -> why, for each preemption (in queue order) whose victims would leave a
    gang with some members placed but fewer than its minimum, or one of its parts
    (`PodGroup.subgroups`) short of its own: planning takes a gang's members only while it
    keeps them, or the whole gang, but two planners (node pools, or single flight off) may
    each take members of one gang that only together break it. Read under the locks of
    `victims_gangs`, so what earlier commits evict counts; a member moved by consolidation is
    not lost to its gang."""
    victims = {victim[0] for attempt in attempts for victim in attempt.victims}
    group_of = dict(
        Pod.objects.filter(pk__in=sorted(victims), group__isnull=False).values_list("pk", "group_id")
    )
    if not group_of:
        return {}
    groups = {group.pk: group for group in PodGroup.objects.filter(pk__in=set(group_of.values()))}
    parts = {pk: subgroup_minimums(group.subgroups) for pk, group in groups.items()}
    going = set(
        Eviction.objects.filter(state__in=Eviction.ACTIVE, victim__group_id__in=groups).values_list(
            "victim_id", flat=True
        )
    )
    part_of: dict[int, str] = {}
    left: dict[tuple[int, str], int] = {}  # (group, part) -> placed, not leaving; part "" the whole
    members = Pod.objects.filter(group_id__in=groups, status__in=Pod.BOUND).values_list(
        "pk", "group_id", "annotations", "labels"
    )
    for pk, group_id, notes, labels in members:
        part_of[pk] = subgroup_of(notes if isinstance(notes, dict) else {}, labels, parts[group_id])
        if pk not in going:
            for key in {(group_id, ""), (group_id, part_of[pk])}:
                left[key] = left.get(key, 0) + 1
    least = {(pk, ""): max(group.min_member, sum(parts[pk].values())) for pk, group in groups.items()} | {
        (pk, part): n for pk, minimums in parts.items() for part, n in minimums.items()
    }
    refused: dict[int, str] = {}
    for attempt in attempts:
        moved = {pod_id for pod_id, _ in attempt.moves}
        taken: dict[tuple[int, str], int] = {}
        for victim in attempt.victims:
            gang = group_of.get(victim[0])
            if gang is None or victim[0] in moved or victim[0] in going:
                continue
            for key in {(gang, ""), (gang, part_of.get(victim[0], ""))}:
                taken[key] = taken.get(key, 0) + 1
        short = [
            key
            for key, n in taken.items()
            if left.get((key[0], ""), 0) - taken[(key[0], "")] > 0  # a gang going whole may go
            and left.get(key, 0) - n < least.get(key, 0)
        ]
        if short:
            (gang, part), keeps = short[0], left.get(short[0], 0) - taken[short[0]]
            what = f"gang {groups[gang].key}" + (f" subgroup {part}" if part else "")
            refused[id(attempt)] = (
                f"{what} would keep {keeps} of the {least[short[0]]} members it needs placed"
                " (other evictions took some since the snapshot)"
            )
            continue
        for key, n in taken.items():
            left[key] = left.get(key, 0) - n
    return refused
