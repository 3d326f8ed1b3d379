"""The cluster defaults (`GET/PUT/PATCH config/`), in the `config` form of a scenario."""

from __future__ import annotations

from rest_framework import serializers

from scheduling.models import SchedulerConfig

from .fields import OptionalTextField, StrictCharField, max_length
from .scenario import ScenarioResourcesSerializer


class ConfigSerializer(serializers.Serializer):
    """The cluster defaults, in the `config` form of a scenario (SPEC 9)."""

    node_scheduler_policy = serializers.ChoiceField(choices=["binpack", "spread"])
    gpu_scheduler_policy = StrictCharField(
        max_length=max_length(SchedulerConfig, "gpu_scheduler_policy"),
        allow_blank=True,
        trim_whitespace=False,
        help_text="the default chain, e.g. spread",
    )
    resources = ScenarioResourcesSerializer()
    changed_by = OptionalTextField(help_text="who changed it last; null: nobody yet")
    changed_at = serializers.DateTimeField(read_only=True, allow_null=True)
