"""The outcomes of a decision, apart so that what reads decisions (`triage`) and the decision
itself (`decision`) both take them without importing each other."""

SCHEDULED, PENDING, REJECTED = "scheduled", "pending", "rejected"
#: The fourth outcome of an attempt, given by the pipeline's commit, not the engine: the
#: placement no longer fit under lock (capacity taken since the snapshot).
CONFLICT = "conflict"
