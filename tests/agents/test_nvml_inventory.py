"""The NVML agent reading whole machines through a stand-in for the pynvml module.

No GPU is available here, so these tests stop at the narrowest boundary: the
library object (see ``nvml_standin``). What they check is what the scheduler
will see: the exact report body, pair scores, NUMA and health.
"""

from __future__ import annotations

from itertools import combinations

import pynvml
import pytest

from agents.nvml.config import NodeConfig
from agents.nvml.inventory import NvmlInventory, NvmlUnavailable, pci_address
from agents.nvml.report import build_report
from tests.agents.nvml_standin import (
    CARD_QUERIES,
    H100_UUIDS,
    T4_UUIDS,
    V100_UUIDS,
    StandinNvml,
    hgx_h100,
    pcie_t4,
    v100_partial_mesh,
)


@pytest.fixture
def sysfs(tmp_path):
    """A sysfs tree with the one NUMA file the T4 machine's driver does not answer for."""
    device = tmp_path / "bus" / "pci" / "devices" / "0000:b0:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    return tmp_path


def opened(library, sysfs_root="/nonexistent-sysfs") -> NvmlInventory:
    inventory = NvmlInventory(library, sysfs_root)
    inventory.open()
    return inventory


def report(library, sysfs_root="/nonexistent-sysfs", node="gpu-host", config=None) -> dict:
    return build_report(node, opened(library, sysfs_root).read(), config or NodeConfig())


def assert_symmetric(body: dict) -> None:
    links = {card["uuid"]: card["links"] for card in body["devices"]}
    for first, second in combinations(links, 2):
        assert links[first].get(second) == links[second].get(first), (first, second)


def t4_card(index: int, numa: int, links: dict[int, int], health: bool = True) -> dict:
    return {
        "uuid": T4_UUIDS[index],
        "index": index,
        "type": "NVIDIA-Tesla T4",
        "slots": 10,
        "memory": 15360,
        "cores": 100,
        "numa": numa,
        "health": health,
        "links": {T4_UUIDS[other]: score for other, score in links.items()},
        "observed": {"memory": 0, "ecc_errors": 0},
    }


def test_hgx_h100_every_pair_is_nv18_through_nvswitch():
    body = report(hgx_h100(), node="h100-node")

    assert body == {
        "node": "h100-node",
        "labels": {},
        "annotations": {},
        "devices": [
            {
                "uuid": H100_UUIDS[index],
                "index": index,
                "type": "NVIDIA-H100 80GB HBM3",
                "slots": 10,
                "memory": 81559,
                "cores": 100,
                "numa": [0, 0, 0, 0, 1, 1, 1, 1][index],
                "health": True,
                "links": {H100_UUIDS[other]: 1800 for other in range(8) if other != index},
                "observed": {"memory": 0, "ecc_errors": 0},
            }
            for index in range(8)
        ],
    }


def test_pcie_t4_scores_switch_pairs_50_and_cross_cpu_pairs_10_with_numa_from_sysfs(sysfs):
    body = report(pcie_t4(), sysfs, node="t4-node")

    assert body == {
        "node": "t4-node",
        "labels": {},
        "annotations": {},
        "devices": [
            t4_card(0, 0, {1: 50, 2: 10, 3: 10}),
            t4_card(1, 0, {0: 50, 2: 10, 3: 10}),
            t4_card(2, 1, {0: 10, 1: 10, 3: 50}),
            t4_card(3, 1, {0: 10, 1: 10, 2: 50}),
        ],
    }


@pytest.mark.parametrize(("content", "numa"), [("-1\n", 0), ("3", 3), (None, 0), ("garbage", 0)])
def test_sysfs_numa_minus_one_or_missing_means_node_0(tmp_path, content, numa):
    device = tmp_path / "bus" / "pci" / "devices" / "0000:b0:00.0"
    device.mkdir(parents=True)
    if content is not None:
        (device / "numa_node").write_text(content)

    cards = opened(pcie_t4(), tmp_path).read().cards

    assert cards[3].numa == numa


def test_nvml_numa_of_minus_one_means_node_0():
    machine = pcie_t4()
    machine.cards[0].numa = -1

    assert opened(machine).read().cards[0].numa == 0


def test_direct_nvlinks_are_counted_per_pair_and_pcie_fills_the_rest():
    body = report(v100_partial_mesh())

    links = {card["index"]: card["links"] for card in body["devices"]}
    score = {(i, j): links[i].get(V100_UUIDS[j]) for i in range(4) for j in range(4) if i != j}
    assert score[(0, 1)] == 200
    assert score[(2, 3)] == 200
    assert score[(0, 2)] == 100
    assert score[(1, 3)] == 100
    assert score[(0, 3)] == 20  # a down link does not count; same CPU
    assert score[(1, 2)] == 30  # host bridge
    assert_symmetric(body)
    assert {card["type"] for card in body["devices"]} == {"NVIDIA-Tesla V100-SXM2-16GB"}


def test_one_side_failing_to_list_its_links_still_leaves_the_pair_linked():
    machine = v100_partial_mesh()
    machine.cards[1].failing["nvmlDeviceGetNvLinkState"] = pynvml.NVMLError_Unknown

    links = {card["index"]: card["links"] for card in report(machine)["devices"]}

    assert links[0][V100_UUIDS[1]] == links[1][V100_UUIDS[0]] == 200


def test_a_card_whose_queries_raise_is_unhealthy_and_the_others_are_still_reported(sysfs):
    machine = pcie_t4()
    machine.cards[1].fail(pynvml.NVMLError_GpuIsLost)

    body = report(machine, sysfs, node="t4-node")

    assert body["devices"] == [
        t4_card(0, 0, {2: 10, 3: 10}),
        {
            "uuid": T4_UUIDS[1],
            "index": 1,
            "type": "NVIDIA",
            "slots": 10,
            "memory": 0,
            "cores": 100,
            "numa": 0,
            "health": False,
            "links": {},
        },
        t4_card(2, 1, {0: 10, 3: 50}),
        t4_card(3, 1, {0: 10, 2: 50}),
    ]


def test_a_card_that_fails_after_being_seen_keeps_what_was_known_but_turns_unhealthy(sysfs):
    machine = pcie_t4()
    inventory = opened(machine, sysfs)
    before = inventory.read()
    machine.cards[2].fail(pynvml.NVMLError_GpuIsLost)
    machine.handle_errors[3] = pynvml.NVMLError_GpuIsLost

    after = inventory.read()

    assert [card.healthy for card in before.cards] == [True, True, True, True]
    assert [card.healthy for card in after.cards] == [True, True, False, False]
    for index in (2, 3):
        assert (after.cards[index].uuid, after.cards[index].model, after.cards[index].memory_mib) == (
            T4_UUIDS[index],
            "Tesla T4",
            15360,
        )
        assert after.cards[index].numa == 1
    assert after.cards[2].problems[0] == "name query failed: GPU is lost"
    assert after.cards[3].problems == ("card query failed: GPU is lost",)


def test_a_card_never_readable_is_left_out_and_the_rest_reported(sysfs):
    machine = pcie_t4()
    machine.handle_errors[0] = pynvml.NVMLError_GpuIsLost

    body = report(machine, sysfs)

    assert [card["index"] for card in body["devices"]] == [1, 2, 3]
    assert all(card["health"] for card in body["devices"])
    assert T4_UUIDS[0] not in body["devices"][0]["links"]


@pytest.mark.parametrize(
    ("damage", "healthy"),
    [
        (lambda card: setattr(card, "retired_pages_pending", True), False),
        (lambda card: setattr(card, "ecc_uncorrected_volatile", 2), False),
        (
            lambda card: setattr(card, "ecc_uncorrected_aggregate", 7),
            True,
        ),  # old errors, since fixed by a reset
        (lambda card: setattr(card, "ecc_uncorrected_volatile", None), True),  # ECC off: not offered
        (lambda card: setattr(card, "remapped_rows", (0, 1, 0, 1)), False),
        (lambda card: setattr(card, "remapped_rows", (0, 1, 1, 0)), False),
        (lambda card: setattr(card, "remapped_rows", (3, 0, 0, 0)), True),
        (lambda card: card.failing.update(nvmlDeviceGetTotalEccErrors=pynvml.NVMLError_Unknown), False),
        (lambda card: card.failing.update(nvmlDeviceGetTotalEccErrors=pynvml.NVMLError_NoPermission), True),
    ],
)
def test_critical_conditions_mark_only_that_card_unhealthy(damage, healthy):
    machine = hgx_h100()
    damage(machine.cards[5])

    body = report(machine)

    assert [card["health"] for card in body["devices"]] == [True] * 5 + [healthy] + [True] * 2


def test_a_critical_xid_marks_the_card_until_the_agent_restarts_and_application_xids_do_not():
    machine = hgx_h100()
    inventory = opened(machine)
    machine.raise_xid(2, 79)  # fell off the bus
    machine.raise_xid(6, 13)  # graphics engine exception: the application's fault

    first = inventory.read()
    second = inventory.read()

    for reading in (first, second):
        assert [card.healthy for card in reading.cards] == [True, True, False, True, True, True, True, True]
    assert second.cards[2].problems == ("critical XID 79",)


def test_nvml_init_failure_is_reported_as_unavailable():
    machine = StandinNvml(pcie_t4().cards, init_error=pynvml.NVMLError_DriverNotLoaded)

    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded"):
        NvmlInventory(machine).open()


def test_close_frees_the_event_set_and_shuts_nvml_down():
    machine = hgx_h100()
    inventory = opened(machine)

    inventory.close()

    assert machine.event_sets[0].freed and not machine.initialised


@pytest.mark.parametrize(
    ("bus_id", "address"),
    [
        (b"00000000:3B:00.0", "0000:3b:00.0"),
        ("00000000:AF:1F.7", "0000:af:1f.7"),
        ("0000:b0:00.0", "0000:b0:00.0"),
        ("00010000:E1:00.0", "10000:e1:00.0"),  # VMD domain, as sysfs writes it
    ],
)
def test_pci_bus_ids_are_written_the_sysfs_way(bus_id, address):
    assert pci_address(bus_id) == address


def test_every_query_the_standin_can_fail_is_one_the_agent_uses():
    """Guards the stand-in: a failure injected into a query the agent never calls would test nothing."""
    machine = hgx_h100()
    called = set()
    for name in CARD_QUERIES:
        original = getattr(machine, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            called.add(_name)
            return _original(*args, **kwargs)

        setattr(machine, name, spy)
    machine.cards[0].nvlinks = []  # no NVLink between 0 and the rest: PCIe ancestors get asked

    opened(machine).read()

    assert called == set(CARD_QUERIES)
