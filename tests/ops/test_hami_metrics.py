"""HAMi's scheduler metrics served by hamiadmin's /metrics (issue 31, item 6): HAMi v2.10's names,
labels, units and meaning (cmd/scheduler/metrics.go), and every metric of HAMi's published
Grafana dashboard either served here or by HAMi's vGPU monitor, which stays on its nodes."""

from __future__ import annotations

import re

import pytest

from scheduling import services
from scheduling.pipeline import run_cycle
from tests.pipeline.conftest import card, submit

from .conftest import scrape, series, value
from .hami_dashboard import EXPRESSIONS, MONITOR_METRICS

pytestmark = pytest.mark.django_db

MIB = 1024 * 1024
T4 = "NVIDIA-Tesla T4"
ZONE = {"zone": "vGPU"}


def labels(**pairs) -> frozenset:
    return frozenset({**pairs, **ZONE}.items())


def placed_cluster():
    """node-a: two 8000 MiB cards of 4 slots; in `default`, a 2-card 3000 MiB 20-core pod and a
    1-card 1000 MiB pod (binpack puts it beside the first), and a gpumem quota on `default`."""
    services.report_inventory(
        "node-a", {}, {}, [card("GPU-a0", 0, slots=4, type=T4), card("GPU-a1", 1, slots=4, type=T4)]
    )
    submit("two", gpu=2, mem=3000, cores=20)
    submit("one", gpu=1, mem=1000, cores=0)
    run_cycle()
    services.store_namespace_quota("default", "gpu", {"gpumem": 20000, "vgpus": 8})


def test_card_series_are_hamis_with_bytes_and_percent(client):
    placed_cluster()
    samples = scrape(client)
    a0 = {"node": "node-a", "device_uuid": "GPU-a0", "device_index": "0", "device_type": T4}
    a1 = {**a0, "device_uuid": "GPU-a1", "device_index": "1"}
    limits = series(samples, "hami_gpu_memory_limit_bytes")
    assert limits == {labels(**a0): 8000 * MIB, labels(**a1): 8000 * MIB}
    assert series(samples, "hami_gpu_core_limit_ratio") == {labels(**a0): 100, labels(**a1): 100}
    allocated = series(samples, "hami_gpu_memory_allocated_bytes")
    assert sum(allocated.values()) == (2 * 3000 + 1000) * MIB
    assert set(allocated) == {labels(**a0, device_cores="100"), labels(**a1, device_cores="100")}
    assert sum(series(samples, "hami_gpu_shared_count").values()) == 3  # three vGPUs in use
    assert sum(series(samples, "hami_gpu_core_allocated_ratio").values()) == 40
    overview = series(samples, "hami_node_gpu_overview")
    assert set(overview) == {
        labels(**a0, device_cores="100", device_memory_limit="8000"),
        labels(**a1, device_cores="100", device_memory_limit="8000"),
    }
    assert sum(overview.values()) == 7000 * MIB
    ratios = series(samples, "hami_node_gpu_memory_allocated_ratio")
    assert sorted(ratios.values()) == sorted(
        v / (8000 * MIB) for v in series(samples, "hami_gpu_memory_allocated_bytes").values()
    )


def test_container_series_hold_each_allocation(client):
    placed_cluster()
    samples = scrape(client)
    memory = series(samples, "hami_vgpu_memory_allocated_bytes")
    cores = series(samples, "hami_vgpu_core_allocated_ratio")
    two = {k: v for k, v in memory.items() if ("pod", "two") in k}
    assert sorted(dict(k)["device_uuid"] for k in two) == ["GPU-a0", "GPU-a1"]
    assert set(two.values()) == {3000 * MIB}
    for key in two:
        assert dict(key)["namespace"] == "default" and dict(key)["node"] == "node-a"
        assert dict(key)["container_index"] == "0"
        assert cores[key] == 20
    assert [v for k, v in memory.items() if ("pod", "one") in k] == [1000 * MIB]


def test_quota_series_count_memory_and_cores_as_hami_keeps_them(client):
    """HAMi tracks a namespace's device memory (MiB) and cores, `quota_name` the resource and
    `limit` the hard value (0 when none is set); vGPU counts are not its quota resources."""
    placed_cluster()
    samples = scrape(client)
    assert series(samples, "hami_resource_quota_used") == {
        labels(namespace="default", quota_name="nvidia.com/gpumem", limit="20000"): 7000,
        labels(namespace="default", quota_name="nvidia.com/gpucores", limit="0"): 40,
    }
    assert series(samples, "hami_resource_quota_limit") == {
        labels(namespace="default", quota_name="nvidia.com/gpumem"): 20000
    }


def test_legacy_names_only_when_asked_as_with_hamis_flag(client, settings):
    placed_cluster()
    assert not series(scrape(client), "GPUDeviceMemoryAllocated")
    settings.HAMIADMIN = {**settings.HAMIADMIN, "LEGACY_METRICS": True}
    samples = scrape(client)
    card_labels = {"nodeid": "node-a", "deviceuuid": "GPU-a0", "deviceidx": "0", "devicetype": T4}
    assert value(samples, "GPUDeviceMemoryLimit", **card_labels, **ZONE) == 8000 * MIB
    assert value(samples, "GPUDeviceCoreLimit", **card_labels, **ZONE) == 100
    for name in (
        "GPUDeviceMemoryAllocated",
        "nodeGPUOverview",
        "GPUDeviceSharedNum",
        "GPUDeviceCoreAllocated",
    ):
        assert series(samples, name), name
    assert set(series(samples, "nodeGPUMemoryPercentage")) == {
        labels(nodeid="node-a", deviceuuid=uuid, deviceidx=index)
        for uuid, index in (("GPU-a0", "0"), ("GPU-a1", "1"))
    }
    assert sum(series(samples, "vGPUMemoryAllocated").values()) == 7000 * MIB
    assert labels(quotanamespace="default", quotaName="nvidia.com/gpumem", limit="20000") in series(
        samples, "QuotaUsed"
    )


_FUNCTIONS_AND_KEYWORDS = re.compile(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)")


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression reads: label matchers, strings, grouping labels,
    function names, keywords and numbers taken out; `label_values(metric, label)` reads `metric`."""
    text = re.sub(r"label_values\((\w+),\s*\w+\)", r"\1", expression)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r'"[^"]*"', "", text)
    text = _FUNCTIONS_AND_KEYWORDS.sub("", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end() :].lstrip()
        if following.startswith("(") or match.group() in ("and", "or", "unless", "bool", "offset"):
            continue
        names.add(match.group())
    return names


def test_the_dashboard_expressions_read_metric_names():
    assert metric_names('100 * sum(a_b{node=~"$node"}) / sum by (node) (c_d)') == {"a_b", "c_d"}
    assert metric_names("x and on (device_uuid) y") == {"x", "y"}
    assert metric_names("label_values(z, node)") == {"z"}


def test_every_metric_of_hamis_dashboard_is_served_here_or_by_hamis_vgpu_monitor(client):
    placed_cluster()
    served = {name for name, _ in scrape(client)}
    wanted = set().union(*(metric_names(expression) for expression in EXPRESSIONS))
    assert len(wanted) >= 10  # the parse found the dashboard's metrics
    missing = {name for name in wanted if name not in served and name not in MONITOR_METRICS}
    assert not missing, f"HAMi's dashboard reads {sorted(missing)}, served by neither"
    # and the scheduler's part really is served by us, not assumed to be the monitor's
    assert {
        name for name in wanted if not name.startswith(("hami_host_", "hami_container_"))
    } - MONITOR_METRICS <= served
