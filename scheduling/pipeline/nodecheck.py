"""The commit's re-check of node resources (SPEC 10 `NodeResourcesFit`, `NodePorts`) across
workers: two commits that each place a pod on other cards of one node must not together pass
its cpu, memory, ephemeral-storage, pod count or host ports.

Cards are the commit's locks, so a commit placing on a node whose `allocatable` limits it locks
every card of that node (`cards_to_lock`), in the same primary-key order as always: two such
commits on one node take turns, and the second reads, under lock, the pods the first placed.
The ledger (`NodeLedger.read`) sums what the node's pods hold from the rows: hamiadmin's own
placed pods and the pods others bound (not ended). Each placement is admitted in queue order
against what is left, plus what this commit admitted before it. Within a cycle the engine's
own accounting already decided the same way; this only catches what another worker placed
meanwhile. A node without `allocatable` is not limited (SPEC 10): nothing to re-check there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduling.engine import PodInvalid
from scheduling.engine.decision import SCHEDULED
from scheduling.engine.noderules.accounting import WILDCARD, host_ports
from scheduling.engine.quantity import PODS, amounts, effective_request
from scheduling.models import BoundPod, Node, Pod

from .plan import Attempt
from .snapshot import Snapshot


def limited_nodes(fresh: list[Attempt], snapshot: Snapshot) -> set[str]:
    """The nodes this commit places on (not preemptions: their node is re-checked when the
    preemptor is placed) whose `allocatable` limits them, as the snapshot saw them."""
    names = set()
    for attempt in fresh:
        node = attempt.decision.node
        if attempt.decision.status != SCHEDULED or attempt.victims or node is None:
            continue
        found = snapshot.cluster.by_name.get(node)
        if found is not None and found.allocatable:
            names.add(node)
    return names


def cards_to_lock(names: set[str], snapshot: Snapshot) -> set[int]:
    """Every card id of these nodes: locked by the commit, they serialize commits on a node."""
    ids = snapshot.card_ids
    return {
        ids[card.uuid] for name in names for card in snapshot.cluster.by_name[name].cards if card.uuid in ids
    }


def _request(containers, init_containers) -> dict[str, int]:
    """A pod's effective request and pod slot; a pod whose spec does not read counts as a slot."""
    try:
        request = effective_request(containers, init_containers)
    except PodInvalid:
        request = {}
    request[PODS] = request.get(PODS, 0) + 1
    return request


def _ports(containers, init_containers) -> tuple:
    try:
        return host_ports(containers, init_containers)
    except PodInvalid:
        return ()


def _clash(port, taken) -> bool:
    """kube-scheduler's NodePorts: same protocol and port, and the same host IP or a wildcard."""
    ip, protocol, number = port
    return any(
        protocol == other_protocol
        and number == other_number
        and (ip == other_ip or WILDCARD in (ip, other_ip))
        for other_ip, other_protocol, other_number in taken
    )


@dataclass
class NodeLedger:
    """What the limited nodes' pods hold, read under the commit's card locks, and what this
    commit admits on top (`admit`)."""

    capacity: dict[str, dict[str, int]] = field(default_factory=dict)
    used: dict[str, dict[str, int]] = field(default_factory=dict)
    ports: dict[str, list] = field(default_factory=dict)
    asks: dict[int, tuple[dict[str, int], tuple]] = field(default_factory=dict)  # pod id -> ask

    @classmethod
    def read(cls, names: set[str], fresh: list[Attempt]) -> NodeLedger | None:
        """The ledger of `names` from the rows (three queries); None when there are none."""
        if not names:
            return None
        ledger = cls()
        for name, allocatable in Node.objects.filter(name__in=sorted(names)).values_list(
            "name", "allocatable"
        ):
            try:
                ledger.capacity[name] = amounts(allocatable, "allocatable")
            except PodInvalid:
                ledger.capacity[name] = {}  # stored before it was checked: not limited
            ledger.used[name], ledger.ports[name] = {}, []
        placing = {attempt.pod_id for attempt in fresh}
        own = (
            Pod.objects.filter(status__in=Pod.BOUND, node__name__in=sorted(names))
            .exclude(pk__in=sorted(placing))
            .values_list("namespace", "name", "node__name", "containers", "init_containers")
        )
        seen = set()
        for namespace, name, node, containers, init_containers in own:
            seen.add((namespace, name))
            ledger._hold(node, _request(containers, init_containers), _ports(containers, init_containers))
        others = (
            BoundPod.objects.filter(node_name__in=sorted(names))
            .exclude(phase__in=BoundPod.ENDED)
            .values_list("namespace", "name", "node_name", "containers", "init_containers")
        )
        for namespace, name, node, containers, init_containers in others:
            if (namespace, name) not in seen:
                ledger._hold(node, _request(containers, init_containers), _ports(containers, init_containers))
        for pk, containers, init_containers in Pod.objects.filter(pk__in=sorted(placing)).values_list(
            "pk", "containers", "init_containers"
        ):
            ledger.asks[pk] = (_request(containers, init_containers), _ports(containers, init_containers))
        return ledger

    def _hold(self, node: str, request: dict[str, int], ports: tuple) -> None:
        used = self.used.setdefault(node, {})
        for resource, value in request.items():
            used[resource] = used.get(resource, 0) + value
        self.ports.setdefault(node, []).extend(ports)

    def admit(self, attempt: Attempt) -> str:
        """Empty (and the placement held) when its node still takes the pod; else why not."""
        node = attempt.decision.node
        if node not in self.capacity or attempt.pod_id not in self.asks:
            return ""
        request, ports = self.asks[attempt.pod_id]
        capacity, used = self.capacity[node], self.used[node]
        for resource, value in request.items():
            if resource in capacity and used.get(resource, 0) + value > capacity[resource]:
                return f"{node} Insufficient {resource}"
        for port in ports:
            if _clash(port, self.ports[node]):
                return f"{node} host port {port[1]}/{port[2]} is taken"
        self._hold(node, request, ports)
        return ""
