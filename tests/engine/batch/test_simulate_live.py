"""`simulate` decides a batch scenario as the live cycle does (issue 28, docs/simulate.md
"Queues, gangs and preemption"): priorities, queue labels, unknown queues, running tenants
with preemption and reclaim, the server's preemption settings, and a queue at its limit
saying so first. (tests/pipeline/test_simulate_is_live.py runs random worlds both ways.)"""

from __future__ import annotations

import pytest

from scheduling.engine.batch.preempt import Rules
from scheduling.engine.errors import ScenarioProblems
from scheduling.engine.scenario import run_scenario
from scheduling.management.commands.simulate import table

ALLOCATED = "hami.io/vgpu-devices-allocated"


def containers(mem: int, gpu: int = 1) -> list[dict]:
    return [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": gpu, "nvidia.com/gpumem": mem}}}]


def tenant(name: str, uuid: str, mem: int = 40000, node: str = "n1", **fields) -> dict:
    return {
        "name": name,
        "node": node,
        "containers": containers(mem),
        "annotations": {ALLOCATED: f"{uuid},NVIDIA,{mem},0:;"},
        **fields,
    }


def pod(name: str, mem: int = 30000, queue: str | None = None, **fields) -> dict:
    notes = {"hami.io/queue": queue} if queue else {}
    return {"name": name, "annotations": notes, "containers": containers(mem), **fields}


def world(running: list[dict], pods: list[dict], **extra) -> dict:
    cards = [{"uuid": f"n1-g{i}", "index": i, "memory": 40000} for i in range(2)]
    return {"nodes": [{"name": "n1", "devices": cards}], "running": running, "pods": pods, **extra}


def by_name(out: dict) -> dict[str, dict]:
    return {p["name"]: p for p in out["pods"]}


def reason(decided: dict) -> str:
    batch = decided.get("batch") or {}
    return f"{batch.get('reason')}: {batch.get('message')}" if batch else decided["status"]


QUEUES = [{"name": "research"}, {"name": "prod"}]


def test_a_higher_priority_pod_preempts_and_an_empty_queue_reclaims():
    out = run_scenario(
        world(
            [
                tenant("low-a", "n1-g0", priority=0, queue="research"),
                tenant("low-b", "n1-g1", priority=5, queue="research"),
            ],
            [pod("urgent", queue="research", priority=1000), pod("fresh", queue="prod")],
            queues=QUEUES,
        )
    )
    pods = by_name(out)
    assert pods["urgent"]["status"] == pods["fresh"]["status"] == "pending"
    got = {(e["pod"], e["by"], e["kind"], tuple(e["cards"])) for e in out["evictions"]}
    # prod (holding nothing) goes first and reclaims research's lowest-priority tenant;
    # urgent then preempts the other, lower in its own queue
    assert got == {
        ("default/low-a", "default/fresh", "reclaim", ("n1-g0",)),
        ("default/low-b", "default/urgent", "preempt", ("n1-g1",)),
    }
    lines = table(out["pods"], {k: v for k, v in out.items() if k != "pods"})
    assert "evict default/low-b on n1 (n1-g1) for default/urgent: preempt, priority 5 < 1000" in lines


def test_running_pods_without_a_tenant_field_were_bound_by_someone_else_and_are_never_victims():
    out = run_scenario(
        world(
            [tenant("hami-a", "n1-g0"), tenant("hami-b", "n1-g1")],
            [pod("urgent", priority=1000)],
        )
    )
    assert out["evictions"] == []
    assert by_name(out)["urgent"]["status"] == "pending"


def test_priorities_order_the_pods_as_the_live_cycle_does():
    out = run_scenario(world([tenant("t", "n1-g0", priority=10)], [pod("first"), pod("second", priority=5)]))
    pods = by_name(out)
    assert pods["second"]["status"] == "scheduled"  # the only free card goes to the higher priority
    assert pods["first"]["status"] == "pending"


def test_an_unknown_queue_is_queue_not_found_and_the_kai_label_names_a_queue():
    labelled = pod("kai", mem=1000, labels={"kai.scheduler/queue": "prod"})
    out = run_scenario(world([], [pod("lost", queue="nowhere"), labelled], queues=QUEUES))
    pods = by_name(out)
    assert reason(pods["lost"]) == "QueueNotFound: the pod names queue 'nowhere', which does not exist"
    assert pods["kai"]["status"] == "scheduled"
    assert {q["name"]: q["used"]["vgpus"] for q in out["queues"]}["prod"] == 1


def test_tenants_fill_their_queues_so_fair_shares_see_them():
    out = run_scenario(
        world(
            [tenant("r", "n1-g0", queue="research")],
            [pod("r2", queue="research", mem=10000), pod("p2", queue="prod", mem=40000)],
            queues=QUEUES,
        )
    )
    pods = by_name(out)
    # prod (empty) goes first and takes the free card whole; research's pod finds no room
    assert pods["p2"]["status"] == "scheduled" and pods["p2"]["node"] == "n1"
    assert pods["r2"]["status"] == "pending"


def test_a_queue_at_its_limit_on_a_full_cluster_says_so_first():
    queues = [{"name": "capped", "limit": {"vgpus": 1}}, {"name": "other"}]
    out = run_scenario(
        world(
            [tenant("c", "n1-g0", queue="capped"), tenant("o", "n1-g1", queue="other")],
            [pod("more", queue="capped")],
            queues=queues,
        )
    )
    assert reason(by_name(out)["more"]) == "QueueLimitExceeded: queue capped: vgpus 1 + 1 > limit 1"
    assert out["evictions"] == []


def test_the_preemption_settings_of_the_server_and_of_the_scenario():
    tenants = [tenant("low-a", "n1-g0", priority=0), tenant("low-b", "n1-g1", priority=0)]
    off = run_scenario(world(tenants, [pod("urgent", priority=1000)]), rules=Rules(enabled=False))
    assert off["evictions"] == []
    on_again = run_scenario(
        world(tenants, [pod("urgent", priority=1000)], preemption={"enabled": True}),
        rules=Rules(enabled=False),
    )
    assert len(on_again["evictions"]) == 1
    protected = [
        tenant("sys", "n1-g0", priority=2_000_000_000),
        tenant("sys2", "n1-g1", priority=2_000_000_000),
    ]
    kept = run_scenario(world(protected, [pod("urgent", priority=2_000_000_001 - 2)]))
    assert kept["evictions"] == []  # at or above protect_priority (Kubernetes' system classes)
    young = run_scenario(
        world(
            [tenant("new", "n1-g0", runtime_seconds=5), tenant("new2", "n1-g1", runtime_seconds=5)],
            [pod("urgent", priority=1000)],
            preemption={"min_runtime_seconds": 60},
        )
    )
    assert young["evictions"] == []


def test_every_bad_batch_field_is_named():
    bad = world(
        [tenant("t", "n1-g0", priority="high", queue="nowhere", preemptible="no")],
        [pod("p", priority=2**40)],
        preemption={"enabeld": True, "max_cards_per_cycle": -1},
        namespace_quotas=[{"namespace": "", "hard": {"gpus": 1}}],
    )
    with pytest.raises(ScenarioProblems) as raised:
        run_scenario(bad)
    fields = {problem.where for problem in raised.value.problems}
    assert {
        "running[0].priority",
        "running[0].preemptible",
        "pods[0].priority",
        "preemption.enabeld",
        "preemption.max_cards_per_cycle",
        "namespace_quotas[0].namespace",
        "namespace_quotas[0].hard.gpus",
    } <= fields, fields


def test_a_namespace_quota_holds_in_simulate():
    out = run_scenario(
        world(
            [],
            [pod("a", mem=1000), pod("b", mem=1000)],
            namespace_quotas=[{"namespace": "default", "hard": {"vgpus": 1}}],
        )
    )
    pods = by_name(out)
    assert pods["a"]["status"] == "scheduled"
    assert reason(pods["b"]).startswith("NamespaceQuotaExceeded: namespace default: vgpus 1 + 1 > hard 1")


def test_a_plain_scenario_is_unchanged():
    out = run_scenario(world([tenant("t", "n1-g0")], [pod("p")]))
    assert set(out) == {"pods"}


def test_a_gangs_topology_key_holds_it_within_one_label_value_in_simulate():
    nodes = [
        {
            "name": f"n{i}",
            "labels": {"rack": rack},
            "devices": [{"uuid": f"n{i}-g{c}", "memory": 40000} for c in range(2)],
        }
        for i, rack in enumerate(["a", "b"])
    ]

    def gang(name: str, size: int) -> list[dict]:
        notes = {"hami.io/group-name": name}
        return [
            {"name": f"{name}-{k}", "annotations": notes, "containers": containers(30000)}
            for k in range(size)
        ]

    too_big = run_scenario(
        {
            "nodes": nodes,
            "groups": [{"name": "wide", "min_member": 3, "topology_key": "rack"}],
            "pods": gang("wide", 3),
        }
    )
    assert all(p["status"] == "pending" for p in too_big["pods"])
    assert "rack" in too_big["groups"][0]["verdict"]
    spread = {"node_scheduler_policy": "spread"}  # without the key the pair would take both racks
    apart = run_scenario(
        {
            "nodes": nodes,
            "config": spread,
            "groups": [{"name": "pair", "min_member": 2}],
            "pods": gang("pair", 2),
        }
    )
    assert len({p["node"] for p in apart["pods"]}) == 2
    fits = run_scenario(
        {
            "nodes": nodes,
            "config": spread,
            "groups": [{"name": "pair", "min_member": 2, "topology_key": "rack"}],
            "pods": gang("pair", 2),
        }
    )
    placed = {p["node"] for p in fits["pods"]}
    assert len(placed) == 1 and all(p["status"] == "scheduled" for p in fits["pods"])
