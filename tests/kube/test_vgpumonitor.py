"""HAMi's vGPU monitor read for measured usage (kube/vgpumonitor.py).

The sample is written for these tests in the form HAMi v2.10.0's monitor serves
(`cmd/vGPUmonitor/metrics.go`: its metric and label names, `zone="vGPU"` added by its
registry, `# HELP`/`# TYPE` lines as client_golang writes them); the numbers are made up.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kube.vgpumonitor import (
    MIB,
    OFF,
    PROXY,
    MonitorSettingInvalid,
    VgpuMonitorReader,
    parse_setting,
    read_monitor,
)
from scheduling import services
from scheduling.models import Card
from scheduling.models.cluster import overused_cards
from tests.ops.hami_dashboard import MONITOR_METRICS

from .conftest import node_object, t4_register

GIB = 1024 * MIB

#: Two T4s: GPU-a-0 measured by NVML on the host; GPU-a-1's host query failed, so only its two
#: containers' usage is there. A MIG info line and the build info are not read.
SAMPLE = f"""# HELP hami_build_info A metric with a constant '1' value labeled by version.
# TYPE hami_build_info gauge
hami_build_info{{version="v2.10.0"}} 1
# HELP hami_host_gpu_memory_used_bytes GPU device memory usage in bytes
# TYPE hami_host_gpu_memory_used_bytes gauge
hami_host_gpu_memory_used_bytes{{device_index="0",device_type="NVIDIA-Tesla T4",device_uuid="GPU-a-0",node="gpu-1",zone="vGPU"}} {9 * GIB + 5 * MIB}
# HELP hami_host_gpu_utilization_ratio GPU core utilization ratio (0-100)
# TYPE hami_host_gpu_utilization_ratio gauge
hami_host_gpu_utilization_ratio{{device_index="0",device_type="NVIDIA-Tesla T4",device_uuid="GPU-a-0",node="gpu-1",zone="vGPU"}} 37
# HELP hami_host_gpu_memory_controller_utilization_ratio GPU memory controller utilization ratio (0-100)
# TYPE hami_host_gpu_memory_controller_utilization_ratio gauge
hami_host_gpu_memory_controller_utilization_ratio{{device_index="0",device_type="NVIDIA-Tesla T4",device_uuid="GPU-a-0",zone="vGPU"}} 12
# HELP hami_vgpu_memory_used_bytes vGPU device memory usage in bytes
# TYPE hami_vgpu_memory_used_bytes gauge
hami_vgpu_memory_used_bytes{{container="main",device_uuid="GPU-a-0",namespace="ml",pod="train-0",vdevice_index="0",zone="vGPU"}} {4 * GIB}
hami_vgpu_memory_used_bytes{{container="main",device_uuid="GPU-a-1",namespace="ml",pod="train-1",vdevice_index="0",zone="vGPU"}} {GIB}
hami_vgpu_memory_used_bytes{{container="side",device_uuid="GPU-a-1",namespace="ml",pod="train-1",vdevice_index="0",zone="vGPU"}} {GIB // 2}
# HELP hami_vgpu_memory_limit_bytes vGPU device memory limit in bytes
# TYPE hami_vgpu_memory_limit_bytes gauge
hami_vgpu_memory_limit_bytes{{container="main",device_uuid="GPU-a-0",namespace="ml",pod="train-0",vdevice_index="0",zone="vGPU"}} {3 * GIB}
# HELP hami_container_device_utilization_ratio Container device SM utilization ratio
# TYPE hami_container_device_utilization_ratio gauge
hami_container_device_utilization_ratio{{container="main",device_uuid="GPU-a-0",namespace="ml",pod="train-0",vdevice_index="0",zone="vGPU"}} 30
# HELP hami_mig_device_info MIG runtime identity for a container allocation
# TYPE hami_mig_device_info gauge
hami_mig_device_info{{compute_instance_id="0",container="main",device_uuid="GPU-c",gpu_instance_id="1",mig_uuid="MIG-x",namespace="ml",pod="m",profile="1g.5gb",vdevice_index="0",zone="vGPU"}} 1
"""

#: The same cards under the pre-2.9 names `--legacy-metrics` serves.
LEGACY = f"""# TYPE HostGPUMemoryUsage gauge
HostGPUMemoryUsage{{deviceidx="0",devicetype="NVIDIA-Tesla T4",deviceuuid="GPU-a-0",nodeid="gpu-1",zone="vGPU"}} {2 * GIB}
HostCoreUtilization{{deviceidx="0",devicetype="NVIDIA-Tesla T4",deviceuuid="GPU-a-0",nodeid="gpu-1",zone="vGPU"}} 64.6
vGPU_device_memory_usage_in_bytes{{ctrname="main",deviceuuid="GPU-a-1",podname="p",podnamespace="ml",vdeviceid="0",zone="vGPU"}} {3 * GIB}
"""


def test_the_sample_uses_only_names_hamis_monitor_exports():
    names = {line.split("{")[0] for line in SAMPLE.splitlines() if line and not line.startswith("#")}
    assert names - {"hami_build_info"} <= MONITOR_METRICS


def test_host_series_give_memory_in_mib_and_utilization_containers_stand_in_for_a_missing_host():
    reading = read_monitor(SAMPLE)
    assert reading.cards == {
        "GPU-a-0": {"memory": 9 * 1024 + 5, "utilization": 37},  # the host's, not the container's 4 GiB
        "GPU-a-1": {"memory": 1024 + 512},  # its containers summed; no utilization measured
    }
    assert reading.bad_lines == 0


def test_legacy_names_are_read_and_utilization_rounded():
    assert read_monitor(LEGACY).cards == {
        "GPU-a-0": {"memory": 2048, "utilization": 65},
        "GPU-a-1": {"memory": 3072},
    }


def test_escaped_label_values_and_timestamps_parse():
    text = 'hami_host_gpu_utilization_ratio{device_type="NVIDIA-\\"odd\\", name\\\\",device_uuid="GPU-q"} 5 1700000000000\n'
    reading = read_monitor(text)
    assert reading.cards == {"GPU-q": {"utilization": 5}}
    assert reading.bad_lines == 0


def test_bad_lines_are_counted_and_skipped_the_rest_is_taken():
    text = "\n".join(
        [
            'hami_host_gpu_utilization_ratio{device_uuid="GPU-ok"} 50',
            'hami_host_gpu_utilization_ratio{device_uuid="GPU-x"}',  # no value
            'hami_host_gpu_utilization_ratio{device_uuid="GPU-y} 3',  # unclosed quote
            'hami_host_gpu_memory_used_bytes{device_uuid="GPU-z"} NaN',
            'hami_host_gpu_memory_used_bytes{device_uuid="GPU-n"} -5',
            'hami_host_gpu_memory_used_bytes{node="gpu-1"} 100',  # no UUID label
            "{{{ garbage",
            'some_other_metric{device_uuid="GPU-ok"} oops',  # not read: not looked at
        ]
    )
    reading = read_monitor(text)
    assert reading.cards == {"GPU-ok": {"utilization": 50}}
    assert reading.bad_lines == 6


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", OFF),
        ("off", OFF),
        ("Proxy", PROXY),
        ("http://{pod_ip}:9394/metrics", "http://{pod_ip}:9394/metrics"),
        ("https://{node_ip}:9394/metrics", "https://{node_ip}:9394/metrics"),
    ],
)
def test_settings_read(value, expected):
    assert parse_setting(value) == expected


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("yes-please", "`off`, `proxy` or an http(s) URL template"),
        ("http://{host}:9394/metrics", "unknown placeholder {host}"),
        ("http://{pod_ip:9394/metrics", "HAMI_VGPU_MONITOR"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(value, words):
    with pytest.raises(MonitorSettingInvalid, match="HAMI_VGPU_MONITOR") as caught:
        parse_setting(value)
    assert words in str(caught.value)


# -- the reader, against monitors that answer over HTTP ---------------------------------------


class Monitors:
    """A threading HTTP server standing in for the nodes' monitors: path `/{node}/metrics`
    answers `pages[node]`, a node without a page answers 500."""

    def __init__(self):
        self.pages: dict[str, str] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                node = self.path.strip("/").split("/")[0]
                page = outer.pages.get(node)
                body = (page if page is not None else "down").encode()
                self.send_response(200 if page is not None else 500)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format, *args):  # noqa: A002
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def template(self) -> str:
        return f"http://{{node_ip}}:{self.httpd.server_address[1]}/{{node}}/metrics"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def monitors():
    found = Monitors()
    yield found
    found.close()


def hami_node(name: str, prefix: str, count: int = 2) -> dict:
    obj = node_object(name, t4_register(prefix, count))
    obj["status"]["addresses"] = [{"type": "InternalIP", "address": "127.0.0.1"}]
    return obj


def report(obj: dict) -> None:
    """What NodeSync does with a HAMi node: its register becomes its cards."""
    from kube.nodes import inventory

    found = inventory(obj)
    services.report_inventory(found.name, found.labels, found.annotations, found.devices)


def card(uuid: str) -> Card:
    return Card.objects.get(uuid=uuid)


@pytest.mark.django_db
def test_the_reader_stores_each_nodes_measurements_on_its_cards(monitors):
    """gpu-1's monitor answers the sample, gpu-2's fails (500), cpu-1 has no register (not
    read). GPU-a-0's 9 GiB pass its grant (none): the dashboard's over-grant flag."""
    nodes = [hami_node("gpu-1", "GPU-a"), hami_node("gpu-2", "GPU-c"), node_object("cpu-1")]
    for obj in nodes[:2]:
        report(obj)
    monitors.pages["gpu-1"] = SAMPLE
    reader = VgpuMonitorReader(None, monitors.template, lambda: nodes)

    counts = reader.run_once()

    assert counts["read"] == 1 and counts["unreachable"] == 1
    assert (card("GPU-a-0").observed_memory, card("GPU-a-0").utilization) == (9 * 1024 + 5, 37)
    assert (card("GPU-a-1").observed_memory, card("GPU-a-1").utilization) == (1536, None)
    assert card("GPU-a-0").observed_at is not None and card("GPU-a-0").temperature is None
    assert card("GPU-c-0").observed_memory is None, "its monitor did not answer: nothing stored"
    assert set(overused_cards().values_list("uuid", flat=True)) == {"GPU-a-0", "GPU-a-1"}
    assert ("gpu-2", "unreachable") in reader.logged


@pytest.mark.django_db
def test_unknown_cards_bad_lines_and_out_of_range_values_are_counted_and_the_rest_kept(monitors):
    nodes = [hami_node("gpu-1", "GPU-a", 1)]
    report(nodes[0])
    monitors.pages["gpu-1"] = "\n".join(
        [
            'hami_host_gpu_memory_used_bytes{device_uuid="GPU-a-0"} 2147483648',
            'hami_host_gpu_utilization_ratio{device_uuid="GPU-a-0"} 12',
            'hami_host_gpu_utilization_ratio{device_uuid="GPU-elsewhere"} 12',  # not this node's
            'hami_host_gpu_utilization_ratio{device_uuid="GPU-hot"} 250',  # out of range, and unknown
            "hami_host_gpu_utilization_ratio{device_uuid=broken} 1",
        ]
    )
    reader = VgpuMonitorReader(None, monitors.template, lambda: nodes)
    counts = reader.run_once()
    assert (counts["read"], counts["bad_line"], counts["unknown_card"], counts["refused"]) == (1, 1, 1, 1)
    assert (card("GPU-a-0").observed_memory, card("GPU-a-0").utilization) == (2048, 12)
    assert not Card.objects.filter(uuid__in=["GPU-elsewhere", "GPU-hot"]).exists()

    monitors.pages["gpu-1"] = "\x00\xff not prometheus at all {"
    counts = reader.run_once()
    assert counts["bad_line"] == 1 and counts["read"] == 1
    assert card("GPU-a-0").observed_memory == 2048, "a page with nothing readable changes nothing"


@pytest.mark.django_db
def test_another_nodes_card_is_not_written_from_this_nodes_monitor(monitors):
    nodes = [hami_node("gpu-1", "GPU-a", 1), hami_node("gpu-2", "GPU-b", 1)]
    for obj in nodes:
        report(obj)
    monitors.pages["gpu-1"] = 'hami_host_gpu_utilization_ratio{device_uuid="GPU-b-0"} 99\n'
    counts = VgpuMonitorReader(None, monitors.template, lambda: nodes[:1]).run_once()
    assert counts["unknown_card"] == 1
    assert card("GPU-b-0").utilization is None


# -- through the API server's pod proxy --------------------------------------------------------


def monitor_pod(name: str, node: str, phase: str = "Running") -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "labels": {"app.kubernetes.io/component": "hami-device-plugin", "app.kubernetes.io/name": "hami"},
        },
        "spec": {"nodeName": node, "containers": [{"name": "vgpu-monitor"}]},
        "status": {"phase": phase, "podIP": "10.0.0.7"},
    }


@pytest.mark.django_db
def test_proxy_mode_finds_each_nodes_monitor_pod_and_reads_it_through_the_api_server(kube, apiserver):
    nodes = [hami_node("gpu-1", "GPU-a", 1), hami_node("gpu-2", "GPU-c", 1), hami_node("gpu-3", "GPU-d", 1)]
    for obj in nodes:
        report(obj)
    apiserver.put("pods", monitor_pod("hami-device-plugin-x1", "gpu-1"))
    apiserver.put("pods", monitor_pod("hami-device-plugin-x3", "gpu-3", phase="Pending"))
    apiserver.put("pods", {**monitor_pod("other", "gpu-2"), "metadata": {"name": "other", "namespace": "ml"}})
    apiserver.proxied[("kube-system", "hami-device-plugin-x1", 9394)] = SAMPLE.encode()

    reader = VgpuMonitorReader(kube, "proxy", lambda: nodes)
    counts = reader.run_once()

    assert (counts["read"], counts["no_monitor"]) == (1, 2), (
        "gpu-2 has no monitor pod, gpu-3's is not running"
    )
    assert card("GPU-a-0").utilization == 37
    assert apiserver.calls("GET", "/namespaces/kube-system/pods/hami-device-plugin-x1")
    assert ("", "pods/proxy", "get") in apiserver.grants_used()


@pytest.mark.django_db
def test_a_pod_ip_template_reads_the_pod_directly_and_a_down_api_server_is_only_counted(kube, apiserver):
    nodes = [hami_node("gpu-1", "GPU-a", 1)]
    report(nodes[0])
    apiserver.put("pods", monitor_pod("hami-device-plugin-x1", "gpu-1"))
    reader = VgpuMonitorReader(kube, "http://{pod_ip}:1/{namespace}/{pod}", lambda: nodes, timeout=0.5)
    assert [target.url for target in reader.targets()] == [
        "http://10.0.0.7:1/kube-system/hami-device-plugin-x1"
    ]
    apiserver.stop()
    assert reader.run_once()["unreachable"] == 1
