"""SPEC 4: the eleven card checks in order, node-level reasons, and the failure text."""

import pytest

from .builders import (
    GPU_POLICY,
    NOUSE_TYPE,
    NOUSE_UUID,
    NUMA_BIND,
    T4,
    USE_TYPE,
    USE_UUID,
    ask,
    card,
    card_row,
    container,
    failure,
    node,
    picked,
    pod,
    run,
    run_one,
)

ONE_GIB = ask(gpu=1, mem=1000)  # cores default to 0: a sharing ask
VGPU_MODE = "nvidia.com/vgpu-mode"


def lone_card_reason(one_card: dict, annotations=None, limits=ONE_GIB, cordon=None) -> str:
    """The failure text of a one-card node for a pod that does not fit on it."""
    out = run_one([node("n1", one_card, cordon=cordon)], pod("p", annotations, limits))
    assert out["status"] == "pending", out
    return failure(out, "n1")


@pytest.mark.parametrize(
    "one_card, annotations, limits, cordon, reason",
    [
        pytest.param(card("G", health=False), None, ONE_GIB, None, "CardNotHealth", id="1-health"),
        pytest.param(card("G"), None, ONE_GIB, "G", "CardCordoned", id="2-cordon"),
        pytest.param(
            card("G", type=T4), {USE_TYPE: "A100"}, ONE_GIB, None, "CardTypeMismatch", id="3-use-type"
        ),
        pytest.param(
            card("G", type=T4), {NOUSE_TYPE: "t4"}, ONE_GIB, None, "CardTypeMismatch", id="3-nouse-type"
        ),
        pytest.param(
            card("G", mode="mig"), {VGPU_MODE: "hami-core"}, ONE_GIB, None, "CardModeMismatch", id="3a-mode"
        ),
        pytest.param(card("G"), {USE_UUID: "OTHER"}, ONE_GIB, None, "CardUuidMismatch", id="4-use-uuid"),
        pytest.param(card("G"), {NOUSE_UUID: "G"}, ONE_GIB, None, "CardUuidMismatch", id="4-nouse-uuid"),
        pytest.param(
            card("G", slots=4, used=(4, 1000, 0)),
            None,
            ONE_GIB,
            None,
            "CardTimeSlicingExhausted",
            id="5-slots",
        ),
        pytest.param(
            card("G", used=(1, 1000, 0)),
            {GPU_POLICY: "mutex"},
            ONE_GIB,
            None,
            "ExclusiveDeviceAllocateConflict",
            id="6-mutex",
        ),
        pytest.param(
            card("G", 8000, used=(1, 7500, 0)), None, ONE_GIB, None, "CardInsufficientMemory", id="7-memory"
        ),
        pytest.param(
            card("G", used=(1, 1000, 90)),
            None,
            ask(gpu=1, mem=1000, cores=20),
            None,
            "CardInsufficientCore",
            id="8-cores",
        ),
        pytest.param(
            card("G", used=(1, 1000, 0)),
            None,
            ask(gpu=1, mem=1000, cores=100),
            None,
            "ExclusiveDeviceAllocateConflict",
            id="9-whole-card-vs-tenant",
        ),
        pytest.param(
            card("G", used=(2, 1000, 100)), None, ONE_GIB, None, "CardComputeUnitsExhausted", id="10-compute"
        ),
    ],
)
def test_each_check_names_its_reason(one_card, annotations, limits, cordon, reason):
    assert lone_card_reason(one_card, annotations, limits, cordon) == f"1/1 {reason}"


def test_numa_bind_fails_when_no_numa_node_holds_all_cards():
    cards = [card("G0", numa=0), card("G1", numa=1)]
    out = run_one([node("n1", *cards)], pod("p", {NUMA_BIND: "true"}, ask(gpu=2, mem=1000)))
    assert out["status"] == "pending"
    assert failure(out, "n1") == "2/2 NumaNotFit"


def test_percentage_is_resolved_against_each_card():
    """50% of an 8000 MiB card is 4000 (3000 free: too little); of a 16000 MiB card, 8000 (11000 free)."""
    small = card("SMALL", 8000, used=(1, 5000, 0))
    big = card("BIG", 16000, used=(1, 5000, 0))
    out = run_one([node("n1", small, big)], pod("p", None, ask(gpu=1, pct=50)))
    assert picked(out) == ["BIG"]
    assert out["containers"][0]["devices"][0]["memory"] == 8000
    assert card_row(out, "SMALL")["reason"] == "CardInsufficientMemory"


@pytest.mark.parametrize(
    "one_card, annotations, limits, cordon, reason",
    [
        pytest.param(card("G", health=False), None, ONE_GIB, "G", "CardNotHealth", id="1-before-2"),
        pytest.param(card("G", type=T4), {USE_TYPE: "A100"}, ONE_GIB, "G", "CardCordoned", id="2-before-3"),
        pytest.param(
            card("G", type=T4),
            {USE_TYPE: "A100", NOUSE_UUID: "G"},
            ONE_GIB,
            None,
            "CardTypeMismatch",
            id="3-before-4",
        ),
        pytest.param(
            card("G", slots=2, used=(2, 1000, 0)),
            {NOUSE_UUID: "G"},
            ONE_GIB,
            None,
            "CardUuidMismatch",
            id="4-before-5",
        ),
        pytest.param(
            card("G", slots=2, used=(2, 1000, 0)),
            {GPU_POLICY: "mutex"},
            ONE_GIB,
            None,
            "CardTimeSlicingExhausted",
            id="5-before-6",
        ),
        pytest.param(
            card("G", 8000, used=(1, 7900, 0)),
            {GPU_POLICY: "mutex"},
            ONE_GIB,
            None,
            "ExclusiveDeviceAllocateConflict",
            id="6-before-7",
        ),
        pytest.param(
            card("G", 8000, used=(1, 7900, 90)),
            None,
            ask(gpu=1, mem=1000, cores=20),
            None,
            "CardInsufficientMemory",
            id="7-before-8",
        ),
        pytest.param(
            card("G", used=(1, 1000, 10)),
            None,
            ask(gpu=1, mem=1000, cores=100),
            None,
            "CardInsufficientCore",
            id="8-before-9",
        ),
    ],
)
def test_a_card_failing_two_checks_gets_the_earlier_reason(one_card, annotations, limits, cordon, reason):
    assert lone_card_reason(one_card, annotations, limits, cordon) == f"1/1 {reason}"


def test_numa_is_counted_only_on_cards_that_passed_checks_1_to_10():
    cards = [
        card("G0", numa=0, used=(1, 1000, 100)),  # check 10
        card("G1", numa=0),
        card("G2", numa=1),
    ]
    out = run_one([node("n1", *cards)], pod("p", {NUMA_BIND: "true"}, ask(gpu=2, mem=1000)))
    assert failure(out, "n1") == "1/3 CardComputeUnitsExhausted, 2/3 NumaNotFit"


def test_compute_check_skips_cards_without_cores():
    """A card with cores = 0 has nothing to exhaust: a 0-core ask fits it."""
    out = run_one([node("n1", card("NOCORE", cores=0))], pod("p", None, ONE_GIB))
    assert out["status"] == "scheduled"
    assert picked(out) == ["NOCORE"]
    assert card_row(out, "NOCORE")["eligible"] is True


def test_node_with_fewer_cards_than_asked_is_m_over_m_insufficient_device():
    out = run_one([node("n1", card("G0"), card("G1", health=False))], pod("p", None, ask(gpu=3, mem=1000)))
    assert failure(out, "n1") == "2/2 NodeInsufficientDevice"


def test_node_without_cards_is_insufficient_device():
    out = run_one([node("empty")], pod("p", None, ONE_GIB))
    assert failure(out, "empty") == "0/0 NodeInsufficientDevice"


def test_too_few_fitting_cards_reports_k_over_m_beside_card_reasons():
    cards = [card("G0"), card("G1", health=False), card("G2", health=False), card("G3")]
    out = run_one([node("n1", *cards)], pod("p", None, ask(gpu=3, mem=1000)))
    assert failure(out, "n1") == "2/4 AllocatedCardsInsufficientRequest, 2/4 CardNotHealth"


def test_failure_text_aggregates_per_reason_sorted_by_code():
    """The SPEC 4 example: two busy cards under mutex, two without the memory."""
    cards = [
        card("G0", 8000, used=(1, 1000, 0)),
        card("G1", 8000, used=(0, 7500, 0)),
        card("G2", 8000, used=(2, 2000, 0)),
        card("G3", 8000, used=(0, 7800, 0)),
    ]
    out = run_one([node("n1", *cards)], pod("p", {GPU_POLICY: "mutex"}, ONE_GIB))
    assert failure(out, "n1") == "2/4 CardInsufficientMemory, 2/4 ExclusiveDeviceAllocateConflict"


def test_failure_text_is_sorted_by_code_not_by_card_order():
    cards = [card("G0", health=False), card("G1")]
    out = run_one([node("n1", *cards, cordon="G1")], pod("p", None, ONE_GIB))
    assert failure(out, "n1") == "1/2 CardCordoned, 1/2 CardNotHealth"


def test_pending_pod_sums_each_reason_over_failed_nodes():
    nodes = [
        node("a", card("A0", health=False), card("A1"), cordon="A1"),
        node("b", card("B0", health=False), card("B1", health=False)),
        node("c", card("C0", slots=1, used=(1, 1000, 0))),
    ]
    out = run_one(nodes, pod("p", None, ONE_GIB))
    assert out["status"] == "pending"
    assert out["failed_nodes"] == {
        "a": "1/2 CardCordoned, 1/2 CardNotHealth",
        "b": "2/2 CardNotHealth",
        "c": "1/1 CardTimeSlicingExhausted",
    }
    assert out["reasons"] == {"CardCordoned": 1, "CardNotHealth": 3, "CardTimeSlicingExhausted": 1}
    assert (out["nodes_fit"], out["nodes_failed"]) == (0, 3)


def test_cluster_reasons_include_node_level_reasons():
    nodes = [node("a", card("A0")), node("b", card("B0"), card("B1", health=False))]
    out = run_one(nodes, pod("p", None, ask(gpu=2, mem=1000)))
    assert out["failed_nodes"] == {
        "a": "1/1 NodeInsufficientDevice",
        "b": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth",
    }
    assert out["reasons"] == {
        "AllocatedCardsInsufficientRequest": 1,
        "CardNotHealth": 1,
        "NodeInsufficientDevice": 1,
    }


def test_every_card_of_the_chosen_node_is_evaluated_and_explained():
    cards = [
        card("G0"),
        card("G1", health=False),
        card("G2", type=T4),
        card("G3", 8000, used=(1, 7500, 0)),
    ]
    out = run_one([node("n1", *cards)], pod("p", {NOUSE_TYPE: "tesla"}, ONE_GIB))
    rows = {row["uuid"]: row for row in out["containers"][0]["cards"]}
    assert set(rows) == {"G0", "G1", "G2", "G3"}
    assert {uuid: row["reason"] for uuid, row in rows.items()} == {
        "G0": None,
        "G1": "CardNotHealth",
        "G2": "CardTypeMismatch",
        "G3": "CardInsufficientMemory",
    }
    assert [row["eligible"] for row in out["containers"][0]["cards"]] == [True, False, False, False]


def test_the_first_container_that_does_not_fit_gives_the_node_text():
    """Container 1 fits; container 2 asks more memory than any card has left."""
    one = node("n1", card("G0", 8000), card("G1", 8000, used=(1, 7000, 0)))
    containers = [container("a", ask(gpu=1, mem=1000)), container("b", ask(gpu=1, mem=7500))]
    out = run_one([one], pod("p", containers=containers))
    assert failure(out, "n1") == "2/2 CardInsufficientMemory"


def test_pending_pod_has_no_node_containers_or_allocation():
    out = run_one([node("n1", card("G0", health=False))], pod("p", None, ONE_GIB))
    assert (out["status"], out["node"], out["containers"], out["allocated"]) == ("pending", None, [], None)
    assert out["error"] is None
    assert out["node_scores"] == {}


def test_examined_cards_m_counts_every_card_on_a_mixed_node():
    """Reasons from all checks add up to M when nothing fits."""
    cards = [
        card("G0", health=False),
        card("G1"),
        card("G2", slots=1, used=(1, 100, 0)),
        card("G3", used=(1, 100, 100)),
        card("G4", 1000, used=(0, 500, 0)),
    ]
    out = run([node("n1", *cards, cordon="G1")], [pod("p", None, ONE_GIB)])[0]
    text = failure(out, "n1")
    assert text == (
        "1/5 CardComputeUnitsExhausted, 1/5 CardCordoned, 1/5 CardInsufficientMemory, "
        "1/5 CardNotHealth, 1/5 CardTimeSlicingExhausted"
    )


# -- 3a: card mode (nvidia.com/vgpu-mode) -----------------------------------------------------


def mixed_modes():
    return node(
        "n1",
        card("G0", mode="hami-core"),
        card("G1", mode="mig"),
        card("G2", mode="mps"),
        card("G3"),  # registers no mode (the older 7-field register): not checked
    )


def test_vgpu_mode_keeps_the_cards_of_the_modes_named():
    out = run_one([mixed_modes()], pod("p", {VGPU_MODE: " MIG , mps"}, ask(gpu=3, mem=1000)))
    assert sorted(picked(out)) == ["G1", "G2", "G3"]


def test_vgpu_mode_comes_right_after_the_type_check():
    """A card of the wrong type and mode counts as CardTypeMismatch; one of the right type but
    the wrong mode as CardModeMismatch, before its UUID is looked at."""
    cards = [card("G0", type=T4, mode="mig"), card("G1", mode="mig")]
    annotations = {USE_TYPE: "NVIDIA", NOUSE_TYPE: "t4", VGPU_MODE: "hami-core", USE_UUID: "nothing"}
    out = run_one([node("n1", *cards)], pod("p", annotations, ONE_GIB))
    assert failure(out, "n1") == "1/2 CardModeMismatch, 1/2 CardTypeMismatch"


def test_no_mode_annotation_means_any_mode():
    out = run_one([mixed_modes()], pod("p", None, ask(gpu=4, mem=1000)))
    assert sorted(picked(out)) == ["G0", "G1", "G2", "G3"]


def test_the_mode_is_part_of_what_decides_a_node_verdict():
    """Two pods identical but for their mode share no cached verdict."""
    pods = [
        pod("core", {VGPU_MODE: "hami-core"}, ONE_GIB),
        pod("mig", {VGPU_MODE: "mig"}, ONE_GIB),
    ]
    out = run([node("n1", card("G0", mode="hami-core"))], pods)
    assert [p["status"] for p in out] == ["scheduled", "pending"]
    assert failure(out[1], "n1") == "1/1 CardModeMismatch"
