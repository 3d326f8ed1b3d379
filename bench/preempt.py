"""Preemption benchmark (issue 12): a full cluster of low-priority tenants, high-priority pods arrive.

    python -m bench.preempt [--nodes 1000] [--pods 500] [--max-cards 64] [--seed 7]

Pure engine, no database. Every card (80 GiB) of `--nodes` nodes x 8 cards is held by
low-priority tenants (priority 0-9): whole-card tenants, 2 or 4 tenants sharing a card,
2/4/8-card tenants, and gangs of 4 two-card members on 4 nodes (half with min_member 4, so
one member going takes the whole gang). Then `--pods` pods of priority 100 arrive, each
asking whole cards (80 GiB, 100 cores: exclusive), 1, 2, 4 or 8 of them; the first six are
a gang of 6 x 8 cards (KAI's 48-GPU shape).

Cycles run as the pipeline runs them: a fresh `Scheduler` over the cluster as it is, a
`JobRunner` with a `Preemptor` over the running tenants and the open nominations, every pod
still pending decided in age order, at most `--max-cards` cards evicted per cycle. Between
cycles the victims are gone (their cards free), each preemptor waits on its nominated
cards, and a pod placed becomes a running tenant (of priority 100: no later pod evicts it).

Printed: cycles and engine seconds to place them all, pods evicted per pod placed beside a
lower bound, cards evicted per card asked (at least 1), cycle p50/p99 ms, the whole decision
of a pod that preempts (decide, search, evict, decide again) and `Preemptor.plan` alone, in
ms per call, for searches that found victims and for those that did not (the cycle's cap
reached). The cluster is audited at the end: every card must hold exactly what the running
pods hold.

The lower bound holds for any way of choosing victims (`lower_bound`): every arriving
pod needs whole cards emptied for it alone, and emptying a card means evicting every tenant
on it. Charge each tenant 1/(its number of cards) on each of its cards: a card then costs
the sum over its tenants, and evicting a set of tenants costs exactly its size at most, so
emptying N cards takes at least the sum of the N cheapest card costs, N being the cards
the arriving pods ask. It ignores which node each pod needs and who may be evicted, so it
is loose where gangs or multi-card tenants are cheap per card but in the wrong place.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduling.engine import Card, Cluster, Node, PodSpec, Scheduler
from scheduling.engine.batch.jobs import Gang, Job, JobRunner, Member, Nominated
from scheduling.engine.batch.preempt import Preemptor, Rules, Tenant, Tenants
from scheduling.engine.batch.queues import QueueBook, QueueState
from scheduling.engine.decision import SCHEDULED

CARD_MIB = 81920
CARDS = 8
HIGH = 100
#: Arriving pods' card counts and how often each comes (after the leading gang).
SHAPES = ((1, 0.5), (2, 0.25), (4, 0.15), (8, 0.10))
KAI_GANG = (6, 8)  # members x cards each


def build_cluster(nodes: int, seed: int) -> tuple[Cluster, list[Tenant], dict[str, int]]:
    """`nodes` x 8 full cards and the low-priority tenants holding them; gangs' min_member."""
    rng = random.Random(seed)
    cluster = Cluster(
        [
            Node(
                name=f"node-{n:05d}",
                cards=[Card(uuid=f"GPU-{n:05d}-{i}", index=i, memory=CARD_MIB) for i in range(CARDS)],
            )
            for n in range(nodes)
        ]
    )
    tenants: list[Tenant] = []
    gang_min: dict[str, int] = {}

    def hold(name: str, node: Node, cards: list[tuple[int, int, int]], gang: str = "") -> None:
        holdings = []
        for index, memory, cores in cards:
            card = node.cards[index]
            card.used_slots += 1
            card.used_memory += memory
            card.used_cores += cores
            holdings.append((card.uuid, memory, cores))
        tenants.append(
            Tenant(
                key=f"low/{name}",
                namespace="low",
                node=node.name,
                priority=rng.randrange(10),
                runtime_seconds=rng.uniform(600, 86400),
                gang=gang,
                holdings=holdings,
            )
        )

    gang_nodes: list[Node] = []
    for node in cluster.nodes:
        kind = rng.random()
        tag = node.name[5:]
        if kind < 0.4:  # whole cards, one tenant each
            for i in range(CARDS):
                hold(f"w{tag}-{i}", node, [(i, CARD_MIB, 100)])
        elif kind < 0.6:  # shared cards: 2 or 4 tenants on each
            for i in range(CARDS):
                share = rng.choice((2, 4))
                for k in range(share):
                    hold(f"s{tag}-{i}-{k}", node, [(i, CARD_MIB // share, 100 // share)])
        elif kind < 0.8:  # multi-card tenants: one of 8, two of 4 or four of 2
            width = rng.choice((8, 4, 2))
            for first in range(0, CARDS, width):
                hold(f"m{tag}-{first}", node, [(i, CARD_MIB, 100) for i in range(first, first + width)])
        else:
            gang_nodes.append(node)
    # gangs of 4 two-card members, one member on each of 4 nodes; the rest whole cards
    whole = len(gang_nodes) % 4
    for node in gang_nodes[len(gang_nodes) - whole :]:
        for i in range(CARDS):
            hold(f"w{node.name[5:]}-{i}", node, [(i, CARD_MIB, 100)])
    for g in range(0, len(gang_nodes) - whole, 4):
        group = gang_nodes[g : g + 4]
        for pair in range(0, CARDS, 2):
            key = f"low/gang-{g:05d}-{pair}"
            gang_min[key] = 4 if (g // 4 + pair) % 2 == 0 else 2
            for m, node in enumerate(group):
                hold(f"g{g:05d}-{pair}-{m}", node, [(pair, CARD_MIB, 100), (pair + 1, CARD_MIB, 100)], key)
    return cluster, tenants, gang_min


def arriving(pods: int, seed: int) -> list[tuple[str, int, str]]:
    """(name, cards, gang key or "") per arriving pod, oldest first: KAI's gang, then singles."""
    rng = random.Random(seed + 1)
    out: list[tuple[str, int, str]] = []
    members, width = KAI_GANG
    if pods >= members * 3:
        out += [(f"train-{i}", width, "high/train") for i in range(members)]
    counts, weights = zip(*SHAPES, strict=True)
    while len(out) < pods:
        out.append((f"p{len(out):04d}", rng.choices(counts, weights)[0], ""))
    return out


def spec(name: str, cards: int) -> PodSpec:
    limits = {"nvidia.com/gpu": cards, "nvidia.com/gpumem": CARD_MIB, "nvidia.com/gpucores": 100}
    return PodSpec(
        name=name, namespace="high", containers=[{"name": "main", "resources": {"limits": limits}}]
    )


def lower_bound(cluster: Cluster, tenants: Iterable[Tenant], cards_asked: int) -> float:
    """The fewest tenants any choice of victims must evict to empty `cards_asked` cards (see
    the module docstring): the sum of the cheapest card costs, a card costing 1/width for each
    of its tenants, width being how many cards that tenant holds."""
    cost = {card.uuid: 0.0 for node in cluster.nodes for card in node.cards}
    for tenant in tenants:
        cards = {uuid for uuid, _, _ in tenant.holdings}
        for uuid in cards:
            cost[uuid] += 1.0 / len(cards)
    return sum(sorted(cost.values())[:cards_asked])


class TimedPreemptor(Preemptor):
    """A Preemptor that keeps how long each victim search took (ms) and whether it found victims."""

    def __init__(self, *args, searches: list, **kwargs):
        super().__init__(*args, **kwargs)
        self.searches = searches

    def plan(self, *args, **kwargs):
        started = time.perf_counter()
        found = super().plan(*args, **kwargs)
        self.searches.append(((time.perf_counter() - started) * 1000, found[0] is not None))
        return found


class TimedRunner(JobRunner):
    """A JobRunner that keeps how long each preempting member's whole decision took (ms): the
    first decision, the victim search, the evictions and the decision after them."""

    def __init__(self, *args, preempting: list, **kwargs):
        super().__init__(*args, **kwargs)
        self.preempting = preempting

    def _decide_member(self, job, member, *args, **kwargs):
        started = time.perf_counter()
        decided = super()._decide_member(job, member, *args, **kwargs)
        if decided[2] is not None:
            self.preempting.append((time.perf_counter() - started) * 1000)
        return decided


@dataclass
class Result:
    nodes: int
    pods: int
    placed: int = 0
    cycles: int = 0
    evicted: int = 0
    evicted_cards: int = 0
    cards_asked: int = 0
    bound: float = 0.0
    engine_seconds: float = 0.0
    cycle_ms: list[float] = field(default_factory=list)
    searches: list[tuple[float, bool]] = field(default_factory=list)
    preempting: list[float] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)
    #: what is wrong with the cluster at the end (cards over capacity, or usage that the
    #: running pods do not account for); empty when all is well
    faults: list[str] = field(default_factory=list)

    @property
    def per_pod(self) -> float:
        return self.evicted / self.placed if self.placed else 0.0


def run(
    nodes: int = 1000, pods: int = 500, max_cards: int = 64, seed: int = 7, max_cycles: int = 500
) -> Result:
    """Place every arriving pod by cycles (see the module docstring); what it took."""
    cluster, tenants, gang_min = build_cluster(nodes, seed)
    arrivals = arriving(pods, seed)
    result = Result(nodes=nodes, pods=pods)
    result.cards_asked = sum(cards for _, cards, _ in arrivals)
    result.bound = lower_bound(cluster, tenants, result.cards_asked)
    capacity = {
        "vgpus": nodes * CARDS * 10,
        "gpumem": nodes * CARDS * CARD_MIB,
        "gpucores": nodes * CARDS * 100,
    }
    running = dict.fromkeys(tenants)  # ordered, so every run decides alike
    nominations: dict[str, Nominated] = {}
    pending = {name: (i, cards, gang) for i, (name, cards, gang) in enumerate(arrivals)}
    gang_size = {gang: sum(1 for _, _, g in arrivals if g == gang) for _, _, gang in arrivals if gang}
    gang_placed = dict.fromkeys(gang_size, 0)
    for _ in range(max_cycles):
        if not pending:
            break
        jobs, singles = [], []
        members: dict[str, list[Member]] = {}
        for name, (age, cards, gang) in sorted(pending.items(), key=lambda kv: kv[1][0]):
            if gang:
                members.setdefault(gang, []).append(Member(spec(name, cards)))
            else:
                singles.append(Job("default", HIGH, (age, name), [Member(spec(name, cards))]))
        for gang, listed in members.items():
            state = Gang(gang, gang_size[gang], gang_size[gang], placed=gang_placed[gang])
            jobs.append(Job("default", HIGH, (-1, gang), listed, state))
        jobs += singles
        started = time.perf_counter()
        book = QueueBook([QueueState("default")], capacity=dict(capacity))
        for tenant in running:
            book.add(tenant.queue, tenant.usage)
        scheduler = Scheduler(cluster)
        current = Tenants(list(running), gang_min)
        preemptor = TimedPreemptor(
            scheduler,
            book,
            lambda current=current: current,
            Rules(max_cards=max_cards),
            searches=result.searches,
        )
        runner = TimedRunner(
            scheduler, book, preemptor=preemptor, nominations=dict(nominations), preempting=result.preempting
        )
        outcomes = runner.run(jobs)
        result.cycle_ms.append((time.perf_counter() - started) * 1000)
        result.cycles += 1
        runner._hold_nominations(-1)  # the nominations left open go back to the next cycle's runner
        for outcome in outcomes:
            key, decision = outcome.member.spec.key, outcome.decision
            if outcome.victims:
                grants = list(decision.preemption.grants)
                node = cluster.node(decision.preemption.node)
                _move(node, grants, -1)  # assumed in the cycle; the next one holds it as a nomination
                nominations[key] = Nominated(
                    node.name, grants, waiting=0, whole=tuple(decision.preemption.whole)
                )
                for victim in outcome.victims:
                    running.pop(victim, None)
                    result.evicted += 1
                    result.evicted_cards += len(victim.holdings)
            elif decision.status == SCHEDULED:
                nominations.pop(key, None)
                holdings = [(d.uuid, d.memory, d.cores) for c in decision.containers for d in c.devices]
                placed = Tenant(
                    key=key, namespace="high", node=decision.node, priority=HIGH, holdings=holdings
                )
                running[placed] = None
                _, _, gang = pending.pop(decision.name)
                if gang:
                    gang_placed[gang] += 1
                result.placed += 1
    result.engine_seconds = sum(result.cycle_ms) / 1000
    result.unplaced = sorted(pending)
    result.faults = audit(cluster, running, nominations)
    return result


def audit(cluster: Cluster, running: Iterable[Tenant], nominations: dict[str, Nominated]) -> list[str]:
    """Cards over capacity, or whose usage is not what the running pods and open nominations hold."""
    held: dict[str, list[int]] = {}
    grants = [g for n in nominations.values() for g in n.grants]
    for uuid, memory, cores in [h for t in running for h in t.holdings] + grants:
        entry = held.setdefault(uuid, [0, 0, 0])
        entry[0] += 1
        entry[1] += memory
        entry[2] += cores
    faults = []
    for node in cluster.nodes:
        for card in node.cards:
            slots, memory, cores = held.get(card.uuid, (0, 0, 0))
            expected = (slots, memory, cores)
            if grants:  # open nominations are not on the cards between cycles
                nominated = [g for g in grants if g[0] == card.uuid]
                expected = (
                    slots - len(nominated),
                    memory - sum(g[1] for g in nominated),
                    cores - sum(g[2] for g in nominated),
                )
            if (card.used_slots, card.used_memory, card.used_cores) != expected:
                faults.append(
                    f"{card.uuid}: holds {(card.used_slots, card.used_memory, card.used_cores)}, pods {expected}"
                )
            if slots > card.slots or memory > card.memory or cores > card.cores:
                faults.append(f"{card.uuid}: over capacity {(slots, memory, cores)}")
    return faults


def _move(node: Node, grants: list[tuple[str, int, int]], sign: int) -> None:
    node.shift(grants, sign)
    node.touch()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values) or [0.0]
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def report(result: Result) -> str:
    found = [ms for ms, hit in result.searches if hit]
    missed = [ms for ms, hit in result.searches if not hit]
    rows = [
        f"preemption bench: {result.pods} high-priority pods arrive on {result.nodes} nodes x {CARDS} "
        f"cards full of low-priority tenants",
        f"  placed                     {result.placed}/{result.pods} in {result.cycles} cycles, "
        f"{result.engine_seconds:.2f} s in the engine",
        f"  evicted                    {result.evicted} pods holding {result.evicted_cards} cards, for "
        f"{result.cards_asked} cards asked (each must be emptied: {result.evicted_cards / max(1, result.cards_asked):.2f}x)",
        f"  evicted per pod placed     {result.per_pod:.2f}  (lower bound {result.bound / max(1, result.pods):.2f}: "
        f"{result.bound:.1f} pods in all; ratio {result.evicted / result.bound if result.bound else 0:.2f}x)",
        f"  cycle ms                   p50 {statistics.median(result.cycle_ms or [0]):.0f}, "
        f"p99 {_pct(result.cycle_ms, 0.99):.0f}",
        f"  decide ms, preempting pod  p50 {statistics.median(result.preempting or [0]):.2f}, "
        f"p99 {_pct(result.preempting, 0.99):.2f} (decide, search victims, evict, decide again)",
        f"  victim search ms, found    p50 {statistics.median(found or [0]):.2f}, p99 {_pct(found, 0.99):.2f} "
        f"({len(found)} searches)",
        f"  victim search ms, none     p50 {statistics.median(missed or [0]):.2f}, p99 {_pct(missed, 0.99):.2f} "
        f"({len(missed)} searches: cap reached or nothing to evict)",
    ]
    if result.unplaced:
        rows.append(f"  NOT placed: {len(result.unplaced)} ({', '.join(result.unplaced[:5])} ...)")
    for fault in result.faults[:5]:
        rows.append(f"  FAULT: {fault}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.preempt", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--max-cards", type=int, default=64, help="cards evicted per cycle at most")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    result = run(args.nodes, args.pods, args.max_cards, args.seed)
    print(report(result))
    return 0 if not result.unplaced and not result.faults else 1


if __name__ == "__main__":
    raise SystemExit(main())
