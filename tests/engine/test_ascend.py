"""Huawei Ascend as HAMi v2.10 schedules it (`families.ascend`).

The cases mirror HAMi v2.10.0's pkg/device/ascend/device_test.go (Test_PatchAnnotations,
Test_PatchAnnotations_ZeroCore, Test_MutateAdmission, Test_GetNodeDevices, Test_checkType,
TestDevices_Fit, Test_GenerateResourceRequests, Test_MutateAdmission_HardSplitCoreRejected):
their facts, our code. The golden strings are HAMi's own expected values.
"""

from __future__ import annotations

import pytest

from scheduling.engine.decision import DeviceGrant
from scheduling.engine.errors import PodInvalid, ScenarioError
from scheduling.engine.families import ASCEND, FAMILIES, NVIDIA, by_resource, family_of_type
from scheduling.engine.families.ascend import CHART_CONFIGS, Ascend, Template, VnpuConfig, read_vnpus
from scheduling.engine.model import ResourceDefaults
from scheduling.engine.requests import parse_container

from .builders import ask, card, container, node, pod, run

B3 = ASCEND["Ascend910B3"]
P310 = ASCEND["Ascend310P"]

#: HAMi's test config for the 910A (Test_PatchAnnotations, Test_MutateAdmission).
A910 = VnpuConfig(
    "Ascend910A",
    "910A",
    32768,
    32768,
    (
        Template("vir16", 17476, 16),
        Template("vir02", 2184, 2),
        Template("vir08", 8738, 8),
        Template("vir04", 4369, 4),
    ),
)


def npu(uuid: str, word: str = "Ascend910B3", memory: int = 65536, **fields) -> dict:
    """One Ascend NPU of a scenario: its type is its chip's commonWord, as the register gives it."""
    return card(uuid, memory, type=word, cores=20, **fields)


def npu_ask(word: str = "Ascend910B3", count=1, memory=None) -> dict:
    found = {f"huawei.com/{word}": count}
    if memory is not None:
        found[f"huawei.com/{word}-memory"] = memory
    return found


def test_each_chip_has_hamis_names():
    """HAMi's InitDevices: every name derives from the commonWord."""
    assert B3.register == "hami.io/node-register-Ascend910B3"
    assert B3.handshake == "hami.io/node-handshake-Ascend910B3"
    assert B3.to_allocate == "hami.io/Ascend910B3-devices-to-allocate"
    assert B3.allocated == "hami.io/Ascend910B3-devices-allocated"
    assert B3.runtime == "huawei.com/Ascend910B3"
    assert (B3.resources.count, B3.resources.memory, B3.resources.cores) == (
        "huawei.com/Ascend910B3",
        "huawei.com/Ascend910B3-memory",
        "huawei.com/Ascend910B3-core",
    )
    assert B3.node_lock == NVIDIA.node_lock == "hami.io/mutex.lock"
    assert by_resource("huawei.com/Ascend310P-memory") is P310
    assert by_resource("") is None
    assert family_of_type("Ascend310P") == "ascend310p" and family_of_type("NVIDIA-Tesla T4") == "nvidia"
    assert list(FAMILIES)[0] == "nvidia"


def test_templates_round_a_memory_ask_up_to_the_smallest_that_holds_it():
    """HAMi's trimMemory: templates sorted by MiB; above all of them but within the capacity
    is the whole NPU; above the capacity is nothing."""
    config = A910
    assert [t.name for t in config.templates] == ["vir02", "vir04", "vir08", "vir16"]
    assert config.trim(1) == (2184, "vir02")
    assert config.trim(2184) == (2184, "vir02")
    assert config.trim(5000) == (8738, "vir08")
    assert config.trim(20000) == (32768, "")
    assert config.trim(40000) == (0, "")
    assert P310.config.trim(21527) == (21527, "")  # 310P: allocatable below capacity
    assert P310.config.trim(24576) == (21527, "")


def read(word: str, limits: dict, mode: str = ""):
    return parse_container(
        {"name": "main", "resources": {"limits": limits}}, "containers[0]", ResourceDefaults(), mode
    )


def test_a_container_ask_is_what_hamis_webhook_writes_back():
    """Test_MutateAdmission: 8738 MiB is a vir08 on a 910A-like chip; 20,000 (no template, under
    the capacity) a whole NPU; no memory a whole NPU; cores are 0 (a template books none)."""
    one = read("Ascend910B3", npu_ask(memory=5000))
    assert (one.family, one.count, one.memory, one.cores) == ("ascend910b3", 1, 16384, 0)
    assert read("Ascend910B3", npu_ask(memory=20000)).memory == 32768
    assert read("Ascend910B3", npu_ask(memory=40000)).memory == 65536
    whole = read("Ascend910B3", npu_ask(count=2))
    assert (whole.count, whole.memory) == (2, 65536)
    assert read("Ascend910B3", npu_ask(count=2, memory=65536)).memory == 65536


@pytest.mark.parametrize(
    ("limits", "field", "words"),
    [
        # Test_MutateAdmission "resourcememoryname is invalid": above the chip's capacity
        (npu_ask(count=2, memory=70000), "huawei.com/Ascend910B3-memory", "is invalid"),
        # MutateAdmission: "vNPU not supported for multiple devices"
        (
            npu_ask(count=2, memory=16384),
            "huawei.com/Ascend910B3-memory",
            "vNPU not supported for multiple devices",
        ),
        # Test_MutateAdmission_HardSplitCoreRejected: -core outside hami-core
        ({**npu_ask(), "huawei.com/Ascend910B3-core": 10}, "huawei.com/Ascend910B3-core", "hami-core"),
        (npu_ask(count=0), "huawei.com/Ascend910B3", "positive integer"),
    ],
)
def test_asks_hami_refuses_are_refused_naming_the_field(limits, field, words):
    with pytest.raises(PodInvalid) as caught:
        read("Ascend910B3", limits)
    assert caught.value.field.endswith(field) and words in str(caught.value)


def test_core_zero_is_allowed_and_hami_core_is_not_scheduled_here():
    """HardSplitCoreRejected: `-core: 0` is allowed on a hard split; the soft split is refused
    naming the annotation (a documented difference)."""
    assert read("Ascend910B3", {**npu_ask(), "huawei.com/Ascend910B3-core": 0}).cores == 0
    with pytest.raises(PodInvalid) as caught:
        read("Ascend910B3", npu_ask(memory=8192), mode="hami-core")
    assert "huawei.com/vnpu-mode" in caught.value.field


def test_one_container_asking_two_families_is_refused_naming_both():
    with pytest.raises(PodInvalid) as caught:
        read("Ascend910B3", {**npu_ask(), "nvidia.com/gpu": 1})
    assert "huawei.com/Ascend910B3" in str(caught.value) and "nvidia.com/gpu" in str(caught.value)


def test_memory_alone_is_no_ascend_ask():
    """Test_GenerateResourceRequests "don't set": without the count HAMi reads no request."""
    assert read("Ascend910B3", {"huawei.com/Ascend910B3-memory": 8192}) is None


def test_the_runtime_annotation_is_byte_for_byte_hamis():
    """Test_PatchAnnotations "exist device" and Test_PatchAnnotations_ZeroCore on HAMi's 910A
    config: `UUID,W,MEM,CORES:;` in both device annotations, and `huawei.com/W` with the
    template, 0 cores left out."""
    chip = Ascend(A910)
    grants = [[DeviceGrant("device-0", 8738, 1, family=chip.name)]]
    # HAMi's test gives the device the type "Ascend"; a placement writes the commonWord
    assert chip.runtime_info(grants[0]) == '[{"UUID":"device-0","temp":"vir08","memory":8738,"core":1}]'
    zero = chip.runtime_info([DeviceGrant("device-zero-core", 8738, 0)])
    assert zero == '[{"UUID":"device-zero-core","temp":"vir08","memory":8738}]'
    whole = chip.runtime_info([DeviceGrant("d", 32768, 0)])
    assert whole == '[{"UUID":"d","memory":32768}]'
    found = chip.extra_annotations(grants)
    assert found == {
        "hami.io/Ascend910A-devices-to-allocate": "device-0,Ascend910A,8738,1:;",
        "hami.io/Ascend910A-devices-allocated": "device-0,Ascend910A,8738,1:;",
        "huawei.com/Ascend910A": '[{"UUID":"device-0","temp":"vir08","memory":8738,"core":1}]',
    }
    assert chip.extra_annotations([[], []]) == {}  # "no device": nothing written


def test_the_register_reads_as_go_reads_it():
    """Test_GetNodeDevices: HAMi's capitalised field names are read (Go matches any case)."""
    value = '[{"ID":"GPU-0","Count":4,"Devmem":8738,"Devcore":8,"Type":"huawei.com/Ascend910","Numa":0,"Health":true}]'
    (card,) = B3.decode_register(value)
    assert (card.uuid, card.slots, card.memory, card.cores, card.health) == ("GPU-0", 4, 8738, 8, True)
    with pytest.raises(ScenarioError) as caught:
        B3.decode_register("not json")
    assert caught.value.where.startswith("hami.io/node-register-Ascend910B3")


def test_an_ascend_pod_lands_on_its_chip_and_writes_hamis_annotations():
    """checkType: only the chip of the ask; the placement carries the three Ascend annotations
    and no NVIDIA one."""
    nodes = [
        node("gpu", {"uuid": "GPU-0", "memory": 81920}),
        node("n310", npu("NPU-310", "Ascend310P", 21527)),
        node("n910", npu("NPU-0"), npu("NPU-1", index=1)),
    ]
    (out,) = run(nodes, [pod("train", None, npu_ask(memory=12000))])
    assert out["node"] == "n910"
    assert out["failed_nodes"] == {"gpu": "1/1 CardTypeMismatch", "n310": "1/1 CardTypeMismatch"}
    uuid = out["containers"][0]["devices"][0]["uuid"]
    assert out["allocated"] == f"{uuid},Ascend910B3,16384,0:;"
    assert out["annotations"] == {
        "hami.io/Ascend910B3-devices-to-allocate": f"{uuid},Ascend910B3,16384,0:;",
        "hami.io/Ascend910B3-devices-allocated": f"{uuid},Ascend910B3,16384,0:;",
        "huawei.com/Ascend910B3": f'[{{"UUID":"{uuid}","temp":"vir05_1c_16g","memory":16384}}]',
    }


def test_an_nvidia_pod_never_takes_an_npu():
    nodes = [node("n910", npu("NPU-0")), node("gpu", {"uuid": "GPU-0", "memory": 15360})]
    (out,) = run(nodes, [pod("p", None, ask(gpu=1, mem=1000))])
    assert out["node"] == "gpu" and "annotations" not in out
    assert out["allocated"] == "GPU-0,NVIDIA,1000,0:;"
    (alone,) = run([node("n910", npu("NPU-0"))], [pod("p", None, ask(gpu=1, mem=1000))])
    assert alone["status"] == "pending" and alone["failed_nodes"] == {"n910": "1/1 CardTypeMismatch"}


def test_a_pod_asking_both_families_needs_a_node_with_both():
    """Each family's annotations name only its own cards, every container keeping its place."""
    both = pod(
        "both",
        containers=[container("gpu", ask(gpu=1, mem=2000)), container("npu", npu_ask(memory=8192))],
    )
    nodes = [
        node("only-gpu", {"uuid": "GPU-a", "memory": 15360}),
        node("only-npu", npu("NPU-a")),
        node("mixed", {"uuid": "GPU-m", "memory": 15360}, npu("NPU-m", index=1)),
    ]
    (out,) = run(nodes, [both])
    assert out["node"] == "mixed"
    assert out["allocated"] == "GPU-m,NVIDIA,2000,0:;NPU-m,Ascend910B3,16384,0:;"
    assert out["annotations"] == {
        "hami.io/Ascend910B3-devices-to-allocate": ";NPU-m,Ascend910B3,16384,0:;",
        "hami.io/Ascend910B3-devices-allocated": ";NPU-m,Ascend910B3,16384,0:;",
        "huawei.com/Ascend910B3": '[{"UUID":"NPU-m","temp":"vir05_1c_16g","memory":16384}]',
    }
    (pending,) = run(nodes[:2], [both])
    assert pending["status"] == "pending"


def test_templates_share_an_npu_by_memory_and_binpack_fills_it():
    """HAMi Fit: a vNPU takes its template's MiB and a slot; binpack puts the second on the
    same NPU; 65,536 MiB hold four 16g templates and no fifth."""
    nodes = [node("n910", npu("NPU-0", slots=8), npu("NPU-1", index=1, slots=8))]
    pods = [
        pod(f"p{i}", {"hami.io/gpu-scheduler-policy": "binpack"}, npu_ask(memory=16384)) for i in range(9)
    ]
    outs = run(nodes, pods)
    first = [o["containers"][0]["devices"][0]["uuid"] for o in outs[:8]]
    assert first.count(first[0]) == 4 and len(set(first)) == 2
    assert outs[8]["status"] == "pending" and outs[8]["failed_nodes"] == {
        "n910": "2/2 CardInsufficientMemory"
    }


def test_whole_npus_for_two_and_card_exhaustion_named():
    """Fit "AllocatedCardsInsufficientRequest"-like: two whole NPUs need two free NPUs."""
    nodes = [node("n910", npu("NPU-0"), npu("NPU-1", index=1, used=(1, 8192, 0)))]
    (out,) = run(nodes, [pod("two", None, npu_ask(count=2))])
    assert out["status"] == "pending"
    assert "CardInsufficientMemory" in out["failed_nodes"]["n910"]


def test_the_chart_configs_read_back_from_the_configmap_form():
    raw = {
        "configs": [
            {
                "chipName": "910B3",
                "commonWord": "Ascend910B3",
                "memoryAllocatable": 65536,
                "memoryCapacity": 65536,
                "aiCore": 20,
                "aiCPU": 7,
                "templates": [
                    {"name": "vir10_3c_32g", "memory": 32768, "aiCore": 10, "aiCPU": 3},
                    {"name": "vir05_1c_16g", "memory": 16384, "aiCore": 5, "aiCPU": 1},
                ],
            }
        ]
    }
    (config,) = read_vnpus(raw)
    assert config == next(c for c in CHART_CONFIGS if c.common_word == "Ascend910B3")
    with pytest.raises(ScenarioError) as caught:
        read_vnpus({"configs": [{"commonWord": "X", "templates": [{"name": "a", "memory": -1}]}]})
    assert caught.value.where == "vnpus.configs[0].templates[0].memory"


def test_a_running_pod_hami_placed_holds_its_npus():
    """A pod HAMi's scheduler bound before the switch counts on its NPUs through its
    `hami.io/W-devices-allocated`: a second 48 GiB ask no longer fits beside it."""
    running = {
        "name": "old",
        "node": "n910",
        "containers": [container("main", npu_ask(memory=32768))],
        "annotations": {"hami.io/Ascend910B3-devices-allocated": "NPU-0,Ascend910B3,32768,0:;"},
    }
    from scheduling.engine.scenario import run_scenario

    raw = {
        "nodes": [node("n910", npu("NPU-0"))],
        "running": [running],
        "pods": [pod("big", None, npu_ask(memory=40000)), pod("half", None, npu_ask(memory=30000))],
    }
    big, half = run_scenario(raw)["pods"]
    assert big["status"] == "pending" and big["failed_nodes"] == {"n910": "1/1 CardInsufficientMemory"}
    assert half["node"] == "n910" and half["allocated"] == "NPU-0,Ascend910B3,32768,0:;"


def test_an_ascend_pod_in_a_cluster_without_its_chip_can_never_fit():
    """The explanation says never, naming the type mismatch, not a shortage to wait out."""
    (out,) = run([node("gpu", {"uuid": "GPU-0", "memory": 81920})], [pod("npu", None, npu_ask())])
    assert out["status"] == "pending" and out["unschedulable"] is True
    assert out["failed_nodes"] == {"gpu": "1/1 CardTypeMismatch"}


def test_the_memory_factor_multiplies_the_limit_the_webhook_wrote():
    """Test_GenerateResourceRequestsFactor: the scheduler reads the memory limit times
    `memoryFactor` (128 x 10 = 1280 there, the webhook left out); through the webhook as
    well, 128 MiB is first the vir02 template's 2184, so 21,840."""
    chip = Ascend(VnpuConfig("Ascend910A", "910A", 32768, 32768, A910.templates, memory_factor=10))
    assert chip.ask_memory(128, 1, "", "f", "c") == 21840
    assert chip.ask_memory(None, 1, "", "f", "c") == 327680
    plain = Ascend(A910)
    assert plain.ask_memory(128, 1, "", "f", "c") == 2184


def test_a_chips_uuid_lists_pick_and_keep_out_npus():
    """TestDevices_Fit "user assign use uuid mismatch" / "no use uuid match": HAMi's
    `hami.io/use-W-uuid` and `hami.io/no-use-W-uuid`, read without a warning."""
    nodes = [node("n910", npu("NPU-0"), npu("NPU-1", index=1))]
    (chosen,) = run(nodes, [pod("p", {"hami.io/use-Ascend910B3-uuid": "NPU-1"}, npu_ask(memory=8192))])
    assert chosen["containers"][0]["devices"][0]["uuid"] == "NPU-1" and chosen["warnings"] == []
    (kept,) = run(nodes, [pod("p", {"hami.io/no-use-Ascend910B3-uuid": "NPU-0,NPU-1"}, npu_ask())])
    assert kept["failed_nodes"] == {"n910": "2/2 CardUuidMismatch"}
    (missing,) = run(nodes, [pod("p", {"hami.io/use-Ascend910B3-uuid": "NPU-9"}, npu_ask())])
    assert missing["failed_nodes"] == {"n910": "2/2 CardUuidMismatch"}


@pytest.mark.parametrize(
    ("cards", "limits", "failure"),
    [
        # TestDevices_Fit "card overused": every slot taken
        ([npu("NPU-0", slots=1, used=(1, 8192, 0))], npu_ask(memory=8192), "1/1 CardTimeSlicingExhausted"),
        # "fit fail: memory not enough"
        ([npu("NPU-0", used=(1, 60000, 0))], npu_ask(memory=8192), "1/1 CardInsufficientMemory"),
        # "fit fail: CardNotHealth"
        ([npu("NPU-0", health=False)], npu_ask(memory=8192), "1/1 CardNotHealth"),
        # "fit fail: AllocatedCardsInsufficientRequest": two whole NPUs, one free
        (
            [npu("NPU-0"), npu("NPU-1", index=1, used=(1, 16384, 0))],
            npu_ask(count=2),
            "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory",
        ),
    ],
)
def test_hamis_fit_refusals_on_npus(cards, limits, failure):
    (out,) = run([node("n910", *cards)], [pod("p", None, limits)])
    assert out["status"] == "pending" and out["failed_nodes"] == {"n910": failure}


def test_mutex_keeps_a_used_npu_from_a_second_pod():
    """TestDevices_Fit "mutex policy rejects used device": the shared chain applies to NPUs."""
    nodes = [node("n910", npu("NPU-0", used=(1, 8192, 0)))]
    (out,) = run(nodes, [pod("p", {"hami.io/gpu-scheduler-policy": "mutex"}, npu_ask(memory=8192))])
    assert out["failed_nodes"] == {"n910": "1/1 ExclusiveDeviceAllocateConflict"}
