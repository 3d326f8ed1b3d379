"""What each scheduling cycle did and why: the record behind every "why pending?"."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from scheduling.engine import decision as outcomes
from scheduling.engine import explain

from .pods import Pod


class Cycle(models.Model):
    """One pass of snapshot, decide and commit. Cycles that found nothing to do are not kept."""

    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    trigger = models.CharField(max_length=100, blank=True, default="")
    worker = models.CharField(max_length=200, blank=True, default="")
    considered = models.PositiveIntegerField(default=0)
    placed = models.PositiveIntegerField(default=0)
    pending = models.PositiveIntegerField(default=0, help_text="left pending: no fit, or a conflict")
    rejected = models.PositiveIntegerField(default=0)
    conflicts = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0, help_text="changed by someone else since the snapshot")
    nodes = models.PositiveIntegerField(default=0)
    snapshot_ms = models.FloatField(default=0)
    decide_ms = models.FloatField(default=0)
    commit_ms = models.FloatField(default=0)
    duration_ms = models.FloatField(default=0)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"cycle {self.pk}: {self.placed}/{self.considered} placed"


class Decision(models.Model):
    """One attempt at one pod. `payload` is the engine's explanation (SPEC 9 pod object, with
    the K best node scores and K failed nodes; counts and `reasons` are always complete).
    Read it through `scheduling.engine.explain`, as every face does."""

    SCHEDULED, PENDING, REJECTED, CONFLICT = outcomes.OUTCOMES
    OUTCOMES = [
        (SCHEDULED, "scheduled"),
        (PENDING, "pending"),
        (REJECTED, "rejected: invalid pod"),
        (CONFLICT, "conflict: capacity taken before the commit"),
    ]

    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="decisions")
    cycle = models.ForeignKey(
        Cycle, null=True, blank=True, on_delete=models.SET_NULL, related_name="decisions"
    )
    outcome = models.CharField(max_length=16, choices=OUTCOMES)
    node = models.CharField(max_length=253, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    payload = models.JSONField(default=dict)
    duration_ms = models.FloatField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-id"]
        get_latest_by = "id"
        indexes = [
            models.Index(fields=["pod", "-id"], name="decision_pod_latest"),
            models.Index(fields=["outcome", "-created_at"], name="decision_outcome_recent"),
            models.Index(fields=["node", "-created_at"], name="decision_node_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.outcome}: {self.reason}"

    @property
    def policy(self) -> dict:
        return explain.policy_of(self.payload)

    @property
    def chain(self) -> list[str]:
        return explain.chain_of(self.policy)

    @property
    def weights(self) -> dict | None:
        return self.policy.get("weights")

    @property
    def node_scores(self) -> dict[str, float]:
        return self.payload.get("node_scores") or {}

    @property
    def failed_nodes(self) -> dict[str, str]:
        return self.payload.get("failed_nodes") or {}

    @property
    def reasons(self) -> dict[str, int]:
        return self.payload.get("reasons") or {}

    @property
    def cards(self) -> list[dict]:
        """The chosen node's card table: per app container, every card as the chain ranked it."""
        return [
            {"container": container.get("name", ""), **card}
            for container in self.payload.get("containers") or []
            for card in container.get("cards") or []
        ]
