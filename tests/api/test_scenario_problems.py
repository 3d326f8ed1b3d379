"""A malformed scenario names ALL its problems, each by its field path, not only the first:
the engine's parser, `manage.py simulate` (the file's path once, at most 20 problems, then
how many more) and `POST /api/v1/simulate/` (a 400 keyed by every place at fault)."""

from __future__ import annotations

import copy
import json

import pytest
from django.core.management import call_command

from scheduling.engine.errors import MAX_PROBLEMS, ScenarioError, ScenarioProblems
from scheduling.engine.scenario import parse_scenario

from .test_simulate import SCENARIO, embedded, limits, simulate  # noqa: F401 - embedded is a fixture


def card(uuid: str, memory=8000, **fields) -> dict:
    return {"uuid": uuid, "memory": memory, **fields}


def pod(name: str, **fields) -> dict:
    return {
        "name": name,
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        **fields,
    }


#: Four problems in four places, and what each says.
BROKEN = {
    "config": {"node_scheduler_policy": "random"},
    "nodes": [
        {"name": "n1", "devices": [card("A0"), {"memory": "lots"}]},
        {"name": "n2", "devices": [card("B0", used={"memory": -1})]},
    ],
    "pods": [pod("p0"), {"name": "p1", "containers": []}],
}
BROKEN_AT = [
    "config.node_scheduler_policy",
    "nodes[0].devices[1].uuid",
    "nodes[0].devices[1].memory",
    "nodes[1].devices[0].used.memory",
    "pods[1].containers",
]


def many_broken_pods(count: int) -> dict:
    return {
        "nodes": [{"name": "n1", "devices": [card("A0")]}],
        "pods": [{"name": f"p{i}"} for i in range(count)],
    }


def test_the_parser_names_every_problem_in_file_order():
    with pytest.raises(ScenarioProblems) as raised:
        parse_scenario(copy.deepcopy(BROKEN))
    problems = raised.value.problems
    assert [p.where for p in problems] == BROKEN_AT
    assert problems[2].message == "must be an integer, got 'lots'"
    assert raised.value.total == len(BROKEN_AT)
    # still a ScenarioError naming the first, for callers that show one message
    assert isinstance(raised.value, ScenarioError)
    assert raised.value.where == "config.node_scheduler_policy"
    assert str(raised.value).endswith("(and 4 more problems)")


def test_a_good_scenario_parses_as_before():
    cluster, config, pods = parse_scenario(copy.deepcopy(SCENARIO))
    assert [n.name for n in cluster.nodes] == ["node1", "node2"] and len(pods) == 3
    assert config.node_scheduler_policy == "spread"


def test_queues_and_groups_are_checked_entry_by_entry():
    raw = {
        "nodes": [],
        "pods": [],
        "queues": [
            {"name": "a", "weight": 0},
            {"name": "b", "limit": {"gpus": 1}},
            {"name": "c", "parent": "nope"},
        ],
        "groups": [{"name": "g", "min_member": 0}, {"name": ""}],
    }
    with pytest.raises(ScenarioProblems) as raised:
        parse_scenario(raw)
    assert [p.where for p in raised.value.problems] == [
        "queues[0].weight",
        "queues[1].limit.gpus",
        "queues[2].parent",
        "groups[0].min_member",
        "groups[1].name",
    ]


def test_past_the_limit_problems_are_counted_not_kept():
    with pytest.raises(ScenarioProblems) as raised:
        parse_scenario(many_broken_pods(MAX_PROBLEMS + 30))
    assert len(raised.value.problems) == MAX_PROBLEMS
    assert raised.value.total == MAX_PROBLEMS + 30


def test_simulate_prints_every_problem_under_the_path_named_once(tmp_path, capsys):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(BROKEN))
    with pytest.raises(SystemExit) as exited:
        call_command("simulate", str(path), "--format", "table")
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0] == f"simulate: {path}: 5 problems"
    assert [line.split(":")[0].strip() for line in lines[1:]] == BROKEN_AT
    assert lines[3] == "  nodes[0].devices[1].memory: must be an integer, got 'lots'"
    assert captured.err.count(str(path)) == 1


def test_simulate_shows_twenty_problems_then_how_many_more(tmp_path, capsys):
    path = tmp_path / "many.json"
    path.write_text(json.dumps(many_broken_pods(25)))
    with pytest.raises(SystemExit):
        call_command("simulate", str(path))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"simulate: {path}: 25 problems"
    assert lines[1] == "  pods[0].containers: required: a non-empty list of containers"
    assert len(lines) == 1 + 20 + 1
    assert lines[-1] == "  and 5 more"


def test_one_problem_stays_one_line(tmp_path, capsys):
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"nodes": [{"devices": []}], "pods": []}))
    with pytest.raises(SystemExit):
        call_command("simulate", str(path))
    assert capsys.readouterr().err == f"simulate: {path}: nodes[0].name: required: a non-empty string\n"


@pytest.mark.django_db
def test_the_api_answers_400_with_every_problem_keyed_by_where(viewer):
    answer = simulate(viewer, BROKEN)
    assert answer.status_code == 400, answer.content
    assert answer.json() == {
        "config.node_scheduler_policy": ["must be binpack or spread, got 'random'"],
        "nodes[0].devices[1].uuid": ["required: a non-empty string"],
        "nodes[0].devices[1].memory": ["must be an integer, got 'lots'"],
        "nodes[1].devices[0].used.memory": ["must be >= 0, got -1"],
        "pods[1].containers": ["required: a non-empty list of containers"],
    }


@pytest.mark.django_db
def test_the_api_names_every_malformed_kubernetes_field(viewer):
    body = {
        "nodes": [
            {"name": "n1", "allocatable": {"cpu": "4 cores"}, "devices": [card("A0")]},
        ],
        "pods": [pod("p0", tolerations=[{"key": "k", "operator": "Exists", "value": "v"}])],
        "running": [{"name": "old", "node": "n9", "containers": []}],
    }
    answer = simulate(viewer, body)
    assert answer.status_code == 400, answer.content
    assert answer.json() == {
        "nodes[0].allocatable.cpu": ["not a quantity: '4 cores'"],
        "pods[0].tolerations[0].value": ["must be empty when operator is Exists, got 'v'"],
        "running[0].node": ["no node 'n9' in the scenario"],
    }


@pytest.mark.django_db
def test_the_api_counts_what_it_does_not_list(viewer):
    body = simulate(viewer, many_broken_pods(MAX_PROBLEMS + 7)).json()
    assert len([key for key in body if key.startswith("pods[")]) == MAX_PROBLEMS
    assert body["non_field_errors"] == ["and 7 more problems"]


@pytest.mark.django_db
def test_a_scenario_too_big_to_answer_at_once_is_refused_with_every_problem(viewer, settings, embedded):  # noqa: F811
    limits(settings, SIMULATE_SYNC_MAX_WORK=1)
    answer = simulate(viewer, BROKEN)
    assert answer.status_code == 400
    assert sorted(answer.json()) == sorted(BROKEN_AT)


def test_a_file_that_cannot_be_read_names_its_path_once(tmp_path, capsys):
    path = tmp_path / "missing.json"
    with pytest.raises(SystemExit):
        call_command("simulate", str(path))
    assert capsys.readouterr().err == f"simulate: {path}: cannot read: No such file or directory\n"
