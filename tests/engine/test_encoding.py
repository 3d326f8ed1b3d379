"""SPEC 8: the placement annotations, the allocation string, HAMi's node register and pair
scores, as HAMi-aware tools read them."""

import json

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

from .builders import GPU_POLICY, ask, card, container, node, pod, run, run_one

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


# -- SPEC 8's three examples, through a placement, byte for byte --------------------------------


def test_spec_8_one_container_one_card():
    out = run_one([node("n1", card("GPU-2"))], pod("p", None, ask(gpu=1, mem=1000)))
    assert out["allocated"] == "GPU-2,NVIDIA,1000,0:;"


def test_spec_8_an_init_container_comes_first():
    out = run_one(
        [node("n1", card("J0", 15360))],
        pod("p", init=[container("warm", ask(gpu=1, mem=15000))], limits=ask(gpu=1, mem=1000)),
    )
    assert out["allocated"] == "J0,NVIDIA,15000,0:;J0,NVIDIA,1000,0:;"
    assert decode_allocation(out["allocated"]) == [[("J0", 15000, 0)], [("J0", 1000, 0)]]


def test_spec_8_an_init_container_without_gpu_writes_just_a_semicolon():
    out = run_one(
        [node("n1", card("J0", 15360))],
        pod("p", init=[container("clone", limits={"cpu": "1"})], limits=ask(gpu=1, mem=1000)),
    )
    assert out["allocated"] == ";J0,NVIDIA,1000,0:;"
    assert decode_allocation(out["allocated"]) == [[], [("J0", 1000, 0)]]


def test_init_containers_in_their_order_then_app_containers_in_theirs():
    one = node("n1", card("G0", 8000), card("G1", 8000, used=(1, 4000, 0)))
    inits = [
        container("first", ask(gpu=2, mem=3000, cores=10)),
        container("clone", limits={"cpu": "1"}),
        container("last", ask(gpu=1, mem=7000)),
    ]
    apps = [container("sidecar"), container("train", ask(gpu=1, mem=1000))]
    out = run_one([one], pod("p", {GPU_POLICY: "binpack"}, containers=apps, init=inits))
    assert out["allocated"] == (
        "G1,NVIDIA,3000,10:G0,NVIDIA,3000,10:;"  # first: binpack, busiest card first
        ";"  # clone: no GPU
        "G0,NVIDIA,7000,0:;"  # last: only G0 has 7000 MiB free
        ";"  # sidecar: no GPU
        "G1,NVIDIA,1000,0:;"  # train
    )
    assert [c["name"] for c in out["containers"]] == ["sidecar", "train"]
    assert out["init_containers"] == [
        {"name": "first", "devices": [d("G1", 3000, 10), d("G0", 3000, 10)]},
        {"name": "clone", "devices": []},
        {"name": "last", "devices": [d("G0", 7000, 0)]},
    ]


def d(uuid: str, memory: int, cores: int) -> dict:
    return {"uuid": uuid, "memory": memory, "cores": cores}


def test_each_init_container_is_the_chains_choice_against_the_node_before_this_pod():
    """Init containers never see the app containers' cards, nor each other's: with spread, both
    take the idle G1 although the app container (placed after them) goes there too."""
    one = node("n1", card("G0", 8000, used=(1, 4000, 0)), card("G1", 8000))
    inits = [container("a", ask(gpu=1, mem=1000)), container("b", ask(gpu=1, mem=1000))]
    out = run_one([one], pod("p", {GPU_POLICY: "spread"}, ask(gpu=1, mem=1000), init=inits))
    assert out["allocated"] == "G1,NVIDIA,1000,0:;G1,NVIDIA,1000,0:;G1,NVIDIA,1000,0:;"


def test_init_cards_are_not_usage_a_later_pod_sees():
    """The init container's 7000 MiB on G0 are given back: a later pod takes 7000 MiB there."""
    outs = run(
        [node("n1", card("G0", 8000))],
        [
            pod("first", init=[container("warm", ask(gpu=1, mem=7000))], limits=ask(gpu=1, mem=1000)),
            pod("second", None, ask(gpu=1, mem=7000)),
        ],
    )
    assert [o["allocated"] for o in outs] == ["G0,NVIDIA,7000,0:;G0,NVIDIA,1000,0:;", "G0,NVIDIA,7000,0:;"]


def test_a_pending_pod_writes_no_init_containers():
    out = run_one(
        [node("n1", card("G0", 8000))],
        pod("p", init=[container("warm", ask(gpu=1, mem=1000))], limits=ask(gpu=2)),
    )
    assert (out["status"], out["allocated"], out["init_containers"]) == ("pending", None, [])


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
    ("entry", "field"),
    [
        pytest.param("GPU-x,10,15360,100,T4,0,true,1", "", id="eight-fields"),
        pytest.param("GPU-x,10,15360,100,T4,0", "", id="six-fields"),
        pytest.param("GPU-x,ten,15360,100,T4,0,true", ".count", id="non-integer-count"),
        pytest.param("GPU-x,10,big,100,T4,0,true", ".devmem", id="non-integer-memory"),
        pytest.param("GPU-x,10,1_000,100,T4,0,true", ".devmem", id="python-only-integer"),
        pytest.param("GPU-x,10,15360,100,T4,0,true,first,hami-core", ".index", id="non-integer-index"),
        pytest.param(",10,15360,100,T4,0,true", ".id", id="empty-uuid"),
        pytest.param("GPU;x,10,15360,100,T4,0,true", ".id", id="uuid-with-a-container-separator"),
        pytest.param("GPU-x,10,-1,100,T4,0,true", ".devmem", id="negative-memory"),
        pytest.param("GPU-x,10," + "9" * 5000 + ",100,T4,0,true", ".devmem", id="memory-of-5000-digits"),
        pytest.param("GPU-x,10,15360,100,T4,0,maybe", ".health", id="bad-health"),
    ],
)
def test_malformed_register_entry_is_refused_naming_it(entry, field):
    value = "GPU-ok,10,15360,100,T4,0,true:" + entry + ":"
    with pytest.raises(ScenarioError) as raised:
        decode_node_register(value)
    assert raised.value.where == "hami.io/node-nvidia-register[1]" + field


# -- hami.io/node-nvidia-register, the JSON list of HAMi 2.8 and later ---------------------------

#: Written by hand as HAMi's device plugin marshals its cards: Go leaves out zero values, so
#: card 0 has no `index` and no `numa`, and the unhealthy card has no `health`; keys this
#: scheduler does not read (devicevendor, migtemplate, custominfo) are there too.
JSON_REGISTER = (
    '[{"id":"GPU-8a1b2c3d-0000-4e5f-9a8b-0123456789ab","count":10,"devmem":15360,"devcore":100,'
    '"type":"NVIDIA-Tesla T4","mode":"hami-core","health":true,"devicevendor":"NVIDIA"},'
    '{"id":"GPU-8a1b2c3d-0001-4e5f-9a8b-0123456789ab","index":1,"count":10,"devmem":15360,'
    '"devcore":100,"type":"NVIDIA-Tesla T4","numa":1,"mode":"hami-core","health":true,'
    '"custominfo":{"k":"v"}},'
    '{"id":"GPU-8a1b2c3d-0002-4e5f-9a8b-0123456789ab","index":2,"count":4,"devmem":40960,'
    '"devcore":100,"type":"NVIDIA-A100-SXM4-40GB","numa":1,"mode":"mig","migtemplate":[]}]'
)


def test_register_json_list_with_go_zero_values_left_out():
    assert decode_node_register(JSON_REGISTER) == [
        RegisteredCard(
            "GPU-8a1b2c3d-0000-4e5f-9a8b-0123456789ab",
            10,
            15360,
            100,
            "NVIDIA-Tesla T4",
            0,
            True,
            0,
            "hami-core",
        ),
        RegisteredCard(
            "GPU-8a1b2c3d-0001-4e5f-9a8b-0123456789ab",
            10,
            15360,
            100,
            "NVIDIA-Tesla T4",
            1,
            True,
            1,
            "hami-core",
        ),
        RegisteredCard(
            "GPU-8a1b2c3d-0002-4e5f-9a8b-0123456789ab",
            4,
            40960,
            100,
            "NVIDIA-A100-SXM4-40GB",
            1,
            False,
            2,
            "mig",
        ),
    ]


def test_register_json_card_naming_only_its_id_is_all_zero_and_unhealthy():
    assert decode_node_register('[{"id":"GPU-a"}]') == [RegisteredCard("GPU-a", 0, 0, 0, "", 0, False, 0, "")]


@pytest.mark.parametrize("value", ["[]", "  \n [ ]", "\t[]"])
def test_register_json_is_told_by_a_leading_bracket_after_whitespace(value):
    assert decode_node_register(value) == []


def test_register_json_with_nulls_reads_them_as_left_out():
    value = '[{"id":"GPU-a","index":null,"count":10,"devmem":8000,"devcore":null,"health":null}]'
    assert decode_node_register(value) == [RegisteredCard("GPU-a", 10, 8000, 0, "", 0, False, 0, "")]


def test_both_forms_of_one_node_read_the_same():
    colons = "GPU-a,10,15360,100,NVIDIA-Tesla T4,0,true,0,hami-core:GPU-b,10,15360,100,NVIDIA-Tesla T4,1,false,1,hami-core:"
    json_list = (
        '[{"id":"GPU-a","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4","mode":"hami-core",'
        '"health":true},{"id":"GPU-b","index":1,"count":10,"devmem":15360,"devcore":100,'
        '"type":"NVIDIA-Tesla T4","numa":1,"mode":"hami-core"}]'
    )
    assert decode_node_register(json_list) == decode_node_register(colons)


def third_card(**fields) -> str:
    """A JSON register of three cards, the third with `fields` over a valid card."""
    good = {"id": "GPU-c", "index": 2, "count": 10, "devmem": 15360, "devcore": 100, "health": True}
    return json.dumps([{"id": "GPU-a", "health": True}, {"id": "GPU-b", "index": 1}, {**good, **fields}])


@pytest.mark.parametrize(
    ("fields", "field", "said"),
    [
        ({"devmem": -1}, "devmem", "must be a non-negative integer up to 2147483647, got -1"),
        ({"devmem": "15360"}, "devmem", "must be a non-negative integer, got '15360'"),
        ({"devmem": 15360.0}, "devmem", "must be a non-negative integer, got 15360.0"),
        ({"devmem": True}, "devmem", "must be a non-negative integer, got True"),
        ({"devmem": 2**31}, "devmem", "must be a non-negative integer up to 2147483647, got 2147483648"),
        ({"devmem": 10**30}, "devmem", "got a larger integer"),
        ({"count": [10]}, "count", "must be a non-negative integer, got [10]"),
        ({"devcore": -5}, "devcore", "non-negative integer"),
        ({"index": -1}, "index", "non-negative integer"),
        ({"numa": "0"}, "numa", "must be an integer, got '0'"),
        ({"numa": 2**31}, "numa", "from -2147483647 to 2147483647"),
        ({"id": ""}, "id", "required"),
        ({"id": "   "}, "id", "required"),
        ({"id": 7}, "id", "required"),
        ({"id": None}, "id", "required"),
        ({"id": "GPU,c"}, "id", "must not contain"),
        ({"id": "GPU:c"}, "id", "must not contain"),
        ({"health": "true"}, "health", "must be true or false, got 'true'"),
        ({"health": 1}, "health", "must be true or false, got 1"),
        ({"type": 4}, "type", "must be a string, got 4"),
        ({"mode": ["mig"]}, "mode", "must be a string"),
    ],
)
def test_malformed_json_register_card_is_refused_naming_card_and_field(fields, field, said):
    with pytest.raises(ScenarioError) as raised:
        decode_node_register(third_card(**fields))
    assert raised.value.where == f"hami.io/node-nvidia-register[2].{field}"
    assert said in raised.value.message


@pytest.mark.parametrize(
    ("value", "where", "said"),
    [
        ('[{"id":"GPU-a"},', "hami.io/node-nvidia-register", "not JSON"),
        ("[" * 100_000, "hami.io/node-nvidia-register", "JSON"),
        ('[{"id":"GPU-a","devmem":1' + "0" * 5000 + "}]", "hami.io/node-nvidia-register", "JSON"),
        ('[{"id":"GPU-a"}, "GPU-b"]', "hami.io/node-nvidia-register[1]", "expected an object"),
        ('[{"id":"GPU-a"}] trailing', "hami.io/node-nvidia-register", "not JSON"),
    ],
)
def test_json_register_that_does_not_read_is_refused_naming_where(value, where, said):
    with pytest.raises(ScenarioError) as raised:
        decode_node_register(value)
    assert raised.value.where == where
    assert said in raised.value.message


# -- hami.io/node-nvidia-score ---------------------------------------------------------------


def test_pair_scores_decode_symmetrically():
    links = decode_node_scores('{"GPU-a": {"GPU-b": 100, "GPU-a": 0}}')
    assert links == {("GPU-a", "GPU-b"): 100}


@pytest.mark.parametrize("value", ["{not json", '{"GPU-a": {"GPU-b": "fast"}}', "[1, 2]"])
def test_malformed_pair_scores_are_refused(value):
    with pytest.raises(ScenarioError) as raised:
        decode_node_scores(value)
    assert "hami.io/node-nvidia-score" in str(raised.value)


def test_pair_scores_given_differently_on_both_sides_keep_the_higher():
    links = decode_node_scores('{"GPU-a": {"GPU-b": 100}, "GPU-b": {"GPU-a": 200}}')
    assert links == {("GPU-a", "GPU-b"): 200}


# -- the two shapes of pair scores ------------------------------------------------------------


def test_links_on_one_side_count_for_both():
    pairs = links_to_pairs([("A", {"B": 100, "C": 20}), ("B", {}), ("C", {"B": 60})])
    assert pairs == {("A", "B"): 100, ("A", "C"): 20, ("B", "C"): 60}


def test_links_that_disagree_keep_the_higher_whichever_side_comes_first():
    assert links_to_pairs([("A", {"B": 100}), ("B", {"A": 60})]) == {("A", "B"): 100}
    assert links_to_pairs([("A", {"B": 60}), ("B", {"A": 100})]) == {("A", "B"): 100}


def test_links_leave_out_self_pairs_booleans_and_what_is_not_a_number():
    row = {"A": 100, "B": True, "C": "fast", "D": None, "E": 40.0}
    assert links_to_pairs([("A", row), ("F", None)]) == {("A", "E"): 40}


def test_pairs_become_links_both_ways_for_the_cards_named():
    pairs = {("A", "B"): 100, ("B", "C"): 60, ("C", "X"): 20}
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
