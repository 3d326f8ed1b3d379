"""HAMi's published Grafana dashboard, as test data: the PromQL of every panel and variable.

Source: github.com/Project-HAMi/HAMi, tag v2.10.0 (commit 4707fb02c91c545bc7343ce26dba4c32919f9a3e),
`dashboards/hami-vgpu-dashboard.json` ("HAMi vGPU metrics": scheduler + vGPU monitor), each
`expr` and variable `query` in file order, verbatim (the data source variable's `prometheus`
left out). Where each metric comes from is HAMi's code at that tag: `cmd/scheduler/metrics.go`
(the scheduler, which hamiadmin replaces) and `cmd/vGPUmonitor/metrics.go` (the vGPU monitor,
part of HAMi's device plugin DaemonSet, which stays on HAMi's nodes after the switch).
"""

EXPRESSIONS = (
    'count(hami_gpu_memory_limit_bytes{node=~"$node"})',
    'sum(hami_gpu_memory_limit_bytes{node=~"$node"})',
    'sum(hami_gpu_memory_allocated_bytes{node=~"$node"})',
    '100 * sum(hami_gpu_memory_allocated_bytes{node=~"$node"}) / sum(hami_gpu_memory_limit_bytes{node=~"$node"})',
    'sum(hami_gpu_shared_count{node=~"$node"})',
    'hami_host_gpu_memory_used_bytes and on (device_uuid) hami_gpu_memory_limit_bytes{node=~"$node"}',
    'hami_host_gpu_utilization_ratio and on (device_uuid) hami_gpu_memory_limit_bytes{node=~"$node"}',
    'sum by (node) (hami_gpu_memory_allocated_bytes{node=~"$node"})',
    'sum by (node) (hami_gpu_memory_limit_bytes{node=~"$node"})',
    'hami_node_gpu_memory_allocated_ratio{node=~"$node"}',
    'hami_gpu_core_allocated_ratio{node=~"$node"}',
    'hami_gpu_shared_count{node=~"$node"}',
    'hami_vgpu_memory_used_bytes{namespace=~"$namespace"}',
    'hami_vgpu_memory_limit_bytes{namespace=~"$namespace"}',
    'hami_container_device_utilization_ratio{namespace=~"$namespace"}',
    '100 * hami_vgpu_memory_used_bytes{namespace=~"$namespace"} / hami_vgpu_memory_limit_bytes{namespace=~"$namespace"}',
    'topk(10, hami_vgpu_memory_used_bytes{namespace=~"$namespace"})',
    "label_values(hami_gpu_memory_limit_bytes, node)",
    "label_values(hami_vgpu_memory_used_bytes, namespace)",
)

#: What HAMi's vGPU monitor exports (cmd/vGPUmonitor/metrics.go, v2.10.0): measured usage,
#: served on each node by the monitor itself, never by the scheduler.
MONITOR_METRICS = frozenset(
    {
        "hami_host_gpu_memory_used_bytes",
        "hami_host_gpu_utilization_ratio",
        "hami_host_gpu_memory_controller_utilization_ratio",
        "hami_vgpu_memory_used_bytes",
        "hami_vgpu_memory_limit_bytes",
        "hami_container_device_memory_bytes",
        "hami_container_device_utilization_ratio",
        "hami_container_last_kernel_elapsed_seconds",
        "hami_mig_device_info",
        "hami_vgpu_memory_context_bytes",
        "hami_vgpu_memory_module_bytes",
        "hami_vgpu_memory_buffer_bytes",
    }
)
