"""The engine's output: a `Decision` that explains itself. API, pages, events and logs render it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from .errors import NO_GPU
from .families import FAMILIES, NVIDIA
from .grants import DeviceGrant
from .outcomes import CONFLICT, PENDING, REJECTED, SCHEDULED
from .reasons import CODES, NODE_RULES, SCHEDULING_GATED

if TYPE_CHECKING:
    from .fit import NodeFailure
    from .triage import Triage


#: `Decision.as_dict`'s `triaged` when the caller has not triaged the decision.
UNTRIAGED = object()


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


@dataclass(frozen=True, slots=True)
class Hold:
    """Why a batch rule kept a pod pending (`Decision.batch`): `reason` is the code
    (`NotEnoughPods`, `GangUnschedulable`, `QueueLimitExceeded`, `NamespaceQuotaExceeded`,
    `QueueNotFound`, `Preempting`, `Consolidating`, `Nominated`), `would_fit_on` the node its
    cards fit when only the rule held it, `group` the gang and `queue` the leaf queue the rule
    read, where one did (absent from the payload otherwise)."""

    reason: str
    message: str
    would_fit_on: str | None = None
    group: str | None = None
    queue: str | None = None

    def as_dict(self) -> dict:
        out: dict[str, Any] = {
            "reason": self.reason,
            "message": self.message,
            "would_fit_on": self.would_fit_on,
        }
        if self.group is not None:
            out["group"] = self.group
        if self.queue is not None:
            out["queue"] = self.queue
        return out

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> Hold:
        """A hold read back from a stored payload's `batch`."""
        return cls(
            reason=str(payload.get("reason") or ""),
            message=str(payload.get("message") or ""),
            would_fit_on=payload.get("would_fit_on"),
            group=payload.get("group"),
            queue=payload.get("queue"),
        )


class Evicted(Protocol):
    """One victim of a preemption as its decision shows it (`batch.preempt.Victim` when fresh,
    `RecordedVictim` when read back from a payload)."""

    @property
    def pod(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def why(self) -> str: ...
    @property
    def cards(self) -> list[str]: ...
    def as_dict(self) -> dict: ...


class Moved(Protocol):
    """One tenant a consolidation moves (`batch.consolidate.Move`, or `RecordedMove`)."""

    @property
    def pod(self) -> str: ...
    @property
    def grants(self) -> list[tuple[str, int, int]]: ...
    def as_dict(self) -> dict: ...


@dataclass(frozen=True, slots=True)
class RecordedVictim:
    """A victim as a stored payload has it (its `as_dict` entry)."""

    entry: Mapping[str, Any]

    @property
    def pod(self) -> str:
        return str(self.entry.get("pod") or "")

    @property
    def kind(self) -> str:
        return str(self.entry.get("kind") or "")

    @property
    def why(self) -> str:
        return str(self.entry.get("why") or "")

    @property
    def cards(self) -> list[str]:
        return [str(uuid) for uuid in self.entry.get("cards") or ()]

    def as_dict(self) -> dict:
        return dict(self.entry)


@dataclass(frozen=True, slots=True)
class RecordedMove:
    """A move as a stored payload has it (its `as_dict` entry)."""

    entry: Mapping[str, Any]

    @property
    def pod(self) -> str:
        return str(self.entry.get("pod") or "")

    @property
    def grants(self) -> list[tuple[str, int, int]]:
        return [(str(g[0]), int(g[1]), int(g[2])) for g in self.entry.get("grants") or ()]

    def as_dict(self) -> dict:
        return dict(self.entry)


@dataclass(frozen=True, slots=True)
class Preemption:
    """The evictions a pod causes (`Decision.preemption`): nominated to `node`'s `grants`
    (card uuid, MiB, cores) once `victims` release `cards`, the cheapest of the plans compared
    (`alternatives`: the others, with why they lost); `moves` for a consolidation; `whole`, the
    cards held whole for an exclusive preemptor (docs/preemption.md, "Exclusive preemptors"). Or, with
    `tried`, why no eviction helped: `why`, the `misses` counted, and `say`, whether the pod's
    reason line repeats it (a miss too common to repeat, such as no tenants, is not said)."""

    node: str | None = None
    victims: tuple[Evicted, ...] = ()
    cards: tuple[str, ...] = ()
    grants: tuple[tuple[str, int, int], ...] = ()
    alternatives: tuple[dict, ...] = ()
    dry_run: bool = False
    message: str = ""
    moves: tuple[Moved, ...] | None = None
    whole: tuple[str, ...] = ()
    tried: bool = False
    why: str = ""
    misses: dict[str, int] | None = None
    say: bool = True

    @classmethod
    def failed(cls, why: str, misses: Mapping[str, int] | None = None, say: bool = True) -> Preemption:
        """Preemption was tried and did not help."""
        return cls(tried=True, why=why, misses=dict(misses) if misses is not None else None, say=say)

    def as_dict(self) -> dict:
        if self.tried:
            out: dict[str, Any] = {"tried": True, "why": self.why}
            if self.misses is not None:
                out["misses"] = dict(self.misses)
                out["say"] = self.say
            return out
        out = {
            "node": self.node,
            "victims": [victim.as_dict() for victim in self.victims],
            "cards": list(self.cards),
            "grants": [list(grant) for grant in self.grants],
            "alternatives": [dict(alternative) for alternative in self.alternatives],
            "dry_run": self.dry_run,
            "message": self.message,
        }
        if self.moves is not None:
            out["moves"] = [move.as_dict() for move in self.moves]
        if self.whole:
            out["whole"] = list(self.whole)
        return out

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> Preemption:
        """A preemption read back from a stored payload's `preemption`."""
        if payload.get("tried"):
            misses = payload.get("misses")
            return cls(
                tried=True,
                why=str(payload.get("why") or ""),
                misses=dict(misses) if isinstance(misses, Mapping) else None,
                say=bool(payload.get("say", True)),
            )
        moves = payload.get("moves")
        return cls(
            node=payload.get("node"),
            victims=tuple(RecordedVictim(v) for v in payload.get("victims") or () if isinstance(v, Mapping)),
            cards=tuple(str(uuid) for uuid in payload.get("cards") or ()),
            grants=tuple((str(g[0]), int(g[1]), int(g[2])) for g in payload.get("grants") or ()),
            alternatives=tuple(dict(a) for a in payload.get("alternatives") or () if isinstance(a, Mapping)),
            dry_run=bool(payload.get("dry_run")),
            message=str(payload.get("message") or ""),
            moves=tuple(RecordedMove(m) for m in moves if isinstance(m, Mapping))
            if isinstance(moves, list)
            else None,
            whole=tuple(str(uuid) for uuid in payload.get("whole") or ()),
        )


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
    #: How many failed nodes say each thing (SPEC 10): a node rule's words (`Insufficient cpu`,
    #: `node(s) had untolerated taint {k: v}`) or a card reason code; what the one-line summary
    #: counts, in nodes. Empty on a decision read back from a payload that has none.
    node_reasons: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    error_field: str | None = None
    error_code: str | None = None
    warnings: list[str] = field(default_factory=list)
    duration_ms: float = 0.0
    closest: list[dict] = field(default_factory=list)  # `closeness.NodeCloseness.detail()`s
    never: dict | None = None
    #: Why a batch rule (gang, queue limit, namespace quota, preemption) kept the pod pending.
    batch: Hold | None = None
    #: Evictions this pod causes, or why none helped (`Preemption.tried`).
    preemption: Preemption | None = None

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
        containers = (*self.init_containers, *self.containers)
        if all(d.family == "nvidia" for c in containers for d in c.devices):
            return NVIDIA.encode_allocation(
                [[(d.uuid, d.memory, d.cores) for d in c.devices] for c in containers]
            )
        # cards of several families: each card with its own family's vendor word, as each
        # family's own allocation string (`extra_annotations`) writes it
        return "".join(
            "".join(f"{d.uuid},{FAMILIES[d.family].vendor},{d.memory},{d.cores}:" for d in c.devices) + ";"
            for c in containers
        )

    @property
    def extra_annotations(self) -> dict[str, str]:
        """What the placement writes beside the allocation (`Family.extra_annotations`: NVIDIA's
        `hami.io/vgpu-mig-allocations` when a vGPU is a MIG instance, an Ascend chip's
        `hami.io/W-devices-*` and `huawei.com/W`, each family given only its own cards, every
        container's place kept); {} when not scheduled."""
        if self.status != SCHEDULED:
            return {}
        containers = [c.devices for c in (*self.init_containers, *self.containers)]
        names = {d.family for devices in containers for d in devices}
        if names <= {"nvidia"}:
            return NVIDIA.extra_annotations(containers)
        found: dict[str, str] = {}
        for name in FAMILIES:
            if name in names:
                found.update(
                    FAMILIES[name].extra_annotations([[d for d in c if d.family == name] for c in containers])
                )
        return found

    @property
    def node_score(self) -> float | None:
        """The chosen node's score: the first entry of the ranking (kept under any `keep`)."""
        for name, score in self.node_ranking:
            if name == self.node:
                return score
        return None

    @property
    def triage(self) -> Triage | None:
        """The verdict class of a waiting decision and its deciding fact (`triage.triage`)."""
        from .triage import triage

        return triage(self)

    def reason_text(self) -> str:
        """The one line an operator reads for this decision (`verdict`)."""
        return verdict(self)

    def as_dict(self, top: int | None = None, triaged: Triage | None | object = UNTRIAGED) -> dict:
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
        for a pod a gang, queue or quota rule kept pending (`Decision.batch`); `node_reasons`,
        how many failed nodes say each node rule's words or card reason (SPEC 10); `verdict`,
        for a pod left waiting (pending or rejected), its class, decisive reason code, deciding
        fact and actions (`triage.Triage`), else null. `triaged`: this decision's `triage`
        where the caller has it already (None once placed).
        """
        ranking = self.node_ranking if top is None else self.node_ranking[:top]
        failed = self.node_failures if top is None else self.node_failures[:top]
        scores = [(name, round(score, 6)) for name, score in ranking]
        if triaged is UNTRIAGED:
            triaged = self.triage  # None once placed
        verdict = cast("Triage | None", triaged)
        out = {
            "name": self.name,
            "namespace": self.namespace,
            "status": self.status,
            "node": self.node,
            "containers": [c.as_dict() for c in self.containers] if self.status == SCHEDULED else [],
            "allocated": self.allocated,
            "node_scores": dict(scores),
            "failed_nodes": {name: failure.text for name, failure in failed},
            "nodes_fit": self.nodes_fit,
            "nodes_failed": self.nodes_failed,
            "reasons": dict(sorted(self.reasons.items())),
            "node_reasons": dict(sorted(self.node_reasons.items())),
            "policy": self.policy,
            "error": self.error,
            "failed_reasons": {name: _failed_reason(failure) for name, failure in failed},
            "node_order": [[name, score] for name, score in scores],
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
            "verdict": verdict.as_dict() if verdict is not None else None,
        }
        extra = self.extra_annotations
        if extra:  # only when a vGPU is a MIG instance: other payloads stay as they were
            out["annotations"] = extra
        if self.batch is not None:
            out["batch"] = self.batch.as_dict()
        if self.preemption is not None:
            out["preemption"] = self.preemption.as_dict()
        return out

    @classmethod
    def read_back(cls, payload: Mapping[str, Any] | None) -> Decision:
        """The decision as far as a stored SPEC 9 payload (`as_dict`) tells what `verdict`
        reads: outcome, node, error, the failed nodes' reason counts, the batch hold and the
        preemption. Card tables, rankings and per-node failures are not rebuilt."""
        payload = payload or {}
        batch, preemption = payload.get("batch"), payload.get("preemption")
        return cls(
            name=str(payload.get("name") or ""),
            namespace=str(payload.get("namespace") or ""),
            status=str(payload.get("status") or ""),
            node=payload.get("node"),
            nodes_fit=int(payload.get("nodes_fit") or 0),
            nodes_failed=int(payload.get("nodes_failed") or 0),
            reasons=dict(payload.get("reasons") or {}),
            node_reasons=dict(payload.get("node_reasons") or {}),
            error=payload.get("error"),
            batch=Hold.from_dict(batch) if isinstance(batch, Mapping) else None,
            preemption=Preemption.from_dict(preemption) if isinstance(preemption, Mapping) else None,
        )


def _failed_reason(failure: NodeFailure) -> dict:
    """One failed node's `failed_reasons` entry: its card count and reason counts, and for a
    node rule (SPEC 10) what would make the node pass (`hints`)."""
    out: dict[str, Any] = {"cards": failure.cards, "reasons": dict(failure.reasons)}
    hints = getattr(failure, "hints", ())
    if hints:
        out["hints"] = list(hints)
    return out


def verdict(decision: Decision) -> str:
    """The one line an operator reads for any decision, kubectl-describe style: what `Pod.reason`
    stores, the API's decision `summary`, the pod page, `simulate --format table` and the
    Kubernetes events say. Placed: the node; rejected: the error; held by a batch rule
    (gang, queue, quota, preemption under way): the rule's code and message; otherwise the
    nodes' failure (`failure_summary`), followed by why preemption did not help when that is
    worth saying, as kube-scheduler writes it (`... . preemption: ...`)."""
    if decision.status == REJECTED:
        return decision.error or "rejected"
    if decision.status == SCHEDULED:
        return f"scheduled on {decision.node}"
    if decision.batch is not None:
        return f"{decision.batch.reason}: {decision.batch.message}"
    preemption = decision.preemption
    if preemption is not None and preemption.tried and preemption.why and preemption.say:
        why = preemption.why.rstrip().removesuffix(".")
        lead = "" if why.startswith("preemption") else "preemption: "
        return f"{failure_summary(decision)} {lead}{why}."
    return failure_summary(decision)


def failure_summary(decision: Decision) -> str:
    """`0/N nodes are available: ....` in kube-scheduler's form (SPEC 10), a sentence: how many nodes each
    node rule refused, in its words (`1 Insufficient cpu`, sorted as kube-scheduler sorts
    them), then the card reasons of the nodes that passed the rules, counted in nodes. A gated
    pod was not tried (`SchedulingGated`). A decision read back from a payload without
    `node_reasons` keeps the reason counts it has."""
    total = decision.nodes_failed
    if decision.reasons.get(SCHEDULING_GATED) and not total:
        return f"{SCHEDULING_GATED}: scheduling is blocked by the pod's scheduling gates."
    if not total:
        return "0/0 nodes are available: no GPU nodes."
    counted = decision.node_reasons
    if not counted:
        summary = ", ".join(f"{n} {reason}" for reason, n in sorted(decision.reasons.items()))
        return f"0/{total} nodes are available: {summary}."
    words = sorted(f"{n} {said}" for said, n in counted.items() if said not in CODES)
    cards = [
        f"{counted[code]} {code}" for code in sorted(counted) if code in CODES and code not in NODE_RULES
    ]
    return f"0/{total} nodes are available: {', '.join(words + cards)}."
