"""kube-scheduler extender mode: a stock kube-scheduler asks hamiadmin where GPU pods go.

`filter` runs the engine over the nodes kube-scheduler offers (the database snapshot
restricted to those names), commits the placement through the pipeline's own commit
(the same re-check under row locks as any cycle, recorded as a cycle and a decision),
and answers the one chosen node; the others come back with their SPEC 4 texts. The
placement is thus reserved at filter time, as HAMi does, so the next pod kube-scheduler
filters already sees it. `bind` then writes the SPEC 8 annotations and the Binding.

A reserved pod that kube-scheduler filters again (it failed elsewhere before binding) is
answered from its reservation when that node is still offered, else released and
placed again among the nodes offered now.

Pods queued here have origin `extender`: scheduling cycles leave them alone, since only a
filter call knows which nodes kube-scheduler allows (taints, affinity, its other filters).

kube-scheduler filters first; the engine's node rules (SPEC 10) then judge the offered nodes
again, as in watcher mode (a node they refuse comes back failed with the rule's words), except
those kube-scheduler can judge and the extender cannot (`offered_spec`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from scheduling import services
from scheduling.engine import PodInvalid, PodSpec
from scheduling.models import Pod
from scheduling.pipeline.commit import commit_plan
from scheduling.pipeline.cycle import plan_one

from . import pods as pod_objects
from .binder import Binder, BindOutcome, requeue

log = logging.getLogger("hamiadmin.kube.extender")

ATTEMPTS = 3
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


@dataclass
class FilterAnswer:
    """What `filter` decided: the chosen node, or why each node failed."""

    chosen: str | None = None
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    passthrough: bool = False  # not a GPU pod: every node offered passes
    error: str = ""


def filter_pod(pod: dict, names: list[str]) -> FilterAnswer:
    if not pod_objects.asks_gpu(pod):
        return FilterAnswer(passthrough=True)
    try:
        arguments = pod_objects.submission(pod)
    except PodInvalid as exc:  # a value the database cannot store (NUL), a wrong type
        return FilterAnswer(unresolvable=dict.fromkeys(names, str(exc)))
    for _ in range(ATTEMPTS):
        try:
            # A new uid (recreated under the same name) releases the earlier reservation here.
            row = services.submit_pod(**arguments, validate=False, origin=Pod.EXTENDER)
        except PodInvalid as exc:
            return FilterAnswer(unresolvable=dict.fromkeys(names, str(exc)))
        if row.status == Pod.SCHEDULED:
            if row.node is not None and row.node.name in names:
                return FilterAnswer(chosen=row.node.name)
            requeue(row, f"reserved on {row.node} but kube-scheduler now offers other nodes")
            continue
        if row.status in Pod.BOUND:
            return FilterAnswer(error=f"pod {row.key} is already bound to {row.node}")
        if row.parked or row.status == Pod.REJECTED:
            return FilterAnswer(unresolvable=dict.fromkeys(names, row.error or row.reason or "invalid pod"))
        answer = place(row, names)
        if answer is not None:
            return answer
    return FilterAnswer(error=f"pod {row.key} kept changing while being placed; try again")


def offered_spec(row: Pod) -> PodSpec:
    """The pod as the extender judges it among the nodes offered: its hard topology spread
    constraints made soft and its required pod affinity left out. kube-scheduler judged both
    before offering the nodes, counting the pods of every node; the extender sees only the
    nodes offered, and the domains span others (an affinity partner on a node not offered, a
    `minDomains` the offered nodes do not reach), so judging them again would refuse nodes
    kube-scheduler allowed. What is judged node by node (selector, node affinity, taints,
    cordon, cpu and memory as hamiadmin counts them, ports), and pod anti-affinity, which the
    offered nodes' pods can only confirm, is judged again."""
    spec = row.as_spec()
    spread = [
        {**c, "whenUnsatisfiable": "ScheduleAnyway"}
        if isinstance(c, dict) and c.get("whenUnsatisfiable") == "DoNotSchedule"
        else c
        for c in spec.topology_spread_constraints or []
    ]
    affinity = spec.affinity
    if isinstance(affinity, dict) and isinstance(affinity.get("podAffinity"), dict):
        kept = {k: v for k, v in affinity["podAffinity"].items() if k != REQUIRED}
        affinity = {**affinity, "podAffinity": kept}
    return replace(spec, topology_spread_constraints=spread, affinity=affinity)


def place(row: Pod, names: list[str]) -> FilterAnswer | None:
    """Decide among `names` and commit. None when the commit lost a race (try again)."""
    plan = plan_one(row, names, spec=offered_spec(row))
    decision = plan.attempts[0].decision
    report = commit_plan(plan)
    if report.skipped or report.conflicts:
        return None
    if report.placed:
        return FilterAnswer(chosen=decision.node, failed=dict(decision.failed_nodes))
    if report.rejected:
        return FilterAnswer(unresolvable=dict.fromkeys(names, decision.error or "invalid pod"))
    return FilterAnswer(failed=dict(decision.failed_nodes))


def bind_pod(binder: Binder, namespace: str, name: str, uid: str, node: str) -> str:
    """Commit the reserved placement to Kubernetes. The error text, or "" when bound."""
    row = Pod.objects.select_related("node").filter(namespace=namespace, name=name).first()
    if row is None or (uid and row.uid and row.uid != uid):
        return f"pod {namespace}/{name} has no placement in hamiadmin (filter it first)"
    placed_on = row.node.name if row.node is not None else ""
    if row.status == Pod.RUNNING and placed_on == node:
        return ""
    if row.status != Pod.SCHEDULED:
        return f"pod {row.key} is {row.status}, not placed"
    if placed_on != node:
        return f"pod {row.key} is placed on {placed_on}, not {node}"
    result = binder.bind(row)
    return (
        ""
        if result.outcome == BindOutcome.BOUND
        else f"binding {row.key} to {node}: {result.outcome}: {result.detail}"
    )
