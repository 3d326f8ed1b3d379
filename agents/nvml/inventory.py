"""What NVML says about this node's cards: identity, memory, NUMA, health, topology.

NVML is reached only through ``library``, an object with the ``pynvml`` module's
functions, constants and ``NVMLError`` classes (by default the module itself),
so tests can describe whole machines with a stand-in. This module records facts
as NVML gives them; turning them into slots, scores and the report body is the
job of ``agents.nvml.report``.

A card whose queries fail is still reported, marked unhealthy, so the scheduler
stops placing work on it instead of silently losing sight of it; the other
cards are unaffected.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

log = logging.getLogger("hamiadmin.agent.nvml")

MIB = 1024 * 1024

# XIDs that a faulty application causes, not a faulty card; the same ones the
# NVIDIA device plugin skips by default. Every other critical XID marks the card.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

# The most critical events drained per read, so a storm cannot stall a report.
MAX_EVENTS_PER_READ = 1000


class NvmlUnavailable(RuntimeError):
    """NVML could not start: no library, no driver, or a driver/library mismatch."""


class InventoryError(RuntimeError):
    """NVML started but cannot list the cards at all; nothing sensible can be reported."""


@dataclass(frozen=True)
class CardReading:
    """One card as NVML describes it; ``problems`` says why it is unhealthy (empty: healthy)."""

    index: int
    uuid: str
    model: str
    memory_mib: int
    numa: int
    problems: tuple[str, ...] = ()
    usage: CardMeasurements | None = None

    @property
    def healthy(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class CardMeasurements:
    """What the card is really doing, beside what the scheduler granted; None: not offered."""

    memory_used_mib: int | None = None
    utilization: int | None = None
    temperature: int | None = None
    power_watts: float | None = None
    ecc_errors: int | None = None
    last_xid: int | None = None


@dataclass(frozen=True)
class PairReading:
    """How two cards are connected.

    ``nvlinks`` counts active NVLink links between them (see ``count_nvlinks``);
    ``pcie_path`` names the PCIe common ancestor when there is no NVLink
    (``same-board``, ``single-switch``, ``multiple-switches``, ``host-bridge``,
    ``same-cpu``, ``across-cpus``), or is None when NVML could not say.
    """

    first: str
    second: str
    nvlinks: int
    pcie_path: str | None = None


@dataclass(frozen=True)
class NodeReading:
    cards: tuple[CardReading, ...]
    pairs: tuple[PairReading, ...] = ()


@dataclass(frozen=True)
class NvLinkEnd:
    """The far end of one active NVLink link: a PCI address and whether it is an NVSwitch."""

    address: str
    switch: bool


@dataclass
class _CardState:
    """A card's reading plus what pair scoring needs; internal to one read."""

    reading: CardReading
    handle: object | None = None
    address: str | None = None
    links: list[NvLinkEnd] = field(default_factory=list)


def pci_address(bus_id: str | bytes) -> str:
    """NVML's ``00000000:3B:00.0`` as Linux sysfs writes it: ``0000:3b:00.0``.

    Both ends of an NVLink and the sysfs path are compared in this one form.
    """
    text = as_text(bus_id).strip().lower()
    try:
        domain, bus, rest = text.split(":")
        device, function = rest.split(".")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}"
    except ValueError:
        raise ValueError(f"unreadable PCI bus id {text!r}") from None


def as_text(value: str | bytes) -> str:
    """pynvml returns ``str`` from most calls but ``bytes`` from structure fields."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def count_nvlinks(first: _CardState, second: _CardState) -> int:
    """NVLink links between two cards.

    Direct links: active links whose remote PCI address is the other card (the
    larger of the two cards' counts, so one card failing to answer does not
    hide the link). Links through NVSwitch (HGX/DGX boards): each switch lets
    the two cards talk over as many links as the lesser of their links to that
    switch, summed over shared switches; on an HGX H100 board with 18 links per
    GPU this gives 18 for every pair, the ``NV18`` that ``nvidia-smi topo -m``
    shows.
    """
    direct = max(
        sum(1 for end in first.links if not end.switch and end.address == second.address),
        sum(1 for end in second.links if not end.switch and end.address == first.address),
    )
    first_switches = Counter(end.address for end in first.links if end.switch)
    second_switches = Counter(end.address for end in second.links if end.switch)
    switched = sum(min(count, second_switches[address]) for address, count in first_switches.items())
    return direct + switched


class XidWatch:
    """Remembers cards that raised a critical XID since the agent started.

    NVML delivers XIDs as events, not as state, so they are drained on every
    read and kept: a card that fell off the bus or hit a double-bit error stays
    unhealthy until the agent restarts (after the card was reset or replaced).
    """

    def __init__(self, library):
        self.library = library
        self.events = None
        self.flagged: dict[str, str] = {}
        self.last: dict[str, int] = {}

    def start(self, handles: list) -> None:
        nvml = self.library
        try:
            self.events = nvml.nvmlEventSetCreate()
        except (nvml.NVMLError, AttributeError) as error:
            log.warning("critical XID events are not watched: %s", error)
            return
        for handle in handles:
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self.events)
            except nvml.NVMLError as error:
                log.info("a card does not offer XID events (%s); its health relies on polling", error)

    def drain(self) -> None:
        nvml = self.library
        if self.events is None:
            return
        for _ in range(MAX_EVENTS_PER_READ):
            try:
                event = nvml.nvmlEventSetWait(self.events, 0)
            except nvml.NVMLError_Timeout:
                return
            except nvml.NVMLError as error:
                log.warning("reading XID events failed: %s", error)
                return
            if not event.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            xid = int(event.eventData)
            try:
                uuid = as_text(nvml.nvmlDeviceGetUUID(event.device))
            except nvml.NVMLError as error:
                log.warning("critical XID %d on a card NVML cannot name (%s)", xid, error)
                continue
            self.last[uuid] = xid
            if xid in APPLICATION_XIDS:
                log.info("XID %d on %s is caused by an application; card stays healthy", xid, uuid)
                continue
            log.warning("critical XID %d on %s: card is unhealthy until the agent restarts", xid, uuid)
            self.flagged[uuid] = f"critical XID {xid}"

    def stop(self) -> None:
        if self.events is not None:
            try:
                self.library.nvmlEventSetFree(self.events)
            except self.library.NVMLError:
                pass
            self.events = None


class NvmlInventory:
    """Reads the node's cards from NVML; ``open`` once, ``read`` every report, ``close`` at exit.

    Keeps the last good reading of each card index, so a card that stops
    answering is still reported (unhealthy) under the UUID it had.
    """

    def __init__(self, library, sysfs_root: str | Path = "/sys"):
        self.library = library
        self.sysfs_root = Path(sysfs_root)
        self.xids = XidWatch(library)
        self._last: dict[int, CardReading] = {}
        self._told: dict[str, tuple[str, ...]] = {}
        nvml = library
        self._pcie_paths = {
            nvml.NVML_TOPOLOGY_INTERNAL: "same-board",
            nvml.NVML_TOPOLOGY_SINGLE: "single-switch",
            nvml.NVML_TOPOLOGY_MULTIPLE: "multiple-switches",
            nvml.NVML_TOPOLOGY_HOSTBRIDGE: "host-bridge",
            nvml.NVML_TOPOLOGY_NODE: "same-cpu",
            nvml.NVML_TOPOLOGY_SYSTEM: "across-cpus",
        }
        self._not_offered = tuple(
            getattr(nvml, name)
            for name in ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NoPermission")
        )

    def open(self) -> None:
        nvml = self.library
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            raise NvmlUnavailable(str(error)) from error
        handles = []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                try:
                    handles.append(nvml.nvmlDeviceGetHandleByIndex(index))
                except nvml.NVMLError:
                    continue
        except nvml.NVMLError:
            pass
        self.xids.start(handles)

    def close(self) -> None:
        self.xids.stop()
        try:
            self.library.nvmlShutdown()
        except self.library.NVMLError:
            pass

    def read(self) -> NodeReading:
        nvml = self.library
        self.xids.drain()
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as error:
            raise InventoryError(f"NVML cannot count the cards: {error}") from error
        states = [state for index in range(count) if (state := self._read_card(index)) is not None]
        for state in states:
            self._last[state.reading.index] = state.reading
            self._tell(state.reading)
        pairs = tuple(
            self._read_pair(first, second)
            for first, second in combinations(states, 2)
            if first.handle is not None and second.handle is not None
        )
        return NodeReading(cards=tuple(state.reading for state in states), pairs=pairs)

    def _read_card(self, index: int) -> _CardState | None:
        nvml = self.library
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = as_text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError as error:
            return self._lost(index, error)
        last = self._last.get(index)
        if last is not None and last.uuid != uuid:
            last = None
        problems: list[str] = []

        def ask(what, query, fallback):
            try:
                return query()
            except (nvml.NVMLError, ValueError) as error:
                problems.append(f"{what} query failed: {error}")
                return fallback

        model = ask("name", lambda: as_text(nvml.nvmlDeviceGetName(handle)), last.model if last else "")
        memory = ask(
            "memory",
            lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total // MIB,
            last.memory_mib if last else 0,
        )
        address = ask("PCI", lambda: pci_address(nvml.nvmlDeviceGetPciInfo(handle).busId), None)
        numa = self._numa(handle, address, fallback=last.numa if last else 0)
        problems.extend(self._health_problems(handle))
        if uuid in self.xids.flagged:
            problems.append(self.xids.flagged[uuid])
        reading = CardReading(
            index, uuid, model, int(memory), numa, tuple(problems), self._measure(handle, uuid)
        )
        return _CardState(reading, handle, address, self._nvlink_ends(handle))

    def _lost(self, index: int, error: Exception) -> _CardState | None:
        last = self._last.get(index)
        if last is None:
            log.error(
                "card %d cannot be read and was never seen before, so it is not reported: %s", index, error
            )
            return None
        problem = f"card query failed: {error}"
        return _CardState(
            CardReading(last.index, last.uuid, last.model, last.memory_mib, last.numa, (problem,))
        )

    def _numa(self, handle, address: str | None, fallback: int) -> int:
        """NUMA node from NVML where the driver offers it, else from sysfs; -1 (no affinity) is 0."""
        nvml = self.library
        try:
            return max(int(nvml.nvmlDeviceGetNumaNodeId(handle)), 0)
        except (nvml.NVMLError, AttributeError):
            pass
        if address is None:
            return fallback
        path = self.sysfs_root / "bus" / "pci" / "devices" / address / "numa_node"
        try:
            return max(int(path.read_text().strip()), 0)
        except (OSError, ValueError) as error:
            log.debug("no NUMA node for %s (%s); using 0", address, error)
            return 0

    def _measure(self, handle, uuid: str) -> CardMeasurements:
        """Memory in use, utilization, temperature, power and ECC errors; a query the card
        does not answer leaves its value None and never marks the card unhealthy."""
        nvml = self.library

        def ask(query):
            try:
                return query()
            except (nvml.NVMLError, AttributeError, TypeError, ValueError):
                return None

        memory = ask(lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).used) // MIB)
        utilization = ask(lambda: int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
        temperature = ask(lambda: int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)))
        power = ask(lambda: round(nvml.nvmlDeviceGetPowerUsage(handle) / 1000, 1))  # milliwatts
        ecc = ask(
            lambda: int(
                nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            )
        )
        return CardMeasurements(memory, utilization, temperature, power, ecc, self.xids.last.get(uuid))

    def _health_problems(self, handle) -> list[str]:
        """Conditions after which a card must not take new work; unsupported checks are skipped."""
        nvml = self.library
        problems: list[str] = []
        checks = (
            (
                "retired pages",
                lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle),
                self._retired_pages,
            ),
            (
                "ECC",
                lambda: nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                ),
                self._ecc,
            ),
            ("row remapping", lambda: nvml.nvmlDeviceGetRemappedRows(handle), self._remapped_rows),
        )
        for what, query, judge in checks:
            try:
                answer = query()
            except self._not_offered:
                continue
            except nvml.NVMLError as error:
                problems.append(f"{what} query failed: {error}")
                continue
            problems.extend(judge(answer))
        return problems

    def _retired_pages(self, pending) -> list[str]:
        return (
            ["retired memory pages pending (card needs a reset)"]
            if pending == self.library.NVML_FEATURE_ENABLED
            else []
        )

    @staticmethod
    def _ecc(count) -> list[str]:
        return [f"{count} uncorrectable ECC errors since the driver loaded"] if count > 0 else []

    @staticmethod
    def _remapped_rows(answer) -> list[str]:
        _corrected, _uncorrected, pending, failure = answer
        problems = []
        if failure:
            problems.append("memory row remapping failed")
        if pending:
            problems.append("memory row remapping pending (card needs a reset)")
        return problems

    def _nvlink_ends(self, handle) -> list[NvLinkEnd]:
        """Far ends of the card's active NVLink links; none on cards without NVLink."""
        nvml = self.library
        ends: list[NvLinkEnd] = []
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                    continue
                address = pci_address(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            except nvml.NVMLError_NotSupported:
                break
            except (nvml.NVMLError, ValueError):
                continue
            try:
                switch = (
                    nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
                    == nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
                )
            except (nvml.NVMLError, AttributeError):
                switch = False
            ends.append(NvLinkEnd(address, switch))
        return ends

    def _read_pair(self, first: _CardState, second: _CardState) -> PairReading:
        nvml = self.library
        nvlinks = count_nvlinks(first, second)
        pcie_path = None
        if nvlinks == 0:
            try:
                level = nvml.nvmlDeviceGetTopologyCommonAncestor(first.handle, second.handle)
                pcie_path = self._pcie_paths.get(level)
            except nvml.NVMLError as error:
                log.debug(
                    "no PCIe path between %s and %s: %s", first.reading.uuid, second.reading.uuid, error
                )
        return PairReading(first.reading.uuid, second.reading.uuid, nvlinks, pcie_path)

    def _tell(self, card: CardReading) -> None:
        """Log a card's health when it changes, not on every report."""
        before = self._told.get(card.uuid, ())
        if card.problems != before:
            if card.problems:
                log.warning("card %d (%s) is unhealthy: %s", card.index, card.uuid, "; ".join(card.problems))
            else:
                log.info("card %d (%s) is healthy again", card.index, card.uuid)
            self._told[card.uuid] = card.problems
