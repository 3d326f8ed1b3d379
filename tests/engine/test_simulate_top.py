"""`simulate --top K` keeps only the K best nodes per decision (issue 29: the whole ranking was
built and thrown away), and what it prints is the same as with every node kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import scheduling.engine.batch.scenario as batch_scenario
import scheduling.engine.scenario as scenario
from scheduling.engine.scenario import read_scenario_file, run_scenario

EXAMPLES = sorted(Path(__file__).resolve().parents[2].glob("static/scheduling/examples/*.json"))


class KeepsAll(scenario.Scheduler):
    """The scheduler as before: every node kept whatever the caller shows."""

    def __init__(self, cluster, config=None, cached_shapes=None, keep=None):
        super().__init__(cluster, config, cached_shapes, None)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("top", [1, 3])
def test_the_output_with_the_keep_bound_is_the_output_without_it(path, top, monkeypatch):
    bounded = run_scenario(read_scenario_file(path), top=top)
    monkeypatch.setattr(scenario, "Scheduler", KeepsAll)
    monkeypatch.setattr(batch_scenario, "Scheduler", KeepsAll)
    kept = run_scenario(read_scenario_file(path), top=top)
    assert json.dumps(bounded, sort_keys=True, default=str) == json.dumps(kept, sort_keys=True, default=str)


def test_the_scheduler_of_a_scenario_keeps_top_nodes(monkeypatch):
    seen = []

    class Spy(scenario.Scheduler):
        def __init__(self, cluster, config=None, cached_shapes=None, keep=None):
            seen.append(keep)
            super().__init__(cluster, config, cached_shapes, keep)

    monkeypatch.setattr(scenario, "Scheduler", Spy)
    run_scenario(read_scenario_file(EXAMPLES[0]), top=2)
    run_scenario(read_scenario_file(EXAMPLES[0]), top=0)
    run_scenario(read_scenario_file(EXAMPLES[0]))
    assert seen == [2, 1, None]
