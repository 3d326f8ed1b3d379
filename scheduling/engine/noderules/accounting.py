"""What the pods on a node hold of it (SPEC 10): cpu, memory, ephemeral-storage, extended
resources, one pod slot each, host ports; and their labels and required anti-affinity for
the rules that read other pods.

A node's `held` (`NodeHeld`) keeps one `Footprint` per pod by key and the sums; it changes
only through `add`/`remove` here, which touch the node (its cached verdicts move on).
`account_running(cluster)` applies `Cluster.running` (pods others bound) to the cluster,
GPU holdings of `hami.io/vgpu-devices-allocated` included, idempotently; the scheduler's
`assume`/`unassume` add and take off the footprints of the pods it places.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..encoding import ALLOCATED, decode_allocation
from ..errors import PodInvalid
from ..families import mig
from ..model import Cluster, Node, RunningPod
from ..quantity import PODS, amounts, effective_request, is_sidecar
from .interpod import PodTerm, pod_affinity
from .terms import _dict, _list

WILDCARD = "0.0.0.0"

#: A host port as kube-scheduler compares them: (host IP, protocol, port).
Port = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class Footprint:
    """One pod on a node, as the node rules count it. `running`: one of `Cluster.running`
    (bound by someone else), whose GPU `holdings` (uuid, MiB, cores) it also holds."""

    key: str
    namespace: str
    labels: dict[str, str]
    request: dict[str, int]
    ports: tuple[Port, ...] = ()
    anti_affinity: tuple[PodTerm, ...] = ()
    running: bool = False
    holdings: tuple[tuple[str, int, int], ...] = ()
    #: (card uuid, MIG instance) per reservation of its `hami.io/vgpu-mig-allocations`: the
    #: exact instances it holds on MIG cards (`families.mig`).
    instances: tuple[tuple[str, Any], ...] = ()


@dataclass(slots=True)
class NodeHeld:
    """The footprints on one node and what they hold together (`requested`, `ports`), and
    the node's `allocatable` read (`capacity`; `source` is the dict it was read from)."""

    pods: dict[str, Footprint] = field(default_factory=dict)
    requested: dict[str, int] = field(default_factory=dict)
    ports: dict[Port, int] = field(default_factory=dict)
    source: dict | None = None
    capacity: dict[str, int] = field(default_factory=dict)


def held(node: Node) -> NodeHeld:
    found = node.held
    if found is None:
        found = node.held = NodeHeld()
    return found


def capacity(node: Node) -> dict[str, int]:
    """The node's `allocatable` in canonical amounts, read once per dict given; an entry that
    is not a quantity is left out (not limited): the readers of nodes refuse it first."""
    state = held(node)
    if state.source is not node.allocatable:
        read = {}
        for name, value in (node.allocatable or {}).items():
            try:
                read.update(amounts({name: value}, "allocatable"))
            except PodInvalid:
                continue
        state.source, state.capacity = node.allocatable, read
    return state.capacity


def host_ports(containers, init_containers, where: str = "") -> tuple[Port, ...]:
    """The host ports a pod's containers (and sidecars) ask: (hostIP, protocol, hostPort) for
    each port with a `hostPort` above 0; hostIP defaults to 0.0.0.0, protocol to TCP."""
    prefix = f"{where}." if where else ""
    found: list[Port] = []
    groups = (
        ("containers", containers or []),
        ("initContainers", [c for c in init_containers or [] if is_sidecar(c)]),
    )
    for name, group in groups:
        for i, container in enumerate(group):
            if not isinstance(container, dict):
                continue
            at = f"{prefix}{name}[{i}].ports"
            for j, port in enumerate(_list(container.get("ports"), at)):
                port = _dict(port, f"{at}[{j}]")
                number = port.get("hostPort") or 0
                if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= 65535:
                    raise PodInvalid(
                        f"{at}[{j}].hostPort", f"must be a port number from 0 to 65535, got {number!r}"
                    )
                protocol = port.get("protocol") or "TCP"
                if protocol not in ("TCP", "UDP", "SCTP"):
                    raise PodInvalid(f"{at}[{j}].protocol", f"must be TCP, UDP or SCTP, got {protocol!r}")
                ip = port.get("hostIP") or WILDCARD
                if not isinstance(ip, str):
                    raise PodInvalid(f"{at}[{j}].hostIP", f"must be a string, got {ip!r}")
                if number:
                    found.append((ip, protocol, number))
    return tuple(found)


def port_conflict(ports: tuple[Port, ...], taken: dict[Port, int]) -> bool:
    """Whether any of `ports` clashes with one `taken` on the node: same protocol and port,
    and the same host IP or either of them 0.0.0.0."""
    if not taken:
        return False
    for ip, protocol, number in ports:
        for other_ip, other_protocol, other_number in taken:
            if other_number == number and other_protocol == protocol:
                if ip == WILDCARD or other_ip == WILDCARD or ip == other_ip:
                    return True
    return False


def footprint_of(pod, running: bool = False) -> Footprint:
    """A `PodSpec` or `RunningPod` as the node rules count it. Raises PodInvalid naming the field."""
    request = effective_request(pod.containers, pod.init_containers)
    request[PODS] = request.get(PODS, 0) + 1
    anti: tuple[PodTerm, ...] = ()
    if pod.affinity:
        anti = pod_affinity(pod.affinity, "affinity", pod.namespace, pod.labels or {}).anti_affinity
    holdings: tuple[tuple[str, int, int], ...] = ()
    instances: tuple[tuple[str, Any], ...] = ()
    if running:
        value = (pod.annotations or {}).get(ALLOCATED)
        if value:
            try:
                holdings = tuple(grant for container in decode_allocation(value) for grant in container)
            except ValueError as exc:
                raise PodInvalid(f"annotations.{ALLOCATED}", str(exc)) from None
        reserved = (pod.annotations or {}).get(mig.ALLOCATIONS)
        if reserved:
            try:
                instances = tuple(
                    (r.uuid, mig.Instance(r.profile, r.placement)) for r in mig.decode_reservations(reserved)
                )
            except ValueError as exc:
                raise PodInvalid(f"annotations.{mig.ALLOCATIONS}", str(exc)) from None
    return Footprint(
        key=pod.key,
        namespace=pod.namespace,
        labels=dict(pod.labels or {}),
        request=request,
        ports=host_ports(pod.containers, pod.init_containers),
        anti_affinity=anti,
        running=running,
        holdings=holdings,
        instances=instances,
    )


def add(node: Node, footprint: Footprint, touch: bool = True) -> None:
    """Put `footprint` on `node` (replacing one with its key) and touch the node (unless the
    caller touches it itself)."""
    state = held(node)
    if footprint.key in state.pods:
        _take_off(node, state, state.pods[footprint.key])
    state.pods[footprint.key] = footprint
    for name, value in footprint.request.items():
        state.requested[name] = state.requested.get(name, 0) + value
    for port in footprint.ports:
        state.ports[port] = state.ports.get(port, 0) + 1
    if footprint.holdings:
        node.shift(footprint.holdings, 1, footprint.instances)
    elif footprint.instances:  # hamiadmin's own pod: its counters are on the cards already
        node.hold_instances(footprint.instances, 1)
    if touch:
        node.touch()


def remove(node: Node, key: str, touch: bool = True) -> Footprint | None:
    """Take the footprint of pod `key` off `node` (touching it unless the caller does); None
    when it held none."""
    state = node.held
    if state is None or key not in state.pods:
        return None
    footprint = state.pods[key]
    _take_off(node, state, footprint)
    if touch:
        node.touch()
    return footprint


def _take_off(node: Node, state: NodeHeld, footprint: Footprint) -> None:
    del state.pods[footprint.key]
    for name, value in footprint.request.items():
        left = state.requested.get(name, 0) - value
        if left:
            state.requested[name] = left
        else:
            state.requested.pop(name, None)
    for port in footprint.ports:
        left = state.ports.get(port, 0) - 1
        if left > 0:
            state.ports[port] = left
        else:
            state.ports.pop(port, None)
    if footprint.holdings:
        node.shift(footprint.holdings, -1, footprint.instances)
    elif footprint.instances:
        node.hold_instances(footprint.instances, -1)


def account_running(
    cluster: Cluster, pods: Iterable[RunningPod] | None = None, nodes: Iterable[str] | None = None
) -> list[tuple[RunningPod, PodInvalid]]:
    """Apply `cluster.running` to its nodes: each running pod's footprint (cpu, memory, pods,
    ports, labels, anti-affinity, and the cards of its `hami.io/vgpu-devices-allocated`) on its
    node. Idempotent: a pod already on its node is left as it is, and running pods no longer
    listed are taken off. A running pod on a node the cluster lacks is skipped; one that does
    not read is skipped too and returned with its error, for the caller to report.

    `pods` and `nodes`: only those nodes, whose running pods are exactly `pods` (a caller that
    put a few nodes back recounts them, not every pod of the cluster)."""
    problems: list[tuple[RunningPod, PodInvalid]] = []
    listed: dict[str, set[str]] = {}
    for pod in cluster.running if pods is None else pods:
        node = cluster.by_name.get(pod.node)
        if node is None:
            continue
        listed.setdefault(pod.node, set()).add(pod.key)
        if node.held is not None and pod.key in node.held.pods:
            continue
        try:
            footprint = footprint_of(pod, running=True)
        except PodInvalid as exc:
            problems.append((pod, exc))
            continue
        add(node, footprint)
    by_name = cluster.by_name
    for node in cluster.nodes if nodes is None else (by_name[name] for name in nodes if name in by_name):
        state = node.held
        if state is None:
            continue
        stale = [key for key, fp in state.pods.items() if fp.running and key not in listed.get(node.name, ())]
        for key in stale:
            remove(node, key)
    return problems
