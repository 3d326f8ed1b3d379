"""DRA pods through the scheduling cycle (`kube.drastate`), with the agent watching the stand-in
API server through the real `kubernetes` client: HAMi-DRA devices become cards of mode `dra`,
a pod's claims its asks; the cycle decides (policy, gangs, preemption, the commit's re-check)
and the binder writes each claim's status, as HAMi's driver reads it, before the Binding."""

from __future__ import annotations

import threading

import pytest

from kube.agent import KubeAgent
from scheduling.models import BoundPod, Card, Eviction, NamespaceQuota, Pod
from scheduling.pipeline import run_cycle
from tests.engine.dra_objects import (
    HAMI,
    allocated,
    claim_devices,
    claim_pod,
    device_class,
    gpumem_claim,
    hami_slice,
    scenario_of,
)

from .apiserver import DEVICE_CLASSES, DEVICE_TAINT_RULES, RESOURCE_CLAIMS, RESOURCE_SLICES
from .conftest import fast_options, node_object, pod_object, running, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BINPACK = {"hami.io/gpu-scheduler-policy": "binpack"}
SPREAD = {"hami.io/gpu-scheduler-policy": "spread"}
GIB_MIB = 1024


def agent(kube) -> KubeAgent:
    return KubeAgent(kube, fast_options(dra=True))


def dra_nodes(apiserver, nodes=("n1",), cards: int = 2, memory_gib: int = 24) -> None:
    apiserver.put(DEVICE_CLASSES, device_class())
    for node in nodes:
        apiserver.put("nodes", node_object(node))
        apiserver.put(RESOURCE_SLICES, hami_slice(node, cards=cards, memory_gib=memory_gib))


def submit(apiserver, name: str, claim: dict | None, annotations=None, priority=None, claim_name=""):
    if claim is not None:
        apiserver.put(RESOURCE_CLAIMS, claim)
    pod = claim_pod(name, claim_name or claim["metadata"]["name"], annotations=annotations)
    del pod["metadata"]["uid"]  # the server gives it
    if priority is not None:
        pod["spec"]["priority"] = priority
    apiserver.put("pods", pod)


#: A two-card claim constraint only the DRA pass places (both cards on one PCIe root).
ONE_ROOT = [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]


def paused_at(apiserver, method: str, path: str) -> tuple[threading.Event, threading.Event]:
    """The next matching request waits, just before it is handled, until `go` is set (20 s at
    most): (reached, go)."""
    reached, go = threading.Event(), threading.Event()

    def hold() -> None:
        reached.set()
        go.wait(20)

    apiserver.before(method, path, hold)
    return reached, go


def row(name: str) -> Pod | None:
    return Pod.objects.select_related("node").filter(namespace="default", name=name).first()


def dra_cards(count: int):
    return lambda: Card.objects.filter(mode="dra").count() == count


def queued(*names: str, asking: bool = True):
    """The pods stored; with `asking`, each with its claims' asks (the claim's watch event may
    come after the pod's: until then the pod is stored held, `ClaimPending`)."""

    def stored() -> bool:
        rows = list(Pod.objects.filter(namespace="default", name__in=names))
        if len(rows) != len(names):
            return False
        return not asking or all(
            (row.scheduling.get("resourceClaims") or {}).get("requests")
            or not row.scheduling.get("resourceClaims")
            for row in rows
        )

    return stored


def claim(apiserver, name: str) -> dict:
    return apiserver.get(RESOURCE_CLAIMS, "default", name)


def results(apiserver, name: str) -> list[dict]:
    status = claim(apiserver, name).get("status") or {}
    return ((status.get("allocation") or {}).get("devices") or {}).get("results") or []


def node_of(apiserver, name: str) -> str:
    return (apiserver.get("pods", "default", name).get("spec") or {}).get("nodeName") or ""


@pytest.mark.parametrize("policy, same", [(BINPACK, True), (SPREAD, False)], ids=["binpack", "spread"])
def test_dra_devices_are_cards_and_claims_binpack_or_spread_through_the_cycle(kube, apiserver, policy, same):
    dra_nodes(apiserver)
    with running(agent(kube)):
        wait_until(dra_cards(2), what="two DRA cards reported")
        submit(apiserver, "a", gpumem_claim("a", memory_mib=8000), policy)
        submit(apiserver, "b", gpumem_claim("b", memory_mib=8000), policy)
        wait_until(queued("a", "b"), what="both queued")
        assert sorted(node for _, node, _ in run_cycle().placed) == ["n1", "n1"]
        wait_until(lambda: results(apiserver, "a") and results(apiserver, "b"), what="claims written")
        wait_until(lambda: node_of(apiserver, "a") and node_of(apiserver, "b"), what="bound")
    devices = [results(apiserver, c)[0]["device"] for c in ("a", "b")]
    assert (devices[0] == devices[1]) is same, devices
    card = Card.objects.get(uuid="GPU-n1-0")
    assert (card.mode, card.memory, card.dra["driver"], card.dra["device"]) == (
        "dra",
        24 * GIB_MIB,
        HAMI,
        "hami-gpu-0",
    )
    written = claim(apiserver, "a")
    (result,) = written["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["request"]) == (HAMI, "n1", "gpu")
    assert result["consumedCapacity"]["memory"] == "8000Mi" and "cores" in result["consumedCapacity"]
    assert result.get("shareID")
    pod = apiserver.get("pods", "default", "a")
    assert written["status"]["reservedFor"] == [
        {"resource": "pods", "name": "a", "uid": pod["metadata"]["uid"]}
    ]
    # the claim's status is written before the Binding, as kube-scheduler's PreBind does
    status = apiserver.calls("PATCH", "/resourceclaims/a/status")
    binding = apiserver.calls("POST", "/pods/a/binding")
    assert status and binding and apiserver.requests.index(status[-1]) < apiserver.requests.index(binding[0])
    # the pod's row is the decision's: placed on the card its claim names
    assert row("a").latest_decision.payload["node"] == "n1"


def test_a_device_plugin_pod_never_lands_on_a_dra_card(kube, apiserver):
    dra_nodes(apiserver)
    apiserver.put("pods", pod_object("plugin", gpu=1, mem=1000))
    with running(agent(kube)):
        wait_until(dra_cards(2), what="DRA cards")
        wait_until(queued("plugin"), what="queued")
        assert run_cycle().placed == []
    assert row("plugin").status == Pod.PENDING
    assert not node_of(apiserver, "plugin")


def test_a_pod_whose_claim_is_missing_waits_saying_so_until_the_claim_comes(kube, apiserver):
    dra_nodes(apiserver)
    submit(apiserver, "late", None, claim_name="late")
    with running(agent(kube)):
        wait_until(dra_cards(2), what="DRA cards")
        wait_until(queued("late", asking=False), what="queued")
        assert run_cycle().placed == []
        waiting = row("late")
        assert waiting.status == Pod.PENDING and "late" in waiting.reason, waiting.reason
        apiserver.put(RESOURCE_CLAIMS, gpumem_claim("late", memory_mib=4000))
        wait_until(
            lambda: (row("late").scheduling.get("resourceClaims") or {}).get("requests"),
            what="submitted again with its asks",
        )
        assert [node for _, node, _ in run_cycle().placed] == ["n1"]
        wait_until(lambda: node_of(apiserver, "late"), what="bound")
    assert results(apiserver, "late")[0]["consumedCapacity"]["memory"] == "4000Mi"


def test_a_gang_of_four_claim_pods_is_placed_all_or_nothing(kube, apiserver):
    dra_nodes(apiserver, nodes=("n1",), cards=3, memory_gib=16)
    notes = {"hami.io/group-name": "job", "hami.io/group-min-member": "4"}
    names = [f"w{i}" for i in range(4)]
    for name in names:
        submit(apiserver, name, gpumem_claim(name, memory_mib=12000), notes)
    with running(agent(kube)):
        wait_until(dra_cards(3), what="three DRA cards")
        wait_until(queued(*names), what="the gang queued")
        assert run_cycle().placed == [], "three cards hold three of the four: none is placed"
        assert not any(results(apiserver, name) for name in names)
        apiserver.put("nodes", node_object("n2"))
        apiserver.put(RESOURCE_SLICES, hami_slice("n2", cards=1, memory_gib=16))
        wait_until(dra_cards(4), what="the fourth card")
        # the new card's capacity wakes the backed-off gang once the report's capacity version
        # moves, just after the card's row is written
        wait_until(lambda: len(run_cycle().placed) == 4, what="the gang placed whole")
        wait_until(lambda: all(node_of(apiserver, name) for name in names), what="all four bound")
    devices = {(results(apiserver, n)[0]["pool"], results(apiserver, n)[0]["device"]) for n in names}
    assert len(devices) == 4, "12000 MiB of 16 GiB each: one card apiece"


def test_a_high_priority_claim_pod_preempts_a_low_one_on_the_card(kube, apiserver):
    dra_nodes(apiserver, cards=1, memory_gib=16)
    submit(apiserver, "low", gpumem_claim("low", memory_mib=12000), priority=0)
    with running(agent(kube)):
        wait_until(dra_cards(1), what="the DRA card")
        wait_until(queued("low"), what="queued")
        assert [pod for pod, _, _ in run_cycle().placed] == ["default/low"]
        wait_until(lambda: node_of(apiserver, "low"), what="the victim bound")
        apiserver.update("pods", "default", "low", lambda pod: pod["status"].update(phase="Running"))
        submit(apiserver, "high", gpumem_claim("high", memory_mib=12000), priority=1000)
        wait_until(queued("high"), what="the preemptor queued")
        run_cycle()
        (eviction,) = Eviction.objects.all()
        assert eviction.victim.name == "low" and eviction.preemptor.name == "high"
        assert eviction.cards == ["GPU-n1-0"]


def test_an_ended_pods_claim_is_given_back(kube, apiserver):
    dra_nodes(apiserver)
    submit(apiserver, "done", gpumem_claim("done", memory_mib=8000))
    with running(agent(kube)):
        wait_until(dra_cards(2), what="DRA cards")
        wait_until(queued("done"), what="queued")
        assert len(run_cycle().placed) == 1
        wait_until(lambda: node_of(apiserver, "done"), what="bound")
        assert claim(apiserver, "done")["status"]["reservedFor"]
        apiserver.update("pods", "default", "done", lambda pod: pod["status"].update(phase="Succeeded"))
        wait_until(
            lambda: not (claim(apiserver, "done").get("status") or {}).get("reservedFor"),
            timeout=15,
            what="the claim given back",
        )
    assert not (claim(apiserver, "done").get("status") or {}).get("allocation")


@pytest.mark.parametrize("special", [False, True], ids=["named-claim", "extended-resource-claim"])
def test_a_claim_kube_scheduler_allocated_counts_on_its_card(kube, apiserver, special):
    """A pod kube-scheduler placed holds what its claim holds: a claim it names, or the
    special claim of its extended resources (KEP-5004), named in its status."""
    dra_nodes(apiserver, memory_gib=16)
    foreign = allocated(
        gpumem_claim("theirs", memory_mib=12000),
        "n1",
        "hami-gpu-0",
        12000,
        share_id="5e1f7c9a-0000-4000-8000-000000000001",
        name="other",
        uid="uid-other",
    )
    apiserver.put(RESOURCE_CLAIMS, foreign)
    asks = 1 if special else None  # kube-scheduler's KEP-5004 pod asks the extended resource
    other = pod_object("other", gpu=asks, scheduler="default-scheduler", node="n1", phase="Running")
    other["metadata"]["uid"] = "uid-other"
    if special:
        other["status"]["extendedResourceClaimStatus"] = {
            "resourceClaimName": "theirs",
            "requestMappings": [
                {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "gpu"}
            ],
        }
    else:
        other["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "theirs"}]
    apiserver.put("pods", other)
    submit(apiserver, "ours", gpumem_claim("ours", memory_mib=8000), BINPACK)
    with running(agent(kube)):
        wait_until(dra_cards(2), what="DRA cards")
        wait_until(queued("ours"), what="queued")
        wait_until(
            lambda: (
                "GPU-n1-0,DRA,12000,"
                in (BoundPod.objects.filter(name="other").values_list("allocated", flat=True).first() or "")
            ),
            what="the foreign claim counted with its pod",
        )
        assert [node for _, node, _ in run_cycle().placed] == ["n1"]
        wait_until(lambda: results(apiserver, "ours"), what="claim written")
    assert results(apiserver, "ours")[0]["device"] == "hami-gpu-1", "binpack would take gpu-0 if it had room"


def test_a_namespace_quota_counts_claim_capacity_in_vgpu_units(kube, apiserver):
    dra_nodes(apiserver)
    apiserver.put(
        "resourcequotas",
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpu", "namespace": "default"},
            "spec": {"hard": {"requests.nvidia.com/gpumem": "10000"}},
        },
    )
    submit(apiserver, "first", gpumem_claim("first", memory_mib=8000))
    submit(apiserver, "second", gpumem_claim("second", memory_mib=4000))
    with running(agent(kube)):
        wait_until(dra_cards(2), what="DRA cards")
        wait_until(queued("first", "second"), what="queued")
        wait_until(lambda: NamespaceQuota.objects.filter(namespace="default").exists(), what="the quota")
        assert [pod for pod, _, _ in run_cycle().placed] == ["default/first"]
        second = row("second")
        assert second.status == Pod.PENDING and "gpumem 8000 + 4000 > hard 10000" in second.reason, (
            second.reason
        )
    assert not results(apiserver, "second")


def test_simulate_gives_the_cycles_placements_offline(kube, apiserver):
    from scheduling.engine.scenario import run_scenario

    dra_nodes(apiserver, nodes=("n1", "n2"))
    names = ("a", "b", "c", "d")
    for name, memory in zip(names, (8000, 20000, 8000, 16000), strict=True):
        submit(apiserver, name, gpumem_claim(name, memory_mib=memory), BINPACK)
    raw = scenario_of(apiserver.all)
    offline = run_scenario(raw)
    with running(agent(kube)):
        wait_until(dra_cards(4), what="four DRA cards")
        wait_until(queued(*names), what="queued")
        assert len(run_cycle().placed) == 4
        wait_until(lambda: all(results(apiserver, name) for name in names), what="claims written")
    live = {c: [(r["pool"], r["device"]) for r in results(apiserver, c)] for c in names}
    simulated = claim_devices(offline["pods"])
    assert simulated == live
    assert {r["consumedCapacity"]["memory"] for c in names for r in results(apiserver, c)} == {
        "8000Mi",
        "20000Mi",
        "16000Mi",
    }


def test_pods_sharing_one_claim_go_to_the_pass_which_allocates_it_once(kube, apiserver):
    dra_nodes(apiserver, memory_gib=16)
    apiserver.put(RESOURCE_CLAIMS, gpumem_claim("shared", memory_mib=12000))
    notes = {"hami.io/group-name": "team", "hami.io/group-min-member": "3"}
    with running(agent(kube)):
        wait_until(dra_cards(2), what="DRA cards")
        submit(apiserver, "m0", None, notes, claim_name="shared")
        wait_until(queued("m0"), what="the first member queued for the cycle, alone on its claim")
        for name in ("m1", "m2"):  # one by one, through the watch: the claim is shared from m1 on
            submit(apiserver, name, None, notes, claim_name="shared")
        wait_until(
            lambda: all(node_of(apiserver, name) for name in ("m0", "m1", "m2")),
            timeout=20,
            what="the three bound by the pass",
        )
        assert run_cycle().placed == [], "the cycle holds none of them"
    (result,) = results(apiserver, "shared")
    assert result["consumedCapacity"]["memory"] == "12000Mi", "allocated once, not three times"
    reserved = sorted(r["name"] for r in claim(apiserver, "shared")["status"]["reservedFor"])
    assert reserved == ["m0", "m1", "m2"]
    assert row("m0").status == Pod.DELETED, "the first member's waiting row was withdrawn"
    assert not Pod.objects.filter(status__in=(Pod.PENDING, Pod.SCHEDULED)).exists()


def test_a_pod_placed_elsewhere_after_a_refused_binding_gets_its_claim_allocated_anew(kube, apiserver):
    dra_nodes(apiserver)
    submit(apiserver, "x", gpumem_claim("x", memory_mib=8000), SPREAD)
    apiserver.fail("POST", r"/pods/x/binding$", 500, times=10_000)
    with running(agent(kube)):
        wait_until(dra_cards(2), what="DRA cards")
        wait_until(queued("x"), what="queued")
        assert len(run_cycle().placed) == 1
        wait_until(lambda: row("x").status == Pod.PENDING and results(apiserver, "x"), what="requeued")
        first = results(apiserver, "x")[0]["device"]
        rule = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "first-broken"},
            "spec": {
                "deviceSelector": {"driver": HAMI, "pool": "n1", "device": first},
                "taint": {"key": "broken", "value": "ecc", "effect": "NoSchedule"},
            },
        }
        apiserver.put(DEVICE_TAINT_RULES, rule)  # so the next placement is on the other card
        apiserver.injected.clear()

        def bound() -> bool:
            run_cycle()
            return bool(node_of(apiserver, "x"))

        wait_until(bound, timeout=15, what="placed on the other card and bound")
    (result,) = results(apiserver, "x")
    assert result["device"] != first, "the allocation follows the new placement"
    assert [r["name"] for r in claim(apiserver, "x")["status"]["reservedFor"]] == ["x"]


def test_a_pod_the_pass_placed_counts_for_the_cycle_between_its_claims_and_its_binding(kube, apiserver):
    """The pass writes a pod's claims, then its Binding; the cycle counts a pod others placed
    from its row. That row used to come from the bound pod's watch event: in between, a cycle
    saw the pair's devices free and put a whole card's pod on one of them (16 GiB on a card
    holding 8000 MiB already). The pass now stores the pod as placed before it binds."""
    dra_nodes(apiserver, memory_gib=16)  # n1: two cards of 16 GiB, on one PCIe root
    # the pass, its claims written, waits here before its Binding
    at_bind, go = paused_at(apiserver, "POST", "/pods/pair/binding")
    try:
        with running(agent(kube)):
            wait_until(dra_cards(2), what="DRA cards")
            submit(apiserver, "whole", gpumem_claim("whole", memory_mib=16 * GIB_MIB))
            wait_until(queued("whole"), what="the whole-card pod queued for the cycle")
            submit(apiserver, "pair", gpumem_claim("pair", memory_mib=8000, count=2, constraints=ONE_ROOT))
            assert at_bind.wait(20), "the pass never bound the pair"
            assert [r["consumedCapacity"]["memory"] for r in results(apiserver, "pair")] == ["8000Mi"] * 2
            report = run_cycle()
            go.set()
            assert report.placed == [], "a card holding 8000 MiB of the pair took a whole card's pod"
            assert "CardInsufficientMemory" in row("whole").reason, row("whole").reason
            stored = BoundPod.objects.get(namespace="default", name="pair")
            assert stored.node_name == "n1" and stored.allocated
            wait_until(lambda: node_of(apiserver, "pair") == "n1", what="the pair bound")
    finally:
        go.set()


def test_a_cycle_placement_landing_after_the_pass_read_takes_the_pass_unit_back(kube, apiserver):
    """The pass reads what the cycle placed, plans, writes its claims and stores its pod. A
    cycle's commit landing on its devices between the read and the store used to be missed:
    both held the card (a whole card's pod and 8000 MiB of the pair on one 16 GiB card). The
    store now checks, under the cards' locks, that no allocation landed there since the read
    (`services.assume_bound_pod`); one did, so the pass takes its claims back and plans again."""
    dra_nodes(apiserver, memory_gib=16)  # n1: two cards of 16 GiB, on one PCIe root
    # the pass has read and planned: it waits here to write the pair's claim
    at_claims, go = paused_at(apiserver, "PATCH", "/resourceclaims/pair/status")
    try:
        with running(agent(kube)):
            wait_until(dra_cards(2), what="DRA cards")
            submit(apiserver, "pair", gpumem_claim("pair", memory_mib=8000, count=2, constraints=ONE_ROOT))
            assert at_claims.wait(20), "the pass never wrote the pair's claim"
            submit(apiserver, "whole", gpumem_claim("whole", memory_mib=16 * GIB_MIB))
            wait_until(queued("whole"), what="the whole-card pod queued for the cycle")
            report = wait_until(lambda: run_cycle().placed, what="the whole-card pod placed by the cycle")
            assert [key for key, _, _ in report] == ["default/whole"]
            go.set()
            # written, then taken back: a cycle's placement landed on the pair's cards
            wait_until(
                lambda: len(apiserver.calls("PATCH", "/resourceclaims/pair/status")) >= 2,
                what="the pair's claim taken back",
            )
            wait_until(lambda: not results(apiserver, "pair"), what="the pair's claim empty")
            assert node_of(apiserver, "pair") == "", "the pair was bound beside the whole card"
            assert not BoundPod.objects.filter(namespace="default", name="pair").exists()
            whole = Pod.objects.get(name="whole")
            assert whole.status in Pod.BOUND
    finally:
        go.set()
