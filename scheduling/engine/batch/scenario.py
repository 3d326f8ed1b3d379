"""Scenarios decided as one live cycle decides (docs/simulate.md, "Queues, gangs and
preemption"): the pods as jobs, assembled by `assemble_jobs` exactly as a cycle assembles its
due rows, from queues whose usage counts the running tenants, with preemption, reclaim and
(opt-in) consolidation over those tenants. The output keeps SPEC 9's `pods` (in file order)
and adds `groups`, `queues` and `evictions`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from ..annotations import group_ref, queue_ref, subgroup_of
from ..decision import SCHEDULED, Decision
from ..encoding import PLACEMENT_ANNOTATIONS
from ..errors import PodInvalid, Problems, ScenarioError
from ..model import Cluster, ClusterConfig, PodSpec, RunningPod
from ..scheduler import Scheduler
from .consolidate import Consolidator
from .jobs import Gang, GangTerms, JobRunner, Member, Pending, assemble_jobs
from .preempt import Preemptor, Rules, Tenant, Tenants, preemptible
from .queues import RESOURCES, NamespaceBook, QueueBook, QueueState, zero

#: Top-level keys that make a scenario a batch one.
BATCH_KEYS = ("queues", "groups", "preemption", "namespace_quotas")
#: A `running` entry's fields that make it one of hamiadmin's tenants (a possible victim).
TENANT_FIELDS = ("priority", "queue", "group", "preemptible", "runtime_seconds", "movable")
#: The 32-bit range of a Kubernetes pod priority.
PRIORITY_RANGE = 2**31


def wants_batch(raw: dict) -> bool:
    """Whether a scenario is decided as a cycle: it has queues, groups, preemption settings or
    namespace quotas, a pod with a `priority`, or a running pod with a tenant's field."""
    if not isinstance(raw, dict):
        return False
    if any(key in raw for key in BATCH_KEYS):
        return True
    pods, running = raw.get("pods"), raw.get("running")
    pods = pods if isinstance(pods, list) else []
    running = running if isinstance(running, list) else []
    return any(isinstance(pod, dict) and "priority" in pod for pod in pods) or any(
        isinstance(pod, dict) and any(key in pod for key in TENANT_FIELDS) for pod in running
    )


def parse_priority(value, where: str) -> int:
    """A pod's priority: a 32-bit integer, as Kubernetes keeps it."""
    if isinstance(value, bool) or not isinstance(value, int) or not -PRIORITY_RANGE <= value < PRIORITY_RANGE:
        raise ScenarioError(where, f"must be a 32-bit integer, got {value!r}")
    return value


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
    book = QueueBook([s.fresh() for _, s in states])
    for _, state in states:
        book.add(state.name, state.used)
    return book


def parse_subgroups(raw: object, where: str, found: Problems) -> tuple[tuple[str, int], ...]:
    """`{part: minimum}` (a job's or a scenario group's `subgroups`) as (name, minimum) pairs;
    each bad entry noted on `found` naming `<where>.<part>`."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        found.note(where, f"must be an object of part names and their minimums, got {raw!r}")
        return ()
    parts = []
    for name, least in raw.items():
        if not isinstance(name, str) or not name.strip():
            found.note(where, f"a part name must be a non-empty string, got {name!r}")
        elif isinstance(least, bool) or not isinstance(least, int) or least < 0:
            found.note(f"{where}.{name}", f"must be a whole number >= 0, got {least!r}")
        else:
            parts.append((name.strip(), least))
    return tuple(parts)


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
    priority = found.check(parse_priority, entry.get("priority", 0), f"{where}.priority")
    topology = entry.get("topology_key", "")
    if not isinstance(topology, str):
        found.note(f"{where}.topology_key", f"must be a node label key, got {topology!r}")
    subgroups = parse_subgroups(entry.get("subgroups"), f"{where}.subgroups", found)
    found.raise_any()
    assert isinstance(name, str) and isinstance(namespace, str)
    return (namespace, name), {
        "topology_key": topology,
        "min_member": min_member,
        "queue": queue,
        "min_resources": {k: v or 0 for k, v in min_resources.items()},
        "priority": priority if priority is not None else 0,
        "subgroups": dict(subgroups),
    }


def _parts_placed(tenants: list[Tenant], gang: str) -> dict[str, int]:
    """Per part, the gang's running members (`Tenant.part`)."""
    placed: dict[str, int] = {}
    for tenant in tenants:
        if tenant.gang == gang:
            placed[tenant.part] = placed.get(tenant.part, 0) + 1
    return placed


def _domain(cluster: Cluster, tenants: list[Tenant], gang: str, key: str) -> str:
    """The value of node label `key` where the gang's running members are ("" for none, or
    when they are not all under one value: every value is tried, as live)."""
    if not key:
        return ""
    values = {cluster.by_name[t.node].labels.get(key, "") for t in tenants if t.gang == gang}
    return values.pop() if len(values) == 1 else ""


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


def parse_preemption(raw, rules: Rules, consolidation: bool) -> tuple[Rules, bool]:
    """The scenario's `preemption` settings over the caller's (the server's options when the
    server runs it, so `simulate` decides as the live cycle does): (rules, consolidation)."""
    if raw is None:
        return rules, consolidation
    if not isinstance(raw, dict):
        raise ScenarioError("preemption", f"must be an object of {', '.join(PREEMPTION_FIELDS)}")
    found = Problems()
    values: dict = {}
    for key, value in raw.items():
        where = f"preemption.{key}"
        kind = PREEMPTION_FIELDS.get(key)
        if kind is None:
            found.note(where, f"unknown setting: use {', '.join(PREEMPTION_FIELDS)}")
        elif kind is bool and not isinstance(value, bool):
            found.note(where, f"must be true or false, got {value!r}")
        elif kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            if not (key == "protect_priority" and value is None):
                found.note(where, f"must be a whole number >= 0, got {value!r}")
            else:
                values[key] = value
        elif kind is float and (
            isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0
        ):
            found.note(where, f"must be a number of seconds >= 0, got {value!r}")
        else:
            values[key] = value
    found.raise_any()
    consolidation = values.pop("consolidation", consolidation)
    renamed = {"max_cards_per_cycle": "max_cards"}
    return replace(rules, **{renamed.get(k, k): v for k, v in values.items()}), consolidation


#: The `preemption` settings, as the server's PREEMPT_* options name them (docs/operations.md).
PREEMPTION_FIELDS = {
    "enabled": bool,
    "reclaim": bool,
    "dry_run": bool,
    "min_runtime_seconds": float,
    "protect_priority": int,
    "max_cards_per_cycle": int,
    "consolidation": bool,
}


def parse_namespace_quotas(raw) -> NamespaceBook:
    """`namespace_quotas`: [{namespace, hard: {vgpus, gpumem, gpucores}}]; two for one namespace:
    the tighter holds, as with two ResourceQuotas."""
    if raw is None:
        return NamespaceBook()
    if not isinstance(raw, list):
        raise ScenarioError("namespace_quotas", "must be a list of {namespace, hard}")
    found = Problems()
    hard: dict[str, dict[str, int]] = {}
    for i, entry in enumerate(raw):
        where = f"namespace_quotas[{i}]"
        if not isinstance(entry, dict):
            found.note(where, "must be an object {namespace, hard}")
            continue
        namespace = entry.get("namespace")
        if not isinstance(namespace, str) or not namespace:
            found.note(f"{where}.namespace", "required: a non-empty string")
        figures = found.check(_figures, entry.get("hard"), f"{where}.hard")
        for key in set(entry) - {"namespace", "hard"}:
            found.note(f"{where}.{key}", "unknown field: use namespace, hard")
        if isinstance(namespace, str) and namespace and figures:
            mine = hard.setdefault(namespace, {})
            for resource, value in figures.items():
                if value is not None:
                    mine[resource] = min(value, mine.get(resource, value))
    found.raise_any()
    return NamespaceBook(hard=hard)


def _flag(entry: dict, key: str, default: bool, where: str, found: Problems) -> bool:
    value = entry.get(key, default)
    if not isinstance(value, bool):
        found.note(f"{where}.{key}", f"must be true or false, got {value!r}")
        return default
    return value


def _tenant_fields(entry: dict, where: str, found: Problems) -> tuple[int, bool, bool]:
    """A running entry's own tenant fields, each bad one noted: (priority, preemptible, movable)."""
    priority = found.check(parse_priority, entry.get("priority", 0), f"{where}.priority")
    for key in ("queue", "group"):
        value = entry.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            found.note(f"{where}.{key}", f"must be a {key} name, got {value!r}")
    runtime = entry.get("runtime_seconds")
    if runtime is not None and (
        isinstance(runtime, bool) or not isinstance(runtime, int | float) or runtime < 0
    ):
        found.note(f"{where}.runtime_seconds", f"must be a number of seconds >= 0, got {runtime!r}")
    flag = _flag(entry, "preemptible", True, where, found)
    return priority or 0, flag, _flag(entry, "movable", False, where, found)


def _tenant(entry: dict, pod: RunningPod, where: str, cluster: Cluster, book: QueueBook, groups: dict):
    """One running entry as a tenant (or None: a pod someone else bound, or one holding no
    card), with its gang's `min_member` and, when it may be moved, its spec; raises
    ScenarioProblems naming every bad field."""
    found = Problems()
    priority, flag, movable = _tenant_fields(entry, where, found)
    named, group, runtime = entry.get("queue"), entry.get("group"), entry.get("runtime_seconds")
    try:
        ref = group_ref(pod.annotations, pod.labels)
        own_queue = queue_ref(pod.annotations, pod.labels)
    except PodInvalid as exc:
        found.note(f"{where}.annotations.{exc.field}", exc.message)
        ref = own_queue = None
    found.raise_any()
    if not any(key in entry for key in TENANT_FIELDS):
        return None  # bound by someone else: counted, never evicted (as live)
    name = group if isinstance(group, str) else (ref.name if ref is not None else None)
    terms = groups.get((pod.namespace, name)) if name else None
    queue, why = book.join(named or (terms or {}).get("queue") or own_queue, pod.namespace, where)
    if queue is None:
        raise ScenarioError(f"{where}.queue", why)
    node = cluster.by_name[pod.node]
    footprint = node.held.pods.get(pod.key) if node.held is not None else None
    if footprint is None or not footprint.holdings:
        return None  # holds no card: never a victim (the live cycle reads card holders only)
    least = terms["min_member"] if terms else (ref.min_member if ref is not None and ref.min_member else 1)
    parts = (terms or {}).get("subgroups") or {}
    least = max(least, sum(parts.values()))
    tenant = Tenant(
        key=pod.key,
        namespace=pod.namespace,
        node=pod.node,
        priority=priority,
        queue=queue,
        gang=f"{pod.namespace}/{name}" if name else "",
        runtime_seconds=math.inf if runtime is None else float(runtime),
        preemptible=flag and preemptible(pod.annotations),
        holdings=list(footprint.holdings),
        ref=pod.key,
        part=subgroup_of(pod.annotations, pod.labels, parts),
    )
    spec = None
    if movable:
        spec = PodSpec(
            name=pod.name,
            namespace=pod.namespace,
            annotations={k: v for k, v in pod.annotations.items() if k not in PLACEMENT_ANNOTATIONS},
            containers=pod.containers,
            init_containers=pod.init_containers,
            labels=pod.labels,
            affinity=pod.affinity,
        )
    return tenant, least, spec


def parse_tenants(raw, cluster: Cluster, book: QueueBook, groups: dict):
    """The running entries that are hamiadmin's tenants (they name a priority, queue, group,
    preemptible, runtime_seconds or movable), as the live cycle's `load_tenants` reads its
    pods: (tenants, each gang's min_member, the specs of the movable ones by key)."""
    found = Problems()
    tenants: list[Tenant] = []
    gang_min: dict[str, int] = {}
    movable: dict[object, PodSpec] = {}
    entries = raw if isinstance(raw, list) else []
    for i, (entry, pod) in enumerate(zip(entries, cluster.running, strict=False)):
        read = found.check(_tenant, entry, pod, f"running[{i}]", cluster, book, groups)
        if read is None:
            continue
        tenant, least, spec = read
        tenants.append(tenant)
        if tenant.gang:
            gang_min[tenant.gang] = least
        if spec is not None:
            movable[tenant.ref] = spec
    found.raise_any()
    return tenants, gang_min, movable


def parse_pod_priorities(raw_pods) -> list[int]:
    """Each pod entry's `priority` (0 when it names none)."""
    found = Problems()
    out = []
    for i, entry in enumerate(raw_pods if isinstance(raw_pods, list) else []):
        value = entry.get("priority", 0) if isinstance(entry, dict) else 0
        out.append(found.check(parse_priority, value, f"pods[{i}].priority") or 0)
    found.raise_any()
    return out


def check_batch(raw: dict) -> None:
    """Every problem of a batch scenario's own sections (queues, groups, preemption, namespace
    quotas, pod priorities); raises ScenarioProblems."""
    found = Problems()
    found.check(parse_queues, raw.get("queues"))
    found.check(parse_groups, raw.get("groups"))
    found.check(parse_preemption, raw.get("preemption"), Rules(), False)
    found.check(parse_namespace_quotas, raw.get("namespace_quotas"))
    found.check(parse_pod_priorities, raw.get("pods"))
    running = raw.get("running")
    for i, entry in enumerate(running if isinstance(running, list) else []):
        if isinstance(entry, dict):
            _tenant_fields(entry, f"running[{i}]", found)
    found.raise_any()


def run_batch_scenario(
    raw: dict,
    cluster: Cluster,
    config: ClusterConfig,
    pods: list[PodSpec],
    top: int | None = None,
    rules: Rules | None = None,
    consolidation: bool = False,
) -> dict:
    """The pods decided as one live cycle would (`rules`/`consolidation`: the server's
    preemption options, which the scenario's `preemption` overrides)."""
    book = parse_queues(raw.get("queues"))
    cards = [card for node in cluster.nodes for card in node.cards]
    # the cluster the fair shares split and the guarantees are kept in, as a cycle counts it
    book.capacity = {
        "vgpus": sum(card.slots for card in cards),
        "gpumem": sum(card.memory for card in cards),
        "gpucores": sum(card.cores for card in cards),
    }
    groups = parse_groups(raw.get("groups"))
    rules, consolidation = parse_preemption(raw.get("preemption"), rules or Rules(), consolidation)
    namespaces = parse_namespace_quotas(raw.get("namespace_quotas"))
    priorities = parse_pod_priorities(raw.get("pods"))
    tenants, gang_min, movable = parse_tenants(raw.get("running"), cluster, book, groups)
    placed: dict[str, int] = {}
    for tenant in tenants:  # what the queues and namespaces hold, as a cycle counts allocations
        book.add(tenant.queue, tenant.usage)
        namespaces.add(tenant.namespace, tenant.usage)
        if tenant.gang:
            placed[tenant.gang] = placed.get(tenant.gang, 0) + 1
    # what the output shows (the `top` nodes) is all a decision keeps
    scheduler = Scheduler(cluster, config, keep=None if top is None else max(1, top))
    pending: list[Pending] = []
    terms_of: dict[tuple[str, str], GangTerms] = {}
    for position, spec in enumerate(pods):
        entry = Pending(Member(spec, position), priorities[position], (position,))
        try:
            ref = group_ref(spec.annotations, spec.labels)
        except PodInvalid:
            ref = None  # `assemble_jobs` rejects it, naming the field
        if ref is not None:
            key = (spec.namespace, ref.name)
            entry.group = terms_of.get(key)
            if entry.group is None:
                group = groups.get(key) or {"min_member": ref.min_member or 1, "queue": None, "priority": 0}
                gang = Gang(
                    f"{key[0]}/{key[1]}",
                    group["min_member"],
                    placed.get(f"{key[0]}/{key[1]}", 0),
                    placed.get(f"{key[0]}/{key[1]}", 0),
                    group.get("min_resources") or {},
                    topology_key=group.get("topology_key") or "",
                    domain=_domain(cluster, tenants, f"{key[0]}/{key[1]}", group.get("topology_key") or ""),
                    subgroups=dict(group.get("subgroups") or {}),
                    parts_placed=_parts_placed(tenants, f"{key[0]}/{key[1]}"),
                )
                entry.group = terms_of[key] = GangTerms(gang, group["queue"], group["priority"], (position,))
            entry.group.gang.known += 1
        pending.append(entry)
    part_min = {
        (f"{ns}/{name}", part): least
        for (ns, name), group in groups.items()
        for part, least in (group.get("subgroups") or {}).items()
        if least > 0
    }
    jobs, refused = assemble_jobs(pending, book, config)
    decided: dict[int, Decision] = {}
    for member, decision in refused:
        assert isinstance(member.ref, int)
        decided[member.ref] = decision
    preemptor = (
        Preemptor(scheduler, book, lambda: Tenants(tenants, gang_min, None, part_min), rules)
        if rules.enabled
        else None
    )
    consolidator = (
        Consolidator(preemptor, scheduler.decide_parsed, lambda tenant: movable.get(tenant.ref))
        if preemptor is not None and consolidation
        else None
    )
    runner = JobRunner(scheduler, book, namespaces, preemptor=preemptor, consolidator=consolidator)
    results: dict[str, dict] = {}
    evictions: list[dict] = []
    for outcome in runner.run(jobs):
        assert isinstance(outcome.member.ref, int)
        decided[outcome.member.ref] = outcome.decision
        preemption = outcome.decision.preemption
        if outcome.victims and preemption is not None:
            for victim in preemption.victims:
                evictions.append({"by": outcome.member.spec.key, **victim.as_dict()})
        if outcome.job.gang is not None:
            gang = outcome.job.gang
            row = results.setdefault(
                gang.key,
                {
                    "name": gang.key,
                    "min_member": gang.min_member,
                    "members": gang.placed,
                    "placed": gang.placed,
                    "verdict": None,
                },
            )
            row["members"] += 1
            row["placed"] += outcome.decision.status == SCHEDULED
            if outcome.decision.batch is not None and row["verdict"] is None:
                row["verdict"] = outcome.decision.reason_text()
    for row in results.values():
        row["scheduled"] = row["placed"] >= row["min_member"]
    return {
        "pods": [decided[i].as_dict(top=top) for i in range(len(pods))],
        "groups": list(results.values()),
        "queues": [
            {"name": q.name, "parent": q.parent, "used": dict(q.used), "limit": dict(q.limit)}
            for q in sorted(book.queues.values(), key=lambda q: q.name)
        ],
        "evictions": evictions,
    }
