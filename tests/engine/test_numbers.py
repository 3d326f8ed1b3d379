"""Numbers a scenario or inventory cannot hold are refused naming the field: JSON reads 1e999
as infinity, Python's parser accepts NaN, and 1e300 is a whole float. A scenario takes
64-bit integers; HAMi's node annotations 32-bit ones, the size of the columns they fill."""

import json

import pytest

from scheduling.engine.encoding import LARGEST, decode_node_register, decode_node_scores
from scheduling.engine.errors import ScenarioError
from scheduling.engine.scenario import LARGEST as SCENARIO_LARGEST
from scheduling.engine.scenario import parse_scenario

from .builders import card, node, scenario


def one_node(**card_fields) -> dict:
    return scenario([node("n1", card("G0", **card_fields), card("G1"))], [])


@pytest.mark.parametrize(
    "score", ["1e999", "-1e999", "NaN", "Infinity", "1e300", str(2**31), "1" + "0" * 400]
)
def test_a_pair_score_that_is_not_a_finite_32_bit_number_is_refused_naming_the_pair(score):
    with pytest.raises(ScenarioError) as refused:
        decode_node_scores(f'{{"GPU-a": {{"GPU-b": {score}}}}}')
    assert refused.value.where == "hami.io/node-nvidia-score.GPU-a.GPU-b"
    assert "finite number" in refused.value.message


def test_the_largest_pair_score_is_kept():
    assert decode_node_scores(json.dumps({"GPU-a": {"GPU-b": LARGEST}})) == {("GPU-a", "GPU-b"): LARGEST}


@pytest.mark.parametrize("value", ["[" * 100_000, '{"GPU-a": {"GPU-b": 1' + "0" * 5000 + "}}"])
def test_pair_scores_python_cannot_even_parse_are_refused(value):
    with pytest.raises(ScenarioError) as refused:
        decode_node_scores(value)
    assert refused.value.where == "hami.io/node-nvidia-score"


@pytest.mark.parametrize(
    ("field", "named"), [("memory", "devmem"), ("slots", "count"), ("cores", "devcore"), ("numa", "numa")]
)
def test_a_register_field_beyond_32_bits_is_refused_naming_the_entry(field, named):
    fields = {"slots": "10", "memory": "15360", "cores": "100", "numa": "0"} | {field: str(2**31)}
    entry = (
        f"GPU-x,{fields['slots']},{fields['memory']},{fields['cores']},T4,{fields['numa']},true,0,hami-core"
    )
    with pytest.raises(ScenarioError) as refused:
        decode_node_register("GPU-ok,10,15360,100,T4,0,true,1,hami-core:" + entry + ":")
    assert refused.value.where == f"hami.io/node-nvidia-register[1].{named}"


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"memory": float("inf")}, "nodes[0].devices[0].memory"),
        ({"memory": float("nan")}, "nodes[0].devices[0].memory"),
        ({"memory": 1e300}, "nodes[0].devices[0].memory"),
        ({"memory": 2**63}, "nodes[0].devices[0].memory"),
        ({"memory": 10**5000}, "nodes[0].devices[0].memory"),
        ({"numa": -(2**63) - 1}, "nodes[0].devices[0].numa"),
        ({"links": {"G1": float("inf")}}, "nodes[0].devices[0].links.G1"),
        ({"links": {"G1": 1e300}}, "nodes[0].devices[0].links.G1"),
    ],
)
def test_a_card_number_that_is_not_a_finite_64_bit_integer_is_refused_naming_it(fields, where):
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(one_node(**fields))
    assert refused.value.where == where
    assert len(str(refused.value)) < 200


def test_64_bit_limits_themselves_are_accepted():
    largest = SCENARIO_LARGEST
    cluster, _, _ = parse_scenario(one_node(memory=largest, numa=-largest - 1, links={"G1": largest}))
    (parsed,) = cluster.nodes
    assert parsed.cards[0].memory == largest and parsed.cards[0].numa == -largest - 1
