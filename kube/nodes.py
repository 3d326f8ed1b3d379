"""Reading a Kubernetes node's HAMi annotations into an inventory report. Pure.

HAMi's device plugin publishes each node's cards in `hami.io/node-nvidia-register`
(SPEC 8: the JSON list of HAMi 2.8 and later, or the older 9- or 7-field colon form, both
read by `encoding.decode_node_register`) and pair scores in `hami.io/node-nvidia-score`;
reading them lets hamiadmin schedule on nodes run by that plugin instead of our NVML agent.
A node without the register annotation is not ours to describe (an NVML agent may
report it), so it yields no inventory at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduling.engine.encoding import decode_node_scores
from scheduling.engine.errors import ScenarioError
from scheduling.engine.families import ASCEND, NVIDIA
from scheduling.engine.model import CORDON_ANNOTATION
from scheduling.storable import printable, why_unstorable

REGISTER = NVIDIA.register
SCORES = NVIDIA.scores
#: `InventoryInvalid.where` of a node whose own name is at fault: it cannot even be marked not ready.
NAME = "metadata.name"

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
    #: What the node rules read (SPEC 10), in the API's forms: `spec.taints`,
    #: `spec.unschedulable` (a cordon), `status.allocatable`.
    taints: list[dict] = field(default_factory=list)
    unschedulable: bool = False
    allocatable: dict = field(default_factory=dict)


def metadata_of(node) -> dict:
    found = node.get("metadata") if isinstance(node, dict) else None
    return found if isinstance(found, dict) else {}


def name_of(node: dict) -> str:
    """The node's name, or "" when it has none or a malformed one (`inventory` refuses it,
    naming `metadata.name`): a list there made the DRA node lookup raise."""
    name = metadata_of(node).get("name")
    return name if isinstance(name, str) else ""


def subject_of(node: dict) -> str:
    """`node/<name>`: what an Event about this node names."""
    return printable(f"node/{name_of(node)}")


def has_register(node: dict) -> bool:
    annotations = metadata_of(node).get("annotations")
    return isinstance(annotations, dict) and REGISTER in annotations


def is_ready(node: dict) -> bool:
    """The kubelet's Ready condition; a node that reports no conditions yet counts as ready."""
    status = node.get("status") if isinstance(node, dict) else None
    conditions = (status.get("conditions") if isinstance(status, dict) else None) or []
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


def _storable(name: str, where: str, text: str) -> str:
    problem = why_unstorable(text)
    if problem:
        raise InventoryInvalid(name, where, problem)
    return text


def _strings(name: str, where: str, found) -> dict[str, str]:
    """Labels: string values kept (others dropped, as before), each storable."""
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise InventoryInvalid(name, where, "must be an object of strings")
    kept = {}
    for key, value in found.items():
        if isinstance(key, str) and isinstance(value, str):
            kept[_storable(name, f"{where}.{printable(key)}", key)] = _storable(name, f"{where}.{key}", value)
    return kept


def rule_fields(node: dict) -> dict:
    """`taints`, `unschedulable` and `allocatable` as the node rules read them (SPEC 10): the
    taints' key, value and effect (`timeAdded` is noise that would look like a change), the
    cordon, and the allocatable quantities as written. Raises InventoryInvalid naming the field
    for what cannot be stored; what they mean is checked where they are stored."""
    name = printable(name_of(node))
    found_spec, found_status = node.get("spec"), node.get("status")
    spec: dict = found_spec if isinstance(found_spec, dict) else {}
    status: dict = found_status if isinstance(found_status, dict) else {}
    taints = spec.get("taints") or []
    if not isinstance(taints, list):
        raise InventoryInvalid(name, "spec.taints", "must be a list of taints")
    kept = []
    for position, taint in enumerate(taints):
        if not isinstance(taint, dict):
            raise InventoryInvalid(name, f"spec.taints[{position}]", "must be an object")
        entry = {}
        for key in ("key", "value", "effect"):
            value = taint.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                raise InventoryInvalid(name, f"spec.taints[{position}].{key}", "must be a string")
            entry[key] = _storable(name, f"spec.taints[{position}].{key}", value)
        kept.append(entry)
    allocatable = status.get("allocatable") or {}
    if not isinstance(allocatable, dict):
        raise InventoryInvalid(name, "status.allocatable", "must be an object of quantities")
    for resource, value in allocatable.items():
        where = f"status.allocatable.{printable(resource)}"
        if (
            not isinstance(resource, str)
            or not isinstance(value, str | int | float)
            or isinstance(value, bool)
        ):
            raise InventoryInvalid(name, where, "must be a quantity")
        _storable(name, where, resource)
        if isinstance(value, str):
            _storable(name, where, value)
    return {
        "taints": kept,
        "unschedulable": spec.get("unschedulable") is True,
        "allocatable": dict(allocatable),
    }


def _ascend_devices(name: str, annotations: dict, after: int) -> list[dict]:
    """The NPUs of each Ascend chip's register (`hami.io/node-register-<commonWord>`), typed
    with the commonWord (what tells the engine their family, `families.family_of_type`), as
    HAMi's GetNodeDevices gives them its vendor; indexed after the node's other cards."""
    devices: list[dict] = []
    for chip in ASCEND.values():
        value = annotations.get(chip.register)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InventoryInvalid(name, chip.register, "must be a string")
        _storable(name, chip.register, value)
        try:
            cards = chip.decode_register(value)
        except ScenarioError as exc:
            raise InventoryInvalid(name, exc.where, exc.message) from None
        for position, card in enumerate(cards):
            _storable(name, f"{chip.register}[{position}].id", card.uuid)
            devices.append(
                {
                    "uuid": card.uuid,
                    "index": after + len(devices),
                    "type": chip.vendor,
                    "slots": card.slots,
                    "memory": card.memory,
                    "cores": card.cores,
                    "numa": card.numa,
                    "health": card.health,
                    "links": {},
                }
            )
    return devices


def inventory(node: dict) -> NodeInventory | None:
    """The node's cards from its HAMi annotations, or None when it has no register annotation.

    Raises InventoryInvalid naming the field for a malformed one: the annotation, card and
    field (`hami.io/node-nvidia-register[1].devmem`, `hami.io/node-nvidia-score.GPU-a.GPU-b`),
    text the database cannot store (NUL, also written `\\u0000` inside the JSON register), a
    number out of range, or `metadata.name` (`NAME`) itself.
    Links that name a card missing from the register (a score annotation older than the
    register) are dropped.
    """
    metadata = metadata_of(node)
    raw_name = metadata.get("name")
    name = printable(raw_name or "")
    annotations = metadata.get("annotations")
    if annotations is None:
        return None
    if not isinstance(annotations, dict):
        raise InventoryInvalid(name, "metadata.annotations", "must be an object of strings")
    register = annotations.get(REGISTER)
    if register is None and not any(chip.register in annotations for chip in ASCEND.values()):
        return None
    raw_name = _checked_name(name, raw_name)
    if register is not None and not isinstance(register, str):
        raise InventoryInvalid(name, REGISTER, "must be a string")
    _storable(name, REGISTER, register or "")
    scores = annotations.get(SCORES) or ""
    if not isinstance(scores, str):
        raise InventoryInvalid(name, SCORES, "must be a string")
    try:
        cards = NVIDIA.decode_register(register) if register else []
        pairs = decode_node_scores(scores)
    except ScenarioError as exc:
        raise InventoryInvalid(name, exc.where, exc.message) from None
    uuids = {card.uuid for card in cards}
    links: dict[str, dict[str, int]] = {uuid: {} for uuid in uuids}
    for (first, second), score in pairs.items():
        if first in uuids and second in uuids and score > 0:
            links[first][second] = score
            links[second][first] = score
    devices = []
    for position, card in enumerate(cards):
        for key, text in (("id", card.uuid), ("type", card.type), ("mode", card.mode)):
            _storable(name, f"{REGISTER}[{position}].{key}", text)
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
        if card.mig_profiles and NVIDIA.partition(card) is not None:
            for k, profile in enumerate(card.mig_profiles):
                _storable(name, f"{REGISTER}[{position}].migProfiles[{k}].name", profile.name)
            device["migProfiles"] = [profile.as_wire() for profile in card.mig_profiles]
        devices.append(device)
    devices += _ascend_devices(name, annotations, len(devices))
    return _with_fields(node, name, raw_name, annotations, devices)


def _checked_name(name: str, raw_name) -> str:
    """`metadata.name`, as a row can hold it; raises InventoryInvalid naming it."""
    if not isinstance(raw_name, str) or not raw_name.strip():
        raise InventoryInvalid(name, NAME, "required: a non-empty string")
    if len(raw_name) > 253:
        raise InventoryInvalid(name, NAME, "at most 253 characters")
    _storable(name, NAME, raw_name)
    return raw_name


def _with_fields(node: dict, name: str, raw_name: str, annotations: dict, devices: list) -> NodeInventory:
    """The inventory of `devices` with the node's labels, kept annotations and rule fields."""
    labels = _strings(name, "metadata.labels", metadata_of(node).get("labels"))
    kept = {
        k: _storable(name, k, annotations[k]) for k in KEPT_ANNOTATIONS if isinstance(annotations.get(k), str)
    }
    return NodeInventory(name=raw_name, labels=labels, annotations=kept, devices=devices, **rule_fields(node))


def plain_inventory(node: dict) -> NodeInventory:
    """A node without HAMi's register annotation as an inventory without cards (its labels,
    kept annotations and rule fields): what its DRA devices are reported with
    (`kube.drastate`). Raises InventoryInvalid naming the field."""
    metadata = metadata_of(node)
    raw_name = metadata.get("name")
    name = printable(raw_name or "")
    raw_name = _checked_name(name, raw_name)
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise InventoryInvalid(name, "metadata.annotations", "must be an object of strings")
    return _with_fields(node, name, raw_name, annotations, [])
