"""`simulate` is the live cycle (issue 28, docs/simulate.md "Queues, gangs and preemption"):
the same world, run once through `run_scenario` and once through a real cycle on the
database, gives the same verdict for every pod (status, node, cards, reason code) and the
same evictions (victim, preemptor, kind, node, cards).

The world is drawn at random per seed: nodes of cards, queues (weights, a guarantee, a
limit), tenants pinned to cards at random priorities and queues, then pending pods at random
priorities, queues (one unknown), sizes and gangs. The database gets the tenants by placing
them in a first cycle (pinned by uuid), the scenario as `running` entries carrying their
allocation annotation, priority and queue.

SQLite by default, PostgreSQL in CI (DATABASE_URL)."""

from __future__ import annotations

import random

import pytest

from scheduling import services
from scheduling.engine.scenario import run_scenario
from scheduling.management.commands.simulate import why_cell
from scheduling.models import Eviction, Pod, PodGroup, Queue
from scheduling.pipeline import run_cycle
from scheduling.pipeline.preemption import scenario_settings

from .conftest import assert_consistent, card, limits, submit

pytestmark = pytest.mark.django_db(transaction=True)

PIN = "nvidia.com/use-gpuuuid"
QUEUE = "hami.io/queue"
GROUP = "hami.io/group-name"
MIN = "hami.io/group-min-member"
QUEUES = [
    {"name": "a", "weight": 1},
    {"name": "b", "weight": 2, "guarantee": {"vgpus": 2}},
    {"name": "c", "weight": 1, "limit": {"gpumem": 40000}},
]


def draw_world(seed: int) -> dict:
    """Nodes, queues, tenants (card, MiB, priority, queue) and pending pods of one seed."""
    rng = random.Random(seed)
    nodes = []
    for n in range(rng.randint(1, 3)):
        cards = [(f"n{n}-g{i}", rng.choice([16000, 24000])) for i in range(rng.randint(2, 4))]
        nodes.append({"name": f"node{n}", "cards": cards})
    tenants = []
    room = {"c": 40000}  # queue c's limit: tenants beyond it would not have been placed
    for node in nodes:
        for uuid, memory in node["cards"]:
            free = memory
            slots = 4
            while rng.random() < 0.92 and free >= 4000 and slots:
                mem = rng.choice([m for m in (4000, 8000, 12000) if m <= free])
                queue = rng.choice("abc")
                if mem > room.get(queue, mem):
                    continue
                free, slots = free - mem, slots - 1
                room[queue] = room.get(queue, mem) - mem
                tenants.append(
                    {
                        "name": f"t{len(tenants)}",
                        "node": node["name"],
                        "card": uuid,
                        "mem": mem,
                        "priority": rng.choice([0, 0, 10]),
                        "queue": queue,
                    }
                )
    pods = []
    for k in range(rng.randint(4, 8)):
        queue = rng.choice(["a", "b", "c", "c", "nope"] if k == 0 else ["a", "b", "c"])
        pod = {
            "name": f"p{k}",
            "mem": rng.choice([4000, 8000, 12000, 16000]),
            "priority": rng.choice([0, 10, 100]),
        }
        pod["queue"] = queue
        if rng.random() < 0.2:
            pod["group"], pod["size"] = f"g{k}", 2
        pods.append(pod)
    return {"nodes": nodes, "tenants": tenants, "pods": pods}


def members(pod: dict) -> list[tuple[str, dict]]:
    """(name, annotations) of a drawn pod: itself, or its gang's members."""
    notes = {QUEUE: pod["queue"]}
    if "group" not in pod:
        return [(pod["name"], notes)]
    notes |= {GROUP: pod["group"], MIN: str(pod["size"])}
    return [(f"{pod['name']}-{i}", notes) for i in range(pod["size"])]


def containers(mem: int) -> list[dict]:
    return [{"name": "main", "resources": limits(gpu=1, mem=mem)}]


def as_scenario(world: dict) -> dict:
    return {
        "nodes": [
            {
                "name": node["name"],
                "devices": [
                    {"uuid": uuid, "index": i, "memory": memory, "slots": 4}
                    for i, (uuid, memory) in enumerate(node["cards"])
                ],
            }
            for node in world["nodes"]
        ],
        "queues": QUEUES,
        "running": [
            {
                "name": t["name"],
                "node": t["node"],
                "priority": t["priority"],
                "queue": t["queue"],
                "containers": containers(t["mem"]),
                "annotations": {
                    PIN: t["card"],
                    "hami.io/vgpu-devices-allocated": f"{t['card']},NVIDIA,{t['mem']},0:;",
                },
            }
            for t in world["tenants"]
        ],
        "pods": [
            {
                "name": name,
                "priority": pod["priority"],
                "annotations": notes,
                "containers": containers(pod["mem"]),
            }
            for pod in world["pods"]
            for name, notes in members(pod)
        ],
    }


def live(world: dict) -> tuple[dict, set]:
    """The world through real cycles: verdicts by pod name and the evictions."""
    for queue in QUEUES:
        Queue.objects.create(
            name=queue["name"],
            weight=queue["weight"],
            guarantee_vgpus=queue.get("guarantee", {}).get("vgpus"),
            limit_gpumem=queue.get("limit", {}).get("gpumem"),
        )
    for node in world["nodes"]:
        services.report_inventory(
            node["name"],
            {},
            {},
            [card(uuid, i, memory, slots=4) for i, (uuid, memory) in enumerate(node["cards"])],
        )
    for t in world["tenants"]:
        submit(
            t["name"],
            gpu=1,
            mem=t["mem"],
            annotations={PIN: t["card"], QUEUE: t["queue"]},
            priority=t["priority"],
        )
    run_cycle()
    assert Pod.objects.filter(status=Pod.SCHEDULED).count() == len(world["tenants"])
    for pod in world["pods"]:
        for name, notes in members(pod):
            submit(name, gpu=1, mem=pod["mem"], annotations=notes, priority=pod["priority"])
    run_cycle()
    assert_consistent()
    verdicts = {}
    for pod in Pod.objects.exclude(name__in=[t["name"] for t in world["tenants"]]):
        cards = sorted(pod.allocations.filter(active=True).values_list("card__uuid", flat=True))
        code = pod.reason.split(":", 1)[0] if pod.status == Pod.PENDING else ""
        verdicts[pod.name] = (pod.status, pod.node.name if pod.node else None, cards, code)
    evictions = {
        (e.victim.name, e.preemptor.name, e.kind, tuple(sorted(e.cards or ())))
        for e in Eviction.objects.select_related("victim", "preemptor")
    }
    return verdicts, evictions


def simulated(world: dict) -> tuple[dict, set]:
    out = run_scenario(as_scenario(world), **scenario_settings())
    verdicts = {}
    for pod in out["pods"]:
        cards = sorted(d["uuid"] for c in pod.get("containers") or () for d in c.get("devices") or ())
        code = why_cell(pod).split(":", 1)[0] if pod["status"] == "pending" else ""
        verdicts[pod["name"]] = (pod["status"], pod.get("node"), cards, code)
    evictions = {
        (e["pod"].split("/", 1)[1], e["by"].split("/", 1)[1], e["kind"], tuple(sorted(e["cards"])))
        for e in out["evictions"]
    }
    return verdicts, evictions


@pytest.mark.parametrize("seed", range(16))
def test_the_same_world_through_simulate_and_a_live_cycle_gives_the_same_verdicts(seed):
    world = draw_world(seed)
    expected = simulated(world)
    got = live(world)
    assert got[0] == expected[0], f"seed {seed}: verdicts differ"
    assert got[1] == expected[1], f"seed {seed}: evictions differ"
    assert PodGroup.objects.count() == sum(1 for pod in world["pods"] if "group" in pod)
