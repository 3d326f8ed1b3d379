"""The write paths: the one place where the API, the admin, the agents, the Kubernetes watchers
and the demo change the cluster and the pods, by domain (`inventory`, `pods`, `bound`, `config`,
`batch`, `evictions`, `actions`, `consistency`; `simulations` keeps the queued simulations),
one validated writer per model. Each validates before it writes (errors name the field and
nothing is written), writes in one transaction, and asks for a cycle on commit.

Lock order everywhere (docs/architecture.md, "Lock order"; taken only through the helpers of
`scheduling.pipeline.rowlocks`): pods by primary key, then the node, then cards by primary key; rows are locked FOR NO KEY UPDATE, since no write here
changes a key, so the key-share locks that foreign-key checks take never wait on them.
Waking backed-off pods locks pods, so it runs after the commit that freed capacity, in its
own transaction, never while card locks are held. Every write is retried from the start
if PostgreSQL still picks it as a deadlock victim (`dbretry`).

Callers use `from scheduling import services; services.submit_pod(...)`: every public name
of the domains is here.
"""

from scheduling.models.cluster import over_capacity_text

from .actions import (
    OPERATOR_ACTION,
    Drain,
    cordon_card_by,
    cordon_node,
    delete_pod_by,
    drain_node,
    requeue_pod_by,
    requeueable,
    running_on,
)
from .batch import (
    QueueNode,
    QuotaOwnedByKubernetes,
    QuotaView,
    create_namespace_quota,
    create_pod_group,
    create_queue,
    delete_namespace_quota,
    delete_queue,
    forget_namespace_quotas,
    namespace_quota,
    namespace_quotas,
    queue_tree,
    rescale_owner_gang,
    store_namespace_quota,
    store_pod_group,
    update_namespace_quota,
    update_pod_group,
    update_queue,
    validate_namespace_quota,
    validate_pod_group,
    validate_queue,
)
from .bound import BOUND_KEYS, BoundWritten, assume_bound_pod, forget_bound_pods, upsert_bound_pods
from .config import current_config_view, parse_config_defaults, set_config, validate_config
from .consistency import Repair, repair_consistency
from .inventory import (
    CAPACITY_FIELDS,
    Measured,
    cordon_card,
    mark_node_not_ready,
    reassign_card,
    record_measurements,
    report_inventory,
    set_node_fields,
)
from .pods import (
    FINAL_STATUSES,
    ORIGIN_VALUES,
    Released,
    capacity_changed,
    mark_bound,
    release_pod,
    release_pods,
    requeue_placed_pod,
    requeue_pod,
    set_scheduling_gates,
    spec_hash,
    submit_pod,
    submit_pods,
    wake_pending_pods,
)

__all__ = [
    "BOUND_KEYS",
    "CAPACITY_FIELDS",
    "FINAL_STATUSES",
    "OPERATOR_ACTION",
    "ORIGIN_VALUES",
    "BoundWritten",
    "Drain",
    "QueueNode",
    "QuotaOwnedByKubernetes",
    "QuotaView",
    "Repair",
    "assume_bound_pod",
    "capacity_changed",
    "cordon_card",
    "cordon_card_by",
    "cordon_node",
    "create_namespace_quota",
    "create_pod_group",
    "create_queue",
    "current_config_view",
    "delete_pod_by",
    "delete_namespace_quota",
    "delete_queue",
    "drain_node",
    "forget_bound_pods",
    "forget_namespace_quotas",
    "mark_bound",
    "mark_node_not_ready",
    "namespace_quota",
    "namespace_quotas",
    "over_capacity_text",
    "parse_config_defaults",
    "queue_tree",
    "reassign_card",
    "Measured",
    "repair_consistency",
    "release_pod",
    "release_pods",
    "Released",
    "record_measurements",
    "report_inventory",
    "requeue_placed_pod",
    "requeue_pod",
    "requeue_pod_by",
    "requeueable",
    "running_on",
    "set_config",
    "set_node_fields",
    "set_scheduling_gates",
    "spec_hash",
    "store_namespace_quota",
    "store_pod_group",
    "rescale_owner_gang",
    "submit_pod",
    "submit_pods",
    "update_namespace_quota",
    "update_pod_group",
    "update_queue",
    "upsert_bound_pods",
    "validate_config",
    "validate_namespace_quota",
    "validate_pod_group",
    "validate_queue",
    "wake_pending_pods",
]
