"""DRA without an API server: ResourceSlices become cards, claims become asks, the engine's
chain places them, and the claim status is what HAMi's driver reads."""

from __future__ import annotations

import copy

import pytest

from scheduling.engine.dra import DraAllocator, read_inventory
from scheduling.engine.dra.allocate import released_status, tenants_of
from scheduling.engine.dra.cel import CelError, Selectors
from scheduling.engine.dra.claims import (
    CONSTRAINT_UNSATISFIED,
    COUNTERS_EXHAUSTED,
    DEVICE_TAINTED,
    POOL_INCOMPLETE,
    SELECTOR_ERROR,
    SELECTOR_MISMATCH,
)
from scheduling.engine.dra.inventory import UNLIMITED_SLOTS, Consumption

from .dra_objects import (
    CLASS,
    HAMI,
    NVIDIA,
    allocated,
    claim_pod,
    device_claim,
    device_class,
    gpumem_claim,
    hami_slice,
    mig_slices,
    nvidia_class,
)

BINPACK = {"hami.io/gpu-scheduler-policy": "binpack"}
SPREAD = {"hami.io/gpu-scheduler-policy": "spread"}


def allocator(slices, claims, rules=None, classes=None) -> DraAllocator:
    inventory = read_inventory(slices, taint_rules=rules)
    found = {(c["metadata"].get("namespace", "default"), c["metadata"]["name"]): c for c in claims}
    return DraAllocator(inventory, classes or {CLASS: device_class()}, found)


def test_a_hami_slice_gives_one_card_per_device_with_mib_cores_numa_and_unlimited_slots():
    inventory = read_inventory([hami_slice("n1", cards=4, memory_gib=16)])
    cards = {d.name: d for d in inventory.devices}
    assert sorted(cards) == ["hami-gpu-0", "hami-gpu-1", "hami-gpu-2", "hami-gpu-3"]
    gpu = cards["hami-gpu-3"]
    assert (gpu.node, gpu.uuid, gpu.type) == ("n1", "GPU-n1-3", "NVIDIA A100")
    assert (gpu.memory, gpu.cores, gpu.slots, gpu.shareable) == (16384, 100, UNLIMITED_SLOTS, True)
    assert [cards[f"hami-gpu-{i}"].numa for i in range(4)] == [0, 0, 1, 1]  # by pcieRoot
    assert gpu.index == 3  # the minor attribute


def test_a_pool_is_used_only_when_all_slices_of_its_newest_generation_are_there():
    old = hami_slice("n1", pool={"name": "n1", "generation": 1, "resourceSliceCount": 1})
    half = hami_slice("n1", name="n1-a", pool={"name": "n1", "generation": 2, "resourceSliceCount": 2})
    inventory = read_inventory([old, half])
    assert inventory.devices == []
    assert "1 of 2 ResourceSlices of generation 2" in inventory.incomplete[f"{HAMI}/n1"]
    other = hami_slice("n1", name="n1-b", pool={"name": "n1", "generation": 2, "resourceSliceCount": 2})
    for device in other["spec"]["devices"]:
        device["name"] += "-b"
    assert len(read_inventory([old, half, other]).devices) == 4


def test_other_drivers_are_not_read():
    foreign = hami_slice("n1")
    foreign["spec"]["driver"] = "example.com/fpga"
    assert read_inventory([foreign]).devices == []


def test_a_device_taint_rule_cordons_the_device_it_names():
    rule = {
        "metadata": {"name": "broken"},
        "spec": {
            "deviceSelector": {"driver": HAMI, "pool": "n1", "device": "hami-gpu-0"},
            "taint": {"key": "broken", "effect": "NoSchedule"},
        },
    }
    cordoned = {d.name: d.cordoned for d in read_inventory([hami_slice("n1")], taint_rules=[rule]).devices}
    assert cordoned == {"hami-gpu-0": True, "hami-gpu-1": False}


def test_binpack_puts_two_8000_mib_claims_on_one_card_and_spread_on_two():
    for policy, same in ((BINPACK, True), (SPREAD, False)):
        cycle = allocator([hami_slice("n1", memory_gib=24)], [gpumem_claim("a"), gpumem_claim("b")])
        first = cycle.place(claim_pod("pa", "a", annotations=policy))
        second = cycle.place(claim_pod("pb", "b", annotations=policy))
        devices = [p.results[c][0]["device"] for p, c in ((first, "a"), (second, "b"))]
        assert (devices[0] == devices[1]) is same, (policy, devices)


def test_the_status_is_what_hamis_driver_reads():
    cycle = allocator([hami_slice("n1")], [gpumem_claim("a", memory_mib=8000, cores=30)])
    placed = cycle.place(claim_pod("pa", "a"))
    assert placed.node == "n1"
    status = placed.status("a", cycle.classes)
    (result,) = status["allocation"]["devices"]["results"]
    assert result["request"] == "gpu" and result["driver"] == HAMI and result["pool"] == "n1"
    assert result["consumedCapacity"] == {"memory": "8000Mi", "cores": "30"}
    assert len(result["shareID"]) == 36
    terms = status["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    assert status["reservedFor"] == [{"resource": "pods", "name": "pa", "uid": "uid-pa"}]


def test_allocated_claims_count_on_their_devices_kube_schedulers_included():
    taken = allocated(gpumem_claim("theirs", memory_mib=16000), "n1", "hami-gpu-0", 16000)
    cycle = allocator([hami_slice("n1", memory_gib=16)], [taken, gpumem_claim("mine", memory_mib=8000)])
    placed = cycle.place(claim_pod("p", "mine", annotations=BINPACK))
    assert placed.results["mine"][0]["device"] == "hami-gpu-1"  # gpu-0 has 384 MiB left


def test_a_pod_whose_claims_fit_nowhere_waits_with_the_engines_reasons():
    cycle = allocator([hami_slice("n1", memory_gib=8)], [gpumem_claim("a", memory_mib=9000)])
    placed = cycle.place(claim_pod("p", "a"))
    assert not placed.placed and "CardInsufficientMemory" in placed.message


def test_a_cel_selector_on_product_name_picks_the_node_with_that_product():
    slices = [hami_slice("n1", product="NVIDIA A100"), hami_slice("n2", product="NVIDIA H100")]
    claim = gpumem_claim("a", selectors=[f'device.attributes["{HAMI}"].productName == "NVIDIA H100"'])
    assert allocator(slices, [claim]).place(claim_pod("p", "a")).node == "n2"
    nowhere = gpumem_claim("b", selectors=[f'device.attributes["{HAMI}"].productName == "T4"'])
    placed = allocator(slices, [nowhere]).place(claim_pod("p", "b"))
    assert placed.reason == SELECTOR_MISMATCH and "4 SelectorMismatch" in placed.message


def test_a_selector_the_library_cannot_evaluate_leaves_the_pod_pending_naming_it():
    expression = 'device.attributes["x"].nope == 1'
    placed = allocator([hami_slice("n1")], [gpumem_claim("a", selectors=[expression])]).place(
        claim_pod("p", "a")
    )
    assert placed.reason == SELECTOR_ERROR and expression in placed.message


def test_kubernetes_quantity_and_semver_functions():
    device = read_inventory([hami_slice("n1", memory_gib=40)]).devices[0]
    selectors = Selectors()
    assert selectors.matches(f'device.capacity["{HAMI}"].memory.compareTo(quantity("32Gi")) >= 0', device)
    assert not selectors.matches(f'device.capacity["{HAMI}"].memory.isGreaterThan(quantity("48Gi"))', device)
    assert selectors.matches(
        f'device.attributes["{HAMI}"].driverVersion.isGreaterThan(semver("535.0.0"))', device
    )
    assert selectors.matches('device.attributes["resource.kubernetes.io"].pcieRoot.startsWith("pci")', device)
    with pytest.raises(CelError, match="not a bool"):
        selectors.matches("device.driver", device)


def test_a_tainted_device_is_skipped_unless_the_request_tolerates_it():
    rule = {
        "metadata": {"name": "r"},
        "spec": {"deviceSelector": {"driver": HAMI}, "taint": {"key": "maint", "effect": "NoSchedule"}},
    }
    placed = allocator([hami_slice("n1")], [gpumem_claim("a")], rules=[rule]).place(claim_pod("p", "a"))
    assert placed.reason == DEVICE_TAINTED
    tolerant = gpumem_claim("a")
    tolerant["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "maint", "operator": "Exists"}
    ]
    assert allocator([hami_slice("n1")], [tolerant], rules=[rule]).place(claim_pod("p", "a")).node == "n1"


def test_an_incomplete_pool_is_the_reason_when_no_device_is_left():
    half = hami_slice("n1", pool={"name": "n1", "generation": 1, "resourceSliceCount": 2})
    placed = allocator([half], [gpumem_claim("a")]).place(claim_pod("p", "a"))
    assert placed.reason == POOL_INCOMPLETE


def test_match_attribute_keeps_a_two_card_claim_under_one_pcie_root():
    root = "resource.kubernetes.io/pcieRoot"
    claim = gpumem_claim("pair", count=2, constraints=[{"matchAttribute": root}])
    cycle = allocator([hami_slice("n1", cards=4)], [claim])
    # the first root's cards are busy: the pair must go to the second root, never across
    cycle.cluster.node("n1").shift([("GPU-n1-0", 16000, 0)], 1)
    cycle.cluster.node("n1").touch()
    placed = cycle.place(claim_pod("p", "pair", annotations=SPREAD))
    assert sorted(r["device"] for r in placed.results["pair"]) == ["hami-gpu-2", "hami-gpu-3"]


def test_distinct_attribute_that_cannot_hold_is_unsatisfied():
    claim = gpumem_claim("pair", count=2, constraints=[{"distinctAttribute": "productName"}])
    placed = allocator([hami_slice("n1")], [claim]).place(claim_pod("p", "pair"))
    assert placed.reason == CONSTRAINT_UNSATISFIED


def test_first_available_tries_the_subrequests_in_order():
    claim = gpumem_claim("a")
    exactly = claim["spec"]["devices"]["requests"][0].pop("exactly")
    big = copy.deepcopy(exactly)
    big["capacity"]["requests"]["memory"] = "40000Mi"
    claim["spec"]["devices"]["requests"][0]["firstAvailable"] = [
        {"name": "big", **big},
        {"name": "small", **exactly},
    ]
    placed = allocator([hami_slice("n1", memory_gib=16)], [claim]).place(claim_pod("p", "a"))
    assert placed.results["a"][0]["request"] == "gpu/small"


def test_an_allocated_claim_pins_its_pod_to_its_node_and_only_adds_it_to_reserved_for():
    shared = gpumem_claim("shared")
    cycle = allocator([hami_slice("n1"), hami_slice("n2")], [shared])
    first = cycle.place(claim_pod("p1", "shared"))
    shared["status"] = first.status("shared", cycle.classes)
    again = allocator([hami_slice("n1"), hami_slice("n2")], [shared]).place(claim_pod("p2", "shared"))
    assert again.node == first.node
    status = again.status("shared", cycle.classes)
    assert [r["name"] for r in status["reservedFor"]] == ["p1", "p2"] and "allocation" not in status


def test_a_scenario_in_api_form_decides_in_order_and_shows_the_claim_statuses():
    from scheduling.engine.scenario import run_scenario

    raw = {
        "config": {"gpu_scheduler_policy": "binpack"},
        "resourceSlices": [hami_slice("n1", memory_gib=24)],
        "deviceClasses": [device_class()],
        "resourceClaims": [gpumem_claim("a"), gpumem_claim("b"), gpumem_claim("c", memory_mib=30000)],
        "pods": [claim_pod("pa", "a"), claim_pod("pb", "b"), claim_pod("pc", "c")],
    }
    result = run_scenario(raw)
    placed = {p["name"]: p for p in result["pods"]}
    assert placed["pa"]["claims"]["a"][0]["device"] == placed["pb"]["claims"]["b"][0]["device"]
    assert placed["pc"]["status"] == "pending" and "CardInsufficientMemory" in placed["pc"]["message"]
    statuses = {c["name"]: c["status"] for c in result["resourceClaims"]}
    assert statuses["a"]["reservedFor"][0]["name"] == "pa" and statuses["c"] is None


def test_a_request_above_the_capacity_policy_leaves_the_device_out():
    slice_ = hami_slice("n1", memory_gib=16)
    slice_["spec"]["devices"][0]["capacity"]["cores"]["requestPolicy"]["validRange"]["max"] = "50"
    placed = allocator([slice_], [gpumem_claim("a", cores=60)]).place(claim_pod("p", "a"))
    assert placed.results["a"][0]["device"] == "hami-gpu-1"
    slice_["spec"]["devices"][1]["capacity"]["cores"]["requestPolicy"]["validRange"]["max"] = "50"
    placed = allocator([slice_], [gpumem_claim("a", cores=60)]).place(claim_pod("p", "a"))
    assert placed.reason == "CapacityPolicyInvalid"


def test_simulate_reads_the_dra_example_in_api_form():
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "manage.py", "simulate", "examples/dra-hami.yaml"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    pods = {p["name"]: p for p in json.loads(done.stdout)["pods"]}
    # binpack shares gpu-0 of gpu-node-1 (gpu-1 is cordoned); the H100 selector picks gpu-node-2
    assert (
        pods["train-a"]["claims"]["train-a"][0]["device"] == pods["train-b"]["claims"]["train-b"][0]["device"]
    )
    assert pods["infer"]["node"] == "gpu-node-2"
    assert pods["infer"]["claims"]["infer-h100"][0]["consumedCapacity"] == {"memory": "4000Mi", "cores": "30"}


def test_a_device_whose_capacity_is_not_a_quantity_is_skipped_naming_the_field():
    slice_ = hami_slice("n1")
    slice_["spec"]["devices"][0]["capacity"]["memory"]["value"] = "lots"
    inventory = read_inventory([slice_])
    assert [d.name for d in inventory.devices] == ["hami-gpu-1"]
    assert inventory.skipped[f"{HAMI}/n1/hami-gpu-0"] == "capacity.memory.value: not a quantity"


def test_numa_bind_on_the_pod_keeps_a_two_card_claim_on_one_numa_node():
    cycle = allocator([hami_slice("n1", cards=4, memory_gib=16)], [gpumem_claim("pair", count=2)])
    cycle.cluster.node("n1").shift([("GPU-n1-0", 16000, 0)], 1)
    cycle.cluster.node("n1").touch()
    loose = cycle.place(claim_pod("p", "pair", annotations=SPREAD))
    assert sorted(r["device"] for r in loose.results["pair"]) == ["hami-gpu-1", "hami-gpu-2"]  # across NUMA
    cycle.scheduler.unassume(loose.decision)
    bound = cycle.place(claim_pod("q", "pair", annotations={**SPREAD, "nvidia.com/numa-bind": "true"}))
    assert sorted(r["device"] for r in bound.results["pair"]) == ["hami-gpu-2", "hami-gpu-3"]


def _allocated(claim: dict, node: str, device: str, memory_mib: int, uid: str, name: str) -> dict:
    claim = copy.deepcopy(claim)
    result = {"request": "gpu", "driver": HAMI, "pool": node, "device": device, "shareID": "s"}
    result["consumedCapacity"] = {"memory": f"{memory_mib}Mi", "cores": "0"}
    claim["status"] = {
        "allocation": {"devices": {"results": [result]}},
        "reservedFor": [{"resource": "pods", "name": name, "uid": uid}],
    }
    return claim


def _bound(name: str, node: str, priority: int = 0, annotations=None) -> dict:
    pod = claim_pod(name, name, annotations=annotations)
    pod["spec"]["nodeName"], pod["spec"]["priority"] = node, priority
    return pod


def test_a_gang_that_does_not_fit_whole_takes_every_placement_back():
    gang = {"hami.io/group-name": "g"}
    claims = [gpumem_claim(f"w{i}", memory_mib=16000) for i in range(3)]
    found = allocator([hami_slice("n1", cards=2, memory_gib=16)], claims)
    pods = [claim_pod(f"w{i}", f"w{i}", annotations=gang) for i in range(3)]
    placements = found.place_gang(pods, 3, "default/g")
    assert [p.reason for p in placements] == ["GangUnschedulable"] * 3
    assert "2 of 3 pending members fit, 3 must" in placements[0].message
    assert all(not c.get("status") for c in found.claims.values())  # nothing kept
    assert found.place(claim_pod("w0", "w0")).placed  # the cards are free again
    assert [p.placed for p in found.place_gang(pods[1:], 1, "default/g")] == [True, False]


def test_preemption_takes_the_fewest_lowest_priority_tenants_that_free_enough():
    slices = [hami_slice("n1", cards=1, memory_gib=16), hami_slice("n2", cards=1, memory_gib=16)]
    tenants = {
        ("n1", "a"): (6000, 5),
        ("n1", "b"): (6000, 1),
        ("n2", "c"): (14000, 3),
    }
    claims, pods = [], []
    for (node, name), (memory, priority) in tenants.items():
        claims.append(_allocated(gpumem_claim(name), node, "hami-gpu-0", memory, f"uid-{name}", name))
        pods.append(_bound(name, node, priority))
    found = allocator(slices, [*claims, gpumem_claim("high", memory_mib=9000)])
    high = claim_pod("high", "high")
    high["spec"]["priority"] = 10
    assert not found.place(high).placed
    placement, victims = found.preempt(high, tenants_of(pods, found.claims, found.inventory))
    # n1: b (priority 1) alone frees 10384 MiB; n2: c alone too, but at priority 3
    assert [v.key for v in victims] == ["default/b"] and placement.node == "n1"
    assert "status" not in found.claims[("default", "b")] or not found.claims[("default", "b")]["status"]
    low = claim_pod("low", "high")
    low["spec"]["priority"] = 0
    assert found.preempt(low, tenants_of(pods, found.claims, found.inventory))[1] == []


def test_a_non_preemptible_tenant_or_a_shared_claim_is_not_a_victim():
    slices = [hami_slice("n1", cards=1, memory_gib=16)]
    kept = _allocated(gpumem_claim("kept"), "n1", "hami-gpu-0", 8000, "uid-kept", "kept")
    shared = _allocated(gpumem_claim("shared"), "n1", "hami-gpu-0", 8000, "uid-s1", "s1")
    shared["status"]["reservedFor"].append({"resource": "pods", "name": "s2", "uid": "uid-s2"})
    pods = [
        _bound("kept", "n1", annotations={"hami.io/preemptible": "false"}),
        *(_bound(n, "n1") for n in ("s1", "s2")),
    ]
    for pod in pods[1:]:
        pod["spec"]["resourceClaims"][0]["resourceClaimName"] = "shared"
    found = allocator(slices, [kept, shared, gpumem_claim("high", memory_mib=8000)])
    tenants = tenants_of(pods, found.claims, found.inventory)
    assert [(t.name, t.preemptible) for t in tenants] == [("kept", False)]  # s1, s2 share theirs
    high = claim_pod("high", "high")
    high["spec"]["priority"] = 10
    assert found.preempt(high, tenants)[1] == []


def test_released_status_drops_the_gone_pods_and_deallocates_a_claim_left_to_nobody():
    claim = _allocated(gpumem_claim("c"), "n1", "hami-gpu-0", 8000, "uid-1", "p1")
    claim["status"]["reservedFor"].append({"resource": "pods", "name": "p2", "uid": "uid-2"})
    assert released_status(claim, {"uid-1"})["reservedFor"] == [
        {"resource": "pods", "name": "p2", "uid": "uid-2"}
    ]
    assert released_status(claim, {"uid-1", "uid-2"}) == {}


def test_the_gang_and_preemption_example_places_the_gang_whole_and_preempts_the_low_pod():
    from pathlib import Path

    import yaml

    from scheduling.engine.scenario import run_scenario

    root = Path(__file__).resolve().parents[2]
    raw = yaml.safe_load((root / "examples" / "dra-gang-preemption.yaml").read_text())
    out = run_scenario(raw)
    pods = {p["name"]: p for p in out["pods"]}
    assert [pods[f"train-{i}"]["status"] for i in range(3)] == ["scheduled"] * 3
    assert pods["serve"]["preempted"] == ["default/batch-low"]
    assert pods["serve"]["claims"]["serve"][0]["device"] == "hami-gpu-0"
    claims = {c["name"]: c["status"] for c in out["resourceClaims"]}
    assert not claims["batch-low"].get("allocation") and not claims["batch-low"].get("reservedFor")


# Partitions (KEP-4815): NVIDIA's dynamic MIG, a whole A100 and its 1g/2g/3g placements
# drawing on one counter set per GPU (8 memory slices, 98 multiprocessors).

MIG_CLASSES = {
    "gpu.nvidia.com": nvidia_class("gpu.nvidia.com", "gpu"),
    "mig.nvidia.com": nvidia_class("mig.nvidia.com", "mig"),
}
COUNTER_SET = (NVIDIA, "n1", "gpu-0-counter-set")


def mig_allocator(claims, gpus: int = 1, allocated=()) -> DraAllocator:
    return allocator(mig_slices("n1", gpus), [*claims, *allocated], classes=MIG_CLASSES)


def profile(name: str) -> str:
    return f"device.attributes['{NVIDIA}'].profile == '{name}'"


def drawn(inventory, devices: list[str]) -> dict[str, int]:
    """What `devices` (names) draw together from gpu-0's counter set."""
    by_name = {d.name: d for d in inventory.devices}
    total: dict[str, int] = {}
    for name in devices:
        for consumption in by_name[name].consumes:
            for counter, amount in consumption.counters.items():
                total[counter] = total.get(counter, 0) + int(amount)
    return total


def test_counter_sets_and_the_devices_drawing_on_them_are_read_in_either_slice_layout():
    for together in (False, True):  # 1.34+: a slice of their own; 1.32-1.33: beside the devices
        inventory = read_inventory(mig_slices("n1", together=together))
        assert inventory.skipped == {} and inventory.incomplete == {}
        assert inventory.counters[COUNTER_SET]["multiprocessors"] == 98
        assert len(inventory.counters[COUNTER_SET]) == 9
        by_name = {d.name: d for d in inventory.devices}
        assert len(by_name) == 1 + 7 + 3 + 2
        whole = by_name["gpu-0"]
        assert (whole.uuid, whole.memory, whole.slots, whole.partition) == ("GPU-n1-0", 40960, 1, True)
        part = by_name["gpu-0-mig-2g.10gb-1"]
        assert part.consumes == (
            Consumption(
                "gpu-0-counter-set", {"memory-slice-2": 1, "memory-slice-3": 1, "multiprocessors": 28}
            ),
        )
        assert (part.uuid, part.memory, part.type) == (
            f"{NVIDIA}/n1/gpu-0-mig-2g.10gb-1",  # no uuid of its own before it is created
            10240,
            "NVIDIA A100-SXM4-40GB",
        )
    hami = read_inventory([hami_slice("n1")]).devices[0]
    assert not hami.partition and hami.card().uuid == "GPU-n1-0"  # a device of its own: unchanged


def test_a_device_naming_a_counter_set_or_counter_its_pool_lacks_is_skipped_naming_the_field():
    counters, devices = mig_slices("n1")
    first, second = devices["spec"]["devices"][1:3]
    first["consumesCounters"][0]["counterSet"] = "gpu-9-counter-set"
    second["consumesCounters"][0]["counters"]["tensor-cores"] = {"value": "1"}
    skipped = read_inventory([counters, devices]).skipped
    assert skipped == {
        f"{NVIDIA}/n1/{first['name']}": "consumesCounters[0].counterSet: no counter set 'gpu-9-counter-set' in pool n1",
        f"{NVIDIA}/n1/{second['name']}": (
            "consumesCounters[0].counters.tensor-cores: not a counter of counter set 'gpu-0-counter-set'"
        ),
    }
    counters["spec"]["sharedCounters"][0]["counters"]["multiprocessors"]["value"] = "many"
    skipped = read_inventory([counters, devices]).skipped
    assert skipped[f"{NVIDIA}/n1/gpu-0"].endswith(
        "spec.sharedCounters[0].counters.multiprocessors.value: not a quantity"
    )
    assert read_inventory([devices]).incomplete  # the counters' slice is part of the pool


def test_a_uuid_several_devices_publish_names_none_of_their_cards():
    slices = mig_slices("n1")
    for device in slices[1]["spec"]["devices"]:
        device["attributes"]["uuid"] = {"string": "GPU-n1-0"}  # as NVIDIA's vGPU partitions do
    uuids = [d.uuid for d in read_inventory(slices).devices]
    assert len(set(uuids)) == len(uuids) and f"{NVIDIA}/n1/gpu-0" in uuids


def test_the_whole_gpu_and_its_partitions_exclude_each_other():
    claims = [device_claim("whole", "gpu.nvidia.com"), device_claim("part", "mig.nvidia.com")]
    cycle = mig_allocator(claims)
    whole = cycle.place(claim_pod("pw", "whole"))
    assert [r["device"] for r in whole.results["whole"]] == ["gpu-0"]
    part = cycle.place(claim_pod("pp", "part"))
    assert part.reason == COUNTERS_EXHAUSTED and "12 CountersExhausted" in part.message

    cycle = mig_allocator(claims)
    part = cycle.place(claim_pod("pp", "part"))
    (result,) = part.results["part"]
    assert result["device"].startswith("gpu-0-mig-") and "consumedCapacity" not in result
    whole = cycle.place(claim_pod("pw", "whole"))
    assert whole.reason == COUNTERS_EXHAUSTED and "1 CountersExhausted" in whole.message
    cycle.scheduler.unassume(part.decision)  # the partition gone, the whole GPU fits again
    assert cycle.place(claim_pod("pw", "whole")).placed


def test_counters_are_never_exceeded_across_several_pods():
    asked = ["3g.20gb", "1g.5gb", "2g.10gb", "1g.5gb", "2g.10gb", "3g.20gb", "1g.5gb", "1g.5gb"]
    claims = [device_claim(f"c{i}", "mig.nvidia.com", selectors=[profile(p)]) for i, p in enumerate(asked)]
    cycle = mig_allocator([*claims, device_claim("whole", "gpu.nvidia.com")])
    placements = [cycle.place(claim_pod(f"p{i}", f"c{i}")) for i in range(len(asked))]
    taken = [p.results[f"c{i}"][0]["device"] for i, p in enumerate(placements) if p.placed]
    assert len(taken) >= 4 and len(set(taken)) == len(taken)
    total = drawn(cycle.inventory, taken)
    assert total["multiprocessors"] <= 98 and all(total.get(f"memory-slice-{n}", 0) <= 1 for n in range(8))
    assert {p.reason for p in placements if not p.placed} <= {COUNTERS_EXHAUSTED}
    assert cycle.place(claim_pod("pw", "whole")).reason == COUNTERS_EXHAUSTED

    sevens = [device_claim(f"s{i}", "mig.nvidia.com", selectors=[profile("1g.5gb")]) for i in range(8)]
    cycle = mig_allocator([*sevens, device_claim("big", "mig.nvidia.com", selectors=[profile("2g.10gb")])])
    placed = [cycle.place(claim_pod(f"s{i}", f"s{i}")) for i in range(8)]
    assert [p.placed for p in placed] == [True] * 7 + [False]  # seven 1g draw all 98 multiprocessors
    assert placed[7].reason == COUNTERS_EXHAUSTED
    assert cycle.place(claim_pod("big", "big")).reason == COUNTERS_EXHAUSTED


def test_devices_chosen_together_for_one_claim_stay_within_the_counters():
    either = f"device.attributes['{NVIDIA}'].type == 'gpu' || {profile('3g.20gb')}"
    classes = {**MIG_CLASSES, "nvidia": device_class("nvidia", f"device.driver == '{NVIDIA}'")}
    claims = [device_claim("two", "nvidia", count=2, selectors=[either])]
    cycle = allocator(mig_slices("n1"), claims, classes=classes)
    two = cycle.place(claim_pod("p2", "two"))  # the whole GPU with a 3g would exceed: two 3g
    assert sorted(r["device"] for r in two.results["two"]) == ["gpu-0-mig-3g.20gb-0", "gpu-0-mig-3g.20gb-1"]
    claims = [device_claim("three", "nvidia", count=3, selectors=[either])]
    cycle = allocator(mig_slices("n1"), claims, classes=classes)
    three = cycle.place(claim_pod("p3", "three"))  # each fits alone, no three together
    assert three.reason == COUNTERS_EXHAUSTED and "shared counters together" in three.message


def test_claims_allocated_already_count_against_the_counters():
    def allocated(name: str, device: str) -> dict:
        claim = device_claim(name, "mig.nvidia.com")
        result = {"request": "gpu", "driver": NVIDIA, "pool": "n1", "device": device}
        claim["status"] = {"allocation": {"devices": {"results": [result]}}}
        return claim

    theirs = [allocated("k1", "gpu-0-mig-1g.5gb-0"), allocated("k2", "gpu-0-mig-2g.10gb-1")]
    claims = [
        device_claim("whole", "gpu.nvidia.com"),
        device_claim("two", "mig.nvidia.com", selectors=[profile("2g.10gb")]),
        device_claim("three", "mig.nvidia.com", selectors=[profile("3g.20gb")]),
    ]
    cycle = mig_allocator(claims, allocated=theirs)
    assert cycle.place(claim_pod("pw", "whole")).reason == COUNTERS_EXHAUSTED
    two = cycle.place(claim_pod("p2", "two"))  # slice 0 and 2g-1 are held: only 2g-2 is left
    assert [r["device"] for r in two.results["two"]] == ["gpu-0-mig-2g.10gb-2"]
    three = cycle.place(claim_pod("p3", "three"))  # slices 0-3 and 4-5 drawn
    assert three.reason == COUNTERS_EXHAUSTED
    assert drawn(cycle.inventory, ["gpu-0-mig-1g.5gb-0", "gpu-0-mig-2g.10gb-1", "gpu-0-mig-2g.10gb-2"]) == {
        "memory-slice-0": 1,
        "memory-slice-2": 1,
        "memory-slice-3": 1,
        "memory-slice-4": 1,
        "memory-slice-5": 1,
        "multiprocessors": 70,
    }


def test_a_second_gpu_takes_what_the_first_gpus_counters_refuse():
    claims = [device_claim("whole", "gpu.nvidia.com"), device_claim("part", "mig.nvidia.com")]
    cycle = mig_allocator(claims, gpus=2)
    part = cycle.place(claim_pod("pp", "part"))
    parent = part.results["part"][0]["device"].split("-mig-")[0]
    whole = cycle.place(claim_pod("pw", "whole"))
    assert [r["device"] for r in whole.results["whole"]] == [{"gpu-0": "gpu-1", "gpu-1": "gpu-0"}[parent]]


def test_the_pods_bound_beside_count_cpu_memory_and_ports_for_a_claim_pod():
    """The pass's node rules count the pods bound on each node (`DraAllocator.beside`): a
    claim pod asking 4 cpu does not go where a bound pod left 2 of 8, nor where its host port
    is taken."""
    slices = [hami_slice("n1"), hami_slice("n2"), hami_slice("n3")]
    nodes = [
        {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"}}}
        for name in ("n1", "n2", "n3")
    ]
    inventory = read_inventory(slices)
    cycle = DraAllocator(
        inventory, {CLASS: device_class()}, {("default", "a"): gpumem_claim("a")}, nodes=nodes
    )

    def bound(name: str, node: str, cpu: str, port: int | None = None) -> dict:
        container: dict = {"name": "main", "resources": {"requests": {"cpu": cpu}}}
        if port is not None:
            container["ports"] = [{"containerPort": port, "hostPort": port, "protocol": "TCP"}]
        return {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [container]},
            "status": {"phase": "Running"},
        }

    ended = bound("done", "n3", "8")
    ended["status"]["phase"] = "Succeeded"
    assert cycle.beside([bound("busy", "n1", "6"), bound("web", "n2", "1", port=8080), ended]) == []
    pod = claim_pod("p", "a", annotations=BINPACK)
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "4"}
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}]
    placed = cycle.place(pod)
    assert placed.node == "n3", placed.message  # n1: 2 cpu left; n2: port 8080 taken; n3's pod ended
    crowded = DraAllocator(
        inventory, {CLASS: device_class()}, {("default", "a"): gpumem_claim("a")}, nodes=nodes
    )
    crowded.beside([bound(f"b{i}", f"n{i}", "6") for i in (1, 2, 3)])
    assert crowded.place(claim_pod("q", "a")).placed  # no cpu asked: the GPU claim alone still fits
    asking = claim_pod("r", "a")
    asking["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "4"}
    refused = crowded.place(asking)
    assert not refused.placed and "NodeResourcesFit 3" in refused.message, refused.message
