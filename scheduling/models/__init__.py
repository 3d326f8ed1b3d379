"""The scheduler's persistent state: the cluster, the pods, what they hold, and why.

Usage of a card is what its active allocations hold; `Card.used_*` are counters kept
equal to that sum, written only in the transaction that writes the allocations.
"""

from .batch import NamespaceQuota, PodGroup, Queue
from .bound import BoundPod
from .cluster import INT32_MAX, CapacityVersion, Card, CardUsage, CycleLease, Node
from .config import SchedulerConfig
from .events import Event, record_event
from .history import Cycle, Decision
from .pods import Allocation, Pod
from .preemption import Eviction, Nomination
from .samples import UsageSample, apply_retention, take_sample

__all__ = [
    "INT32_MAX",
    "Allocation",
    "BoundPod",
    "CapacityVersion",
    "Card",
    "CardUsage",
    "Cycle",
    "CycleLease",
    "Decision",
    "Event",
    "Eviction",
    "NamespaceQuota",
    "Nomination",
    "Node",
    "Pod",
    "PodGroup",
    "Queue",
    "SchedulerConfig",
    "UsageSample",
    "apply_retention",
    "record_event",
    "take_sample",
]
