"""The engine's output: a `Decision` that explains itself. API, pages, events and logs render it."""

from __future__ import annotations

from dataclasses import dataclass, field

from .encoding import encode_allocation


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


@dataclass(slots=True)
class Decision:
    """Where a pod goes and why. `node_ranking` is in policy order (best first);
    `failed_nodes` is sorted by node name; `reasons` sums each reason over the failed nodes.
    """

    name: str
    namespace: str
    status: str
    node: str | None = None
    containers: list[ContainerPlacement] = field(default_factory=list)
    policy: dict | None = None
    node_ranking: list[tuple[str, float]] = field(default_factory=list)
    failed_nodes: list[tuple[str, str]] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    error_field: str | None = None
    duration_ms: float = 0.0

    @property
    def allocated(self) -> str | None:
        if self.status != SCHEDULED:
            return None
        return encode_allocation([[(d.uuid, d.memory, d.cores) for d in c.devices] for c in self.containers])

    @property
    def node_score(self) -> float | None:
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
        total = len(self.failed_nodes)
        if not total:
            return "0/0 nodes are available: no GPU nodes"
        summary = ", ".join(f"{n} {reason}" for reason, n in sorted(self.reasons.items()))
        return f"0/{total} nodes are available: {summary}"

    def as_dict(self, top: int | None = None) -> dict:
        """The pod object of SPEC 9's output. `top` keeps the K best node scores and K failed nodes."""
        ranking = self.node_ranking if top is None else self.node_ranking[:top]
        failed = self.failed_nodes if top is None else self.failed_nodes[:top]
        return {
            "name": self.name,
            "namespace": self.namespace,
            "status": self.status,
            "node": self.node,
            "containers": [c.as_dict() for c in self.containers] if self.status == SCHEDULED else [],
            "allocated": self.allocated,
            "node_scores": {name: round(score, 6) for name, score in ranking},
            "failed_nodes": dict(failed),
            "nodes_fit": len(self.node_ranking),
            "nodes_failed": len(self.failed_nodes),
            "reasons": dict(sorted(self.reasons.items())),
            "policy": self.policy,
            "error": self.error,
        }
