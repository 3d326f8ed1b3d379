"""Things the scheduler refused or repaired, for operators: one row per (kind, subject,
reason), counted, so a watcher that resyncs every minute does not flood the table."""

from __future__ import annotations

from django.db import IntegrityError, models, transaction
from django.utils import timezone

from scheduling.storable import escaped


class Event(models.Model):
    """An audited happening that is not a scheduling decision: a card claim refused, an
    object from Kubernetes that could not enter, a card left over capacity by a shrinking
    report, a card reassigned by an operator, a half-done bind repaired, an operator's
    dashboard action, consistency drift found or repaired, a preemption carried out or refused."""

    CARD_CLAIM_REFUSED = "card_claim_refused"
    CARD_OVERCOMMITTED = "card_overcommitted"
    CARD_REASSIGNED = "card_reassigned"
    OBJECT_REFUSED = "object_refused"
    BIND_REPAIRED = "bind_repaired"
    OPERATOR_ACTION = "operator_action"
    CONSISTENCY = "consistency"
    PREEMPTION = "preemption"
    KINDS = [
        (CARD_CLAIM_REFUSED, "card claim refused"),
        (CARD_OVERCOMMITTED, "card over capacity under its tenants"),
        (CARD_REASSIGNED, "card reassigned by an operator"),
        (OBJECT_REFUSED, "object refused"),
        (BIND_REPAIRED, "half-done bind repaired"),
        (OPERATOR_ACTION, "operator action from the dashboard"),
        (CONSISTENCY, "consistency drift found or repaired"),
        (PREEMPTION, "a pod evicted for another, or an eviction refused"),
    ]
    WARNING, NORMAL = "Warning", "Normal"

    kind = models.CharField(max_length=32, choices=KINDS)
    severity = models.CharField(max_length=8, default=WARNING)
    subject = models.CharField(max_length=400, help_text="what it is about: node/a, card/GPU-1, pod/ns/name")
    reason = models.CharField(max_length=100, help_text="a short code, like a Kubernetes event reason")
    message = models.TextField(blank=True, default="")
    actor = models.CharField(
        max_length=200, blank=True, default="", help_text="who caused it: agent:node, user"
    )
    count = models.PositiveIntegerField(default=1)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-last_seen", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "subject", "reason"], name="event_kind_subject_reason"),
        ]
        indexes = [models.Index(fields=["-last_seen"], name="event_last_seen")]

    def __str__(self) -> str:
        return f"{self.kind} {self.subject}: {self.reason}"


def record_event(
    kind: str, subject: str, reason: str, message: str = "", actor: str = "", severity: str = Event.WARNING
) -> Event:
    """Create the event, or count it again (newest message, actor and severity win). Runs in
    its own savepoint so that a caller's transaction is never broken by it; no row locks
    other than the event's own, so it cannot join a lock cycle."""
    subject, reason, message, actor = (
        escaped(subject)[:400],
        escaped(reason)[:100],
        escaped(message)[:4000],
        escaped(actor)[:200],
    )
    now = timezone.now()
    same = Event.objects.filter(kind=kind, subject=subject, reason=reason)

    def count_again() -> int:
        return same.update(
            count=models.F("count") + 1, last_seen=now, message=message, actor=actor, severity=severity
        )

    with transaction.atomic():
        if not count_again():
            try:
                with transaction.atomic():
                    return Event.objects.create(
                        kind=kind,
                        subject=subject,
                        reason=reason,
                        message=message,
                        actor=actor,
                        severity=severity,
                        first_seen=now,
                        last_seen=now,
                    )
            except IntegrityError:  # a concurrent writer created it first: count it there
                count_again()
        return same.get()
