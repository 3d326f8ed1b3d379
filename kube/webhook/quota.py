"""Namespace quotas checked at admission, as HAMi's webhook does since v2.9.

HAMi's webhook (`fitResourceQuota`, `pkg/device/quota.go`) refuses a GPU pod when what its
namespace's scheduled pods hold plus what the pod asks passes a ResourceQuota's hard limit
(`limits.nvidia.com/gpumem`, `limits.nvidia.com/gpucores`), with "exceeding resource quota".
hamiadmin's validating webhook does the same against the quotas its cycle enforces (the
`NamespaceQuota` rows: ResourceQuotas read by the kube agent, and API quotas), counted as
the cycle counts them (`ask_usage`, active allocations: a 2-card 4000 MiB ask is 8000 MiB,
as HAMi's `Memreq * Nums`), and names the quota and the resource it would pass.

A pod admitted here can still wait in the cycle (`NamespaceQuotaExceeded`): pods admitted at
the same moment are not counted against each other, in HAMi either.
"""

from __future__ import annotations

from dataclasses import dataclass

from hamiadmin.hamiconfig import HamiConfig
from scheduling.engine.batch.queues import UNITS, Usage, zero
from scheduling.engine.errors import PodInvalid

#: The refusal's field: the quota is the namespace's, not one container's.
FIELD = "metadata.namespace"


@dataclass(frozen=True)
class QuotaRow:
    """One resource of one quota of the namespace."""

    quota: str
    resource: str  # vgpus, gpumem, gpucores
    hard: int
    source: str = "kubernetes"


@dataclass(frozen=True)
class NamespaceQuotas:
    """The quotas of one namespace and what its placed pods hold now."""

    namespace: str
    rows: tuple[QuotaRow, ...] = ()
    used: Usage | None = None


def resource_name(resource: str, hami: HamiConfig) -> str:
    """The quota resource as the pod and the ResourceQuota write it (`nvidia.com/gpumem`)."""
    names = hami.resources
    return {"vgpus": names.count, "gpumem": names.memory, "gpucores": names.cores}.get(resource, resource)


def over_quota(quotas: NamespaceQuotas, ask: Usage, hami: HamiConfig) -> PodInvalid | None:
    """The refusal of a pod asking `ask` in a namespace with `quotas`, naming the tightest
    quota it would pass; None when it fits them all (or the namespace has none)."""
    used = quotas.used or zero()
    for row in sorted(quotas.rows, key=lambda row: (row.hard - used.get(row.resource, 0), row.quota)):
        asked = ask.get(row.resource, 0)
        held = used.get(row.resource, 0)
        if asked and held + asked > row.hard:
            kind = "ResourceQuota" if row.source == "kubernetes" else "namespace quota"
            return PodInvalid(
                FIELD,
                f"exceeding resource quota: {kind} {quotas.namespace}/{row.quota} caps "
                f"{resource_name(row.resource, hami)} at {row.hard}{UNITS[row.resource]}; the namespace's "
                f"pods hold {held} and this pod asks {asked}",
            )
    return None


def read_namespace_quotas(namespace: str) -> NamespaceQuotas:
    """The namespace's quota rows and the usage of its active allocations (two queries; the
    second only when it has a quota). Raises DatabaseError when the database does not answer."""
    from django.db.models import Count, Sum

    from scheduling.models import Allocation, NamespaceQuota

    rows = tuple(
        QuotaRow(quota, resource, hard, source)
        for quota, resource, hard, source in NamespaceQuota.objects.filter(namespace=namespace)
        .order_by("quota", "resource")
        .values_list("quota", "resource", "hard", "source")
    )
    if not rows:
        return NamespaceQuotas(namespace)
    totals = Allocation.objects.filter(active=True, pod__namespace=namespace).aggregate(
        vgpus=Count("id"), gpumem=Sum("memory"), gpucores=Sum("cores")
    )
    return NamespaceQuotas(namespace, rows, {resource: int(totals[resource] or 0) for resource in zero()})
