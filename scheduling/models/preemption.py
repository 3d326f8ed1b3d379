"""Preemption and reclaim as they happen: which running pod gives way to which, and the
cards the preemptor holds (is nominated to) until its victims have released them.

The decision that chose an eviction is the preemptor's `Decision` (its payload's
`preemption`: the victims with why, the cards, the alternatives compared); an `Eviction` row
is that choice carried out, one per victim, and says how far it got.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from .cluster import Card
from .history import Decision
from .pods import Pod


class Eviction(models.Model):
    """One victim of one preemption or reclaim."""

    REQUESTED = "requested"  # chosen; not yet carried out
    EVICTING = "evicting"  # Kubernetes accepted the eviction; the pod is terminating
    DONE = "done"  # its cards are released
    REFUSED = "refused"  # a PodDisruptionBudget (or Kubernetes) refused the eviction
    TIMED_OUT = "timed_out"  # it did not release its cards within the grace period
    CANCELLED = "cancelled"  # the preemptor went away or was placed elsewhere first
    STATES = [
        (REQUESTED, "requested"),
        (EVICTING, "evicting"),
        (DONE, "done"),
        (REFUSED, "refused"),
        (TIMED_OUT, "timed out"),
        (CANCELLED, "cancelled"),
    ]
    ACTIVE = (REQUESTED, EVICTING)

    PREEMPT = "preempt"
    RECLAIM = "reclaim"
    CONSOLIDATE = "consolidate"
    KINDS = [
        (PREEMPT, "preempt: lower priority in the same queue"),
        (RECLAIM, "reclaim: a queue above its fair share"),
        (CONSOLIDATE, "consolidate: moved to a new home held for it"),
    ]

    victim = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="evictions")
    preemptor = models.ForeignKey(
        Pod, null=True, blank=True, on_delete=models.SET_NULL, related_name="preemptions"
    )
    decision = models.ForeignKey(
        Decision,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="evictions",
        help_text="the preemptor's decision that chose this victim",
    )
    kind = models.CharField(max_length=16, choices=KINDS, default=PREEMPT)
    node = models.CharField(max_length=253)
    cards = models.JSONField(default=list, help_text="UUIDs of the cards the victim gives up")
    reason = models.TextField(help_text="why this victim, with the figures")
    state = models.CharField(max_length=16, choices=STATES, default=REQUESTED)
    message = models.TextField(blank=True, default="", help_text="what Kubernetes answered, or why it ended")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["victim"],
                condition=Q(state__in=("requested", "evicting")),
                name="eviction_one_active_per_victim",
            )
        ]
        indexes = [
            models.Index(fields=["state", "created_at"], name="eviction_state_age"),
        ]

    def __str__(self) -> str:
        return f"{self.victim_id} for {self.preemptor_id}: {self.state}"


class Nomination(models.Model):
    """One vGPU a preemptor will take on a card once its victims are gone. Other pods see the
    card as holding it (the cycle's snapshot and the commit's re-check), until it expires;
    `whole` (an exclusive ask: mutex, or all of the card's cores) as holding the whole card."""

    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="nominations")
    card = models.ForeignKey(Card, on_delete=models.CASCADE, related_name="nominations")
    memory = models.PositiveIntegerField(help_text="MiB")
    cores = models.PositiveSmallIntegerField()
    whole = models.BooleanField(
        default=False,
        db_default=False,
        help_text="the card is held whole for the preemptor (mutex or whole-card ask): nothing else is placed on it",
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["pod_id", "id"]
        indexes = [models.Index(fields=["card", "expires_at"], name="nomination_card")]

    def __str__(self) -> str:
        whole = ", whole card" if self.whole else ""
        return f"{self.pod_id} on {self.card_id}: {self.memory} MiB, {self.cores}%{whole}"
