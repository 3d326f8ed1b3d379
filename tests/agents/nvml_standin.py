"""A stand-in for the ``pynvml`` module that describes whole machines, for tests without a GPU.

No NVIDIA GPU or driver is available where these tests run, so the agent is
tested at its narrowest boundary: the library object it calls. The stand-in
implements only the pynvml functions the agent uses, with pynvml's signatures,
returns pynvml's own ctypes structures where pynvml does (so ``busId`` is
``bytes`` as it really is), takes constants and error classes from pynvml, and
raises the ``NVMLError`` subclasses the real library raises (``NotSupported``
for features a card lacks, ``InvalidArgument`` past a card's last NVLink link,
``Timeout`` from an empty event set). Event data is a plain object rather than
``c_nvmlEventData_t`` because a ctypes device pointer cannot hold a stand-in
handle; the agent only reads its ``device``, ``eventType`` and ``eventData``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml

MIB = 1024 * 1024
GPU = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
SWITCH = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH

CARD_QUERIES = (
    "nvmlDeviceGetName",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
)


@dataclass
class Link:
    """One NVLink link of a card: where it goes and whether it is up."""

    remote_bus_id: str
    remote_type: int = GPU
    active: bool = True


@dataclass
class Card:
    """One GPU as the driver would describe it. ``None`` means the driver does not offer that query."""

    uuid: str
    name: str
    memory_mib: int
    bus_id: str
    numa: int | None = None
    nvlinks: list[Link] | None = None
    retired_pages_pending: bool | None = False
    ecc_uncorrected_volatile: int | None = 0
    ecc_uncorrected_aggregate: int | None = 0
    remapped_rows: tuple[int, int, int, int] | None = None
    memory_used_mib: int = 0
    utilization: int | None = None
    temperature: int | None = None
    power_mw: int | None = None
    failing: dict[str, type[pynvml.NVMLError]] = field(default_factory=dict)

    def fail(self, error: type[pynvml.NVMLError], queries=CARD_QUERIES) -> None:
        for query in queries:
            self.failing[query] = error


@dataclass(frozen=True)
class Handle:
    index: int


class StandinNvml:
    """A machine behind the pynvml API. ``ancestors`` maps ``frozenset({i, j})`` to an NVML_TOPOLOGY_* level."""

    def __init__(self, cards: list[Card], ancestors: dict[frozenset, int] | None = None, init_error=None):
        self.cards = cards
        self.ancestors = ancestors or {}
        self.init_error = init_error
        self.initialised = False
        self.handle_errors: dict[int, type[pynvml.NVMLError]] = {}
        self.event_sets: list[SimpleNamespace] = []

    def __getattr__(self, name: str):
        if name.startswith(("NVML_", "NVMLError", "nvmlEventType")):
            return getattr(pynvml, name)
        raise AttributeError(f"the NVML stand-in does not implement {name}")

    # -- library life ---------------------------------------------------
    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error()
        self.initialised = True

    def nvmlShutdown(self):
        self._require_init()
        self.initialised = False

    def _require_init(self):
        if not self.initialised:
            raise pynvml.NVMLError_Uninitialized()

    def _card(self, handle: Handle, query: str) -> Card:
        self._require_init()
        if not isinstance(handle, Handle) or not 0 <= handle.index < len(self.cards):
            raise pynvml.NVMLError_InvalidArgument()
        card = self.cards[handle.index]
        if query in card.failing:
            raise card.failing[query]()
        return card

    # -- enumeration and identity -----------------------------------------
    def nvmlDeviceGetCount(self):
        self._require_init()
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._require_init()
        if not 0 <= index < len(self.cards):
            raise pynvml.NVMLError_InvalidArgument()
        if index in self.handle_errors:
            raise self.handle_errors[index]()
        return Handle(index)

    def nvmlDeviceGetUUID(self, handle):
        return self._card(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle):
        return self._card(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        card = self._card(handle, "nvmlDeviceGetMemoryInfo")
        total, used = card.memory_mib * MIB, card.memory_used_mib * MIB
        return pynvml.c_nvmlMemory_t(total=total, free=total - used, used=used)

    # -- what the card is doing ------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle):
        card = self._card(handle, "nvmlDeviceGetUtilizationRates")
        if card.utilization is None:
            raise pynvml.NVMLError_NotSupported()
        return pynvml.c_nvmlUtilization_t(gpu=card.utilization, memory=0)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        card = self._card(handle, "nvmlDeviceGetTemperature")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError_InvalidArgument()
        if card.temperature is None:
            raise pynvml.NVMLError_NotSupported()
        return card.temperature

    def nvmlDeviceGetPowerUsage(self, handle):
        card = self._card(handle, "nvmlDeviceGetPowerUsage")
        if card.power_mw is None:
            raise pynvml.NVMLError_NotSupported()
        return card.power_mw

    def nvmlDeviceGetPciInfo(self, handle):
        return pci_info(self._card(handle, "nvmlDeviceGetPciInfo").bus_id)

    def nvmlDeviceGetNumaNodeId(self, handle):
        card = self._card(handle, "nvmlDeviceGetNumaNodeId")
        if card.numa is None:
            raise pynvml.NVMLError_NotSupported()
        return card.numa

    # -- health -------------------------------------------------------------
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        card = self._card(handle, "nvmlDeviceGetRetiredPagesPendingStatus")
        if card.retired_pages_pending is None:
            raise pynvml.NVMLError_NotSupported()
        return pynvml.NVML_FEATURE_ENABLED if card.retired_pages_pending else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetTotalEccErrors(self, handle, errorType, counterType):
        card = self._card(handle, "nvmlDeviceGetTotalEccErrors")
        counters = {
            (
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            ): card.ecc_uncorrected_volatile,
            (
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_AGGREGATE_ECC,
            ): card.ecc_uncorrected_aggregate,
            (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC): 0,
            (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC): 0,
        }
        if (errorType, counterType) not in counters:
            raise pynvml.NVMLError_InvalidArgument()
        count = counters[(errorType, counterType)]
        if count is None:
            raise pynvml.NVMLError_NotSupported()
        return count

    def nvmlDeviceGetRemappedRows(self, handle):
        card = self._card(handle, "nvmlDeviceGetRemappedRows")
        if card.remapped_rows is None:
            raise pynvml.NVMLError_NotSupported()
        return card.remapped_rows

    # -- topology -------------------------------------------------------------
    def _link(self, handle, link, query) -> Link:
        card = self._card(handle, query)
        if card.nvlinks is None:
            raise pynvml.NVMLError_NotSupported()
        if not 0 <= link < len(card.nvlinks):
            raise pynvml.NVMLError_InvalidArgument()
        return card.nvlinks[link]

    def nvmlDeviceGetNvLinkState(self, handle, link):
        active = self._link(handle, link, "nvmlDeviceGetNvLinkState").active
        return pynvml.NVML_FEATURE_ENABLED if active else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):
        return pci_info(self._link(handle, link, "nvmlDeviceGetNvLinkRemotePciInfo").remote_bus_id)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link):
        return self._link(handle, link, "nvmlDeviceGetNvLinkRemoteDeviceType").remote_type

    def nvmlDeviceGetTopologyCommonAncestor(self, device1, device2):
        self._card(device1, "nvmlDeviceGetTopologyCommonAncestor")
        self._card(device2, "nvmlDeviceGetTopologyCommonAncestor")
        key = frozenset({device1.index, device2.index})
        if len(key) != 2 or key not in self.ancestors:
            raise pynvml.NVMLError_InvalidArgument()
        return self.ancestors[key]

    # -- critical XID events ------------------------------------------------------
    def nvmlEventSetCreate(self):
        self._require_init()
        events = SimpleNamespace(registered={}, pending=[], freed=False)
        self.event_sets.append(events)
        return events

    def nvmlDeviceRegisterEvents(self, handle, eventTypes, eventSet):
        self._card(handle, "nvmlDeviceRegisterEvents")
        eventSet.registered[handle.index] = eventTypes

    def nvmlEventSetWait(self, eventSet, timeoutms):
        self._require_init()
        if not eventSet.pending:
            raise pynvml.NVMLError_Timeout()
        return eventSet.pending.pop(0)

    def nvmlEventSetFree(self, eventSet):
        eventSet.freed = True

    def raise_xid(self, index: int, xid: int) -> None:
        """The driver reporting a critical XID on card ``index`` to every set that listens."""
        for events in self.event_sets:
            if events.registered.get(index, 0) & pynvml.nvmlEventTypeXidCriticalError:
                events.pending.append(
                    SimpleNamespace(
                        device=Handle(index), eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid
                    )
                )


def pci_info(bus_id: str) -> pynvml.nvmlPciInfo_t:
    """The structure NVML fills for a bus id such as ``00000000:3B:00.0``."""
    domain, bus, rest = bus_id.split(":")
    device = rest.split(".")[0]
    info = pynvml.nvmlPciInfo_t()
    info.busId = bus_id.encode()
    info.busIdLegacy = bus_id[4:].encode()
    info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(device, 16)
    return info


# -- machines ---------------------------------------------------------------------

H100_BUS_IDS = [f"00000000:{bus}:00.0" for bus in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")]
H100_SWITCHES = [f"00000000:{bus}:00.0" for bus in ("05", "06", "07", "08")]
H100_UUIDS = [f"GPU-7f3a9c21-5b4e-4d8a-9c1f-2e6b8d0a{index:04x}" for index in range(8)]


def hgx_h100() -> StandinNvml:
    """8 x H100 SXM (81559 MiB) on an HGX board.

    Each GPU has 18 NVLink links, all to the board's four NVSwitch chips
    (5, 4, 4 and 5 links), so every GPU reaches every other over 18 links
    (``NV18`` in ``nvidia-smi topo -m``). GPUs 0-3 sit on NUMA node 0, 4-7 on 1,
    and this driver gives the NUMA node through NVML. The PCIe ancestors are
    modelled too (same CPU / across CPUs) so that ignoring NVLink would show.
    """
    per_switch = (5, 4, 4, 5)
    links = [
        Link(H100_SWITCHES[switch], SWITCH) for switch, count in enumerate(per_switch) for _ in range(count)
    ]
    cards = [
        Card(
            uuid=H100_UUIDS[index],
            name="NVIDIA H100 80GB HBM3",
            memory_mib=81559,
            bus_id=H100_BUS_IDS[index],
            numa=0 if index < 4 else 1,
            nvlinks=list(links),
            remapped_rows=(0, 0, 0, 0),
            retired_pages_pending=None,
        )
        for index in range(8)
    ]
    ancestors = {
        frozenset({i, j}): pynvml.NVML_TOPOLOGY_NODE if (i < 4) == (j < 4) else pynvml.NVML_TOPOLOGY_SYSTEM
        for i in range(8)
        for j in range(i + 1, 8)
    }
    return StandinNvml(cards, ancestors)


T4_BUS_IDS = ["00000000:1A:00.0", "00000000:1B:00.0", "00000000:AF:00.0", "00000000:B0:00.0"]
T4_UUIDS = [
    "GPU-2b1e6f4a-0c3d-4e9b-8a7f-5d1c3b2a9e01",
    "GPU-9d4c2e7b-6a1f-4b3c-9e8d-0f2a4c6b8d12",
    "GPU-4e8a1c3d-7b2f-4d6e-8c9a-1b3d5f7a9c23",
    "GPU-c6f2b8d4-3e1a-4f7c-9b5d-2a4c6e8f0b34",
]


def pcie_t4() -> StandinNvml:
    """4 x Tesla T4 (15360 MiB) on PCIe in a two-socket server, no NVLink.

    GPU0/1 share one PCIe switch, GPU2/3 another; the two pairs hang off
    different CPUs. The driver gives the NUMA node for GPU0-2 but not for GPU3
    (``NotSupported``), so the agent must find GPU3's in sysfs
    (``0000:b0:00.0/numa_node``, which the test writes). Turing: ECC and
    retired pages are offered, row remapping is not.
    """
    numa = [0, 0, 1, None]
    cards = [
        Card(
            uuid=T4_UUIDS[index],
            name="Tesla T4",
            memory_mib=15360,
            bus_id=T4_BUS_IDS[index],
            numa=numa[index],
        )
        for index in range(4)
    ]
    single, system = pynvml.NVML_TOPOLOGY_SINGLE, pynvml.NVML_TOPOLOGY_SYSTEM
    ancestors = {
        frozenset({0, 1}): single,
        frozenset({2, 3}): single,
        frozenset({0, 2}): system,
        frozenset({0, 3}): system,
        frozenset({1, 2}): system,
        frozenset({1, 3}): system,
    }
    return StandinNvml(cards, ancestors)


V100_BUS_IDS = ["00000000:06:00.0", "00000000:07:00.0", "00000000:0A:00.0", "00000000:0B:00.0"]
V100_UUIDS = [f"GPU-1c5e9a3f-8b2d-4a6c-b0e4-7d9f1a3c{index:04x}" for index in range(4)]


def v100_partial_mesh() -> StandinNvml:
    """4 x V100 SXM2 wired directly by NVLink, not all pairs (a DGX-1-like quarter).

    Six links per GPU: 0-1 two links, 2-3 two links, 0-2 one, 1-3 one; 0-3 and
    1-2 have no NVLink and fall back to PCIe (same CPU, host bridge). One of
    GPU0's links to GPU3 is wired but down, and must not count.
    """
    bus = V100_BUS_IDS
    wiring = {
        0: [Link(bus[1]), Link(bus[1]), Link(bus[2]), Link(bus[3], active=False)],
        1: [Link(bus[0]), Link(bus[0]), Link(bus[3])],
        2: [Link(bus[3]), Link(bus[3]), Link(bus[0])],
        3: [Link(bus[2]), Link(bus[2]), Link(bus[1]), Link(bus[0], active=False)],
    }
    cards = [
        Card(
            uuid=V100_UUIDS[index],
            name="Tesla V100-SXM2-16GB",
            memory_mib=16384,
            bus_id=bus[index],
            numa=0,
            nvlinks=wiring[index] + [Link("00000000:00:00.0", GPU, active=False)] * (6 - len(wiring[index])),
        )
        for index in range(4)
    ]
    ancestors = {
        frozenset({0, 1}): pynvml.NVML_TOPOLOGY_SINGLE,
        frozenset({2, 3}): pynvml.NVML_TOPOLOGY_SINGLE,
        frozenset({0, 2}): pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
        frozenset({0, 3}): pynvml.NVML_TOPOLOGY_NODE,
        frozenset({1, 2}): pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
        frozenset({1, 3}): pynvml.NVML_TOPOLOGY_NODE,
    }
    return StandinNvml(cards, ancestors)
