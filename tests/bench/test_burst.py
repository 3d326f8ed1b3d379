"""bench.burst: the pipeline bench's burst decided by the engine alone."""

from __future__ import annotations

import pytest

from bench.burst import main, run_once, scenario
from bench.pipeline import REALISTIC_SHAPES


def test_the_burst_is_the_pipeline_benchs_cluster_and_shapes():
    raw = scenario(3, 50, "realistic")
    assert [len(node["devices"]) for node in raw["nodes"]] == [8, 8, 8]
    assert {card["numa"] for card in raw["nodes"][0]["devices"]} == {0, 1}
    shapes = [(pod["annotations"], pod["containers"][0]["resources"]["limits"]) for pod in raw["pods"]]
    assert shapes[: len(REALISTIC_SHAPES)] == REALISTIC_SHAPES


def test_room_for_every_pod_places_every_pod_and_too_little_does_not():
    assert run_once(scenario(200, 120, "realistic"))[1] == 120
    assert 0 < run_once(scenario(2, 120, "realistic"))[1] < 120


def test_it_prints_one_line_a_size(capsys):
    results = main(["--nodes", "20,40", "--pods", "30", "--runs", "2"])
    assert [(r["nodes"], r["placed"]) for r in results] == [(20, 30), (40, 30)]
    assert all(0 < r["best"] <= r["median"] for r in results)
    assert len(capsys.readouterr().out.splitlines()) == 4


def test_bad_sizes_are_refused():
    with pytest.raises(SystemExit):
        main(["--nodes", "0"])
