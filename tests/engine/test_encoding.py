"""SPEC 8: the placement annotations, the allocation string, HAMi's node register and pair
scores, as HAMi-aware tools read them."""

import pytest

from scheduling.engine.encoding import (
    ALLOCATED,
    BIND_PHASE,
    BIND_TIME,
    NODE,
    TIME,
    TO_ALLOCATE,
    VENDOR,
    RegisteredCard,
    decode_allocation,
    decode_node_register,
    decode_node_scores,
    encode_allocation,
    encode_node_register,
    links_to_pairs,
    pairs_to_links,
    placement_annotations,
)
from scheduling.engine.errors import ScenarioError

from .builders import GPU_POLICY, ask, card, container, node, pod, run_one

# -- what a placement writes on the pod -----------------------------------------------------


def test_placement_writes_the_six_annotations_hami_reads():
    written = placement_annotations(
        "node1", "GPU-2,NVIDIA,1000,0:;", 1700000000.9, "allocating", 1700000042.5
    )
    assert written == {
        "hami.io/vgpu-node": "node1",
        "hami.io/vgpu-time": "1700000000",
        "hami.io/vgpu-devices-to-allocate": "GPU-2,NVIDIA,1000,0:;",
        "hami.io/vgpu-devices-allocated": "GPU-2,NVIDIA,1000,0:;",
        "hami.io/bind-phase": "allocating",
        "hami.io/bind-time": "1700000042",
    }
    assert list(written) == [NODE, TIME, TO_ALLOCATE, ALLOCATED, BIND_PHASE, BIND_TIME]


def test_bind_time_is_when_the_annotations_are_written_not_when_the_pod_was_scheduled():
    """HAMi's device plugin times out a pod left `allocating` against bind-time: a pod bound an
    hour after it was scheduled must not look an hour stale."""
    scheduled, bound = 1700000000, 1700003600
    written = placement_annotations("node1", ";", scheduled, "success", bound)
    assert (written[TIME], written[BIND_TIME]) == (str(scheduled), str(bound))


def test_an_unknown_scheduling_time_is_the_write_time():
    written = placement_annotations("node1", ";", None, "allocating", 1700000007.2)
    assert written[TIME] == written[BIND_TIME] == "1700000007"


def test_the_vendor_in_the_allocation_is_nvidia():
    assert VENDOR == "NVIDIA"
    assert encode_allocation([[("GPU-2", 1000, 0)]]) == f"GPU-2,{VENDOR},1000,0:;"


# -- hami.io/vgpu-devices-allocated ---------------------------------------------------------


def test_one_container_one_card():
    assert encode_allocation([[("GPU-2", 1000, 0)]]) == "GPU-2,NVIDIA,1000,0:;"


def test_cards_then_containers_each_closed():
    value = encode_allocation([[("A", 1000, 10), ("B", 1000, 10)], [("C", 500, 0)]])
    assert value == "A,NVIDIA,1000,10:B,NVIDIA,1000,10:;C,NVIDIA,500,0:;"


def test_a_container_without_gpu_contributes_just_a_semicolon():
    assert encode_allocation([[], [("A", 1000, 0)], []]) == ";A,NVIDIA,1000,0:;;"


def test_scheduled_pod_allocation_includes_no_gpu_containers_in_order():
    one = node("n1", card("G0"), card("G1"))
    containers = [
        container("sidecar"),
        container("train", ask(gpu=2, mem=2000, cores=25)),
        container("log", limits={"cpu": "1"}),
    ]
    out = run_one([one], pod("p", {GPU_POLICY: "binpack"}, containers=containers))
    assert out["allocated"] == ";G0,NVIDIA,2000,25:G1,NVIDIA,2000,25:;;"
    assert [c["name"] for c in out["containers"]] == ["sidecar", "train", "log"]
    assert out["containers"][0]["devices"] == []


def test_allocation_round_trips():
    containers = [[("GPU-a", 1000, 0), ("GPU-b", 2000, 30)], [], [("GPU-c", 15360, 100)]]
    assert decode_allocation(encode_allocation(containers)) == containers


@pytest.mark.parametrize("value", ["GPU-0,NVIDIA,1000,0:", "GPU-0,NVIDIA,1000:;", "GPU-0,NVIDIA,lots,0:;"])
def test_malformed_allocation_is_refused(value):
    with pytest.raises(ScenarioError) as raised:
        decode_allocation(value)
    assert "hami.io/vgpu-devices-allocated" in str(raised.value)


# -- hami.io/node-nvidia-register -----------------------------------------------------------

NINE = "GPU-a,10,15360,100,NVIDIA-Tesla T4,0,true,0,hami-core:GPU-b,4,40960,100,NVIDIA-A100,1,false,3,mig:"
SEVEN = "GPU-a,10,15360,100,NVIDIA-Tesla T4,0,true:GPU-b,4,40960,100,NVIDIA-A100,1,false:"


def test_register_nine_fields():
    assert decode_node_register(NINE) == [
        RegisteredCard("GPU-a", 10, 15360, 100, "NVIDIA-Tesla T4", 0, True, 0, "hami-core"),
        RegisteredCard("GPU-b", 4, 40960, 100, "NVIDIA-A100", 1, False, 3, "mig"),
    ]


def test_register_older_seven_fields_index_by_position():
    cards = decode_node_register(SEVEN)
    assert [(c.uuid, c.slots, c.memory, c.cores, c.type, c.numa, c.health) for c in cards] == [
        ("GPU-a", 10, 15360, 100, "NVIDIA-Tesla T4", 0, True),
        ("GPU-b", 4, 40960, 100, "NVIDIA-A100", 1, False),
    ]
    assert [c.index for c in cards] == [0, 1]


def test_register_round_trips():
    cards = decode_node_register(NINE)
    assert decode_node_register(encode_node_register(cards)) == cards


def test_empty_register_has_no_cards():
    assert decode_node_register("") == []


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param("GPU-x,10,15360,100,T4,0,true,1", id="eight-fields"),
        pytest.param("GPU-x,10,15360,100,T4,0", id="six-fields"),
        pytest.param("GPU-x,ten,15360,100,T4,0,true", id="non-integer-count"),
        pytest.param("GPU-x,10,big,100,T4,0,true", id="non-integer-memory"),
        pytest.param("GPU-x,10,15360,100,T4,0,true,first,hami-core", id="non-integer-index"),
        pytest.param(",10,15360,100,T4,0,true", id="empty-uuid"),
        pytest.param("GPU-x,10,-1,100,T4,0,true", id="negative-memory"),
        pytest.param("GPU-x,10,15360,100,T4,0,maybe", id="bad-health"),
    ],
)
def test_malformed_register_entry_is_refused_naming_it(entry):
    value = "GPU-ok,10,15360,100,T4,0,true:" + entry + ":"
    with pytest.raises(ScenarioError) as raised:
        decode_node_register(value)
    assert raised.value.where == "hami.io/node-nvidia-register[1]"


# -- hami.io/node-nvidia-score ---------------------------------------------------------------


def test_pair_scores_decode_symmetrically():
    links = decode_node_scores('{"GPU-a": {"GPU-b": 100, "GPU-a": 0}}')
    assert links == {frozenset(("GPU-a", "GPU-b")): 100}


@pytest.mark.parametrize("value", ["{not json", '{"GPU-a": {"GPU-b": "fast"}}', "[1, 2]"])
def test_malformed_pair_scores_are_refused(value):
    with pytest.raises(ScenarioError) as raised:
        decode_node_scores(value)
    assert "hami.io/node-nvidia-score" in str(raised.value)


def test_pair_scores_given_differently_on_both_sides_keep_the_higher():
    links = decode_node_scores('{"GPU-a": {"GPU-b": 100}, "GPU-b": {"GPU-a": 200}}')
    assert links == {frozenset(("GPU-a", "GPU-b")): 200}


# -- the two shapes of pair scores ------------------------------------------------------------


def test_links_on_one_side_count_for_both():
    pairs = links_to_pairs([("A", {"B": 100, "C": 20}), ("B", {}), ("C", {"B": 60})])
    assert pairs == {frozenset("AB"): 100, frozenset("AC"): 20, frozenset("BC"): 60}


def test_links_that_disagree_keep_the_higher_whichever_side_comes_first():
    assert links_to_pairs([("A", {"B": 100}), ("B", {"A": 60})]) == {frozenset("AB"): 100}
    assert links_to_pairs([("A", {"B": 60}), ("B", {"A": 100})]) == {frozenset("AB"): 100}


def test_links_leave_out_self_pairs_booleans_and_what_is_not_a_number():
    row = {"A": 100, "B": True, "C": "fast", "D": None, "E": 40.0}
    assert links_to_pairs([("A", row), ("F", None)]) == {frozenset("AE"): 40}


def test_pairs_become_links_both_ways_for_the_cards_named():
    pairs = {frozenset("AB"): 100, frozenset("BC"): 60, frozenset("CX"): 20}
    assert pairs_to_links(["A", "B", "C", "D"], pairs) == {
        "A": {"B": 100},
        "B": {"A": 100, "C": 60},
        "C": {"B": 60},
        "D": {},
    }


def test_links_and_pairs_round_trip():
    links = {"A": {"B": 100, "C": 20}, "B": {"A": 100}, "C": {"A": 20}}
    pairs = links_to_pairs(links.items())
    assert pairs_to_links(links, pairs) == links
    assert links_to_pairs(pairs_to_links(links, pairs).items()) == pairs
