"""Scenarios with `queues` and `groups` (docs/simulate.md, "Queues and gangs"): the pods are
decided as jobs (`engine.jobs`), as one pipeline cycle would, instead of one by one in file
order. The output keeps SPEC 9's `pods` (in file order) and adds `groups` and `queues`.
"""

from __future__ import annotations

from ..annotations import group_ref, queue_ref
from ..decision import SCHEDULED, Decision
from ..errors import PodInvalid, Problems, ScenarioError
from ..model import Cluster, ClusterConfig, PodSpec
from ..pod import describe_policy
from ..scheduler import Scheduler
from .jobs import Gang, Job, JobRunner, Member
from .queues import DEFAULT_QUEUE, RESOURCES, NamespaceBook, QueueBook, QueueState, zero


def wants_batch(raw: dict) -> bool:
    return isinstance(raw, dict) and ("queues" in raw or "groups" in raw)


def _figures(raw, where: str) -> dict[str, int | None]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ScenarioError(where, f"must be an object of {', '.join(RESOURCES)}")
    out: dict[str, int | None] = {}
    for key, value in raw.items():
        if key not in RESOURCES:
            raise ScenarioError(f"{where}.{key}", f"unknown resource: use {', '.join(RESOURCES)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ScenarioError(f"{where}.{key}", f"must be a whole number >= 0, got {value!r}")
        out[key] = value
    return out


def _queue(entry, where: str) -> QueueState:
    """One queue entry, its `used` set; raises ScenarioProblems with every bad field."""
    if not isinstance(entry, dict):
        raise ScenarioError(where, "a queue must be an object")
    found = Problems()
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        found.note(f"{where}.name", "required: a non-empty string")
    weight = entry.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
        found.note(f"{where}.weight", f"must be a number > 0, got {weight!r}")
    parent = entry.get("parent")
    if parent is not None and not isinstance(parent, str):
        found.note(f"{where}.parent", "must be a queue name")
    namespaces = entry.get("namespaces", [])
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        found.note(f"{where}.namespaces", "must be a list of namespace names")
    figures = {key: found.check(_figures, entry.get(key), f"{where}.{key}") for key in FIGURES}
    lend = entry.get("lend_guarantee", False)
    if not isinstance(lend, bool):
        found.note(f"{where}.lend_guarantee", f"must be true or false, got {lend!r}")
    found.raise_any()
    assert isinstance(name, str)
    state = QueueState(
        name=name,
        parent=parent,
        weight=float(weight),
        guarantee=figures["guarantee"],
        quota=figures["quota"],
        limit=figures["limit"],
        namespaces=namespaces,
        lend_guarantee=lend,
    )
    state.used = zero() | {k: v or 0 for k, v in figures["used"].items()}
    return state


#: A queue entry's resource figures.
FIGURES = ("guarantee", "quota", "limit", "used")


def parse_queues(raw) -> QueueBook:
    """The scenario's queues; raises ScenarioProblems with every bad entry's fields."""
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise ScenarioError("queues", "must be a list of queues")
    found = Problems()
    states, seen = [], set()
    for i, entry in enumerate(raw):
        state = found.check(_queue, entry, f"queues[{i}]")
        if state is None:
            continue
        if state.name in seen:
            found.note(f"queues[{i}].name", f"{state.name!r} repeats an earlier queue")
            continue
        seen.add(state.name)
        states.append((i, state))
    named = {entry.get("name") for entry in raw if isinstance(entry, dict)}
    for i, state in states:
        if state.parent is not None and state.parent not in named:
            found.note(f"queues[{i}].parent", f"no queue named {state.parent!r}")
    found.raise_any()
    book = QueueBook(
        [
            QueueState(
                s.name,
                s.parent,
                s.weight,
                s.guarantee,
                s.quota,
                s.limit,
                namespaces=s.namespaces,
                lend_guarantee=s.lend_guarantee,
            )
            for _, s in states
        ]
    )
    for _, state in states:
        book.add(state.name, state.used)
    return book


def _group(entry, where: str) -> tuple[tuple[str, str], dict]:
    """One group entry, keyed by (namespace, name); raises ScenarioProblems with every bad field."""
    if not isinstance(entry, dict):
        raise ScenarioError(where, "a group must be an object")
    found = Problems()
    name, namespace = entry.get("name"), entry.get("namespace", "default")
    if not isinstance(name, str) or not name or not isinstance(namespace, str) or not namespace:
        found.note(f"{where}.name", "required: a non-empty string (and namespace, if given)")
    min_member = entry.get("min_member", 1)
    if isinstance(min_member, bool) or not isinstance(min_member, int) or min_member < 1:
        found.note(f"{where}.min_member", f"must be a whole number >= 1, got {min_member!r}")
    queue = entry.get("queue")
    if queue is not None and not isinstance(queue, str):
        found.note(f"{where}.queue", "must be a queue name")
    min_resources = found.check(_figures, entry.get("min_resources"), f"{where}.min_resources")
    found.raise_any()
    assert isinstance(name, str) and isinstance(namespace, str)
    return (namespace, name), {
        "min_member": min_member,
        "queue": queue,
        "min_resources": {k: v or 0 for k, v in min_resources.items()},
        "priority": entry.get("priority", 0) if isinstance(entry.get("priority", 0), int) else 0,
    }


def parse_groups(raw) -> dict[tuple[str, str], dict]:
    """The scenario's pod groups; raises ScenarioProblems with every bad entry's fields."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise ScenarioError("groups", "must be a list of pod groups")
    found = Problems()
    groups = {}
    for i, entry in enumerate(raw):
        parsed = found.check(_group, entry, f"groups[{i}]")
        if parsed is not None:
            groups[parsed[0]] = parsed[1]
    found.raise_any()
    return groups


def run_batch_scenario(
    raw: dict, cluster: Cluster, config: ClusterConfig, pods: list[PodSpec], top: int | None = None
) -> dict:
    book = parse_queues(raw.get("queues"))
    cards = [card for node in cluster.nodes for card in node.cards]
    # the cluster the fair shares split and the guarantees are kept in, as a cycle counts it
    book.capacity = {
        "vgpus": sum(card.slots for card in cards),
        "gpumem": sum(card.memory for card in cards),
        "gpucores": sum(card.cores for card in cards),
    }
    groups = parse_groups(raw.get("groups"))
    scheduler = Scheduler(cluster, config)
    decided: dict[int, Decision] = {}
    jobs: list[Job] = []
    gang_jobs: dict[tuple[str, str], Job] = {}
    for position, spec in enumerate(pods):
        try:
            ref = group_ref(spec.annotations)
            named = queue_ref(spec.annotations)
        except PodInvalid as exc:
            decided[position] = Decision(
                name=spec.name,
                namespace=spec.namespace,
                status="rejected",
                policy=describe_policy(spec.annotations, config),
                error=str(exc),
                error_field=exc.field,
            )
            continue
        key = (spec.namespace, ref.name) if ref is not None else None
        group = groups.get(key) if key is not None else None
        if ref is not None and key is not None and group is None:
            group = groups[key] = {
                "min_member": ref.min_member or 1,
                "queue": None,
                "min_resources": {},
                "priority": 0,
            }
        named = (group or {}).get("queue") or named
        queue = book.leaf(named) if named else book.by_namespace.get(spec.namespace, DEFAULT_QUEUE)
        member = Member(spec, position)
        if key is None or group is None:
            jobs.append(Job(queue, 0, (position,), [member]))
            continue
        job = gang_jobs.get(key)
        if job is None:
            gang = Gang(f"{key[0]}/{key[1]}", group["min_member"], 0, 0, group["min_resources"])
            job = gang_jobs[key] = Job(queue, group["priority"], (position,), [], gang)
            jobs.append(job)
        job.members.append(member)
        assert job.gang is not None
        job.gang.known += 1
    runner = JobRunner(scheduler, book, NamespaceBook())
    results: dict[str, dict] = {}
    for outcome in runner.run(jobs):
        assert isinstance(outcome.member.ref, int)
        decided[outcome.member.ref] = outcome.decision
        if outcome.job.gang is not None:
            gang = outcome.job.gang
            entry = results.setdefault(
                gang.key,
                {"name": gang.key, "min_member": gang.min_member, "members": 0, "placed": 0, "verdict": None},
            )
            entry["members"] += 1
            entry["placed"] += outcome.decision.status == SCHEDULED
            if outcome.decision.batch is not None and entry["verdict"] is None:
                entry["verdict"] = outcome.decision.reason_text()
    for entry in results.values():
        entry["scheduled"] = entry["placed"] >= entry["min_member"]
    return {
        "pods": [decided[i].as_dict(top=top) for i in range(len(pods))],
        "groups": list(results.values()),
        "queues": [
            {"name": q.name, "parent": q.parent, "used": dict(q.used), "limit": dict(q.limit)}
            for q in sorted(book.queues.values(), key=lambda q: q.name)
        ],
    }
