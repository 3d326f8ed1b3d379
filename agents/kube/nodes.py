"""Reading a Kubernetes node's HAMi annotations into an inventory report. Pure.

HAMi's device plugin publishes each node's cards in `hami.io/node-nvidia-register`
(SPEC 8, 9- or 7-field form) and pair scores in `hami.io/node-nvidia-score`; reading
them lets hamiadmin schedule on nodes run by that plugin instead of our NVML agent.
A node without the register annotation is not ours to describe (an NVML agent may
report it), so it yields no inventory at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduling.engine.encoding import decode_node_register, decode_node_scores
from scheduling.engine.errors import ScenarioError
from scheduling.engine.model import CORDON_ANNOTATION

REGISTER = "hami.io/node-nvidia-register"
SCORES = "hami.io/node-nvidia-score"

#: Node annotations kept on the Node row: the ones that change decisions. The register and
#: score annotations become cards and links; the rest (handshakes, other tools) is noise
#: that would otherwise look like a change on every kubelet update.
KEPT_ANNOTATIONS = (CORDON_ANNOTATION,)


class InventoryInvalid(ValueError):
    """The node's annotations cannot be read; `where` names the annotation and entry."""

    def __init__(self, node: str, where: str, message: str):
        super().__init__(f"node {node}: {where}: {message}")
        self.node, self.where, self.message = node, where, message


@dataclass
class NodeInventory:
    """The arguments of `services.report_inventory` for one node."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    devices: list[dict] = field(default_factory=list)


def name_of(node: dict) -> str:
    return (node.get("metadata") or {}).get("name") or ""


def is_ready(node: dict) -> bool:
    """The kubelet's Ready condition; a node that reports no conditions yet counts as ready."""
    conditions = (node.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


def inventory(node: dict) -> NodeInventory | None:
    """The node's cards from its HAMi annotations, or None when it has no register annotation.

    Raises InventoryInvalid naming the annotation for a malformed one. Links that name a
    card missing from the register (a score annotation older than the register) are dropped.
    """
    name = name_of(node)
    metadata = node.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    register = annotations.get(REGISTER)
    if register is None:
        return None
    if not isinstance(register, str):
        raise InventoryInvalid(name, REGISTER, "must be a string")
    try:
        cards = decode_node_register(register)
        pairs = decode_node_scores(annotations.get(SCORES) or "")
    except ScenarioError as exc:
        raise InventoryInvalid(name, exc.where, exc.message) from None
    uuids = {card.uuid for card in cards}
    links: dict[str, dict[str, int]] = {uuid: {} for uuid in uuids}
    for pair, score in pairs.items():
        if len(pair) == 2 and pair <= uuids and score > 0:
            first, second = sorted(pair)
            links[first][second] = score
            links[second][first] = score
    devices = []
    for card in cards:
        device = {
            "uuid": card.uuid,
            "index": card.index,
            "type": card.type or "NVIDIA",
            "slots": card.slots,
            "memory": card.memory,
            "cores": card.cores,
            "numa": card.numa,
            "health": card.health,
            "links": links[card.uuid],
        }
        if card.mode:
            device["mode"] = card.mode
        devices.append(device)
    labels = {k: v for k, v in (metadata.get("labels") or {}).items() if isinstance(v, str)}
    kept = {k: annotations[k] for k in KEPT_ANNOTATIONS if isinstance(annotations.get(k), str)}
    return NodeInventory(name=name, labels=labels, annotations=kept, devices=devices)
