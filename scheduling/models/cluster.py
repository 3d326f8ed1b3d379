"""Nodes and their cards, as the agents last reported them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection, models
from django.db.models import F, Q
from django.db.models.functions import Coalesce

from .fields import JSONField

#: The largest number the integer columns hold (capacities, counters, priority).
INT32_MAX = 2**31 - 1


PRESENT = Q(cards__present=True)


class NodeQuerySet(models.QuerySet):
    def with_totals(self) -> NodeQuerySet:
        """Each node with its present cards' count, capacity and usage summed in SQL (read by
        `Node.usage` instead of the cards), and `cordoned_cards`."""
        return self.annotate(
            total_cards=models.Count("cards", filter=PRESENT),
            total_slots=Coalesce(models.Sum("cards__slots", filter=PRESENT), 0),
            total_used_slots=Coalesce(models.Sum("cards__used_slots", filter=PRESENT), 0),
            total_memory=Coalesce(models.Sum("cards__memory", filter=PRESENT), 0),
            total_used_memory=Coalesce(models.Sum("cards__used_memory", filter=PRESENT), 0),
            total_cores=Coalesce(models.Sum("cards__cores", filter=PRESENT), 0),
            total_used_cores=Coalesce(models.Sum("cards__used_cores", filter=PRESENT), 0),
            cordoned_cards=models.Count("cards", filter=Q(cards__cordoned=True)),
        )


#: The annotations `Node.objects.with_totals()` sets, in `CardUsage`'s argument order.
TOTALS = ("slots", "used_slots", "memory", "used_memory", "cores", "used_cores")


class Node(models.Model):
    """A machine with cards. `ready` turns off when its agent stops reporting (heartbeat) or
    cannot vouch for it; `not_ready_reason` says why, until the next valid report."""

    name = models.CharField(max_length=253, unique=True)
    labels = JSONField(default=dict, blank=True)
    annotations = JSONField(default=dict, blank=True)
    ready = models.BooleanField(default=True)
    not_ready_reason = models.TextField(blank=True, default="", db_default="")
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    #: Kubernetes node fields (SPEC 10), in the API's own forms: `{key, value, effect}` taints,
    #: `spec.unschedulable`, and resource name -> quantity as given (`"4"`, `"16Gi"`).
    taints = JSONField(default=list, db_default=models.Value([], output_field=models.JSONField()), blank=True)
    unschedulable = models.BooleanField(default=False, db_default=False)
    allocatable = JSONField(
        default=dict, db_default=models.Value({}, output_field=models.JSONField()), blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    #: The cards of another node a report named, refused (set by `services.report_inventory` on
    #: the node it returns; not a column).
    refused: list[dict]

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def usage(self) -> CardUsage:
        """What the node's present cards hold against their capacity: the sums of
        `Node.objects.with_totals()` when read so, else the (prefetched) cards."""
        if hasattr(self, "total_cards"):
            totals = vars(self)  # the annotations of with_totals(), set on the instance
            return CardUsage(
                **{name: totals[f"total_{name}"] for name in TOTALS}, cards=totals["total_cards"]
            )
        return CardUsage.of(card for card in self.cards.all() if card.present)


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
    links = JSONField(default=dict, blank=True, help_text="pair scores: {other card uuid: score}")
    dra = JSONField(
        default=dict,
        blank=True,
        help_text="a DRA driver's device (mode `dra`): driver, pool, device, shareable, capacity names",
    )
    mig_profiles = JSONField(
        default=list,
        blank=True,
        help_text="a MIG card's profiles, as HAMi v2.10 registers them (migProfiles)",
    )
    used_slots = models.IntegerField(default=0)
    used_memory = models.IntegerField(default=0)
    used_cores = models.IntegerField(default=0)
    over_capacity = models.CharField(
        max_length=300,
        blank=True,
        default="",
        db_default="",
        help_text="set when a report shrank the card under its tenants: which dimension, by how much",
    )
    # What the agent measured (NVML), beside what the scheduler granted; null until reported.
    observed_memory = models.PositiveIntegerField(null=True, blank=True, help_text="MiB in use (NVML)")
    utilization = models.PositiveSmallIntegerField(null=True, blank=True, help_text="GPU busy, percent")
    temperature = models.PositiveSmallIntegerField(null=True, blank=True, help_text="degrees C")
    power = models.FloatField(null=True, blank=True, help_text="watts")
    ecc_errors = models.PositiveIntegerField(
        null=True, blank=True, help_text="uncorrectable ECC errors since the driver loaded"
    )
    last_xid = models.PositiveIntegerField(null=True, blank=True, help_text="latest XID the agent saw")
    observed_at = models.DateTimeField(null=True, blank=True)
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

    @property
    def usage(self) -> CardUsage:
        return CardUsage.of([self])

    @property
    def memory_overuse(self) -> int:
        """MiB the card really uses beyond what its tenants were granted (and the margin):
        a tenant ignoring its limit, or a process the scheduler does not know. 0 when fine
        or not measured."""
        if self.observed_memory is None:
            return 0
        return max(0, self.observed_memory - self.used_memory - OVERUSE_MARGIN_MIB)


#: Memory NVML counts as used on a card with no tenant work (driver and CUDA contexts), so a
#: card is flagged only when its use passes what was granted by more than this.
OVERUSE_MARGIN_MIB = 512


def overused_cards():
    """Cards whose measured memory passes what their tenants were granted (`memory_overuse`)."""
    return Card.objects.filter(observed_memory__gt=F("used_memory") + OVERUSE_MARGIN_MIB)


@dataclass
class CardUsage:
    """Slots, memory and cores held against capacity, summed over some cards: what the API's
    `usage`, `used` and `free` and the dashboard's bars and heat colours show."""

    slots: int = 0
    used_slots: int = 0
    memory: int = 0
    used_memory: int = 0
    cores: int = 0
    used_cores: int = 0
    cards: int = 0

    @classmethod
    def of(cls, cards: Iterable[Card]) -> CardUsage:
        usage = cls()
        for card in cards:
            usage.add(card)
        return usage

    def add(self, card: Card) -> None:
        self.cards += 1
        self.slots += card.slots
        self.used_slots += card.used_slots
        self.memory += card.memory
        self.used_memory += card.used_memory
        self.cores += card.cores
        self.used_cores += card.used_cores

    @property
    def used(self) -> dict[str, int]:
        return {"slots": self.used_slots, "memory": self.used_memory, "cores": self.used_cores}

    @property
    def total(self) -> dict[str, int]:
        return {"slots": self.slots, "memory": self.memory, "cores": self.cores}

    @property
    def free(self) -> dict[str, int]:
        """What is left, never below 0 (a card shrunk under its tenants has nothing free)."""
        return {
            "slots": max(0, self.slots - self.used_slots),
            "memory": max(0, self.memory - self.used_memory),
            "cores": max(0, self.cores - self.used_cores),
        }

    @property
    def peak(self) -> float:
        """The fullest dimension, 0..1: what the heat colour shows."""
        shares = [
            used / total
            for used, total in (
                (self.used_slots, self.slots),
                (self.used_memory, self.memory),
                (self.used_cores, self.cores),
            )
            if total
        ]
        return max(shares, default=0.0)


def over_capacity_text(used_slots, used_memory, used_cores, slots, memory, cores) -> str:
    """'' when the tenants fit the capacity, else what is held beyond it, per dimension
    (`Card.over_capacity`)."""
    parts = [
        f"{name} {used} held, {capacity} reported"
        for name, used, capacity in (
            ("slots", used_slots, slots),
            ("memory MiB", used_memory, memory),
            ("cores %", used_cores, cores),
        )
        if used > capacity
    ]
    return "; ".join(parts)[:300]


def overcommitted_cards():
    """Cards holding more than their capacity in any dimension (should always be empty)."""
    return Card.objects.filter(
        Q(used_slots__gt=F("slots")) | Q(used_memory__gt=F("memory")) | Q(used_cores__gt=F("cores"))
    )


class CapacityVersion(models.Model):
    """One row whose `version` every change that may free capacity moves, in a short
    transaction of its own after the change commits (`services.bump_capacity`).

    A cycle reads it as it plans and again as its commit starts. Moved means capacity was
    freed while it planned: the pods it could not place are not backed off, since the next
    cycle's wake (`pipeline.wake`) would look only at pods backed off already. A move after
    the commit's read is seen by the next cycle's wake, which runs after this commit (cycles
    are single-flight), and finds the pods it backed off. Nothing holds the row locked beyond
    its own update, so a bump never waits on a commit (issue 29: a stalled commit used to hold
    it `FOR SHARE` and every release waited behind it).
    """

    ROW = 1

    version = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "capacity version"

    def __str__(self) -> str:
        return f"capacity version {self.version}"

    @classmethod
    def read(cls) -> int:
        """The version now (0 before the first bump)."""
        return cls.objects.filter(pk=cls.ROW).values_list("version", flat=True).first() or 0

    @classmethod
    def bump(cls) -> None:
        """Move it: capacity may have been freed. One UPDATE written once (every release
        sends it; the ORM's `update()` compiles it anew each time)."""
        quote = connection.ops.quote_name
        column = {field.name: str(field.column) for field in cls._meta.concrete_fields}
        table, version, key = quote(str(cls._meta.db_table)), quote(column["version"]), quote(column["id"])
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET {version} = {version} + 1 WHERE {key} = %s", [cls.ROW])
            moved = cursor.rowcount
        if not moved:
            cls.objects.get_or_create(pk=cls.ROW, defaults={"version": 1})


class CycleLease(models.Model):
    """The cycle lock's deadline on PostgreSQL (`pipeline.locks`): the session holding the
    advisory lock moves `expires_at` forward from its cycle loop; a caller that finds the lock
    held past it ends that session (`pg_terminate_backend`), so a holder that stopped making
    progress (stopped, stuck writing a full pipe) loses the lock. One row, written in the
    database's own clock."""

    ROW = 1

    pid = models.IntegerField(help_text="The holding session's backend process id.")
    holder = models.CharField(max_length=200, blank=True, help_text="The worker holding it.")
    expires_at = models.DateTimeField()

    class Meta:
        verbose_name = "cycle lease"

    def __str__(self) -> str:
        return f"cycle lease of {self.holder or self.pid} until {self.expires_at:%H:%M:%S}"
