"""Consolidation (opt-in): make room for a pod that fits nowhere by moving one or two tenants
to other nodes, never by evicting work that has nowhere to go.

Tried for a pod that fits no node and for which no preemption or reclaim plan exists. On a
node the pod failed on, a tenant (then a pair of tenants) is taken off the node as a victim
would be (`Preemptor.fits_without`: its cards, cpu and memory, and the pods the spread and
affinity rules count); if the pod then fits there, each moved tenant is decided again with its own spec and chain on the rest
of the cluster (its old node held for the pod meanwhile, `Scheduler.reserve`). Only when every moved tenant has a
new home is the move kept: the homes are assumed in the job's `Statement` first, then the pod
is decided again. The pipeline commits the homes as the moved pods' nominations in the same
transaction that asks for their evictions, so a moved pod's new cards are held before it
gives up the old ones.

Who may move: a preemptible tenant, outside any gang, not protected by the min runtime, whose
spec the caller can give (`spec_of`: the pipeline gives specs only for pods hamiadmin can
place again itself, not for Kubernetes pods, whose controller creates a new pod on eviction).
Priority does not matter: a moved pod keeps running elsewhere. Cheapest first: one tenant
before two, the least memory moved, nodes with fewer tenants first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import combinations

from ..decision import SCHEDULED, Decision
from ..model import PodSpec
from ..pod import ParsedPod
from .preempt import Plan, Preemptor, Tenant, Victim, VictimKind, grants_of

CONSOLIDATING = "Consolidating"
#: How many tenants of a node are paired at most (the cheapest ones).
PAIR_POOL = 6
#: How many nodes are searched at most per pod.
NODE_LIMIT = 200


@dataclass
class Move:
    """A tenant moved off its node: `home` is it decided again elsewhere (scheduled)."""

    tenant: Tenant
    home: Decision

    @property
    def pod(self) -> str:
        return self.tenant.key

    @property
    def grants(self) -> list[tuple[str, int, int]]:
        """(card uuid, MiB, cores) per vGPU at its new home."""
        return grants_of(self.home)

    def as_dict(self) -> dict:
        return {
            "pod": self.tenant.key,
            "from": self.tenant.node,
            "to": self.home.node,
            "grants": [list(grant) for grant in self.grants],
        }


@dataclass
class Consolidation:
    """The moves chosen for one member, and the node it then lands on."""

    node: str
    moves: list[Move]


class Consolidator:
    """Finds one or two tenants to move, and applies the move in a Statement."""

    def __init__(self, preemptor: Preemptor, decide: Callable, spec_of: Callable[[Tenant], PodSpec | None]):
        self.preemptor = preemptor
        self.scheduler = preemptor.scheduler
        self.decide = decide
        self.spec_of = spec_of

    def _movable(self, tenant: Tenant) -> bool:
        rules = self.preemptor.rules
        return (
            tenant.preemptible
            and not tenant.gang
            and not tenant.refused
            and tenant.runtime_seconds >= rules.min_runtime_seconds
            and (rules.protect_priority is None or tenant.priority < rules.protect_priority)
            and self.spec_of(tenant) is not None
        )

    def _home(self, tenant: Tenant, statement, for_job: str) -> Decision | None:
        """The tenant decided on the cluster without its own node, held meanwhile for `for_job`
        (the pod making room there); assumed in `statement`."""
        spec = self.spec_of(tenant)
        assert spec is not None
        held = self.scheduler.reserve(tenant.node, for_job)
        try:
            decision, _ = self.decide(spec)
        finally:
            if held:
                self.scheduler.release(tenant.node)
        if decision.status != SCHEDULED:
            return None
        statement.assume(decision, tenant.queue, "")
        return decision

    def plan(self, parsed: ParsedPod, decision: Decision, statement) -> tuple[list[Move], str] | None:
        """(moves, node): moves applied in `statement` (evicted, homes assumed) after which the
        pod fits `node`; or None, the statement unchanged."""
        tenants = self.preemptor.tenants
        nodes = []
        for name in self.preemptor.candidate_names(parsed)[:NODE_LIMIT]:
            movable = [t for t in tenants.by_node.get(name, ()) if self._movable(t)]
            node = self.scheduler.cluster.by_name.get(name)
            if movable and node is not None and node.ready and not node.reserved_for:
                nodes.append((len(tenants.by_node.get(name, ())), name, node, sorted(movable, key=_cost)))
        nodes.sort(key=lambda entry: entry[:2])
        for size in (1, 2):
            for _, name, node, movable in nodes:
                pool = movable if size == 1 else movable[:PAIR_POOL]
                sets = sorted(combinations(pool, size), key=lambda group: sum(t.work for t in group))
                for group in sets:
                    if not self.preemptor.fits_without(node, parsed, list(group)):
                        continue
                    moves = self._apply(group, statement, f"{decision.namespace}/{decision.name}")
                    if moves is not None:
                        return moves, name
        return None

    def _apply(self, group: tuple[Tenant, ...], statement, for_job: str) -> list[Move] | None:
        mark = statement.mark()
        moves = []
        for tenant in group:
            statement.evict(tenant, self.preemptor)
        for tenant in group:
            home = self._home(tenant, statement, for_job)
            if home is None:
                statement.rollback(mark)
                return None
            moves.append(Move(tenant, home))
        return moves

    def explain(self, decision: Decision, moves: list[Move], node: str, grants) -> Plan:
        """The pod's decision as a consolidation: pending, nominated to `node`; the moved
        tenants as victims of kind `consolidate` with where they go."""
        victims = [
            Victim(
                m.tenant,
                VictimKind.CONSOLIDATE,
                f"moved to {m.home.node} ({', '.join(sorted({g[0] for g in grants_of(m.home)}))}) so {decision.namespace}/{decision.name} fits {node}",
            )
            for m in moves
        ]
        plan = Plan(node, victims, [])
        self.preemptor.explain(decision, plan, grants)
        names = ", ".join(f"{m.tenant.key} {m.tenant.node} -> {m.home.node}" for m in moves)
        verb = "would move" if self.preemptor.rules.dry_run else "moving"
        message = f"{verb} {len(moves)} pod{'s' if len(moves) != 1 else ''} to make room on {node}: {names}"
        assert decision.preemption is not None and decision.batch is not None
        decision.preemption = replace(decision.preemption, moves=tuple(moves), message=message)
        decision.batch = replace(decision.batch, reason=CONSOLIDATING, message=message)
        return plan


def _cost(tenant: Tenant) -> tuple[int, str]:
    return tenant.work, tenant.key
