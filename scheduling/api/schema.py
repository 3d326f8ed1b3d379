"""Choice sets named in the OpenAPI schema (SPECTACULAR_SETTINGS ENUM_NAME_OVERRIDES):
several resources have a `status` with different values."""

from scheduling.engine.decision import PENDING, REJECTED, SCHEDULED
from scheduling.models import Pod
from scheduling.services import simulations

POD_STATUSES = [value for value, _ in Pod.STATUSES]
SIMULATED_STATUSES = [SCHEDULED, PENDING, REJECTED]
PROBE_STATUSES = ["ok", "unavailable"]
SIMULATION_JOB_STATUSES = list(simulations.STATUSES)
