"""ResourceSlices as cards: each device of a configured driver, in a complete pool, on one node.

The rules (docs/kubernetes.md, "Dynamic Resource Allocation", has the table):

- A pool (`spec.driver`, `spec.pool.name`) is used only when complete: every one of the
  `spec.pool.resourceSliceCount` slices of its highest `spec.pool.generation` is there.
  Slices of older generations are stale and ignored; an incomplete pool gives no cards and
  is named in `Inventory.incomplete` (kube-scheduler waits for such a pool the same way).
- The node is `spec.nodeName`, or with `spec.perDeviceNodeSelection` the device's
  `nodeName`. Devices reachable from several nodes (`nodeSelector`, `allNodes`) are not
  cards of any one node and are left out, with the reason in `Inventory.skipped`.
- uuid from the `uuid` attribute (HAMi's and NVIDIA's drivers publish it), else
  `driver/pool/device`; type from `productName`, else `type`, else the driver.
- NUMA from the `numaNode` attribute (`resource.kubernetes.io/numaNode` or unqualified),
  else the rank of `resource.kubernetes.io/pcieRoot` among the node's roots, else 0.
- MiB from `capacity.memory` (bytes), core percent from `capacity.cores` (100 when absent).
- Slots: DRA has no per-card slot count. A device with `allowMultipleAllocations` takes
  `capacity.shares` when the driver publishes it, else `UNLIMITED_SLOTS` (memory and cores
  are what bound it, as in HAMi's DRA driver); a device without it takes one allocation.
- Cordoned when a taint with effect `NoSchedule` or `NoExecute` is on the device or comes
  from a DeviceTaintRule whose `deviceSelector` (driver, pool, device; each optional) names it.
- Partitions (KEP-4815): a pool's `spec.sharedCounters` (in a slice of their own since
  1.34, or beside the devices as 1.32-1.33 published them) are its counter sets, e.g. one per
  physical GPU; a device's `consumesCounters` is what it draws from them while in use. Each
  such device (a MIG partition, and the whole GPU that draws every counter) is a card of its
  own; `CounterLedger` keeps the devices in use within every counter, and within their
  `compatibilityGroups`. A device naming a counter set or counter its pool does not publish,
  or an amount that is not a quantity, is skipped naming the field.
- A `uuid` attribute that several devices publish (NVIDIA's vGPU partitions carry their
  GPU's, VFIO devices the GPU's own) names no card: each of them takes `driver/pool/device`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from ..model import Card, Node
from ..quantity import parse

#: HAMi's DRA driver and NVIDIA's (`HAMI_DRA_DRIVERS` overrides).
DEFAULT_DRIVERS = ("hami-core-gpu.project-hami.io", "gpu.nvidia.com")
#: The slot count of a shareable device that publishes no `shares` capacity: in effect no bound.
UNLIMITED_SLOTS = 1024
STANDARD_DOMAIN = "resource.kubernetes.io"
CORDONING_EFFECTS = ("NoSchedule", "NoExecute")
MIB = 2**20


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def qualify(name: str, driver: str) -> tuple[str, str]:
    """An attribute or capacity name as (domain, id): unqualified names are the driver's."""
    if "/" in name:
        domain, _, ident = name.partition("/")
        return domain, ident
    return driver, name


def attribute_value(attribute: dict):
    """A DeviceAttribute's one value: `int`, `bool`, `string` or `version` (kept as a
    `Version`); the list forms as lists."""
    for kind in ("int", "bool", "string"):
        if kind in attribute:
            return attribute[kind]
    if "version" in attribute:
        return Version(str(attribute["version"]))
    for kind in ("ints", "bools", "strings"):
        if kind in attribute:
            return list(attribute[kind])
    if "versions" in attribute:
        return [Version(str(v)) for v in attribute["versions"]]
    return None


@dataclass(frozen=True, slots=True)
class Version:
    """A `version` attribute: semver, compared by CEL's `semver` functions."""

    text: str


@dataclass(frozen=True, slots=True)
class Consumption:
    """What a device draws, while in use, from one counter set of its pool (one
    `consumesCounters[]` entry): counter name -> exact amount, and its compatibility groups."""

    counter_set: str
    counters: dict[str, Decimal]
    groups: frozenset[str] = frozenset()


@dataclass(slots=True)
class DraDevice:
    """One device of a ResourceSlice, as the card it becomes and what the selectors read."""

    driver: str
    pool: str
    name: str
    node: str
    uuid: str
    type: str
    numa: int
    memory: int  # MiB
    cores: int  # percent
    slots: int
    shareable: bool
    cordoned: bool = False
    taints: tuple[dict, ...] = ()
    #: (domain, id) -> value (`attribute_value`); capacity (domain, id) -> exact amount
    attributes: dict[tuple[str, str], object] = field(default_factory=dict)
    capacity: dict[tuple[str, str], Decimal] = field(default_factory=dict)
    #: capacity id -> its `requestPolicy` as published (the default a request that names none takes)
    policies: dict[str, dict] = field(default_factory=dict)
    index: int = 0
    #: `consumesCounters`: what it draws from its pool's counter sets; () for a device of its own
    consumes: tuple[Consumption, ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return self.driver, self.pool, self.name

    @property
    def partition(self) -> bool:
        """Whether it draws on shared counters (a partition, or a whole device that has them)."""
        return bool(self.consumes)

    def attribute(self, name: str):
        """The value of `name` (qualified, or unqualified: the driver's), or None."""
        return self.attributes.get(qualify(name, self.driver))

    def card(self) -> Card:
        """The engine's card. Never cordoned there: a request may tolerate the taint, so the
        asks leave tainted devices out of their candidates instead (`claims`)."""
        return Card(
            uuid=self.uuid,
            index=self.index,
            memory=self.memory,
            type=self.type,
            slots=self.slots,
            cores=self.cores,
            numa=self.numa,
            mode="dra",
        )


@dataclass
class Inventory:
    devices: list[DraDevice] = field(default_factory=list)
    #: "driver/pool" -> why it gave no cards (incomplete, several generations)
    incomplete: dict[str, str] = field(default_factory=dict)
    #: "driver/pool/device" -> why it is not a card
    skipped: dict[str, str] = field(default_factory=dict)
    #: (driver, pool, counter set) -> counter name -> what the set holds (`spec.sharedCounters`)
    counters: dict[tuple[str, str, str], dict[str, Decimal]] = field(default_factory=dict)

    def by_key(self) -> dict[tuple[str, str, str], DraDevice]:
        return {device.key: device for device in self.devices}

    def by_uuid(self) -> dict[str, DraDevice]:
        return {device.uuid: device for device in self.devices}

    def nodes(self) -> list[Node]:
        """Engine nodes, one per node name, carrying their DRA cards (no usage yet)."""
        cards: dict[str, list[Card]] = {}
        for device in self.devices:
            cards.setdefault(device.node, []).append(device.card())
        return [
            Node(name=name, cards=found, labels={"kubernetes.io/hostname": name})
            for name, found in sorted(cards.items())
        ]


def _amount(value: Decimal) -> str:
    return str(value.normalize()) if value != value.to_integral_value() else str(int(value))


class CounterLedger:
    """What the devices in use draw from their pools' counter sets, and whether one more fits.

    The rule (KEP-4815, as kube-scheduler allocates): the amounts that the devices in use
    draw from a counter set, summed per counter, never exceed what the set holds. A device
    is counted once however many claims share it. With compatibility groups, the devices on
    one counter set must all declare none, or share at least one group. So a GPU's whole
    device, which draws every counter, and its MIG partitions exclude each other.
    """

    def __init__(self, inventory: Inventory, in_use: Iterable[DraDevice] = ()):
        self.inventory = inventory
        self.keys: set[tuple[str, str, str]] = set()
        self.used: dict[tuple[str, str, str], dict[str, Decimal]] = {}
        self.groups: dict[tuple[str, str, str], list[frozenset[str]]] = {}
        for device in in_use:
            self.add(device)

    def refuses(self, device: DraDevice) -> str:
        """Why `device` cannot be put in use as well (the counter set, counter and amounts, or
        the groups), "" when it can. A device in use already draws nothing more."""
        if device.key in self.keys:
            return ""
        for consumption in device.consumes:
            key = (device.driver, device.pool, consumption.counter_set)
            held = self.inventory.counters.get(key, {})
            used = self.used.get(key, {})
            for name, amount in sorted(consumption.counters.items()):
                total = held.get(name, Decimal(0))
                if used.get(name, Decimal(0)) + amount > total:
                    return (
                        f"{device.name} draws {name} {_amount(amount)} from counter set "
                        f"{consumption.counter_set}, {_amount(total - used.get(name, Decimal(0)))} "
                        f"of {_amount(total)} left"
                    )
            others = self.groups.get(key, [])
            if others and not _compatible([*others, consumption.groups]):
                return (
                    f"{device.name}: compatibility groups {sorted(consumption.groups) or 'none'} "
                    f"do not meet those in use on counter set {consumption.counter_set}"
                )
        return ""

    def add(self, device: DraDevice) -> None:
        if device.key in self.keys or not device.consumes:
            return
        self.keys.add(device.key)
        for consumption in device.consumes:
            key = (device.driver, device.pool, consumption.counter_set)
            used = self.used.setdefault(key, {})
            for name, amount in consumption.counters.items():
                used[name] = used.get(name, Decimal(0)) + amount
            self.groups.setdefault(key, []).append(consumption.groups)


def _compatible(groups: list[frozenset[str]]) -> bool:
    """Devices on one counter set: all without groups, or all with a group in common."""
    if not any(groups):
        return True
    return all(groups) and bool(frozenset.intersection(*groups))


def complete_slices(slices: list[dict], drivers) -> tuple[list[dict], dict[str, str]]:
    """The slices of complete pools of `drivers`, and the incomplete pools with their reason."""
    pools: dict[tuple[str, str], list[dict]] = {}
    for obj in slices:
        spec = _dict(_dict(obj).get("spec"))
        driver = str(spec.get("driver") or "")
        if driver not in drivers:
            continue
        pool = _dict(spec.get("pool"))
        pools.setdefault((driver, str(pool.get("name") or "")), []).append(obj)
    kept: list[dict] = []
    incomplete: dict[str, str] = {}
    for (driver, name), members in sorted(pools.items()):
        generations = [int(_dict(_dict(m["spec"]).get("pool")).get("generation") or 0) for m in members]
        newest = max(generations)
        current = [m for m, g in zip(members, generations, strict=True) if g == newest]
        wanted = int(_dict(current[0]["spec"].get("pool")).get("resourceSliceCount") or 1)
        if len(current) < wanted:
            incomplete[f"{driver}/{name}"] = (
                f"pool incomplete: {len(current)} of {wanted} ResourceSlices of generation {newest}"
            )
            continue
        kept += current
    return kept, incomplete


def rule_taints(rules: list[dict]) -> list[tuple[dict, dict]]:
    """DeviceTaintRules as (deviceSelector, taint)."""
    found = []
    for rule in rules:
        spec = _dict(_dict(rule).get("spec"))
        taint = _dict(spec.get("taint"))
        if taint.get("key"):
            found.append((_dict(spec.get("deviceSelector")), taint))
    return found


def _selects(selector: dict, driver: str, pool: str, device: str) -> bool:
    return all(
        not selector.get(key) or selector[key] == value
        for key, value in (("driver", driver), ("pool", pool), ("device", device))
    )


def read_inventory(
    slices: list[dict], drivers=DEFAULT_DRIVERS, taint_rules: list[dict] | None = None
) -> Inventory:
    """The cards of `slices` (ResourceSlice objects) for `drivers`, cordoned by `taint_rules`
    (DeviceTaintRule objects) as well as by the devices' own taints."""
    kept, incomplete = complete_slices(slices, tuple(drivers))
    inventory = Inventory(incomplete=incomplete)
    rules = rule_taints(taint_rules or [])
    broken = _counter_sets(kept, inventory)
    for obj in kept:
        spec = obj["spec"]
        driver, pool = spec["driver"], str(_dict(spec.get("pool")).get("name") or "")
        for raw in spec.get("devices") or []:
            raw = _dict(raw)
            name = str(raw.get("name") or "")
            where = f"{driver}/{pool}/{name}"
            node = spec.get("nodeName") or (raw.get("nodeName") if spec.get("perDeviceNodeSelection") else "")
            if not node:
                inventory.skipped[where] = "not on one node (nodeSelector or allNodes): not supported yet"
                continue
            bad = [
                key
                for key, value in _dict(raw.get("capacity")).items()
                if parse(_dict(value).get("value")) is None
            ]
            if bad:
                inventory.skipped[where] = f"capacity.{bad[0]}.value: not a quantity"
                continue
            consumes = _consumes(raw, driver, pool, inventory, broken)
            if isinstance(consumes, str):
                inventory.skipped[where] = consumes
                continue
            device = _device(driver, pool, name, str(node), raw, rules)
            device.consumes = consumes
            inventory.devices.append(device)
    published = Counter(device.uuid for device in inventory.devices)
    for device in inventory.devices:
        if published[device.uuid] > 1:
            device.uuid = f"{device.driver}/{device.pool}/{device.name}"
    _number(inventory.devices)
    return inventory


def _counter_sets(kept: list[dict], inventory: Inventory) -> dict[tuple[str, str, str], str]:
    """Every `spec.sharedCounters[]` of the kept slices into `inventory.counters`, by pool;
    the sets that cannot be read (an amount not a quantity, a name given twice in a pool), with
    why, are returned instead."""
    broken: dict[tuple[str, str, str], str] = {}
    for obj in kept:
        spec = obj["spec"]
        driver, pool = spec["driver"], str(_dict(spec.get("pool")).get("name") or "")
        for i, raw in enumerate(spec.get("sharedCounters") or []):
            raw = _dict(raw)
            key = (driver, pool, str(raw.get("name") or ""))
            where = f"ResourceSlice {_dict(obj.get('metadata')).get('name')}: spec.sharedCounters[{i}]"
            if key in inventory.counters or key in broken:
                inventory.counters.pop(key, None)
                broken[key] = f"{where}.name: counter set {key[2]!r} is published twice in pool {pool}"
                continue
            counters = {}
            for name, value in _dict(raw.get("counters")).items():
                amount = parse(_dict(value).get("value"))
                if amount is None or amount < 0:
                    broken[key] = f"{where}.counters.{name}.value: not a quantity"
                    break
                counters[str(name)] = amount
            else:
                inventory.counters[key] = counters
    return broken


def _consumes(
    raw: dict, driver: str, pool: str, inventory: Inventory, broken: dict[tuple[str, str, str], str]
) -> tuple[Consumption, ...] | str:
    """The device's `consumesCounters`, or why it cannot be read (naming the field)."""
    found = []
    for i, entry in enumerate(raw.get("consumesCounters") or []):
        entry = _dict(entry)
        where = f"consumesCounters[{i}]"
        key = (driver, pool, str(entry.get("counterSet") or ""))
        if key in broken:
            return broken[key]
        held = inventory.counters.get(key)
        if held is None:
            return f"{where}.counterSet: no counter set {key[2]!r} in pool {pool}"
        counters = {}
        for name, value in _dict(entry.get("counters")).items():
            amount = parse(_dict(value).get("value"))
            if amount is None or amount < 0:
                return f"{where}.counters.{name}.value: not a quantity"
            if name not in held:
                return f"{where}.counters.{name}: not a counter of counter set {key[2]!r}"
            counters[str(name)] = amount
        groups = frozenset(str(g) for g in entry.get("compatibilityGroups") or [])
        found.append(Consumption(key[2], counters, groups))
    return tuple(found)


def _device(driver: str, pool: str, name: str, node: str, raw: dict, rules) -> DraDevice:
    attributes = {
        qualify(key, driver): attribute_value(_dict(value))
        for key, value in _dict(raw.get("attributes")).items()
    }
    capacity, policies = {}, {}
    for key, value in _dict(raw.get("capacity")).items():
        amount = parse(_dict(value).get("value"))
        if amount is not None:
            capacity[qualify(key, driver)] = amount
        if _dict(value).get("requestPolicy"):
            policies[key] = value["requestPolicy"]
    shareable = raw.get("allowMultipleAllocations") is True
    taints = tuple(_dict(t) for t in raw.get("taints") or [])
    taints += tuple(taint for selector, taint in rules if _selects(selector, driver, pool, name))
    memory = capacity.get((driver, "memory"), Decimal(0))
    cores = capacity.get((driver, "cores"))
    shares = capacity.get((driver, "shares"))

    def text(key: str) -> str:
        value = attributes.get((driver, key))
        return value if isinstance(value, str) and value else ""

    return DraDevice(
        driver=driver,
        pool=pool,
        name=name,
        node=node,
        uuid=text("uuid") or f"{driver}/{pool}/{name}",
        type=text("productName") or text("type") or driver,
        numa=-1,  # numbered per node below
        memory=int(memory // MIB),
        cores=int(cores) if cores is not None else 100,
        slots=(int(shares) if shares is not None else UNLIMITED_SLOTS) if shareable else 1,
        shareable=shareable,
        cordoned=any(t.get("effect") in CORDONING_EFFECTS for t in taints),
        taints=taints,
        attributes=attributes,
        capacity=capacity,
        policies=policies,
    )


def _number(devices: list[DraDevice]) -> None:
    """NUMA per `numaNode`, else the rank of the pcieRoot on its node; index per node in
    slice order (a `minor` attribute wins)."""
    by_node: dict[str, list[DraDevice]] = {}
    for device in devices:
        by_node.setdefault(device.node, []).append(device)
    for members in by_node.values():
        roots = sorted(
            {str(r) for d in members if (r := d.attributes.get((STANDARD_DOMAIN, "pcieRoot"))) is not None}
        )
        for position, device in enumerate(members):
            numa = device.attributes.get((STANDARD_DOMAIN, "numaNode"))
            if numa is None:
                numa = device.attributes.get((device.driver, "numaNode"))
            root = device.attributes.get((STANDARD_DOMAIN, "pcieRoot"))
            if isinstance(numa, int) and not isinstance(numa, bool):
                device.numa = numa
            elif root is not None:
                device.numa = roots.index(str(root))
            else:
                device.numa = 0
            minor = device.attributes.get((device.driver, "minor"))
            device.index = minor if isinstance(minor, int) and not isinstance(minor, bool) else position
