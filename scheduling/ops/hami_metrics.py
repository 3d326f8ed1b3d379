"""HAMi's scheduler metrics, under HAMi's names, beside hamiadmin's own.

HAMi's Grafana dashboards and HAMi-WebUI read what HAMi's scheduler exports
(`cmd/scheduler/metrics.go` in v2.10.0); after the switch hamiadmin is the scheduler, so it
serves the same series with the same labels, units and meaning, read from the database at
scrape time as the rest of the cluster state (`scrape.py`):

- per card (`hami_gpu_*`, `hami_node_gpu_*`): capacity and what is granted, memory in bytes,
  cores in percent of a card (100 = whole), `hami_gpu_shared_count` the vGPUs in use;
- per container and card (`hami_vgpu_*_allocated_*`): what each active allocation holds;
- per namespace (`hami_resource_quota_used`/`_limit`): the memory (MiB) and cores its placed
  pods hold against its quotas, with `quota_name` the resource (`nvidia.com/gpumem`), as HAMi
  keeps them (`pkg/device/quota.go`: only memory and cores are tracked).

Every series carries `zone="vGPU"`, the constant label HAMi's collector is registered with.
HAMi's older names (`GPUDeviceMemoryAllocated`, `nodeGPUOverview`, `QuotaUsed`...) are served
too when `HAMI_LEGACY_METRICS` is on, as HAMi serves them with `--legacy-metrics` (off by
default in v2.10). Not served: `hami_node_gpu_mig_instance_info` (MIG instances) and
`hami_build_info`. Measured usage (`hami_vgpu_memory_used_bytes`, `hami_host_gpu_*`,
`hami_container_*`) is the vGPU monitor's, which keeps running on HAMi's nodes and is scraped
directly (docs/migrating-from-hami.md).
"""

from __future__ import annotations

from django.conf import settings
from django.db.models import Sum
from prometheus_client.core import GaugeMetricFamily

from hamiadmin.hamiconfig import current
from scheduling.models import Allocation, Card, NamespaceQuota

from .metrics import MIB

ZONE = "vGPU"
#: HAMi's managed quota resources (its device's memory and core names) by our quota resource.
QUOTA_RESOURCES = ("gpumem", "gpucores")


def _gauge(name: str, help_text: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, labels=[*labels, "zone"])


CARD = ["node", "device_uuid", "device_index", "device_type"]
LEGACY_CARD = ["nodeid", "deviceuuid", "deviceidx", "devicetype"]
CONTAINER = ["namespace", "node", "pod", "container_index", "device_uuid"]
LEGACY_CONTAINER = ["podnamespace", "nodename", "podname", "containeridx", "deviceuuid"]


class HamiMetricsCollector:
    """HAMi v2.10's scheduler series, from the Card, Allocation and NamespaceQuota rows (three
    queries); a database error propagates to the scrape's collector, which reports it."""

    def __init__(self, legacy: bool | None = None):
        self._legacy = legacy

    @property
    def legacy(self) -> bool:
        if self._legacy is not None:
            return self._legacy
        return bool(settings.HAMIADMIN.get("LEGACY_METRICS", False))

    def collect(self):
        yield from self.card_families()
        yield from self.container_families()
        yield from self.quota_families()

    def card_families(self) -> list[GaugeMetricFamily]:
        legacy = self.legacy
        limit = _gauge("hami_gpu_memory_limit_bytes", "Device memory limit for a certain GPU", CARD)
        core_limit = _gauge("hami_gpu_core_limit_ratio", "Device core limit for a certain GPU", CARD)
        allocated = _gauge(
            "hami_gpu_memory_allocated_bytes",
            "Device memory allocated for a certain GPU",
            ["node", "device_uuid", "device_index", "device_cores", "device_type"],
        )
        shared = _gauge("hami_gpu_shared_count", "Number of containers sharing this GPU", CARD)
        core_allocated = _gauge(
            "hami_gpu_core_allocated_ratio", "Device core allocated for a certain GPU", CARD
        )
        overview = _gauge(
            "hami_node_gpu_overview",
            "GPU overview on a certain node",
            ["node", "device_uuid", "device_index", "device_cores", "device_memory_limit", "device_type"],
        )
        ratio = _gauge(
            "hami_node_gpu_memory_allocated_ratio", "GPU Memory Allocated Percentage on a certain GPU", CARD
        )
        families = [limit, core_limit, allocated, shared, core_allocated, overview, ratio]
        if legacy:
            old = {
                "limit": _gauge("GPUDeviceMemoryLimit", "Device memory limit for a certain GPU", LEGACY_CARD),
                "core_limit": _gauge(
                    "GPUDeviceCoreLimit", "Device memory core limit for a certain GPU", LEGACY_CARD
                ),
                "allocated": _gauge(
                    "GPUDeviceMemoryAllocated",
                    "Device memory allocated for a certain GPU",
                    ["nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype"],
                ),
                "shared": _gauge("GPUDeviceSharedNum", "Number of containers sharing this GPU", LEGACY_CARD),
                "core_allocated": _gauge(
                    "GPUDeviceCoreAllocated", "Device core allocated for a certain GPU", LEGACY_CARD
                ),
                "overview": _gauge(
                    "nodeGPUOverview",
                    "GPU overview on a certain node",
                    ["nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit", "devicetype"],
                ),
                "ratio": _gauge(
                    "nodeGPUMemoryPercentage",
                    "GPU Memory Allocated Percentage on a certain GPU",
                    ["nodeid", "deviceuuid", "deviceidx"],
                ),
            }
            families += old.values()
        rows = (
            Card.objects.filter(present=True)
            .order_by("node__name", "index", "uuid")
            .values_list(
                "node__name",
                "uuid",
                "index",
                "type",
                "memory",
                "used_memory",
                "cores",
                "used_cores",
                "used_slots",
            )
        )
        for node, uuid, index, kind, memory, used_memory, cores, used_cores, used_slots in rows:
            card = [node, uuid, str(index), kind, ZONE]
            with_cores = [node, uuid, str(index), str(cores), kind, ZONE]
            full = [node, uuid, str(index), str(cores), str(memory), kind, ZONE]
            limit.add_metric(card, memory * MIB)
            core_limit.add_metric(card, cores)
            allocated.add_metric(with_cores, used_memory * MIB)
            shared.add_metric(card, used_slots)
            core_allocated.add_metric(card, used_cores)
            overview.add_metric(full, used_memory * MIB)
            if memory > 0:
                ratio.add_metric(card, used_memory / memory)
            if legacy:
                old["limit"].add_metric(card, memory * MIB)
                old["core_limit"].add_metric(card, cores)
                old["allocated"].add_metric(with_cores, used_memory * MIB)
                old["shared"].add_metric(card, used_slots)
                old["core_allocated"].add_metric(card, used_cores)
                old["overview"].add_metric(full, used_memory * MIB)
                if memory > 0:
                    old["ratio"].add_metric([node, uuid, str(index), ZONE], used_memory / memory)
        return families

    def container_families(self) -> list[GaugeMetricFamily]:
        memory = _gauge(
            "hami_vgpu_memory_allocated_bytes", "vGPU memory allocated from a container", CONTAINER
        )
        cores = _gauge("hami_vgpu_core_allocated_ratio", "vGPU core allocated from a container", CONTAINER)
        families = [memory, cores]
        if self.legacy:
            old_memory = _gauge(
                "vGPUMemoryAllocated", "vGPU memory allocated from a container", LEGACY_CONTAINER
            )
            old_cores = _gauge("vGPUCoreAllocated", "vGPU core allocated from a container", LEGACY_CONTAINER)
            families += [old_memory, old_cores]
        rows = (
            Allocation.objects.filter(active=True)
            .order_by("pod__namespace", "pod__name", "container_index", "card__uuid")
            .values_list("pod__namespace", "card__node__name", "pod__name", "container_index", "card__uuid")
            .annotate(mib=Sum("memory"), held=Sum("cores"))
        )
        for namespace, node, pod, index, uuid, mib, held in rows:
            labels = [namespace, node, pod, str(index), uuid, ZONE]
            memory.add_metric(labels, (mib or 0) * MIB)
            cores.add_metric(labels, held or 0)
            if self.legacy:
                old_memory.add_metric(labels, (mib or 0) * MIB)
                old_cores.add_metric(labels, held or 0)
        return families

    def quota_families(self) -> list[GaugeMetricFamily]:
        names = current().resources
        written = {"gpumem": names.memory, "gpucores": names.cores}
        used_family = _gauge(
            "hami_resource_quota_used",
            "resourcequota usage for a certain device",
            ["namespace", "quota_name", "limit"],
        )
        limit_family = _gauge(
            "hami_resource_quota_limit",
            "resourcequota limit for a certain device",
            ["namespace", "quota_name"],
        )
        families = [used_family, limit_family]
        if self.legacy:
            old_used = _gauge(
                "QuotaUsed",
                "resourcequota usage for a certain device",
                ["quotanamespace", "quotaName", "limit"],
            )
            families.append(old_used)
        limits: dict[tuple[str, str], int] = {}
        for namespace, resource, hard in NamespaceQuota.objects.filter(
            resource__in=QUOTA_RESOURCES
        ).values_list("namespace", "resource", "hard"):
            key = (namespace, resource)
            limits[key] = min(hard, limits.get(key, hard))  # two quotas: the tighter holds
        used: dict[tuple[str, str], int] = {}
        for namespace, memory, cores in (
            Allocation.objects.filter(active=True)
            .values("pod__namespace")
            .annotate(gpumem=Sum("memory"), gpucores=Sum("cores"))
            .order_by()
            .values_list("pod__namespace", "gpumem", "gpucores")
        ):
            used[(namespace, "gpumem")] = int(memory or 0)
            used[(namespace, "gpucores")] = int(cores or 0)
        for namespace, resource in sorted(set(limits) | set(used)):
            held = used.get((namespace, resource), 0)
            limit = limits.get((namespace, resource))
            labels = [namespace, written[resource], str(limit or 0), ZONE]
            used_family.add_metric(labels, held)
            if limit is not None:
                limit_family.add_metric([namespace, written[resource], ZONE], limit)
            if self.legacy:
                old_used.add_metric(labels, held)
        return families
