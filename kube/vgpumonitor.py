"""HAMi's vGPU monitor, read for measured usage on the nodes HAMi's device plugin runs.

In drop-in mode hamiadmin's NVML agent does not run on those nodes, so nothing measures
their cards; HAMi's device plugin DaemonSet runs a second container there, `vgpu-monitor`
(`vGPUmonitor`), which serves Prometheus text on port 9394 (`/metrics`). With
`HAMI_VGPU_MONITOR` set, the agent reads each HAMi node's monitor every
`HAMI_VGPU_MONITOR_SECONDS` and stores what it measured on the node's cards, where an NVML
agent's `observed` measurements go (`services.record_measurements`): the dashboard's
memory-in-use and utilization columns and its "over grant" flag then work on HAMi's nodes.

What is read (HAMi v2.10.0, `cmd/vGPUmonitor/metrics.go`; the pre-2.9 names that
`--legacy-metrics` still serves are read too):

- a card's memory in use: `hami_host_gpu_memory_used_bytes{device_uuid}` (NVML's
  `memory.Used`, bytes; legacy `HostGPUMemoryUsage{deviceuuid}`), stored in MiB rounded down
  as the NVML agent does. A card the monitor reports no host series for (its NVML query
  failed) gets the sum of its containers' `hami_vgpu_memory_used_bytes{device_uuid}`
  (legacy `vGPU_device_memory_usage_in_bytes{deviceuuid}`): a lower bound, what HAMi's
  in-container library counted;
- a card's utilization: `hami_host_gpu_utilization_ratio{device_uuid}` (NVML's busy percent,
  0 to 100; legacy `HostCoreUtilization{deviceuuid}`), rounded.

The monitor exports no temperature, power or ECC count: those stay not measured.

Where the monitor is reached (`HAMI_VGPU_MONITOR`):

- `off` (the default): not read;
- `proxy`: through the API server's pod proxy, `/api/v1/namespaces/{ns}/pods/{pod}:9394/
  proxy/metrics`, to the device plugin pod on the node (RBAC `pods/proxy` get). The pod is
  found by `HAMI_VGPU_MONITOR_SELECTOR` (HAMi's chart labels it
  `app.kubernetes.io/component=hami-device-plugin`). HAMi's chart runs it off the host
  network (`devicePlugin.hostNetwork: false`), so the node proxy cannot reach it;
- a URL template, `http://{pod_ip}:9394/metrics` (the agent reaches the pod directly) or
  `http://{node_ip}:9394/metrics` (a device plugin on the host network), with `{node}`,
  `{node_ip}` (the node's InternalIP), `{pod_ip}`, `{pod}` and `{namespace}`.

Bad input never stops the agent: a monitor that does not answer, a line that does not
parse, a UUID that is not one of the node's cards, a value out of range are logged (once
per node and kind until it changes) and counted in `hamiadmin_vgpu_monitor_reads`, and the
rest is taken.
"""

from __future__ import annotations

import logging
import math
import re
import string
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from scheduling import services
from scheduling.ops.metrics import vgpu_monitor_read

from . import nodes as node_objects
from .api import ApiError, ApiUnavailable, KubeApi

log = logging.getLogger("hamiadmin.kube.vgpumonitor")

OFF = "off"
PROXY = "proxy"
PORT = 9394
PATH = "metrics"
SELECTOR = "app.kubernetes.io/component=hami-device-plugin"
PLACES = frozenset({"node", "node_ip", "pod_ip", "pod", "namespace"})
#: Placeholders that need the monitor's pod found first.
POD_PLACES = frozenset({"pod_ip", "pod", "namespace"})
#: The most of one monitor's answer read: a node's few cards and containers are kilobytes.
MAX_BYTES = 8 * 1024 * 1024
MIB = 1024 * 1024

#: metric -> its card UUID label, by what it measures (current name first, then legacy).
HOST_MEMORY = {"hami_host_gpu_memory_used_bytes": "device_uuid", "HostGPUMemoryUsage": "deviceuuid"}
HOST_UTILIZATION = {"hami_host_gpu_utilization_ratio": "device_uuid", "HostCoreUtilization": "deviceuuid"}
CONTAINER_MEMORY = {
    "hami_vgpu_memory_used_bytes": "device_uuid",
    "vGPU_device_memory_usage_in_bytes": "deviceuuid",
}
READ = {**HOST_MEMORY, **HOST_UTILIZATION, **CONTAINER_MEMORY}

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


class MonitorSettingInvalid(ValueError):
    """`HAMI_VGPU_MONITOR` is neither `off`, `proxy` nor a usable URL template."""


@dataclass
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Reading:
    """One monitor's answer: card UUID -> `observed` (report keys), and lines refused."""

    cards: dict[str, dict] = field(default_factory=dict)
    bad_lines: int = 0


def _labels(text: str) -> dict[str, str] | None:
    found: dict[str, str] = {}
    at = 0
    while at < len(text):
        match = _LABEL.match(text, at)
        if match is None:
            return None if text[at:].strip() else found
        found[match.group(1)] = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], match.group(2))
        at = match.end()
    return found


def samples(text: str, names=READ) -> tuple[list[Sample], int]:
    """The samples of the Prometheus text format whose metric is in `names`, and how many
    lines did not parse: those of `names`, and lines that start with no metric name (another
    metric's line is not read further). A comment or blank line is skipped; a value that is
    not a finite number counts as not parsed."""
    found, bad = [], 0
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
        if name is None or name.group(0) not in names:
            bad += name is None
            continue
        match = _SAMPLE.match(line)
        labels = _labels(match.group(2) or "") if match else None
        try:
            value = float(match.group(3)) if match else math.nan
        except ValueError:
            value = math.nan
        if labels is None or not math.isfinite(value):
            bad += 1
            continue
        found.append(Sample(name.group(0), labels, value))
    return found, bad


def read_monitor(text: str) -> Reading:
    """The cards' measurements in one monitor's answer (the rules in the module's docstring).
    A sample without its UUID label, or a negative value, counts as a bad line."""
    parsed, bad = samples(text)
    host_memory: dict[str, float] = {}
    utilization: dict[str, float] = {}
    containers: dict[str, float] = defaultdict(float)
    for sample in parsed:
        uuid = sample.labels.get(READ[sample.name], "").strip()
        if not uuid or sample.value < 0:
            bad += 1
        elif sample.name in HOST_MEMORY:
            host_memory.setdefault(uuid, sample.value)
        elif sample.name in HOST_UTILIZATION:
            utilization.setdefault(uuid, sample.value)
        else:
            containers[uuid] += sample.value
    reading = Reading(bad_lines=bad)
    for uuid in sorted({*host_memory, *utilization, *containers}):
        used = host_memory.get(uuid, containers.get(uuid))
        observed: dict = {}
        if used is not None:
            observed["memory"] = int(used) // MIB
        if uuid in utilization:
            observed["utilization"] = round(utilization[uuid])
        reading.cards[uuid] = observed
    return reading


def parse_setting(value: str) -> str:
    """`off`, `proxy`, or a URL template checked for its scheme and placeholders."""
    value = (value or "").strip()
    if value.lower() in ("", OFF, "false", "0", "no"):
        return OFF
    if value.lower() == PROXY:
        return PROXY
    if not value.startswith(("http://", "https://")):
        raise MonitorSettingInvalid(
            f"HAMI_VGPU_MONITOR: `off`, `proxy` or an http(s) URL template, got {value!r}"
        )
    try:
        used = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
    except ValueError as exc:
        raise MonitorSettingInvalid(f"HAMI_VGPU_MONITOR: {exc}: {value!r}") from None
    unknown = sorted(used - PLACES)
    if unknown:
        raise MonitorSettingInvalid(
            f"HAMI_VGPU_MONITOR: unknown placeholder {{{unknown[0]}}}; one of "
            + ", ".join(f"{{{name}}}" for name in sorted(PLACES))
        )
    return value


@dataclass
class Target:
    """Where one HAMi node's monitor is read."""

    node: str
    url: str = ""  # a URL template's, filled in
    pod: tuple[str, str] | None = None  # (namespace, name), through the proxy


def internal_ip(node: dict) -> str:
    status = node.get("status")
    for address in (status.get("addresses") if isinstance(status, dict) else None) or []:
        if isinstance(address, dict) and address.get("type") == "InternalIP":
            return str(address.get("address") or "")
    return ""


class VgpuMonitorReader:
    """Reads every HAMi node's monitor, once per `run_once`; `nodes` gives the Node objects
    (the agent's informer cache)."""

    def __init__(
        self,
        api: KubeApi,
        setting: str,
        nodes: Callable[[], list[dict]],
        selector: str = SELECTOR,
        timeout: float = 5.0,
        workers: int = 8,
    ):
        self.api, self.nodes, self.selector = api, nodes, selector
        self.setting = parse_setting(setting)
        self.timeout, self.workers = timeout, workers
        self.logged: dict[tuple[str, str], str] = {}  # (node, kind) -> last message logged
        self.missing: list[str] = []  # the last round's HAMi nodes without a monitor pod

    @property
    def enabled(self) -> bool:
        return self.setting != OFF

    def _pods_by_node(self) -> dict[str, dict]:
        """The running monitor pods, by node (one per node: a DaemonSet's)."""
        found: dict[str, dict] = {}
        for pod in self.api.list_pods("status.phase=Running", self.selector)[0]:
            node = (pod.get("spec") or {}).get("nodeName")
            if isinstance(node, str) and node:
                found.setdefault(node, pod)
        return found

    def targets(self) -> list[Target]:
        """One per node carrying HAMi's register; a node whose monitor pod is not running is
        left out (and counted) when the setting needs the pod."""
        hami_nodes = [node for node in self.nodes() if node_objects.has_register(node)]
        needs_pod = self.setting == PROXY or any(
            name in POD_PLACES for _, name, _, _ in string.Formatter().parse(self.setting) if name
        )
        pods = self._pods_by_node() if needs_pod and hami_nodes else {}
        found, self.missing = [], []
        for node in hami_nodes:
            name = node_objects.name_of(node)
            pod = pods.get(name)
            if needs_pod and pod is None:
                self._note(name, "no_monitor", f"no running pod matching {self.selector} on the node")
                self.missing.append(name)
                continue
            self._clear(name, "no_monitor")
            meta = (pod or {}).get("metadata") or {}
            where = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            if self.setting == PROXY:
                found.append(Target(name, pod=where))
                continue
            url = self.setting.format(
                node=name,
                node_ip=internal_ip(node),
                pod_ip=str(((pod or {}).get("status") or {}).get("podIP") or ""),
                namespace=where[0],
                pod=where[1],
            )
            found.append(Target(name, url=url))
        return found

    def fetch(self, target: Target) -> str:
        """The monitor's answer as text; raises OSError or ApiError/ApiUnavailable."""
        if target.pod is not None:
            body = self.api.get_pod_proxy(target.pod[0], target.pod[1], PORT, PATH)
        else:
            with urllib.request.urlopen(target.url, timeout=self.timeout) as response:  # noqa: S310 - the operator's URL
                body = response.read(MAX_BYTES + 1)
        if len(body) > MAX_BYTES:
            raise OSError(f"answer larger than {MAX_BYTES} bytes")
        return body.decode("utf-8", errors="replace")

    def _fetched(self, target: Target) -> tuple[Target, str | None, str]:
        try:
            return target, self.fetch(target), ""
        except (OSError, ApiError, ApiUnavailable, urllib.error.URLError) as exc:
            return target, None, f"{type(exc).__name__}: {exc}"

    def run_once(self) -> dict[str, int]:
        """Read every HAMi node's monitor and store what it measured. How many of each
        outcome (`read`, `unreachable`, `no_monitor`, `bad_line`, `unknown_card`, `refused`)."""
        counts: dict[str, int] = defaultdict(int)
        if not self.enabled:
            return counts
        try:
            targets = self.targets()
        except (ApiError, ApiUnavailable) as exc:
            log.warning("vGPU monitor: the monitor pods could not be listed: %s", exc)
            counts["unreachable"] += 1
            vgpu_monitor_read("unreachable")
            return counts
        counts["no_monitor"] = len(self.missing)
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(targets) or 1))) as pool:
            answers = list(pool.map(self._fetched, targets))
        for target, text, error in answers:
            if text is None:
                self._note(target.node, "unreachable", f"the monitor did not answer: {error}")
                counts["unreachable"] += 1
                continue
            self._store(target.node, read_monitor(text), counts)
        for outcome, count in counts.items():
            if count:
                vgpu_monitor_read(outcome, count)
        return counts

    def _store(self, node: str, reading: Reading, counts: dict[str, int]) -> None:
        counts["read"] += 1
        self._clear(node, "unreachable")
        if reading.bad_lines:
            counts["bad_line"] += reading.bad_lines
            self._note(node, "bad_line", f"{reading.bad_lines} line(s) of the monitor's answer did not parse")
        if not reading.cards:
            return
        result = services.record_measurements(node, reading.cards)
        if result.unknown:
            counts["unknown_card"] += len(result.unknown)
            self._note(node, "unknown_card", f"cards not of this node skipped: {', '.join(result.unknown)}")
        for uuid, why in result.refused.items():
            counts["refused"] += 1
            self._note(node, f"refused {uuid}", f"measurements of card {uuid} refused: {why}")

    def _note(self, node: str, kind: str, message: str) -> None:
        """Log once per node and kind until the message changes."""
        if self.logged.get((node, kind)) != message:
            log.warning("vGPU monitor of node %s: %s", node, message)
        self.logged[(node, kind)] = message

    def _clear(self, node: str, kind: str) -> None:
        if self.logged.pop((node, kind), None) is not None:
            log.info("vGPU monitor of node %s: no longer %s", node, kind.replace("_", " "))
