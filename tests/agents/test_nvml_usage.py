"""The agent reports what each card really does (memory in use, utilization, temperature,
power, ECC errors, the latest XID) beside its capacity, through the pynvml stand-in."""

from __future__ import annotations

import pynvml

from agents.nvml.config import NodeConfig
from agents.nvml.inventory import NvmlInventory
from agents.nvml.report import build_report
from tests.agents.nvml_standin import hgx_h100, pcie_t4


def reading_of(machine):
    inventory = NvmlInventory(machine, "/nonexistent-sysfs")
    inventory.open()
    return inventory


def test_a_busy_card_reports_memory_in_use_utilization_temperature_and_power():
    machine = hgx_h100()
    busy = machine.cards[0]
    busy.memory_used_mib, busy.utilization, busy.temperature, busy.power_mw = 40960, 87, 64, 512345

    body = build_report("h100", reading_of(machine).read(), NodeConfig())

    assert body["devices"][0]["observed"] == {
        "memory": 40960,
        "utilization": 87,
        "temperature": 64,
        "power": 512.3,
        "ecc_errors": 0,
    }
    assert body["devices"][1]["observed"] == {"memory": 0, "ecc_errors": 0}


def test_the_latest_xid_is_reported_also_when_the_application_caused_it():
    machine = hgx_h100()
    inventory = reading_of(machine)
    machine.raise_xid(3, 13)  # an application's fault: the card stays healthy
    machine.raise_xid(5, 79)

    cards = build_report("h100", inventory.read(), NodeConfig())["devices"]

    assert cards[3]["observed"]["xid"] == 13 and cards[3]["health"] is True
    assert cards[5]["observed"]["xid"] == 79 and cards[5]["health"] is False


def test_a_sensor_that_fails_leaves_its_value_out_and_the_card_healthy():
    machine = pcie_t4()
    machine.cards[0].utilization = 10
    machine.cards[0].failing["nvmlDeviceGetUtilizationRates"] = pynvml.NVMLError_Unknown
    machine.cards[0].failing["nvmlDeviceGetPowerUsage"] = pynvml.NVMLError_GpuIsLost

    card = build_report("t4", reading_of(machine).read(), NodeConfig())["devices"][0]

    assert card["health"] is True
    assert card["observed"] == {"memory": 0, "ecc_errors": 0}


def test_uncorrectable_ecc_errors_are_counted_beside_the_health_mark():
    machine = pcie_t4()
    machine.cards[2].ecc_uncorrected_volatile = 3

    card = build_report("t4", reading_of(machine).read(), NodeConfig())["devices"][2]

    assert card["observed"]["ecc_errors"] == 3 and card["health"] is False
