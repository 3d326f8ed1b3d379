"""SPEC 5 and 7: the card score (predicted utilization), the scoring weights annotation, and
the node score."""

import pytest

from .builders import (
    GPU_POLICY,
    NUMA_BIND,
    WEIGHTS,
    ask,
    card,
    card_row,
    container,
    node,
    picked,
    pod,
    run_one,
)

# -- the formula ------------------------------------------------------------------------------


def seed_node():
    """SPEC 5 seed: 10 slots, 100 cores, 8000 MiB, one slot in use on each card."""
    return node(
        "n1",
        card("GPU1", 8000, used=(1, 2000, 10)),
        card("GPU2", 8000, used=(1, 6000, 70)),
    )


SEED_ASK = ask(gpu=1, mem=1000, cores=20)


@pytest.mark.parametrize("chain, expected", [("binpack", "GPU2"), ("spread", "GPU1")])
def test_seed_example_scores_and_picks(chain, expected):
    out = run_one([seed_node()], pod("p", {GPU_POLICY: chain}, SEED_ASK))
    assert card_row(out, "GPU1")["score"] == pytest.approx(8.75, abs=1e-3)
    assert card_row(out, "GPU2")["score"] == pytest.approx(19.75, abs=1e-3)
    assert picked(out) == [expected]


def test_score_is_shown_for_cards_that_fail_too():
    """GPU2 cannot hold 30 more cores (70 used), yet its predicted score is in the table."""
    out = run_one([seed_node()], pod("p", None, ask(gpu=1, mem=1000, cores=40)))
    row = card_row(out, "GPU2")
    assert (row["eligible"], row["reason"]) == (False, "CardInsufficientCore")
    assert row["score"] == pytest.approx(10 * (0.2 + 1.1 + 7000 / 8000), abs=1e-3)


def test_percentage_memory_is_resolved_per_card_in_the_score():
    one = node("n1", card("SMALL", 8000), card("BIG", 32000))
    out = run_one([one], pod("p", None, ask(gpu=1, pct=25)))
    # 25% of either card is a quarter of it: same predicted utilization.
    expected = 10 * (1 / 10 + 0 / 100 + 0.25)
    assert card_row(out, "SMALL")["score"] == pytest.approx(expected, abs=1e-3)
    assert card_row(out, "BIG")["score"] == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize(
    "fields, limits, expected",
    [
        pytest.param({"cores": 0}, ask(gpu=1, mem=1000), 10 * (1 / 10 + 1000 / 10000), id="no-cores"),
        pytest.param(
            {"slots": 0}, ask(gpu=1, mem=1000, cores=10), 10 * (10 / 100 + 1000 / 10000), id="no-slots"
        ),
    ],
)
def test_a_dimension_with_zero_capacity_contributes_nothing(fields, limits, expected):
    one = node("n1", card("Z", 10000, **fields), card("OK", 10000))
    out = run_one([one], pod("p", None, limits))
    assert card_row(out, "Z")["score"] == pytest.approx(expected, abs=1e-3)


def test_a_card_without_memory_contributes_nothing_for_memory():
    one = node("n1", card("Z", 0))
    out = run_one([one], pod("p", None, ask(gpu=1, mem=0, cores=10)))
    assert out["status"] == "scheduled"
    assert card_row(out, "Z")["score"] == pytest.approx(10 * (1 / 10 + 10 / 100), abs=1e-3)


def test_used_includes_earlier_containers_of_the_same_pod():
    one = node("n1", card("G0", 10000), card("G1", 10000))
    containers = [
        container("a", ask(gpu=1, mem=1000, cores=10)),
        container("b", ask(gpu=1, mem=1000, cores=10)),
    ]
    out = run_one([one], pod("p", {GPU_POLICY: "binpack"}, containers=containers))
    assert picked(out, 0) == picked(out, 1) == ["G0"]
    assert card_row(out, "G0", 0)["score"] == pytest.approx(10 * (1 / 10 + 10 / 100 + 1000 / 10000), abs=1e-3)
    assert card_row(out, "G0", 1)["score"] == pytest.approx(10 * (2 / 10 + 20 / 100 + 2000 / 10000), abs=1e-3)
    assert card_row(out, "G1", 1)["score"] == pytest.approx(10 * (1 / 10 + 10 / 100 + 1000 / 10000), abs=1e-3)


# -- weights ----------------------------------------------------------------------------------


def weights_node():
    """Predicted utilizations for a 10-core, 100 MiB ask: A = (0.2, 0.9, 0.5), B = (0.8, 0.1, 0.6)."""
    return node(
        "n1",
        card("A", 1000, used=(1, 400, 80)),
        card("B", 1000, used=(7, 500, 0)),
    )


WEIGHTS_ASK = ask(gpu=1, mem=100, cores=10)


@pytest.mark.parametrize(
    "weights, score_a, score_b, binpack_takes",
    [
        (None, 16, 15, "A"),
        ("slot=1,core=1,memory=1", 16, 15, "A"),
        ("slot=1,core=1,memory=3", 26, 27, "B"),
    ],
)
def test_weights_seed_example(weights, score_a, score_b, binpack_takes):
    annotations = {GPU_POLICY: "binpack"}
    if weights is not None:
        annotations[WEIGHTS] = weights
    out = run_one([weights_node()], pod("p", annotations, WEIGHTS_ASK))
    assert card_row(out, "A")["score"] == pytest.approx(score_a, abs=1e-3)
    assert card_row(out, "B")["score"] == pytest.approx(score_b, abs=1e-3)
    assert picked(out) == [binpack_takes]


@pytest.mark.parametrize(
    "value",
    ["memory=3,slot=1,core=1", " slot = 1 , core=1,  memory =3 ", "core=1,memory=3,slot=1"],
)
def test_weights_order_and_spaces_do_not_matter(value):
    out = run_one([weights_node()], pod("p", {GPU_POLICY: "binpack", WEIGHTS: value}, WEIGHTS_ASK))
    assert out["policy"]["weights"] == {"slot": 1, "core": 1, "memory": 3}
    assert picked(out) == ["B"]


def test_default_weights_are_reported():
    out = run_one([weights_node()], pod("p", None, WEIGHTS_ASK))
    assert out["policy"]["weights"] == {"slot": 1, "core": 1, "memory": 1}


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("slot=1,core=1", id="missing-key"),
        pytest.param("slot=1,core=1,memory=1,disk=1", id="unknown-key"),
        pytest.param("slot=1,core=1,memory=1,slot=2", id="duplicate-key"),
        pytest.param("slot=1,core=x,memory=1", id="non-integer"),
        pytest.param("slot=1.5,core=1,memory=1", id="non-integer-float"),
        pytest.param("slot=-1,core=1,memory=1", id="negative"),
        pytest.param("slot=0,core=0,memory=0", id="all-zero"),
        pytest.param("slot=1,core,memory=1", id="pair-without-equals"),
    ],
)
def test_invalid_weights_reject_the_pod_naming_the_annotation(value):
    out = run_one([weights_node()], pod("p", {WEIGHTS: value}, WEIGHTS_ASK))
    assert out["status"] == "rejected"
    assert WEIGHTS in out["error"]
    assert (out["node"], out["containers"], out["allocated"]) == (None, [], None)


def test_zero_weights_are_allowed_when_one_is_positive():
    out = run_one(
        [weights_node()], pod("p", {GPU_POLICY: "binpack", WEIGHTS: "slot=1,core=0,memory=0"}, WEIGHTS_ASK)
    )
    assert card_row(out, "A")["score"] == pytest.approx(2, abs=1e-3)
    assert card_row(out, "B")["score"] == pytest.approx(8, abs=1e-3)
    assert picked(out) == ["B"]


def test_weights_never_make_a_card_fit():
    """Memory weight alone would rank the slot-exhausted card first; it still cannot be taken."""
    one = node("n1", card("FULL", 1000, slots=2, used=(2, 900, 0)), card("FREE", 1000))
    out = run_one(
        [one], pod("p", {GPU_POLICY: "binpack", WEIGHTS: "slot=0,core=0,memory=5"}, ask(gpu=1, mem=100))
    )
    assert picked(out) == ["FREE"]
    assert card_row(out, "FULL")["reason"] == "CardTimeSlicingExhausted"


def test_weights_never_override_mutex():
    one = node("n1", card("BUSY", 1000, used=(1, 800, 0)), card("FREE", 1000))
    annotations = {GPU_POLICY: "mutex,binpack", WEIGHTS: "slot=0,core=0,memory=9"}
    out = run_one([one], pod("p", annotations, ask(gpu=1, mem=100)))
    assert picked(out) == ["FREE"]


def test_weights_never_override_numa_bind():
    one = node(
        "n1",
        card("N0", 1000, numa=0, used=(1, 800, 0)),
        card("N1-A", 1000, numa=1),
        card("N1-B", 1000, numa=1),
    )
    annotations = {GPU_POLICY: "binpack", NUMA_BIND: "true", WEIGHTS: "slot=0,core=0,memory=9"}
    out = run_one([one], pod("p", annotations, ask(gpu=2, mem=100)))
    assert sorted(picked(out)) == ["N1-A", "N1-B"]


def test_weights_do_not_change_the_node_score():
    nodes = [node("a", card("A0", 1000, used=(3, 100, 0))), node("b", card("B0", 1000, used=(1, 700, 0)))]
    plain = run_one(nodes, pod("p", None, ask(gpu=1, mem=100)))
    weighted = run_one(nodes, pod("p", {WEIGHTS: "slot=0,core=0,memory=7"}, ask(gpu=1, mem=100)))
    assert weighted["node_scores"] == pytest.approx(plain["node_scores"], abs=1e-3)
    assert weighted["node"] == plain["node"]


# -- SPEC 7: the node score -------------------------------------------------------------------


def test_node_score_is_predicted_utilization_over_all_cards_after_placement():
    one = node(
        "n1",
        card("G0", 10000, slots=5, used=(2, 3000, 30)),
        card("G1", 20000, slots=10),
    )
    out = run_one([one], pod("p", None, ask(gpu=1, mem=2000, cores=20)))
    expected = 10 * ((2 + 1) / 15 + (30 + 20) / 200 + (3000 + 2000) / 30000)
    assert out["node_scores"]["n1"] == pytest.approx(expected, abs=1e-3)


def test_node_score_sums_every_container_of_the_pod():
    one = node("n1", card("G0", 10000), card("G1", 10000))
    containers = [container("a", ask(gpu=2, mem=1000, cores=10)), container("b", ask(gpu=1, mem=3000))]
    out = run_one([one], pod("p", None, containers=containers))
    expected = 10 * (3 / 20 + 20 / 200 + 5000 / 20000)
    assert out["node_scores"]["n1"] == pytest.approx(expected, abs=1e-3)


def test_node_score_counts_cards_that_cannot_be_taken():
    """Unhealthy and cordoned cards are still cards of the node: they weigh in the totals."""
    one = node("n1", card("G0", 10000), card("G1", 10000, health=False), card("G2", 10000), cordon="G2")
    out = run_one([one], pod("p", None, ask(gpu=1, mem=3000, cores=30)))
    assert out["node_scores"]["n1"] == pytest.approx(10 * (1 / 30 + 30 / 300 + 3000 / 30000), abs=1e-3)
