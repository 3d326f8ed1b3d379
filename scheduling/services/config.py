"""The cluster defaults: one set of checks (the API, the admin form and `set_config` use
`validate_config`), one view of what is in force (`current_config_view`), and the write."""

from __future__ import annotations

from django.db import transaction

from scheduling.dbretry import retry_on_conflict
from scheduling.engine import ClusterConfig, ScenarioError
from scheduling.engine.scenario import parse_config
from scheduling.models import SchedulerConfig

from .pods import capacity_changed

#: The resource defaults, as the scenario's `config.resources` names them.
RESOURCES = ("memory_percentage", "cores", "exclusive_cores")


def validate_config(raw: dict) -> ClusterConfig:
    """The `config` object of a scenario (SPEC 9: `node_scheduler_policy`,
    `gpu_scheduler_policy`, `resources.{memory_percentage,cores,exclusive_cores}`) as the engine
    reads it, with the cluster's bound on top: no resource default above
    `SchedulerConfig.MAX_PERCENT`. Raises ScenarioError naming the field (`config.resources.cores`);
    the first fault found, the engine's rules first."""
    config = parse_config(raw)
    for key in RESOURCES:
        if getattr(config.resources, key) > SchedulerConfig.MAX_PERCENT:
            raise ScenarioError(f"config.resources.{key}", f"must be at most {SchedulerConfig.MAX_PERCENT}")
    return config


def parse_config_defaults() -> dict:
    """The settings' defaults in the scenario's `config` form, every resource named."""
    raw = SchedulerConfig.default_raw()
    config = parse_config(raw)
    raw["resources"] = {key: getattr(config.resources, key) for key in RESOURCES}
    return raw


def current_config_view() -> dict:
    """The defaults in force, in the scenario's `config` form, and who set them last (when)."""
    latest = SchedulerConfig.in_force()
    current = latest.as_engine() if latest else SchedulerConfig.current()
    return {
        "node_scheduler_policy": current.node_scheduler_policy,
        "gpu_scheduler_policy": current.gpu_scheduler_policy,
        "resources": {key: getattr(current.resources, key) for key in RESOURCES},
        "changed_by": latest.changed_by if latest else "",
        "changed_at": latest.created_at if latest else None,
    }


@retry_on_conflict
def set_config(
    node_scheduler_policy: str | None = None,
    gpu_scheduler_policy: str | None = None,
    memory_percentage: int | None = None,
    default_cores: int | None = None,
    exclusive_cores: int | None = None,
    changed_by: str = "",
) -> SchedulerConfig:
    """Change the cluster defaults (a new row; the old ones are the history). Unnamed values
    stay as they are. Raises ScenarioError naming the field (`config.…`)."""
    latest = SchedulerConfig.in_force()
    raw = latest.as_raw() if latest else parse_config_defaults()
    given = {"node_scheduler_policy": node_scheduler_policy, "gpu_scheduler_policy": gpu_scheduler_policy}
    raw.update({key: value for key, value in given.items() if value is not None})
    resources = dict(raw.get("resources") or {})
    for key, value in zip(RESOURCES, (memory_percentage, default_cores, exclusive_cores), strict=True):
        if value is not None:
            resources[key] = value
    raw["resources"] = resources
    config = validate_config(raw)
    with transaction.atomic():
        row = SchedulerConfig.objects.create(
            node_scheduler_policy=config.node_scheduler_policy,
            gpu_scheduler_policy=config.gpu_scheduler_policy[:200],
            memory_percentage=config.resources.memory_percentage,
            default_cores=config.resources.cores,
            exclusive_cores=config.resources.exclusive_cores,
            changed_by=(changed_by or "")[:150],
        )
        capacity_changed("config changed")
    return row
