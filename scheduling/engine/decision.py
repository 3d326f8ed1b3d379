"""The engine's output: a `Decision` that explains itself. API, pages, events and logs render it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .encoding import encode_allocation
from .errors import NO_GPU

if TYPE_CHECKING:
    from .fit import NodeFailure


@dataclass(frozen=True, slots=True)
class DeviceGrant:
    """One vGPU given to a container: which card, how many MiB and cores."""

    uuid: str
    memory: int
    cores: int
    index: int = 0

    def as_dict(self) -> dict:
        return {"uuid": self.uuid, "memory": self.memory, "cores": self.cores}


@dataclass(frozen=True, slots=True)
class CardVerdict:
    """One card of the chosen node as the chain saw it for one container.

    `stage` names the check that removed it (`health`, `cordon`, `type`, `uuid`, `slots`,
    `mutex`, `memory`, `cores`, `exclusive`, `compute`, `numa`); `decided_by` names the sort
    key that placed an eligible card after the one before it (`index` for the tiebreak).
    """

    uuid: str
    index: int
    score: float
    eligible: bool
    reason: str | None
    stage: str | None = None
    chosen: bool = False
    decided_by: str | None = None
    numa: int = 0

    def as_dict(self) -> dict:
        return {
            "uuid": self.uuid,
            "index": self.index,
            "score": round(self.score, 6),
            "eligible": self.eligible,
            "reason": self.reason,
            "stage": self.stage,
            "chosen": self.chosen,
            "decided_by": self.decided_by,
            "numa": self.numa,
        }


@dataclass(slots=True)
class ContainerPlacement:
    """One app container of a scheduled pod: the vGPUs it got, and every card of the chosen
    node as the chain saw them for it (ranked eligible cards first, then the removed ones)."""

    name: str
    devices: list[DeviceGrant] = field(default_factory=list)
    cards: list[CardVerdict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "devices": [device.as_dict() for device in self.devices],
            "cards": [card.as_dict() for card in self.cards],
        }


SCHEDULED, PENDING, REJECTED = "scheduled", "pending", "rejected"
#: The fourth outcome of an attempt, given by the pipeline's commit, not the engine: the
#: placement no longer fit under lock (capacity taken since the snapshot).
CONFLICT = "conflict"
OUTCOMES = (SCHEDULED, PENDING, REJECTED, CONFLICT)


@dataclass(slots=True)
class Decision:
    """Where a pod goes and why. `node_ranking` is in policy order (best first);
    `node_failures` is sorted by node name, each node's failure as data (`fit.NodeFailure`);
    `reasons` sums each reason over the failed nodes. A scheduler with a `keep` bound
    (`Scheduler.keep`) gives only the first `keep` entries of both lists; `nodes_fit` and
    `nodes_failed` count all of them either way (-1, the default, when constructed: the lists
    are complete, so their lengths). A rejected pod has `error`, the `error_field` at fault
    and, where callers act on its kind, an `error_code`.

    `containers` are the app containers only: they hold their cards, so they are what usage,
    allocation rows and the node score count. `init_containers` (one per init container of
    the spec, without card tables) hold their cards only until the app containers start;
    they are written first in `allocated` (SPEC 8), and nowhere else. `warnings` are what
    was read but changed or ignored, each `field: message` (e.g. `gpucores` above 100).
    """

    name: str
    namespace: str
    status: str
    node: str | None = None
    containers: list[ContainerPlacement] = field(default_factory=list)
    init_containers: list[ContainerPlacement] = field(default_factory=list)
    policy: dict | None = None
    node_ranking: list[tuple[str, float]] = field(default_factory=list)
    node_failures: list[tuple[str, NodeFailure]] = field(default_factory=list)
    nodes_fit: int = -1
    nodes_failed: int = -1
    reasons: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    error_field: str | None = None
    error_code: str | None = None
    warnings: list[str] = field(default_factory=list)
    duration_ms: float = 0.0
    closest: list[dict] = field(default_factory=list)  # `closeness.NodeCloseness.detail()`s
    never: dict | None = None
    #: Why a batch rule (gang, queue limit, namespace quota) kept the pod pending: `reason`
    #: (a code: `GangUnschedulable`, `QueueLimitExceeded`, ...), `message`, `would_fit_on`.
    batch: dict | None = None
    #: Evictions this pod caused (`preempt.Preemptor.explain`: node, victims, cards, grants,
    #: alternatives), or, when it tried and nothing helped, `{"tried": True, "why": ...}`.
    preemption: dict | None = None

    def __post_init__(self) -> None:
        if self.nodes_fit < 0:
            self.nodes_fit = len(self.node_ranking)
        if self.nodes_failed < 0:
            self.nodes_failed = len(self.node_failures)

    @property
    def unschedulable(self) -> bool:
        """Pending, and no node could ever take the pod as it asks (`never` says why)."""
        return self.status == PENDING and self.never is not None

    @property
    def failed_nodes(self) -> list[tuple[str, str]]:
        """(node, `N/M Reason, ...`) per failed node in `node_failures`, by node name."""
        return [(name, failure.text) for name, failure in self.node_failures]

    @property
    def asks_no_gpu(self) -> bool:
        """SPEC 2: a pod asking no GPU is rejected for good; other invalid pods wait for a fixed spec."""
        return self.error_code == NO_GPU

    @property
    def allocated(self) -> str | None:
        """`hami.io/vgpu-devices-allocated` (SPEC 8): the init containers first, in their order,
        then the app containers; `;` alone for a container without GPU."""
        if self.status != SCHEDULED:
            return None
        return encode_allocation(
            [
                [(d.uuid, d.memory, d.cores) for d in c.devices]
                for c in (*self.init_containers, *self.containers)
            ]
        )

    @property
    def node_score(self) -> float | None:
        """The chosen node's score: the first entry of the ranking (kept under any `keep`)."""
        for name, score in self.node_ranking:
            if name == self.node:
                return score
        return None

    def reason_text(self) -> str:
        """The one line an operator reads for a pod that waits (kubectl-describe style)."""
        if self.status == REJECTED:
            return self.error or "rejected"
        if self.status == SCHEDULED:
            return f"scheduled on {self.node}"
        if self.batch is not None:
            return f"{self.batch['reason']}: {self.batch['message']}"
        if self.preemption is not None and self.preemption.get("why") and self.preemption.get("say", True):
            return f"{self._failure_text()}; {self.preemption['why']}"
        return self._failure_text()

    def _failure_text(self) -> str:
        total = self.nodes_failed
        if not total:
            return "0/0 nodes are available: no GPU nodes"
        summary = ", ".join(f"{n} {reason}" for reason, n in sorted(self.reasons.items()))
        return f"0/{total} nodes are available: {summary}"

    def as_dict(self, top: int | None = None) -> dict:
        """The pod object of SPEC 9's output. `top` keeps the K best node scores and K failed nodes
        (the same dict as from a decision kept to `keep` >= K entries).

        Beyond SPEC 9's fields: `failed_reasons`, each failed node's failure as data
        (`{node: {"cards": M, "reasons": {code: N}}}`, the nodes of `failed_nodes`),
        `node_order`, the entries of `node_scores` as `[[node, score], ...]` in policy order
        (a JSON object may lose its key order where it is stored, e.g. PostgreSQL JSONB),
        `init_containers`, per init container `{"name", "devices"}` (scheduled pods; else []),
        `warnings`, a list of `field: message` texts, [] when none; for a pending pod
        `closest_nodes`, the nodes that came closest (`engine.closeness`, at most
        `ClusterConfig.closest_nodes`, closest first, whatever `top` is), each with its card
        table and what would make the pod fit there (`hints`), `unschedulable`, true when no
        node could ever take the pod (false otherwise, and for other outcomes), and
        `unschedulable_reason`, why not (`closeness.cluster_never`), else null; `batch`, only
        for a pod a gang, queue or quota rule kept pending (`Decision.batch`).
        """
        ranking = self.node_ranking if top is None else self.node_ranking[:top]
        failed = self.node_failures if top is None else self.node_failures[:top]
        out = {
            "name": self.name,
            "namespace": self.namespace,
            "status": self.status,
            "node": self.node,
            "containers": [c.as_dict() for c in self.containers] if self.status == SCHEDULED else [],
            "allocated": self.allocated,
            "node_scores": {name: round(score, 6) for name, score in ranking},
            "failed_nodes": {name: failure.text for name, failure in failed},
            "nodes_fit": self.nodes_fit,
            "nodes_failed": self.nodes_failed,
            "reasons": dict(sorted(self.reasons.items())),
            "policy": self.policy,
            "error": self.error,
            "failed_reasons": {
                name: {"cards": failure.cards, "reasons": dict(failure.reasons)} for name, failure in failed
            },
            "node_order": [[name, round(score, 6)] for name, score in ranking],
            "init_containers": [
                {"name": c.name, "devices": [device.as_dict() for device in c.devices]}
                for c in self.init_containers
            ]
            if self.status == SCHEDULED
            else [],
            "warnings": list(self.warnings),
            "closest_nodes": [dict(c) for c in self.closest] if self.status == PENDING else [],
            "unschedulable": self.unschedulable,
            "unschedulable_reason": self.never if self.unschedulable else None,
        }
        if self.batch is not None:
            out["batch"] = dict(self.batch)
        if self.preemption is not None:
            out["preemption"] = dict(self.preemption)
        return out
