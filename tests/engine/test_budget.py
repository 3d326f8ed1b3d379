"""Simulation cost: the work estimate counts topology-aware's combinations, and a deadline
stops the engine mid-run (in the combination search too), naming the setting that set it."""

from __future__ import annotations

import time
from math import comb

import pytest

from scheduling.engine import budget
from scheduling.engine.chain import FILTERS
from scheduling.engine.cost import choice_work
from scheduling.engine.scenario import parse_scenario, run_scenario

TOPOLOGY = {"hami.io/gpu-scheduler-policy": "topology-aware"}


def topology_scenario(nodes: int, cards: int, pods: int, count: int, chain: dict | None = None) -> dict:
    """`nodes` nodes of `cards` identical cards, every pair linked alike, and `pods` pods each
    asking `count` whole cards under `chain` (default topology-aware)."""
    return {
        "nodes": [
            {
                "name": f"n{n}",
                "devices": [
                    {"uuid": f"G{n}-{i}", "index": i, "memory": 16000, "type": "NVIDIA-A100"}
                    for i in range(cards)
                ],
            }
            for n in range(nodes)
        ],
        "pods": [
            {
                "name": f"p{p}",
                "annotations": dict(TOPOLOGY if chain is None else chain),
                "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": count}}}],
            }
            for p in range(pods)
        ],
    }


def steps(raw: dict) -> int:
    return choice_work(*parse_scenario(raw))


def test_topology_combinations_are_counted_per_pod_and_node_plus_the_explained_one():
    # 2 pods x (3 nodes + 1 explained) x C(8, 4) combinations x (C(4, 2) pairs + 1)
    assert steps(topology_scenario(3, 8, 2, 4)) == 2 * 4 * comb(8, 4) * (comb(4, 2) + 1)
    # one card: every fitting card's pairs once
    assert steps(topology_scenario(3, 8, 2, 1)) == 2 * 4 * 8 * 7


def test_the_search_cap_bounds_the_count_and_other_chains_add_nothing():
    cap = FILTERS["topology-aware"].max_combinations
    assert steps(topology_scenario(1, 120, 1, 16)) == 2 * cap * (comb(16, 2) + 1)
    assert steps(topology_scenario(3, 8, 2, 4, chain={"hami.io/gpu-scheduler-policy": "binpack"})) == 0
    assert steps(topology_scenario(3, 4, 2, 4)) == 0  # as many cards as asked: nothing to choose


def test_a_deadline_stops_the_combination_search_and_names_its_setting():
    raw = topology_scenario(1, 120, 2, 16)  # one pod alone weighs 200,000 combinations
    started = time.monotonic()
    with pytest.raises(budget.OverBudget, match=r"stopped after 0.2 s \(HAMI_TEST_SECONDS\)"):
        with budget.deadline(0.2, "HAMI_TEST_SECONDS"):
            run_scenario(raw)
    assert time.monotonic() - started < 1.5


def test_without_a_deadline_nothing_stops_and_a_deadline_ends_with_its_block():
    raw = topology_scenario(2, 8, 3, 2)
    with budget.deadline(30, "HAMI_TEST_SECONDS"):
        inside = run_scenario(raw)
    assert run_scenario(raw) == inside
    assert [pod["status"] for pod in inside["pods"]] == ["scheduled"] * 3
    with budget.deadline(0, "HAMI_TEST_SECONDS"):  # 0: no bound
        assert run_scenario(raw) == inside
