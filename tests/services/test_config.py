"""The cluster defaults (`services.config`): validated naming the field, appended as a row,
read by the next cycle."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.engine import ScenarioError
from scheduling.models import Pod, SchedulerConfig
from scheduling.pipeline import run_cycle
from tests.pipeline.conftest import card, submit

pytestmark = pytest.mark.django_db


def test_set_config_validates_naming_the_field_and_appends_a_row():
    with pytest.raises(ScenarioError) as error:
        services.set_config(node_scheduler_policy="tightest")
    assert error.value.where == "config.node_scheduler_policy"
    assert not SchedulerConfig.objects.exists()
    services.set_config(gpu_scheduler_policy="binpack", changed_by="ops")
    services.set_config(node_scheduler_policy="spread")
    current = SchedulerConfig.current()
    assert (current.node_scheduler_policy, current.gpu_scheduler_policy) == ("spread", "binpack")
    assert SchedulerConfig.objects.count() == 2


def test_node_spread_from_the_config_is_used_by_the_next_cycle():
    services.report_inventory("node1", {}, {}, [card("GPU-1a", 0), card("GPU-1b", 1)])
    services.report_inventory("node2", {}, {}, [card("GPU-2a", 0), card("GPU-2b", 1)])
    services.set_config(node_scheduler_policy="spread")
    submit("pod1", gpu=1, mem=1000)
    submit("pod2", gpu=1, mem=1000)
    run_cycle()
    assert sorted(Pod.objects.values_list("node__name", flat=True)) == ["node1", "node2"]


def test_validate_config_reads_a_scenario_config_and_bounds_the_resource_defaults():
    config = services.validate_config(
        {
            "node_scheduler_policy": "spread",
            "gpu_scheduler_policy": "mutex,binpack",
            "resources": {"cores": 20},
        }
    )
    assert (config.node_scheduler_policy, config.gpu_scheduler_policy, config.resources.cores) == (
        "spread",
        "mutex,binpack",
        20,
    )
    with pytest.raises(ScenarioError) as error:
        services.validate_config({"resources": {"exclusive_cores": 101}})
    assert (error.value.where, error.value.message) == (
        "config.resources.exclusive_cores",
        "must be at most 100",
    )
    with pytest.raises(ScenarioError) as error:
        services.validate_config({"node_scheduler_policy": "sideways", "resources": {"cores": 101}})
    assert error.value.where == "config.node_scheduler_policy", "the engine's rules first"
    assert not SchedulerConfig.objects.exists()
