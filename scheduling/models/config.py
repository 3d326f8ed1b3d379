"""Cluster-wide scheduling defaults: append-only, the latest row is in force."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from scheduling.engine import ClusterConfig
from scheduling.engine.scenario import parse_config
from scheduling.statements import Statement


class SchedulerConfig(models.Model):
    """One change of the cluster defaults, with who made it and when. Rows are never edited,
    so the history of policy changes is the table itself."""

    #: The most a resource default may be: a container's share of one card, in percent.
    MAX_PERCENT = 100

    node_scheduler_policy = models.CharField(max_length=16, default="binpack")
    gpu_scheduler_policy = models.CharField(max_length=200, default="spread")
    memory_percentage = models.PositiveSmallIntegerField(
        default=100, help_text="memory share of a container naming neither gpumem nor gpumem-percentage"
    )
    default_cores = models.PositiveSmallIntegerField(
        default=0, help_text="cores of a container not naming gpucores"
    )
    exclusive_cores = models.PositiveSmallIntegerField(
        default=100, help_text="cores of a container that wants the whole card"
    )
    changed_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        get_latest_by = "id"

    def __str__(self) -> str:
        return f"node={self.node_scheduler_policy} gpu={self.gpu_scheduler_policy} ({self.created_at:%Y-%m-%d %H:%M})"

    def as_raw(self) -> dict:
        """The `config` object of a scenario (SPEC 9), which the engine validates."""
        return {
            "node_scheduler_policy": self.node_scheduler_policy,
            "gpu_scheduler_policy": self.gpu_scheduler_policy,
            "resources": {
                "memory_percentage": self.memory_percentage,
                "cores": self.default_cores,
                "exclusive_cores": self.exclusive_cores,
            },
        }

    def as_engine(self) -> ClusterConfig:
        return parse_config(self.as_raw())

    @staticmethod
    def default_raw() -> dict:
        """The defaults from settings.HAMIADMIN, used until someone changes them."""
        conf = settings.HAMIADMIN
        return {
            "node_scheduler_policy": conf.get("NODE_SCHEDULER_POLICY", "binpack"),
            "gpu_scheduler_policy": conf.get("GPU_SCHEDULER_POLICY", "spread"),
        }

    @classmethod
    def in_force(cls) -> SchedulerConfig | None:
        """The row in force, or None while the settings' defaults apply (every submission
        reads it: a statement compiled once)."""
        return _IN_FORCE.first()

    @classmethod
    def current(cls) -> ClusterConfig:
        """The config in force: the latest row, else the settings' defaults (one query)."""
        latest = cls.in_force()
        return latest.as_engine() if latest else parse_config(cls.default_raw())


_IN_FORCE = Statement(lambda: SchedulerConfig.objects.order_by("-id")[:1])
