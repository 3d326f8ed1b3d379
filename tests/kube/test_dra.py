"""DRA through the stand-in API server and the real `kubernetes` client: HAMi-DRA nodes as
HAMi's driver publishes them, claims as HAMi-DRA's webhook writes them, each claim's status
as HAMi's driver reads it, then the Binding."""

from __future__ import annotations

import pytest

from kube.api import RBAC_RULES
from kube.dra import DRA_RBAC_RULES, DraCycle
from kube.events import EventRecorder
from tests.engine.dra_objects import (
    HAMI,
    claim_devices,
    claim_pod,
    device_claim,
    device_class,
    gpumem_claim,
    hami_slice,
    mig_slices,
    nvidia_class,
    scenario_of,
)

from .apiserver import DEVICE_CLASSES, DEVICE_TAINT_RULES, RESOURCE_CLAIMS, RESOURCE_SLICES

BINPACK = {"hami.io/gpu-scheduler-policy": "binpack"}
SPREAD = {"hami.io/gpu-scheduler-policy": "spread"}


def cluster(apiserver, nodes=("n1",), memory_gib=24):
    apiserver.put(DEVICE_CLASSES, device_class())
    for node in nodes:
        apiserver.put(RESOURCE_SLICES, hami_slice(node, cards=2, memory_gib=memory_gib))


def submit(apiserver, name: str, claim: dict, annotations=None):
    apiserver.put(RESOURCE_CLAIMS, claim)
    pod = claim_pod(name, claim["metadata"]["name"], annotations=annotations)
    del pod["metadata"]["uid"]  # the server gives it
    apiserver.put("pods", pod)


def results(apiserver, claim: str) -> list[dict]:
    return apiserver.get(RESOURCE_CLAIMS, "default", claim)["status"]["allocation"]["devices"]["results"]


def test_8000_mib_claims_binpack_onto_one_card_and_spread_across_cards(apiserver, kube):
    for policy, same in ((BINPACK, True), (SPREAD, False)):
        apiserver.objects[RESOURCE_CLAIMS].clear()
        apiserver.objects["pods"].clear()
        cluster(apiserver)
        submit(apiserver, "a", gpumem_claim("a", memory_mib=8000), policy)
        submit(apiserver, "b", gpumem_claim("b", memory_mib=8000), policy)
        outcomes = DraCycle(kube).run_once()
        assert sorted((o.name, o.node) for o in outcomes) == [("a", "n1"), ("b", "n1")]
        devices = [results(apiserver, claim)[0]["device"] for claim in ("a", "b")]
        assert (devices[0] == devices[1]) is same, (policy, devices)
    claim = apiserver.get(RESOURCE_CLAIMS, "default", "a")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["request"]) == (HAMI, "n1", "gpu")
    assert result["consumedCapacity"]["memory"] == "8000Mi" and "cores" in result["consumedCapacity"]
    pod = apiserver.get("pods", "default", "a")
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "a", "uid": pod["metadata"]["uid"]}
    ]
    assert pod["spec"]["nodeName"] == "n1"


def test_claims_allocated_earlier_count_in_the_next_pass(apiserver, kube):
    cluster(apiserver, memory_gib=16)
    submit(apiserver, "a", gpumem_claim("a", memory_mib=12000), BINPACK)
    DraCycle(kube).run_once()
    submit(apiserver, "b", gpumem_claim("b", memory_mib=8000), BINPACK)
    DraCycle(kube).run_once()
    assert results(apiserver, "a")[0]["device"] != results(apiserver, "b")[0]["device"]


def test_a_device_taint_rule_cordons_a_card(apiserver, kube):
    cluster(apiserver)
    apiserver.put(
        DEVICE_TAINT_RULES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "gpu-0-broken"},
            "spec": {
                "deviceSelector": {"driver": HAMI, "pool": "n1", "device": "hami-gpu-0"},
                "taint": {"key": "broken", "value": "ecc", "effect": "NoSchedule"},
            },
        },
    )
    for name in ("a", "b"):
        submit(apiserver, name, gpumem_claim(name, memory_mib=8000), SPREAD)
    DraCycle(kube).run_once()
    assert [results(apiserver, c)[0]["device"] for c in ("a", "b")] == ["hami-gpu-1", "hami-gpu-1"]


def test_a_claim_changed_under_the_write_is_planned_again(apiserver, kube):
    cluster(apiserver)
    submit(apiserver, "a", gpumem_claim("a"))
    apiserver.before(
        "PATCH",
        "/resourceclaims/a/status",
        lambda: apiserver.update(
            RESOURCE_CLAIMS, "default", "a", lambda c: c["metadata"].setdefault("labels", {})
        ),
    )
    (outcome,) = DraCycle(kube).run_once()
    assert outcome.node == "n1"
    statuses = [r for r in apiserver.calls("PATCH", "/resourceclaims/a/status")]
    assert len(statuses) == 2  # the first met a 409, the second was planned from a fresh list
    assert results(apiserver, "a")


def test_a_claim_from_a_template_is_found_through_the_pods_status(apiserver, kube):
    cluster(apiserver)
    apiserver.put(RESOURCE_CLAIMS, gpumem_claim("p-gpu-x7k2"))
    pod = claim_pod("p", "unused")
    del pod["metadata"]["uid"]
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu-8000"}]
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "p-gpu-x7k2"}]
    apiserver.put("pods", pod)
    (outcome,) = DraCycle(kube).run_once()
    assert outcome.node == "n1" and results(apiserver, "p-gpu-x7k2")


def test_a_pod_that_cannot_be_placed_says_why_in_its_condition(apiserver, kube):
    cluster(apiserver)
    expression = f'device.attributes["{HAMI}"].productName == "NVIDIA H100"'
    submit(apiserver, "a", gpumem_claim("a", selectors=[expression]))
    (outcome,) = DraCycle(kube).run_once()
    assert outcome.node is None and outcome.reason == "SelectorMismatch"
    (condition,) = apiserver.get("pods", "default", "a")["status"]["conditions"]
    assert condition["status"] == "False" and condition["message"].startswith("SelectorMismatch")
    assert "status" not in apiserver.get(RESOURCE_CLAIMS, "default", "a")


def test_the_requests_made_are_granted_by_the_shipped_rules(apiserver, kube):
    cluster(apiserver)
    submit(apiserver, "a", gpumem_claim("a"))
    submit(apiserver, "b", gpumem_claim("b", selectors=['device.attributes["x"].y == 1']))
    DraCycle(kube).run_once()
    used = apiserver.grants_used()
    assert used <= set(RBAC_RULES) and set(DRA_RBAC_RULES) <= set(RBAC_RULES)
    assert {
        ("resource.k8s.io", "resourceclaims/status", "patch"),
        ("resource.k8s.io", "resourceclaims/binding", "patch"),  # 1.36's granular status check
        ("", "pods/binding", "create"),
    } <= used


def test_simulate_gives_the_live_placements_offline(apiserver, kube):
    from scheduling.engine.scenario import run_scenario

    cluster(apiserver, nodes=("n1", "n2"))
    for name, memory in (("a", 8000), ("b", 20000), ("c", 8000), ("d", 16000)):
        submit(apiserver, name, gpumem_claim(name, memory_mib=memory), BINPACK)
    raw = scenario_of(apiserver.all)
    offline = run_scenario(raw)
    DraCycle(kube).run_once()
    live = {c: [(r["pool"], r["device"]) for r in results(apiserver, c)] for c in "abcd"}
    simulated = claim_devices(offline["pods"])
    assert simulated == live


def test_only_the_configured_drivers_are_read(apiserver, kube, settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "DRA_DRIVERS": ["gpu.nvidia.com"]}
    cluster(apiserver)
    submit(apiserver, "a", gpumem_claim("a"))
    (outcome,) = DraCycle(kube).run_once()
    assert outcome.node is None and "none published" in outcome.message


def test_a_two_card_claim_with_match_attribute_lands_on_one_pcie_root(apiserver, kube):
    apiserver.put(DEVICE_CLASSES, device_class())
    apiserver.put(RESOURCE_SLICES, hami_slice("n1", cards=4, memory_gib=16))  # roots: gpu-0,1 | gpu-2,3
    submit(apiserver, "busy", gpumem_claim("busy", memory_mib=16000))  # fills one card of the first root
    DraCycle(kube).run_once()
    pair = gpumem_claim("pair", count=2, constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}])
    submit(apiserver, "pair", pair, SPREAD)
    DraCycle(kube).run_once()
    busy = results(apiserver, "busy")[0]["device"]
    chosen = sorted(r["device"] for r in results(apiserver, "pair"))
    roots = {"hami-gpu-0": 0, "hami-gpu-1": 0, "hami-gpu-2": 1, "hami-gpu-3": 1}
    assert busy not in chosen and roots[chosen[0]] == roots[chosen[1]]


def test_a_cel_selector_on_product_name_places_on_that_product(apiserver, kube):
    apiserver.put(DEVICE_CLASSES, device_class())
    apiserver.put(RESOURCE_SLICES, hami_slice("a100-node", product="NVIDIA A100"))
    apiserver.put(RESOURCE_SLICES, hami_slice("h100-node", product="NVIDIA H100"))
    expression = f'device.attributes["{HAMI}"].productName.startsWith("NVIDIA H")'
    submit(apiserver, "a", gpumem_claim("a", selectors=[expression]))
    (outcome,) = DraCycle(kube).run_once()
    assert outcome.node == "h100-node" and results(apiserver, "a")[0]["pool"] == "h100-node"


def test_pods_sharing_one_claim_in_one_pass_get_one_allocation(apiserver, kube):
    cluster(apiserver, nodes=("n1", "n2"))
    submit(apiserver, "p1", gpumem_claim("shared"))
    pod = claim_pod("p2", "shared")
    del pod["metadata"]["uid"]
    apiserver.put("pods", pod)
    outcomes = DraCycle(kube).run_once()
    assert len({o.node for o in outcomes}) == 1 and None not in {o.node for o in outcomes}
    claim = apiserver.get(RESOURCE_CLAIMS, "default", "shared")
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == ["p1", "p2"]
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 1
    # the second pod joined the claim as the first left it: no 409, no second plan
    assert len(apiserver.calls("PATCH", "/resourceclaims/shared/status")) == 2


def test_a_refused_binding_keeps_the_claim_and_the_next_pass_binds_there(apiserver, kube):
    cluster(apiserver, nodes=("n1", "n2"))
    submit(apiserver, "a", gpumem_claim("a"))
    apiserver.fail("POST", "/pods/a/binding", 500)
    (outcome,) = DraCycle(kube).run_once()
    assert outcome.node is None and outcome.reason == "BindFailed"
    node = results(apiserver, "a")[0]["pool"]
    (outcome,) = DraCycle(kube).run_once()
    assert outcome.node == node == apiserver.get("pods", "default", "a")["spec"]["nodeName"]


GANG = {"hami.io/group-name": "train", "hami.io/group-min-member": "4"}


def whole_card_pod(apiserver, name: str, annotations=None, priority: int | None = None):
    submit(apiserver, name, gpumem_claim(name, memory_mib=16000), annotations)
    if priority is not None:
        apiserver.update("pods", "default", name, lambda p: p["spec"].__setitem__("priority", priority))


def test_a_gang_of_four_claim_pods_is_placed_all_or_nothing(apiserver, kube):
    cluster(apiserver, nodes=("n1", "n2"), memory_gib=16)  # four cards
    whole_card_pod(apiserver, "busy")
    DraCycle(kube).run_once()
    for i in range(4):
        whole_card_pod(apiserver, f"w{i}", GANG)
    outcomes = DraCycle(kube).run_once()
    assert {(o.name, o.node, o.reason) for o in outcomes} == {
        (f"w{i}", None, "GangUnschedulable") for i in range(4)
    }
    assert not apiserver.calls("PATCH", "/resourceclaims/w0/status")  # three fit: none is written
    assert not any(apiserver.get("pods", "default", f"w{i}")["spec"].get("nodeName") for i in range(4))
    (condition,) = apiserver.get("pods", "default", "w3")["status"]["conditions"]
    assert "3 of 4 pending members fit, 4 must" in condition["message"]

    apiserver.delete("pods", "default", "busy")  # its claim is released on the next pass
    outcomes = DraCycle(kube).run_once()
    assert sorted(o.node is not None for o in outcomes) == [True] * 4
    assert "status" not in apiserver.get(RESOURCE_CLAIMS, "default", "busy") or not apiserver.get(
        RESOURCE_CLAIMS, "default", "busy"
    )["status"].get("allocation")
    cards = {
        (results(apiserver, f"w{i}")[0]["pool"], results(apiserver, f"w{i}")[0]["device"]) for i in range(4)
    }
    assert len(cards) == 4


def test_a_high_priority_claim_pod_preempts_a_low_one_on_its_card(apiserver, kube):
    apiserver.put(DEVICE_CLASSES, device_class())
    apiserver.put(RESOURCE_SLICES, hami_slice("n1", cards=1, memory_gib=16))
    submit(apiserver, "low", gpumem_claim("low", memory_mib=12000))
    DraCycle(kube).run_once()
    low_uid = apiserver.get("pods", "default", "low")["metadata"]["uid"]
    submit(apiserver, "high", gpumem_claim("high", memory_mib=12000))
    apiserver.update("pods", "default", "high", lambda p: p["spec"].__setitem__("priority", 1000))
    (outcome,) = DraCycle(kube, events=EventRecorder(kube, "hami-scheduler")).run_once()
    assert outcome.node == "n1"
    assert [(ns, name) for ns, name, _ in apiserver.evictions] == [("default", "low")]
    events = {(e["involvedObject"]["name"], e["reason"]): e["message"] for e in apiserver.all("events")}
    assert events[("low", "Preempted")].startswith("Preempted by default/high on card n1/hami-gpu-0")
    assert events[("high", "Preempting")] == "Preempting default/low on n1 for cards n1/hami-gpu-0"
    assert events[("high", "Scheduled")].endswith("to n1 with cards n1/hami-gpu-0")
    assert apiserver.evictions[0][2]["deleteOptions"]["preconditions"]["uid"] == low_uid
    low = apiserver.get(RESOURCE_CLAIMS, "default", "low")
    assert not low["status"].get("reservedFor") and not low["status"].get("allocation")
    (result,) = results(apiserver, "high")
    assert (result["device"], result["consumedCapacity"]["memory"]) == ("hami-gpu-0", "12000Mi")
    assert apiserver.get("pods", "default", "high")["spec"]["nodeName"] == "n1"


def test_equal_priority_or_a_non_preemptible_tenant_is_never_a_victim(apiserver, kube):
    apiserver.put(DEVICE_CLASSES, device_class())
    apiserver.put(RESOURCE_SLICES, hami_slice("n1", cards=1, memory_gib=16))
    submit(apiserver, "kept", gpumem_claim("kept", memory_mib=12000), {"hami.io/preemptible": "false"})
    submit(apiserver, "peer", gpumem_claim("peer", memory_mib=4000))
    DraCycle(kube).run_once()
    submit(apiserver, "high", gpumem_claim("high", memory_mib=12000))
    apiserver.update("pods", "default", "high", lambda p: p["spec"].__setitem__("priority", 1000))
    (outcome,) = DraCycle(kube).run_once()
    assert outcome.node is None and "CardInsufficientMemory" in outcome.message
    assert apiserver.evictions == []
    submit(apiserver, "same", gpumem_claim("same", memory_mib=4000))
    (outcome,) = [o for o in DraCycle(kube).run_once() if o.name == "same"]
    assert outcome.node is None and apiserver.evictions == []


def test_a_waiting_pod_condition_says_what_the_code_means_and_what_to_do(apiserver, kube):
    cluster(apiserver)
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "all-broken"},
        "spec": {"deviceSelector": {"driver": HAMI}, "taint": {"key": "broken", "effect": "NoSchedule"}},
    }
    apiserver.put(DEVICE_TAINT_RULES, rule)
    submit(apiserver, "a", gpumem_claim("a"))
    (outcome,) = DraCycle(kube, events=EventRecorder(kube, "hami-scheduler")).run_once()
    (condition,) = apiserver.get("pods", "default", "a")["status"]["conditions"]
    (event,) = apiserver.all("events")
    assert (event["reason"], event["message"]) == ("FailedScheduling", condition["message"])
    assert outcome.reason == "DeviceTainted"
    assert condition["message"].startswith("DeviceTainted: every device the request may take has a taint")
    assert "add a toleration" in condition["message"]


def test_an_ended_pod_leaves_its_claim_and_frees_the_card(apiserver, kube):
    apiserver.put(DEVICE_CLASSES, device_class())
    apiserver.put(RESOURCE_SLICES, hami_slice("n1", cards=1, memory_gib=16))
    submit(apiserver, "done", gpumem_claim("done", memory_mib=12000))
    DraCycle(kube).run_once()
    apiserver.update("pods", "default", "done", lambda p: p["status"].__setitem__("phase", "Succeeded"))
    submit(apiserver, "next", gpumem_claim("next", memory_mib=12000))
    (outcome,) = DraCycle(kube).run_once()
    assert outcome.node == "n1"
    assert not apiserver.get(RESOURCE_CLAIMS, "default", "done")["status"].get("allocation")


def test_simulate_gives_the_live_gang_and_preemption_offline(apiserver, kube):
    from scheduling.engine.scenario import run_scenario

    cluster(apiserver, nodes=("n1", "n2"), memory_gib=16)  # four cards
    submit(apiserver, "low", gpumem_claim("low", memory_mib=12000))
    DraCycle(kube).run_once()
    for i in range(3):
        whole_card_pod(apiserver, f"g{i}", {"hami.io/group-name": "g"})
    submit(apiserver, "high", gpumem_claim("high", memory_mib=12000))
    apiserver.update("pods", "default", "high", lambda p: p["spec"].__setitem__("priority", 1000))
    raw = scenario_of(apiserver.all)
    offline = run_scenario(raw)
    outcomes = DraCycle(kube).run_once()
    assert all(o.node for o in outcomes) and len(outcomes) == 4
    assert [name for _, name, _ in apiserver.evictions] == ["low"]
    (high,) = [p for p in offline["pods"] if p["name"] == "high"]
    assert high["preempted"] == ["default/low"]
    live = {c: [(r["pool"], r["device"]) for r in results(apiserver, c)] for c in ("g0", "g1", "g2", "high")}
    simulated = claim_devices(offline["pods"])
    assert simulated == live


def test_the_watcher_leaves_dra_pods_without_a_device_plugin_gpu_to_the_dra_pass(kube):
    from kube.sync import PodSync

    sync = PodSync(kube, "hami-scheduler")
    pod = claim_pod("a", "a")
    assert not sync.to_queue(pod)
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    assert sync.to_queue(pod)  # both: the device plugin's GPU is the watcher's to place
    del pod["spec"]["resourceClaims"]
    assert sync.to_queue(pod)


@pytest.mark.django_db(transaction=True)
def test_the_agent_runs_the_dra_pass_for_the_pods_the_cycle_cannot_place(apiserver, kube):
    """With `HAMI_DRA` the watcher queues the claim pods one decision can place (their test is
    tests/kube/test_dra_cycle.py) and leaves the rest, here a `matchAttribute` pair, to the pass."""
    from kube.agent import KubeAgent
    from scheduling.models import Pod

    from .conftest import fast_options, running, wait_until

    apiserver.put(DEVICE_CLASSES, device_class())
    apiserver.put(RESOURCE_SLICES, hami_slice("n1", cards=4, memory_gib=16))
    pair = gpumem_claim("pair", count=2, constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}])
    submit(apiserver, "pair", pair, SPREAD)
    with running(KubeAgent(kube, fast_options(dra=True))):
        wait_until(
            lambda: apiserver.get("pods", "default", "pair")["spec"].get("nodeName"), what="the pair bound"
        )
    assert not Pod.objects.filter(name="pair").exists()  # the watcher did not queue it
    roots = {"hami-gpu-0": 0, "hami-gpu-1": 0, "hami-gpu-2": 1, "hami-gpu-3": 1}
    chosen = sorted(r["device"] for r in results(apiserver, "pair"))
    assert len(chosen) == 2 and roots[chosen[0]] == roots[chosen[1]]


def test_node_taints_and_selectors_apply_to_dra_pods(apiserver, kube):
    cluster(apiserver, nodes=("n1", "n2"))
    taint = {"key": "reserved", "value": "infer", "effect": "NoSchedule"}
    apiserver.put("nodes", {"metadata": {"name": "n1", "labels": {"pool": "a"}}, "spec": {"taints": [taint]}})
    apiserver.put("nodes", {"metadata": {"name": "n2", "labels": {"pool": "b"}}, "spec": {}})
    submit(apiserver, "plain", gpumem_claim("plain"), BINPACK)
    submit(apiserver, "tolerant", gpumem_claim("tolerant"), BINPACK)
    apiserver.update(
        "pods",
        "default",
        "tolerant",
        lambda p: p["spec"].update(
            tolerations=[{"key": "reserved", "operator": "Exists"}], nodeSelector={"pool": "a"}
        ),
    )
    submit(apiserver, "nowhere", gpumem_claim("nowhere"))
    apiserver.update("pods", "default", "nowhere", lambda p: p["spec"].update(nodeSelector={"pool": "c"}))
    outcomes = {o.name: o for o in DraCycle(kube).run_once()}
    assert (outcomes["plain"].node, outcomes["tolerant"].node) == ("n2", "n1")
    assert outcomes["nowhere"].node is None and "NodeAffinity" in outcomes["nowhere"].message


def test_a_refused_eviction_leaves_the_preemptor_waiting_and_the_victim_alone(apiserver, kube):
    apiserver.put(DEVICE_CLASSES, device_class())
    apiserver.put(RESOURCE_SLICES, hami_slice("n1", cards=1, memory_gib=16))
    submit(apiserver, "low", gpumem_claim("low", memory_mib=12000))
    cycle = DraCycle(kube)
    cycle.run_once()
    submit(apiserver, "high", gpumem_claim("high", memory_mib=12000))
    apiserver.update("pods", "default", "high", lambda p: p["spec"].__setitem__("priority", 1000))
    apiserver.fail("POST", "/pods/low/eviction", 429, reason="TooManyRequests")
    (outcome,) = cycle.run_once()
    assert (outcome.node, outcome.reason, outcome.nominated) == (None, "Preempting", "n1")
    assert len(apiserver.calls("POST", "/pods/low/eviction")) == 1  # not tried again at once
    assert results(apiserver, "low") and apiserver.get("pods", "default", "low")
    status = apiserver.get("pods", "default", "high")["status"]
    assert status["nominatedNodeName"] == "n1" and status["conditions"][0]["message"].startswith("Preempting")


def test_a_gang_sharing_one_claim_allocates_it_once_and_reserves_it_for_every_member(apiserver, kube):
    cluster(apiserver, nodes=("n1", "n2"))
    apiserver.put(RESOURCE_CLAIMS, gpumem_claim("shared"))
    members = ("m0", "m1", "m2")  # a third: it must find the claim allocated by the first
    for name in members:
        pod = claim_pod(name, "shared", annotations={"hami.io/group-name": "trio"})
        del pod["metadata"]["uid"]
        apiserver.put("pods", pod)
    outcomes = DraCycle(kube).run_once()
    assert len({o.node for o in outcomes}) == 1 and None not in {o.node for o in outcomes}
    claim = apiserver.get(RESOURCE_CLAIMS, "default", "shared")
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == list(members)
    assert len(apiserver.calls("PATCH", "/resourceclaims/shared/status")) == 3  # no 409, no replan


def test_a_mig_partition_waits_while_the_whole_gpu_is_allocated_and_is_named_once_it_is_free(apiserver, kube):
    for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
        apiserver.put(DEVICE_CLASSES, nvidia_class(name, kind))
    for obj in mig_slices("n1"):  # the counter set in a slice of its own, as 1.34+ publishes it
        apiserver.put(RESOURCE_SLICES, obj)
    submit(apiserver, "whole", device_claim("whole", "gpu.nvidia.com"))
    (placed,) = DraCycle(kube).run_once()
    assert placed.node == "n1" and [r["device"] for r in results(apiserver, "whole")] == ["gpu-0"]
    submit(apiserver, "part", device_claim("part", "mig.nvidia.com"))
    (waiting,) = DraCycle(kube).run_once()
    assert waiting.node is None and waiting.reason == "CountersExhausted"
    (condition,) = apiserver.get("pods", "default", "part")["status"]["conditions"]
    assert condition["message"].startswith("CountersExhausted: every device the request may take draws")
    whole = apiserver.get("pods", "default", "whole")
    whole["status"]["phase"] = "Succeeded"  # the whole GPU's pod ends: its claim is released
    apiserver.put("pods", whole)
    (placed,) = DraCycle(kube).run_once()
    (result,) = results(apiserver, "part")
    assert placed.node == "n1" and result["device"].startswith("gpu-0-mig-") and "shareID" not in result


# -- KEP-5729: a Workload API PodGroup's claims, allocated once for the gang -----------------


def podgroup_with_claim(apiserver, name: str = "train", min_count: int = 3, **entry) -> dict:
    """A Workload API PodGroup sharing claim `gpu` among its members (`shared` unless told)."""
    from .apiserver import WORKLOAD_PODGROUPS

    apiserver.serve(WORKLOAD_PODGROUPS)
    return apiserver.put(
        WORKLOAD_PODGROUPS,
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": min_count}},
                "resourceClaims": [{"name": "gpu", **(entry or {"resourceClaimName": "shared"})}],
            },
        },
    )


def group_member(apiserver, name: str, group: str = "train", own: dict | None = None) -> None:
    """A pod of the PodGroup consuming its claim `gpu`; `own`: a claim of its own besides."""
    pod = claim_pod(name, "shared")
    del pod["metadata"]["uid"]
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    if own is not None:
        apiserver.put(RESOURCE_CLAIMS, own)
        pod["spec"]["resourceClaims"].append({"name": "own", "resourceClaimName": own["metadata"]["name"]})
    apiserver.put("pods", pod)


def reserved_for_group(podgroup: dict) -> list[dict]:
    meta = podgroup["metadata"]
    return [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": meta["name"], "uid": meta["uid"]}
    ]


def test_a_podgroups_claim_is_allocated_once_and_reserved_for_the_podgroup(apiserver, kube):
    cluster(apiserver, nodes=("n1", "n2"))
    apiserver.put(RESOURCE_CLAIMS, gpumem_claim("shared"))
    group = podgroup_with_claim(apiserver)
    for name in ("m0", "m1", "m2"):
        group_member(apiserver, name)
    outcomes = DraCycle(kube).run_once()
    claim = apiserver.get(RESOURCE_CLAIMS, "default", "shared")
    assert claim["status"]["reservedFor"] == reserved_for_group(group)  # not each pod
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert {o.node for o in outcomes} == {result["pool"]} and len(outcomes) == 3
    assert {apiserver.get("pods", "default", n)["spec"]["nodeName"] for n in ("m0", "m1", "m2")} == {
        result["pool"]
    }
    assert len(apiserver.calls("PATCH", "/resourceclaims/shared/status")) == 1  # once, by the first


def test_a_podgroup_whose_members_do_not_all_fit_writes_nothing(apiserver, kube):
    cluster(apiserver)  # n1: two 24 GiB cards; the shared claim pins every member there
    apiserver.put(RESOURCE_CLAIMS, gpumem_claim("shared", memory_mib=8000))
    podgroup_with_claim(apiserver)
    for name in ("m0", "m1", "m2"):  # 8000 + 16000 on one card, 16000 on the other: two fit
        group_member(apiserver, name, own=gpumem_claim(f"{name}-own", memory_mib=16000))
    outcomes = DraCycle(kube).run_once()
    assert {(o.node, o.reason) for o in outcomes} == {(None, "GangUnschedulable")} and len(outcomes) == 3
    assert "2 of 3 pending members fit, 3 must" in outcomes[0].message
    assert not apiserver.calls("PATCH", "/resourceclaims/")  # neither the shared claim nor an own one
    assert not apiserver.get(RESOURCE_CLAIMS, "default", "shared").get("status")


def test_a_podgroups_claim_stays_reserved_while_the_podgroup_exists(apiserver, kube):
    from .apiserver import WORKLOAD_PODGROUPS

    cluster(apiserver)
    apiserver.put(RESOURCE_CLAIMS, gpumem_claim("shared"))
    group = podgroup_with_claim(apiserver, min_count=2)
    for name in ("m0", "m1"):
        group_member(apiserver, name)
    assert all(o.node == "n1" for o in DraCycle(kube).run_once())
    for name in ("m0", "m1"):  # its pods end: the PodGroup keeps the claim
        apiserver.delete("pods", "default", name)
    DraCycle(kube).run_once()
    claim = apiserver.get(RESOURCE_CLAIMS, "default", "shared")
    assert claim["status"]["reservedFor"] == reserved_for_group(group) and claim["status"]["allocation"]
    apiserver.delete(WORKLOAD_PODGROUPS, "default", "train")  # gone: released, left to nobody
    DraCycle(kube).run_once()
    status = apiserver.get(RESOURCE_CLAIMS, "default", "shared").get("status") or {}
    assert not status.get("reservedFor") and not status.get("allocation")


def test_pods_of_a_podgroup_not_read_yet_wait_for_it(apiserver, kube):
    cluster(apiserver)
    apiserver.put(RESOURCE_CLAIMS, gpumem_claim("shared"))
    podgroup_with_claim(apiserver, name="other")
    group_member(apiserver, "m0", group="train")
    (outcome,) = DraCycle(kube).run_once()
    assert (outcome.node, outcome.reason) == (None, "NotEnoughPods")
    assert "PodGroup default/train is not read yet" in outcome.message
    assert not apiserver.calls("PATCH", "/resourceclaims/shared/status")


def test_a_reservation_without_a_uid_is_refused_as_the_api_server_refuses_it(apiserver, kube):
    from kube.api import ApiError

    cluster(apiserver)
    apiserver.put(RESOURCE_CLAIMS, gpumem_claim("shared"))
    group_member(apiserver, "m0")
    DraCycle(kube).run_once()  # allocated and reserved for m0
    consumer = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train"}
    reserved = apiserver.get(RESOURCE_CLAIMS, "default", "shared")["status"]["reservedFor"]
    with pytest.raises(ApiError) as refused:
        kube.patch_resource_claim_status(
            "default", "shared", {"status": {"reservedFor": [*reserved, consumer]}}
        )
    assert refused.value.status == 422 and "status.reservedFor[1].uid: Required value" in str(refused.value)


@pytest.mark.django_db(transaction=True)
def test_the_agent_sends_a_podgroups_claim_to_the_dra_pass(apiserver, kube):
    """A claim from a template that the PodGroup names (KEP-5729): no two waiting pods name
    one claim object in their specs, so only the PodGroup says it is the gang's."""
    from kube.agent import KubeAgent
    from scheduling.models import Pod

    from .conftest import fast_options, running, wait_until

    cluster(apiserver, nodes=("n1", "n2"))
    apiserver.put(RESOURCE_CLAIMS, gpumem_claim("train-gpu-x7k2"))
    group = podgroup_with_claim(apiserver, resourceClaimTemplateName="gpu-template")
    generated = [{"name": "gpu", "resourceClaimName": "train-gpu-x7k2"}]
    group = apiserver.update(
        "podgroups.scheduling.k8s.io",
        "default",
        "train",
        lambda g: g.__setitem__("status", {"resourceClaimStatuses": generated}),
    )
    members = ("m0", "m1", "m2")
    for name in members:
        pod = claim_pod(name, "unused")
        del pod["metadata"]["uid"]
        pod["spec"]["schedulingGroup"] = {"podGroupName": "train"}
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}]
        pod["status"]["resourceClaimStatuses"] = generated
        apiserver.put("pods", pod)
    with running(KubeAgent(kube, fast_options(dra=True))):
        wait_until(
            lambda: all(apiserver.get("pods", "default", n)["spec"].get("nodeName") for n in members),
            what="the gang bound",
        )
    assert not Pod.objects.filter(name__in=members).exists()  # the watcher did not queue them
    claim = apiserver.get(RESOURCE_CLAIMS, "default", "train-gpu-x7k2")
    assert claim["status"]["reservedFor"] == reserved_for_group(group)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert {apiserver.get("pods", "default", n)["spec"]["nodeName"] for n in members} == {result["pool"]}


def test_the_pass_counts_the_cpu_of_the_pods_bound_on_a_node(apiserver, kube):
    """The pass's pods get the node rules' resources as the cycle's do: the pods bound on a
    node hold its cpu (here kube-scheduler's, without claims)."""
    cluster(apiserver, nodes=("n1", "n2"))
    for name in ("n1", "n2"):
        apiserver.put(
            "nodes",
            {"metadata": {"name": name}, "spec": {}, "status": {"allocatable": {"cpu": "8", "pods": "110"}}},
        )
    busy = claim_pod("busy", "none", scheduler="default-scheduler")
    del busy["spec"]["resourceClaims"]
    busy["spec"]["nodeName"] = "n1"
    busy["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "6"}}
    busy["status"]["phase"] = "Running"
    apiserver.put("pods", busy)
    pair = gpumem_claim("pair", count=2, constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}])
    submit(apiserver, "pair", pair, BINPACK)
    apiserver.update(
        "pods",
        "default",
        "pair",
        lambda p: p["spec"]["containers"][0]["resources"].update(requests={"cpu": "4"}),
    )
    (outcome,) = DraCycle(kube).run_once()
    assert outcome.node == "n2", outcome  # binpack ties on the cards; n1 has 2 cpu left


@pytest.mark.django_db(transaction=True)
def test_a_pass_pod_a_quota_binds_waits_rather_than_slip_past_it(apiserver, kube):
    """The pass keeps no rows, so it cannot count what it places against a namespace quota or a
    queue limit: a pod they bind waits `QuotaUnsupported` (the agent's rule, `quota_holds`)."""
    from kube.dra import quota_holds
    from scheduling.models import NamespaceQuota, Queue

    apiserver.put(DEVICE_CLASSES, device_class())
    apiserver.put(RESOURCE_SLICES, hami_slice("n1", cards=4, memory_gib=16))
    pair = gpumem_claim("pair", count=2, constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}])
    submit(apiserver, "pair", pair, SPREAD)
    NamespaceQuota.objects.create(namespace="default", quota="gpu", resource="gpumem", hard=4000)
    cycle = DraCycle(kube)
    cycle.quotas = quota_holds
    (outcome,) = cycle.run_once()
    assert (outcome.node, outcome.reason) == (None, "QuotaUnsupported")
    assert "namespace default has a GPU quota" in outcome.message
    (condition,) = apiserver.get("pods", "default", "pair")["status"]["conditions"]
    assert condition["message"].startswith("QuotaUnsupported: the claims need the DRA pass")
    NamespaceQuota.objects.all().delete()
    parent = Queue.objects.create(name="org", limit_gpumem=100_000)
    Queue.objects.create(name="team", parent=parent, namespaces=["default"])
    (outcome,) = cycle.run_once()
    assert outcome.reason == "QuotaUnsupported" and "queue org has a limit" in outcome.message
    Queue.objects.filter(name="org").update(limit_gpumem=None)
    (outcome,) = cycle.run_once()
    assert outcome.node == "n1" and results(apiserver, "pair")
