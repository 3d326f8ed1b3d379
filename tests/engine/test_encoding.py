"""SPEC 8: the allocation string and HAMi's node register, as HAMi-aware tools read them."""

import pytest

from scheduling.engine.encoding import (
    RegisteredCard,
    decode_allocation,
    decode_node_register,
    decode_node_scores,
    encode_allocation,
    encode_node_register,
)
from scheduling.engine.errors import ScenarioError

from .builders import GPU_POLICY, ask, card, container, node, pod, run_one

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
