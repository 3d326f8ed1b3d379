"""The scheduling engine: pure Python, no Django.

Plain dataclasses in (`Cluster`, `ClusterConfig`, `PodSpec`), a `Decision` out.
`Scheduler` keeps one cluster snapshot and decides pods against it, applying each
placement so that later pods see it. Everything user-visible renders a `Decision`.

One module per SPEC section: `model` (1), `requests` (2), `annotations` (3), `pod` (2+3),
`fit` (4), `score` (5+7), `chain` (6: filters and sort keys), `evaluate` (one pod on one
node), `scheduler` (7: node order, cache), `decision`, `encoding` (8), `scenario` (9).
"""

from .decision import CardVerdict, ContainerPlacement, Decision, DeviceGrant
from .errors import PodInvalid, ScenarioError
from .model import Card, Cluster, ClusterConfig, Node, PodSpec, ResourceDefaults
from .scheduler import Scheduler

__all__ = [
    "Card",
    "CardVerdict",
    "Cluster",
    "ClusterConfig",
    "ContainerPlacement",
    "Decision",
    "DeviceGrant",
    "Node",
    "PodInvalid",
    "PodSpec",
    "ResourceDefaults",
    "ScenarioError",
    "Scheduler",
]
