"""NVIDIA dynamic MIG as HAMi v2.10 schedules it (`families.mig`).

The cases mirror HAMi v2.10.0's own (pkg/device/nvidia/mig_capability_test.go,
mig_topology_test.go, mig_profiles_test.go, device_test.go, pkg/device/devices_test.go,
pkg/scheduler/mig_allocation_test.go): their facts, our code.
"""

from __future__ import annotations

import json

import pytest

from scheduling.engine.encoding import ALLOCATED
from scheduling.engine.errors import ScenarioError, ScenarioProblems
from scheduling.engine.explain import hint_words
from scheduling.engine.families import NVIDIA
from scheduling.engine.families.mig import (
    ALLOCATIONS,
    Geometry,
    Instance,
    Placement,
    Profile,
    Reservation,
    decode_reservations,
    encode_reservations,
    read_profiles,
)

from .builders import ask, container, node, pod, run

P = Placement


def a100_profiles(memory_1g: int = 5120) -> tuple[Profile, ...]:
    """HAMi's `a100MigProfiles()`: what NVML reports for an A100-40GB's three smaller profiles."""
    return (
        Profile("1g.5gb", memory_1g, 14, 1, tuple(P(i, 1) for i in range(7))),
        Profile("2g.10gb", 10240, 28, 2, (P(0, 2), P(2, 2), P(4, 2))),
        Profile("3g.20gb", 20480, 42, 3, (P(0, 4), P(4, 4))),
    )


def held(*pairs: tuple[str, Placement]) -> tuple[Instance, ...]:
    return tuple(Instance(name, placement) for name, placement in pairs)


THREE_2G = held(("2g.10gb", P(0, 2)), ("2g.10gb", P(2, 2)), ("2g.10gb", P(4, 2)))

#: An A100-40GB as HAMi v2.10's device plugin registers it in MIG mode (the wire form).
A100_WIRE = [
    {"name": "1g.5gb", "memoryMB": 4864, "core": 15, "sliceCount": 1, "placements": [
        {"start": i, "size": 1} for i in range(7)
    ]},
    {"name": "2g.10gb", "memoryMB": 9856, "core": 29, "sliceCount": 2, "placements": [
        {"start": 0, "size": 2}, {"start": 2, "size": 2}, {"start": 4, "size": 2}
    ]},
    {"name": "3g.20gb", "memoryMB": 19968, "core": 43, "sliceCount": 3, "placements": [
        {"start": 0, "size": 4}, {"start": 4, "size": 4}
    ]},
    {"name": "7g.40gb", "memoryMB": 40192, "core": 100, "sliceCount": 7, "placements": [{"start": 0, "size": 8}]},
]  # fmt: skip


def mig_card(uuid: str = "GPU-mig0", instances: list | None = None, **fields) -> dict:
    entry = {"uuid": uuid, "memory": 40960, "slots": 7, "mode": "mig", "migProfiles": A100_WIRE, **fields}
    if instances is not None:
        entry["migInstances"] = [
            {"profile": name, "placement": {"start": start, "size": size}} for name, start, size in instances
        ]
    return entry


def mig_pod(name: str, mem: int, mode: str | None = "mig", gpu: int = 1) -> dict:
    return pod(name, {"nvidia.com/vgpu-mode": mode} if mode else None, ask(gpu=gpu, mem=mem))


# --- choosing a profile and a placement (HAMi's selectMigCandidate, selectMigPlacement) ---


def test_the_smallest_profile_holding_the_ask_at_its_first_free_placement():
    """HAMi: TestAddResourceUsageUsesReportedProfileAndPlacement: 10,000 MiB takes 2g.10gb at 0."""
    instance = Geometry(a100_profiles()).choose(10000, 0)
    assert instance == Instance("2g.10gb", P(0, 2))
    assert (instance.memory, instance.cores) == (10240, 28)


def test_placements_reported_free_are_the_capacity():
    """HAMi: TestCustomFilterUsesReportedPlacementCapacity: a fourth 2g does not fit three
    held; a 1g still fits the slice they leave."""
    geometry = Geometry(a100_profiles(), THREE_2G)
    assert geometry.choose(10000, 0) is None
    assert geometry.choose(5000, 0) == Instance("1g.5gb", P(6, 1))


def test_what_this_pod_took_counts_on_that_card_only():
    """HAMi: TestCustomFilterIgnoresQueuedAllocationsForOtherGPUs: an instance this pod took on
    the same card uses its last slice; taken elsewhere it does not."""
    geometry = Geometry(a100_profiles(), THREE_2G)
    assert geometry.choose(5000, 0, taken=()) is not None
    assert geometry.choose(5000, 0, taken=[P(6, 1)]) is None


def test_balanced_packing_puts_1g_and_3g_high_and_the_rest_low():
    """HAMi: TestSelectMigPlacementUsesBalancedPacking: 3g at 4, 2g at 0, then 1g at 3, then 2."""
    geometry = Geometry(a100_profiles())
    for memory, name, start in (
        (20000, "3g.20gb", 4),
        (10000, "2g.10gb", 0),
        (5000, "1g.5gb", 3),
        (5000, "1g.5gb", 2),
    ):
        instance = geometry.choose(memory, 0)
        assert instance is not None and (instance.profile, instance.placement.start) == (name, start)
        geometry = geometry.take(instance)


def test_no_placement_overlaps_two_held_3g():
    """HAMi: TestCanPlaceMigProfilesA100: with both 3g placements held nothing else fits."""
    geometry = Geometry(a100_profiles(), held(("3g.20gb", P(0, 4)), ("3g.20gb", P(4, 4))))
    assert geometry.choose(1, 0) is None
    assert geometry.free_profiles() == []


def test_the_ask_cores_count_too():
    """Beyond HAMi (which picks by MiB alone): 1,000 MiB with 20 cores needs 2g (28 cores)."""
    assert Geometry(a100_profiles()).choose(1000, 20).profile == "2g.10gb"
    assert Geometry(a100_profiles()).choose(1000, 0).profile == "1g.5gb"


def test_freeing_an_instance_gives_its_slices_back():
    geometry = Geometry(a100_profiles(), THREE_2G)
    assert geometry.free(Instance("2g.10gb", P(2, 2))).choose(10000, 0) == Instance("2g.10gb", P(2, 2))
    assert geometry.free_memory(10240, 28).choose(10000, 0) == Instance("2g.10gb", P(4, 2))


# --- the register and the reservations on the wire --------------------------------------


def test_a_profile_on_the_wire_is_hamis_compact_form():
    """HAMi: TestMigProfileUsesCompactWireFormat (instanceCount is not on the wire)."""
    profile = Profile("1g.5gb", 4864, 15, 1, (P(6, 1),))
    want = '{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":6,"size":1}]}'
    assert json.dumps(profile.as_wire(), separators=(",", ":")) == want


def test_the_register_of_a_mig_card_carries_its_profiles():
    """HAMi: TestGetNodeDevices_MigProfilesFromNode, the annotation byte for byte (keys the
    scheduler does not read, `instanceCount` and `multiprocessorCount`, ignored)."""
    register = (
        '[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100-SXM4-40GB","numa":0,'
        '"health":true,"mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":5120,"core":14,"sliceCount":1,'
        '"instanceCount":7,"multiprocessorCount":14,"placements":[{"start":6,"size":1}]}]}]'
    )
    (found,) = NVIDIA.decode_register(register)
    assert (found.mode, found.slots, found.memory) == ("mig", 7, 40960)
    assert found.mig_profiles == (Profile("1g.5gb", 5120, 14, 1, (P(6, 1),)),)
    geometry = NVIDIA.partition(found)
    assert geometry is not None and geometry.choose(5000, 0) == Instance("1g.5gb", P(6, 1))


def test_a_card_of_another_mode_is_not_cut_and_bad_profiles_name_the_field():
    (plain,) = NVIDIA.decode_register('[{"id":"GPU-0","count":10,"devmem":15360,"mode":"hami-core"}]')
    assert NVIDIA.partition(plain) is None
    with pytest.raises(ScenarioError) as bad:
        NVIDIA.decode_register(
            '[{"id":"GPU-0","mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":"5120"}]}]'
        )
    assert bad.value.where == "hami.io/node-nvidia-register[0].migProfiles[0].memoryMB"
    with pytest.raises(ScenarioError, match="at least 1 slice"):
        read_profiles([{"name": "1g.5gb", "placements": [{"start": 0, "size": 0}]}], "p")


def test_the_reservation_annotation_is_byte_for_byte_hamis():
    """HAMi: TestEncodeDecodeMigAllocations, and the form its DecodeMigAllocations tests read."""
    value = encode_reservations([Reservation(0, 0, "GPU-a", "1g.5gb", P(6, 1))])
    assert value == (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":6,"size":1}}]'
    )
    assert decode_reservations(value) == [Reservation(0, 0, "GPU-a", "1g.5gb", P(6, 1))]
    assert encode_reservations([]) == ""


def test_reservations_read_as_the_device_plugin_reads_them():
    """HAMi: TestDecodeMigAllocationsRejectsDuplicateDeviceIndex, ...PreservesZeroRuntimeInstanceIDs,
    ...RejectsPartialRuntimeIdentity."""
    twice = (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":6,"size":1}},'
        '{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":5,"size":1}}]'
    )
    with pytest.raises(ScenarioError, match="reserved twice"):
        decode_reservations(twice)
    runtime = (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":0,"size":2},'
        '"migUUID":"MIG-a","gpuInstanceID":4,"computeInstanceID":0}]'
    )
    assert decode_reservations(runtime)[0].placement == P(0, 2)
    partial = (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":0,"size":2},'
        '"migUUID":"MIG-a"}]'
    )
    with pytest.raises(ScenarioError, match="partial runtime identity"):
        decode_reservations(partial)


# --- the engine: MIG cards get instances, not shares ---------------------------------------


def test_a_pod_on_a_mig_card_gets_the_smallest_profile_and_hamis_annotations():
    """The issue's case: on an A100 in MIG mode a plain pod and a `vgpu-mode: mig` pod of
    3,000 MiB each get 1g.5gb (4,864 MiB, 15 cores), the allocation string naming the
    profile's MiB and cores and the reservation naming its placement, as HAMi writes them."""
    plain, asked = run([node("a100", mig_card())], [mig_pod("plain", 3000, None), mig_pod("asked", 3000)])
    assert plain["allocated"] == "GPU-mig0,NVIDIA,4864,15:;"
    assert plain["annotations"] == {
        ALLOCATIONS: '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-mig0","profile":"1g.5gb",'
        '"placement":{"start":6,"size":1}}]'
    }
    assert asked["allocated"] == "GPU-mig0,NVIDIA,4864,15:;"
    assert json.loads(asked["annotations"][ALLOCATIONS])[0]["placement"] == {"start": 5, "size": 1}
    assert plain["containers"][0]["devices"][0]["profile"] == "1g.5gb"


def test_a_card_holds_no_profiles_beyond_its_slices():
    """Three 2g.10gb fill slices 0-5: a fourth is refused although 10,000 MiB are free, with
    HAMi's reason, and the hint names the profile and what is left."""
    pods = [mig_pod(f"p{i}", 9000) for i in range(4)]
    outs = run([node("a100", mig_card())], pods)
    assert [out["status"] for out in outs] == ["scheduled"] * 3 + ["pending"]
    assert [json.loads(out["annotations"][ALLOCATIONS])[0]["placement"]["start"] for out in outs[:3]] == [
        0,
        2,
        4,
    ]
    last = outs[3]
    assert last["failed_nodes"] == {"a100": "1/1 CardMigTopologyInfeasible"}
    (hint,) = last["closest_nodes"][0]["hints"]
    assert hint_words(hint) == "a100: GPU-mig0 needs 2g.10gb, only 1g.5gb slices left"
    assert last["verdict"]["code"] == "CardMigTopologyInfeasible"


def test_instances_held_by_tenants_count():
    """A 3g.20gb held at slices 4-7 and a 1g at 3: 12,000 MiB needs 3g.20gb at 0-3, taken."""
    card = mig_card(instances=[("3g.20gb", 4, 4), ("1g.5gb", 3, 1)])
    (out,) = run([node("a100", card)], [mig_pod("big", 12000)])
    assert out["status"] == "pending"
    (hint,) = out["closest_nodes"][0]["hints"]
    assert hint["cards"][0]["needs"] == "3g.20gb" and hint["cards"][0]["left"] == ["1g.5gb", "2g.10gb"]


def test_a_running_pods_reservation_holds_its_exact_placement():
    """HAMi: TestGetNodesUsageRestoresMigAllocationByProfileAndPlacement: a pod bound before
    the switch holds the placement its annotation names (not the one its MiB would pick)."""
    running = {
        "name": "old",
        "node": "a100",
        "containers": [container("main", ask(gpu=1, mem=9000))],
        "annotations": {
            ALLOCATED: "GPU-mig0,NVIDIA,9856,29:;",
            ALLOCATIONS: '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-mig0","profile":"2g.10gb",'
            '"placement":{"start":2,"size":2},"migUUID":"MIG-a","gpuInstanceID":7,"computeInstanceID":0}]',
        },
    }
    raw = {
        "nodes": [node("a100", mig_card())],
        "running": [running],
        "pods": [mig_pod("p0", 9000), mig_pod("p1", 9000), mig_pod("p2", 9000)],
    }
    from scheduling.engine.scenario import run_scenario

    outs = run_scenario(raw)["pods"]
    starts = [json.loads(out["annotations"][ALLOCATIONS])[0]["placement"]["start"] for out in outs[:2]]
    assert starts == [0, 4] and outs[2]["status"] == "pending"


def test_a_hami_core_pod_never_lands_on_a_mig_card_and_a_mig_pod_only_there():
    """HAMi: TestIsMIGRequest and checkType: `vgpu-mode: hami-core` refuses MIG cards (and a
    mig pod every card of another mode), a pod naming no mode takes either."""
    nodes = [node("a100", mig_card()), node("t4", {"uuid": "GPU-t4", "memory": 15360, "mode": "hami-core"})]
    core, migged = run(nodes, [mig_pod("core", 3000, "hami-core"), mig_pod("mig", 3000, "mig")])
    assert core["node"] == "t4" and "annotations" not in core
    assert migged["node"] == "a100" and ALLOCATIONS in migged["annotations"]
    (alone,) = run([node("a100", mig_card())], [mig_pod("core", 3000, "hami-core")])
    assert alone["failed_nodes"] == {"a100": "1/1 CardModeMismatch"}


def test_a_percentage_ask_is_its_share_of_the_whole_card():
    """HAMi: TestFitUsesEffectivePercentageMemoryForMigPlacement: 25% of 40,960 MiB is 10,240,
    which only a 2g holds, and only 1g slices are left."""
    card = mig_card(instances=[("2g.10gb", 0, 2), ("2g.10gb", 2, 2), ("2g.10gb", 4, 2)])
    (out,) = run([node("a100", card)], [pod("pct", None, ask(gpu=1, pct=25))])
    assert out["failed_nodes"] == {"a100": "1/1 CardMigTopologyInfeasible"}


def test_mig_nodes_are_decided_card_by_card_beside_swept_ones():
    """The columnar sweep leaves MIG nodes to the full evaluation: with plain nodes beside it,
    a MIG node is still refused by its geometry and plain nodes are still swept."""
    card = mig_card(instances=[("2g.10gb", 0, 2), ("2g.10gb", 2, 2), ("2g.10gb", 4, 2)])
    plain = [node(f"n{i}", {"uuid": f"GPU-{i}", "memory": 15360}) for i in range(3)]
    outs = run([node("a100", card), *plain], [mig_pod(f"p{i}", 10000, None) for i in range(3)])
    assert all(out["node"] != "a100" for out in outs)
    assert outs[0]["failed_nodes"]["a100"] == "1/1 CardMigTopologyInfeasible"


def test_scenario_mig_cards_are_checked_naming_the_field():
    with pytest.raises(ScenarioProblems) as bad:
        run([node("a100", mig_card(instances=[("4g.20gb", 0, 4)]))], [mig_pod("p", 1000)])
    assert "nodes[0].devices[0].migInstances[0].profile" in str(bad.value)
    with pytest.raises(ScenarioProblems) as overlap:
        run([node("a100", mig_card(instances=[("3g.20gb", 0, 4), ("2g.10gb", 2, 2)]))], [mig_pod("p", 1000)])
    assert "overlaps another instance" in str(overlap.value)
    with pytest.raises(ScenarioProblems) as plain:
        run([node("n", {"uuid": "G", "memory": 1000, "migProfiles": A100_WIRE})], [mig_pod("p", 1000)])
    assert "nodes[0].devices[0].mode" in str(plain.value)


def test_what_if_copies_and_empties_mig_cards_with_their_slices_free():
    """`add` copies a MIG node with no instance held, `empty` frees every slice: a 3g.20gb
    refused on the full card fits on each."""
    from scheduling.engine.scenario import parse_scenario
    from scheduling.engine.whatif import apply_edits, decide_all, parse_edits, parse_whatif

    full = mig_card(instances=[("3g.20gb", 0, 4), ("3g.20gb", 4, 4)])
    cluster, config, _ = parse_scenario({"nodes": [node("a100", full)], "pods": []})
    pods, _ = parse_whatif({"pods": [mig_pod(f"p{i}", 15000) for i in range(3)]})
    assert decide_all(cluster, config, pods[:1])[0].status == "pending"
    cluster, config = apply_edits(cluster, config, parse_edits({"add": [{"like": "a100", "count": 1}]}))
    first, second = decide_all(cluster, config, pods[:2])
    assert first.node == "a100-whatif-1" and second.node == "a100-whatif-1"
    cluster, config = apply_edits(cluster, config, parse_edits({"empty": ["a100"]}))
    assert decide_all(cluster, config, pods[2:])[0].node == "a100"


@pytest.mark.parametrize("seed", range(25))
def test_random_mig_worlds_never_overlap_slices_nor_mix_modes(seed):
    """Random clusters of MIG and shared cards, random asks and modes, decided in order: on
    every MIG card the instances held (before and given) never overlap and each sits at one
    of its profile's placements with the profile's MiB; a `mig` pod lands on MIG cards only,
    a `hami-core` pod never on one."""
    import random

    rnd = random.Random(seed)
    profiles = {p["name"]: p for p in A100_WIRE}
    nodes, held_before = [], {}
    for n in range(rnd.randint(2, 12)):
        cards = []
        for c in range(rnd.randint(1, 3)):
            uuid = f"GPU-{n}-{c}"
            if rnd.random() < 0.5:
                geometry, instances = Geometry(read_profiles(A100_WIRE, "p")), []
                for _ in range(rnd.randint(0, 4)):
                    found = geometry.choose(rnd.choice((4000, 9000, 19000)), 0)
                    if found is not None:
                        geometry = geometry.take(found)
                        instances.append((found.profile, found.placement.start, found.placement.size))
                held_before[uuid] = [P(start, size) for _, start, size in instances]
                cards.append(mig_card(uuid, instances, index=c))
            else:
                cards.append({"uuid": uuid, "memory": 40960, "index": c, "mode": "hami-core"})
        nodes.append(node(f"n{n}", *cards))
    modes = (None, "mig", "hami-core")
    pods = [
        mig_pod(f"p{i}", rnd.choice((1000, 4000, 9000, 15000, 30000)), rnd.choice(modes)) for i in range(20)
    ]
    outs = run(nodes, pods)
    held = {uuid: list(placements) for uuid, placements in held_before.items()}
    for spec, out in zip(pods, outs, strict=True):
        if out["status"] != "scheduled":
            continue
        mode = (spec.get("annotations") or {}).get("nvidia.com/vgpu-mode")
        (device,) = out["containers"][0]["devices"]
        on_mig = device["uuid"] in held_before
        assert (mode != "mig" or on_mig) and (mode != "hami-core" or not on_mig), (mode, device)
        if not on_mig:
            assert "annotations" not in out
            continue
        (reservation,) = json.loads(out["annotations"][ALLOCATIONS])
        placement = P(reservation["placement"]["start"], reservation["placement"]["size"])
        profile = profiles[reservation["profile"]]
        assert {"start": placement.start, "size": placement.size} in profile["placements"]
        assert device["memory"] == profile["memoryMB"] and device["cores"] == profile["core"]
        assert not any(placement.overlaps(other) for other in held[device["uuid"]]), (seed, out["name"])
        held[device["uuid"]].append(placement)
