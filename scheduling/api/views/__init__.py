"""REST endpoints under /api/v1/, one module per resource. Thin: reads go through the
filtersets and serializers, every write goes through `scheduling.services` inside one
transaction, so a refused request writes nothing.
"""

from .agents import AgentReportView
from .base import BAD_FILTER, ERRORS, REFUSED, Conflict, Pages, RoleView
from .batch import (
    NamespaceQuotaDetail,
    NamespaceQuotaList,
    PodGroupDetail,
    PodGroupList,
    QueueDetail,
    QueueList,
)
from .cluster import CardViewSet, NodeViewSet
from .config import ConfigView
from .history import AllocationViewSet, CycleViewSet, DecisionViewSet, EventList
from .pods import PendingView, PodViewSet
from .preemption import EvictionViewSet
from .simulate import QueuedSimulationThrottle, ScenarioTooBig, SimulateView, SimulationView
from .whatif import CapacityView, PodDecisionView, WhatIfView

__all__ = [
    "QueueList",
    "QueueDetail",
    "PodGroupList",
    "PodGroupDetail",
    "NamespaceQuotaList",
    "NamespaceQuotaDetail",
    "BAD_FILTER",
    "ERRORS",
    "REFUSED",
    "AgentReportView",
    "AllocationViewSet",
    "CapacityView",
    "CardViewSet",
    "Conflict",
    "ConfigView",
    "CycleViewSet",
    "DecisionViewSet",
    "EventList",
    "EvictionViewSet",
    "NodeViewSet",
    "Pages",
    "PendingView",
    "PodDecisionView",
    "PodViewSet",
    "QueuedSimulationThrottle",
    "RoleView",
    "ScenarioTooBig",
    "SimulateView",
    "SimulationView",
    "WhatIfView",
]
