"""One serializer module per resource (NetBox's `serializers_/`); every name is here too.

Field names follow the scenario format (SPEC 9) wherever the same thing appears there; a
decision is a pod object of the simulate output. Input serializers check the envelope
(types, required fields, the columns' sizes); what a pod asks for and what its annotations
mean is checked by the engine, so there is one rule book.
"""

from .agents import AgentReportResultSerializer, AgentReportSerializer, CardListField, RefusedCardSerializer
from .batch import (
    FiguresSerializer,
    HardSerializer,
    MemberDecisionSerializer,
    MemberSerializer,
    NamespaceQuotaSerializer,
    NamespaceQuotaWriteSerializer,
    PodGroupSerializer,
    PodGroupWriteSerializer,
    QueueSerializer,
    QueueWriteSerializer,
    UsageSerializer,
)
from .cluster import (
    CardReassignSerializer,
    CardSerializer,
    NodeSerializer,
    NodeUsageSerializer,
    SlimNodeSerializer,
    TenantSerializer,
)
from .config import ConfigSerializer
from .fields import StrictCharField, StrictIntegerField, StringMapField
from .history import AllocationSerializer, CycleSerializer, DecisionSerializer, EventSerializer
from .pods import (
    ContainerListField,
    ContainerStatusSerializer,
    PendingPodSerializer,
    PodDetailSerializer,
    PodSerializer,
    PodSubmitSerializer,
    PodSubmittedSerializer,
)
from .preemption import (
    EvictionSerializer,
    NominationSerializer,
    PreemptionAlternativeSerializer,
    PreemptionSerializer,
    PreemptionVictimSerializer,
)
from .scenario import (
    CapacitySerializer,
    CardVerdictSerializer,
    ClusterConfigSerializer,
    ContainerSpecSerializer,
    DeviceSerializer,
    PlacementSerializer,
    PodDecisionSerializer,
    PolicySerializer,
    ScenarioCardSerializer,
    ScenarioNodeSerializer,
    ScenarioPodSerializer,
    ScenarioResourcesSerializer,
    ScenarioSerializer,
    ScenarioUsedCardSerializer,
    SimulationJobSerializer,
    SimulationSerializer,
    WeightsSerializer,
)

__all__ = [
    "EvictionSerializer",
    "NominationSerializer",
    "PreemptionAlternativeSerializer",
    "PreemptionSerializer",
    "PreemptionVictimSerializer",
    "UsageSerializer",
    "QueueWriteSerializer",
    "QueueSerializer",
    "PodGroupWriteSerializer",
    "PodGroupSerializer",
    "MemberSerializer",
    "MemberDecisionSerializer",
    "FiguresSerializer",
    "HardSerializer",
    "NamespaceQuotaSerializer",
    "NamespaceQuotaWriteSerializer",
    "AgentReportResultSerializer",
    "AgentReportSerializer",
    "AllocationSerializer",
    "CapacitySerializer",
    "CardListField",
    "CardReassignSerializer",
    "CardSerializer",
    "CardVerdictSerializer",
    "ClusterConfigSerializer",
    "ConfigSerializer",
    "ContainerListField",
    "ContainerSpecSerializer",
    "ContainerStatusSerializer",
    "CycleSerializer",
    "DecisionSerializer",
    "DeviceSerializer",
    "EventSerializer",
    "NodeSerializer",
    "NodeUsageSerializer",
    "SlimNodeSerializer",
    "PendingPodSerializer",
    "PlacementSerializer",
    "PodDecisionSerializer",
    "PodDetailSerializer",
    "PodSerializer",
    "PodSubmitSerializer",
    "PodSubmittedSerializer",
    "PolicySerializer",
    "RefusedCardSerializer",
    "ScenarioCardSerializer",
    "ScenarioNodeSerializer",
    "ScenarioPodSerializer",
    "ScenarioResourcesSerializer",
    "ScenarioSerializer",
    "ScenarioUsedCardSerializer",
    "SimulationJobSerializer",
    "SimulationSerializer",
    "StrictCharField",
    "StrictIntegerField",
    "StringMapField",
    "TenantSerializer",
    "WeightsSerializer",
]
