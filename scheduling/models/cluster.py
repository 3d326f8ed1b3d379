"""Nodes and their cards, as the agents last reported them."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q


class Node(models.Model):
    """A machine with cards. `ready` turns off when its agent stops reporting (heartbeat) or
    cannot vouch for it; `not_ready_reason` says why, until the next valid report."""

    name = models.CharField(max_length=253, unique=True)
    labels = models.JSONField(default=dict, blank=True)
    annotations = models.JSONField(default=dict, blank=True)
    ready = models.BooleanField(default=True)
    not_ready_reason = models.TextField(blank=True, default="", db_default="")
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Card(models.Model):
    """One physical GPU. Capacities come from the agent; `used_*` from the allocations.

    A card missing from its node's latest report is kept (its tenants and history stay)
    with `present` off, and takes no new pods.
    """

    uuid = models.CharField(max_length=128, unique=True)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="cards")
    index = models.PositiveIntegerField(default=0)
    type = models.CharField(max_length=128, default="NVIDIA")
    slots = models.PositiveIntegerField(default=10)
    memory = models.PositiveIntegerField(help_text="MiB")
    cores = models.PositiveIntegerField(default=100, help_text="100 = the whole card")
    numa = models.IntegerField(default=0)
    health = models.BooleanField(default=True)
    mode = models.CharField(max_length=64, blank=True, default="")
    cordoned = models.BooleanField(default=False)
    present = models.BooleanField(default=True)
    links = models.JSONField(default=dict, blank=True, help_text="pair scores: {other card uuid: score}")
    used_slots = models.IntegerField(default=0)
    used_memory = models.IntegerField(default=0)
    used_cores = models.IntegerField(default=0)
    over_capacity = models.CharField(
        max_length=300, blank=True, default="", db_default="",
        help_text="set when a report shrank the card under its tenants: which dimension, by how much",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [
            models.CheckConstraint(condition=Q(used_slots__gte=0), name="card_used_slots_not_negative"),
            models.CheckConstraint(condition=Q(used_memory__gte=0), name="card_used_memory_not_negative"),
            models.CheckConstraint(condition=Q(used_cores__gte=0), name="card_used_cores_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.uuid} ({self.node_id and self.node.name}#{self.index})"


def overcommitted_cards():
    """Cards holding more than their capacity in any dimension (should always be empty)."""
    return Card.objects.filter(
        Q(used_slots__gt=F("slots")) | Q(used_memory__gt=F("memory")) | Q(used_cores__gt=F("cores"))
    )
