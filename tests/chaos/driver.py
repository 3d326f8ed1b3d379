"""The chaos suite's hands inside a database of its own (a private PostgreSQL, a SQLite
file): `python -m tests.chaos.driver COMMAND`, with DATABASE_URL (and REDIS_URL) set.

- `migrate`: the schema.
- `seed --nodes N --cards C --pods P --seed S`: nodes reported and pods submitted through
  `scheduling.services`, the paths agents and the API use.
- `churn --seconds T --seed S`: for T seconds, what a live cluster does beside the
  scheduler: pods released, new ones submitted, agents reporting again.
- `token --role R`: an API token of that role.
- `check`: the figures of the database as one JSON line (over-commits counted from the
  allocation rows, counter drift, ghosts, double placements, cycles, conflicts, ...).
- `preempt-seed --nodes N`: N nodes x 2 cards of 16,000 MiB, each card full with two
  running Kubernetes tenants of 8,000 MiB at priority 0 (evicted by the kube agent, which
  does not run: their evictions and the preemptor's nominations stay until released).
- `serve`: reads one JSON command a line on stdin (`submit`, `release`, `check`, `undecided`,
  `preemptor`, `preemption`, `release_victims`, `preemption_check`) and answers one JSON
  line each, reconnecting after the database went away.

The last line on stdout is always one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import uuid as uuidlib
from collections import defaultdict

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hamiadmin.settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import close_old_connections, connection  # noqa: E402
from django.db.models import Count, Sum  # noqa: E402
from django.db.utils import DatabaseError, InterfaceError, OperationalError  # noqa: E402
from django.utils import timezone  # noqa: E402

from scheduling import services  # noqa: E402
from scheduling.api.tokens import issue_role_token  # noqa: E402
from scheduling.engine.encoding import decode_allocation  # noqa: E402
from scheduling.models import Allocation, Card, Cycle, Decision, Eviction, Nomination, Pod  # noqa: E402
from scheduling.pipeline import consistency, run_cycle  # noqa: E402
from scheduling.services.evictions import settle_evictions  # noqa: E402
from tests.pipeline.conftest import pod_kind  # noqa: E402


def devices(node: int, cards: int) -> list[dict]:
    return [
        {"uuid": f"GPU-{node}-{i}", "index": i, "memory": 16000, "numa": i // 4, "type": "NVIDIA-Tesla T4"}
        for i in range(cards)
    ]


def submit(rng: random.Random, name: str) -> None:
    annotations, resources = pod_kind(rng)
    services.submit_pod(
        "chaos",
        name,
        annotations,
        [{"name": "main", "resources": resources}],
        priority=rng.choice([0, 0, 1, 5]),
    )


def seed(args) -> dict:
    rng = random.Random(args.seed)
    for n in range(args.nodes):
        services.report_inventory(f"node{n:03d}", {}, {}, devices(n, args.cards))
    for n in range(args.pods):
        submit(rng, f"pod{n:05d}")
    return {"nodes": args.nodes, "cards": args.nodes * args.cards, "pods": args.pods}


def churn(args) -> dict:
    """Releases, new submissions and agent reports for `seconds`, as fast as they go."""
    rng = random.Random(args.seed)
    nodes = list(Card.objects.values_list("node__name", flat=True).distinct())
    cards = Card.objects.filter(node__name=nodes[0]).count() if nodes else 0
    done = {"releases": 0, "submissions": 0, "reports": 0}
    stop_at = time.monotonic() + args.seconds
    while time.monotonic() < stop_at:
        roll = rng.random()
        if roll < 0.45:
            placed = list(Pod.objects.filter(status=Pod.SCHEDULED).values_list("pk", flat=True)[:50])
            if placed:
                services.release_pod(rng.choice(placed), rng.choice(Pod.FINISHED))
                done["releases"] += 1
        elif roll < 0.8:
            submit(rng, f"churn{args.seed}-{done['submissions']:05d}")
            done["submissions"] += 1
        elif nodes:
            node = rng.choice(nodes)
            services.report_inventory(node, {}, {}, devices(int(node.removeprefix("node")), cards))
            done["reports"] += 1
    return done


def gpu(memory: int) -> list[dict]:
    return [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": memory}}}]


def preempt_seed(args) -> dict:
    """Full cards of preemptible tenants: any 16,000 MiB pod must evict the two on one card."""
    for n in range(args.nodes):
        services.report_inventory(f"node{n:03d}", {}, {}, devices(n, 2))
        for i in range(2):
            for t in range(2):
                services.submit_pod(
                    "tenants",
                    f"t{n:03d}-{i}-{t}",
                    {"nvidia.com/use-gpuuuid": f"GPU-{n}-{i}"},
                    gpu(8000),
                    priority=0,
                    uid=str(uuidlib.uuid4()),
                    origin=Pod.KUBERNETES,
                    validate=False,
                )
    while run_cycle().placed:
        pass
    for pod in Pod.objects.filter(status=Pod.SCHEDULED).select_related("node"):
        services.mark_bound(pod, pod.node.name)
    return {"tenants": Pod.objects.filter(status=Pod.RUNNING).count()}


def preemption_of(name: str) -> dict:
    """Where a preemptor stands: status, active evictions, nominations, who decided it."""
    pod = Pod.objects.filter(namespace="chaos", name=name).first()
    if pod is None:
        return {"status": None}
    return {
        "status": pod.status,
        "reason": pod.reason,
        "parked": pod.parked,
        "next_attempt_at": pod.next_attempt_at,
        "eviction_states": list(
            Eviction.objects.filter(preemptor=pod).values_list("state", "victim__status")
        ),
        "evictions": Eviction.objects.filter(preemptor=pod, state__in=Eviction.ACTIVE).count(),
        "nominations": Nomination.objects.filter(pod=pod).count(),
        "decided_by": list(Decision.objects.filter(pod=pod).values_list("cycle__worker", flat=True)),
    }


def release_victims(name: str) -> int:
    """What Kubernetes does once the kube agent evicted them: the victims deleted; then the
    housekeeping's settling (evictions done)."""
    victims = list(
        Eviction.objects.filter(
            preemptor__namespace="chaos", preemptor__name=name, state__in=Eviction.ACTIVE
        ).values_list("victim_id", flat=True)
    )
    for victim in victims:
        services.release_pod(victim, Pod.DELETED)
    settle_evictions()
    return len(victims)


def preemption_check() -> dict:
    """What a half-written preemption commit would leave, each must be 0:
    - `evictions_without_decision`: an Eviction not tied to its preemptor's decision;
    - `partial_evictions`: a decision whose Eviction rows are not exactly the victims it names;
    - `evictions_without_nominations`: a waiting preemptor with active evictions, no Nomination;
    - `nominations_without_evictions`: a Nomination whose pod evicts nobody;
    - `overbooked_cards`: a card whose allocations (of pods not being evicted) plus
      unexpired nominations exceed its slots, memory or cores."""
    evictions = list(
        Eviction.objects.values_list(
            "pk", "victim_id", "preemptor_id", "decision_id", "decision__pod_id", "state"
        )
    )
    by_decision: dict[int, set[str]] = defaultdict(set)
    keys = dict(Pod.objects.filter(pk__in={e[1] for e in evictions}).values_list("pk", "namespace"))
    names = dict(Pod.objects.filter(pk__in=list(keys)).values_list("pk", "name"))
    unlinked = 0
    for _, victim, preemptor, decision, decided, _state in evictions:
        if decision is None or decided != preemptor:
            unlinked += 1
            continue
        by_decision[decision].add(f"{keys[victim]}/{names[victim]}")
    partial = 0
    for decision, payload in Decision.objects.filter(pk__in=list(by_decision)).values_list("pk", "payload"):
        named = {victim["pod"] for victim in ((payload or {}).get("preemption") or {}).get("victims", [])}
        partial += named != by_decision[decision]
    active = [e for e in evictions if e[5] in Eviction.ACTIVE]
    waiting = set(
        Pod.objects.filter(pk__in={e[2] for e in active}, status=Pod.PENDING).values_list("pk", flat=True)
    )
    nominated = set(Nomination.objects.values_list("pod_id", flat=True))
    preemptors = {e[2] for e in evictions}
    being_evicted = {e[1] for e in active}
    booked: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    for card, memory, cores in (
        Allocation.objects.filter(active=True)
        .exclude(pod_id__in=being_evicted)
        .values_list("card_id", "memory", "cores")
    ):
        booked[card][0], booked[card][1], booked[card][2] = (
            booked[card][0] + 1,
            booked[card][1] + memory,
            booked[card][2] + cores,
        )
    for card, memory, cores in Nomination.objects.filter(expires_at__gt=timezone.now()).values_list(
        "card_id", "memory", "cores"
    ):
        booked[card][0], booked[card][1], booked[card][2] = (
            booked[card][0] + 1,
            booked[card][1] + memory,
            booked[card][2] + cores,
        )
    overbooked = sum(
        1
        for pk, slots, memory, cores in Card.objects.values_list("pk", "slots", "memory", "cores")
        if booked[pk][0] > slots or booked[pk][1] > memory or booked[pk][2] > cores
    )
    return {
        "evictions": len(evictions),
        "nominations": Nomination.objects.count(),
        "evictions_without_decision": unlinked,
        "partial_evictions": partial,
        "evictions_without_nominations": len(waiting - nominated),
        "nominations_without_evictions": len(nominated - preemptors),
        "overbooked_cards": overbooked,
    }


def overcommits() -> int:
    """Cards whose active allocation rows (not the counters) exceed slots, memory or cores."""
    held = {
        row["card"]: row
        for row in Allocation.objects.filter(active=True)
        .values("card")
        .annotate(slots=Count("id"), memory=Sum("memory"), cores=Sum("cores"))
    }
    over = 0
    for card in Card.objects.all():
        row = held.get(card.pk)
        if row and (row["slots"] > card.slots or row["memory"] > card.memory or row["cores"] > card.cores):
            over += 1
    return over


def double_placements() -> int:
    """Pods whose active allocations disagree with one placement: more cards than asked, a
    card twice, cards on two nodes, rows unlike the allocation string, or rows of a pod
    that is not placed."""
    rows = defaultdict(list)
    for pod_id, uuid, memory, cores, node in Allocation.objects.filter(active=True).values_list(
        "pod_id", "card__uuid", "memory", "cores", "card__node__name"
    ):
        rows[pod_id].append((uuid, memory, cores, node))
    wrong = 0
    for pod in Pod.objects.filter(pk__in=list(rows)).select_related("node") | Pod.objects.filter(
        status__in=Pod.BOUND
    ).select_related("node"):
        held = rows.get(pod.pk, [])
        if pod.status not in Pod.BOUND:
            wrong += bool(held)
            continue
        asked = sum(
            int(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 1))
            for container in pod.containers
        )
        written = [entry for container in decode_allocation(pod.allocated) for entry in container]
        if (
            len(held) != asked
            or len({uuid for uuid, *_ in held}) != asked
            or {node for *_, node in held} != {pod.node.name if pod.node else None}
            or sorted(written) != sorted((uuid, memory, cores) for uuid, memory, cores, _ in held)
        ):
            wrong += 1
    return wrong


def overlapping_cycles() -> int:
    """Pairs of committed cycles of different workers that ran at the same time."""
    cycles = sorted(
        Cycle.objects.exclude(finished_at=None)
        .exclude(considered=0)
        .values_list("worker", "started_at", "finished_at"),
        key=lambda cycle: cycle[1],
    )
    pairs = 0
    for i, (worker, _start, end) in enumerate(cycles):
        for other, other_start, _ in cycles[i + 1 :]:
            if other_start >= end:
                break
            pairs += other != worker
    return pairs


def undecided() -> int:
    """Pending pods no cycle has looked at yet (not parked): what must drain."""
    return Pod.objects.filter(status=Pod.PENDING, parked=False, attempts=0).count()


def check(_args=None) -> dict:
    found = consistency.check()
    statuses = dict(Pod.objects.values_list("status").annotate(n=Count("id")).order_by())
    pending = Pod.objects.filter(status=Pod.PENDING)
    with connection.cursor() as cursor:
        advisory = 0
        if connection.vendor == "postgresql":
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
            advisory = cursor.fetchone()[0]
    return {
        "pods": Pod.objects.count(),
        "statuses": statuses,
        "placed": statuses.get(Pod.SCHEDULED, 0) + statuses.get(Pod.RUNNING, 0),
        "cycles": Cycle.objects.exclude(considered=0).count(),
        "conflicts": Decision.objects.filter(outcome="conflict").count(),
        "over_commits": overcommits(),
        "counter_drift": len(found.counter_drift),
        "ghosts": len(found.ghost_allocations),
        "unbacked": len(found.unbacked_placements),
        "double_placements": double_placements(),
        "overlapping_cycles": overlapping_cycles(),
        "undecided": undecided(),
        "pending_without_reason": pending.filter(attempts__gt=0, reason="").count(),
        "advisory_locks": advisory,
    }


def serve(args) -> dict:
    """One JSON command a line; a command that meets a database that went away is answered
    {"error": ...} and the connection is dropped, so the next one reconnects."""
    rng = random.Random(args.seed)
    served = 0
    for line in sys.stdin:
        command = json.loads(line)
        close_old_connections()
        try:
            op = command["op"]
            if op == "submit":
                names = [f"{command['prefix']}-{n:04d}" for n in range(command["count"])]
                for name in names:
                    submit(rng, name)
                answer: dict = {"submitted": len(names)}
            elif op == "release":
                placed = list(Pod.objects.filter(status=Pod.SCHEDULED).values_list("pk", flat=True))
                chosen = rng.sample(placed, min(command["count"], len(placed)))
                for pk in chosen:
                    services.release_pod(pk, Pod.SUCCEEDED)
                answer = {"released": len(chosen)}
            elif op == "preemptor":
                services.submit_pod("chaos", command["name"], {}, gpu(16000), priority=1000)
                answer = {"submitted": 1}
            elif op == "preemption":
                answer = preemption_of(command["name"])
            elif op == "release_victims":
                answer = {"released": release_victims(command["name"])}
            elif op == "preemption_check":
                answer = preemption_check()
            elif op == "undecided":
                answer = {"undecided": undecided()}
            elif op == "check":
                answer = check()
            else:
                answer = {"error": f"op: unknown {op!r}"}
        except (OperationalError, InterfaceError, DatabaseError) as exc:
            connection.close_if_unusable_or_obsolete()
            try:
                connection.close()
            except DatabaseError:
                pass
            answer = {"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
        served += 1
        print(json.dumps(answer, default=str), flush=True)
    return {"served": served}


def main() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("migrate")
    seeding = commands.add_parser("seed")
    seeding.add_argument("--nodes", type=int, required=True)
    seeding.add_argument("--cards", type=int, default=8)
    seeding.add_argument("--pods", type=int, required=True)
    seeding.add_argument("--seed", type=int, default=16)
    churning = commands.add_parser("churn")
    churning.add_argument("--seconds", type=float, required=True)
    churning.add_argument("--seed", type=int, default=1)
    commands.add_parser("check")
    preempting = commands.add_parser("preempt-seed")
    preempting.add_argument("--nodes", type=int, required=True)
    tokens = commands.add_parser("token")
    tokens.add_argument("--role", default="operator")
    serving = commands.add_parser("serve")
    serving.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    if args.command == "token":
        print(json.dumps({"key": issue_role_token(f"chaos-{args.role}", args.role)}), flush=True)
        return
    if args.command == "migrate":
        call_command("migrate", verbosity=0)
        result: dict = {"migrated": True}
    else:
        commands_run = {
            "seed": seed,
            "churn": churn,
            "check": check,
            "serve": serve,
            "preempt-seed": preempt_seed,
        }
        result = commands_run[args.command](args)
    print(json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
