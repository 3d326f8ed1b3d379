"""A preemption as the pipeline's commit records it, built straight from the models: a
preemptor pending with its decision's `preemption`, its victims' `Eviction` rows, the cards
it is nominated to, a reclaim for another pod, and a pod whose preemption did not help."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from scheduling.models import Card, Decision, Eviction, Node, Nomination, Pod

STUCK_WHY = "preemption did not help: victims protected by min runtime (3), no victims of lower priority (1)"


@dataclass
class Scene:
    urgent: Pod  # the preemptor: pending, nominated to gpu-a
    low: Pod  # its victim, being evicted
    done: Pod  # its other victim, already gone
    serve: Pod  # another preemptor, by reclaim
    batch: Pod  # its victim, whose eviction a PDB refused
    stuck: Pod  # tried to preempt, nothing helped
    decision: Decision  # urgent's decision
    evictions: dict[str, Eviction]


def pending_payload(pod: Pod, **extra) -> dict:
    """The engine's explanation of a pending pod (`engine.Decision.as_dict`'s keys)."""
    return {
        "name": pod.name,
        "namespace": pod.namespace,
        "status": "pending",
        "node": None,
        "containers": [],
        "allocated": None,
        "node_scores": {},
        "failed_nodes": {"gpu-a": "2/2 CardInsufficientMemory"},
        "nodes_fit": 0,
        "nodes_failed": 1,
        "reasons": {"CardInsufficientMemory": 2},
        "policy": {"gpu": "spread", "node": "spread"},
        "error": None,
        "failed_reasons": {"gpu-a": {"cards": 2, "reasons": {"CardInsufficientMemory": 2}}},
        "node_order": [],
        "init_containers": [],
        "warnings": [],
        "closest_nodes": [],
        "unschedulable": False,
        "unschedulable_reason": None,
        **extra,
    }


def running(namespace: str, name: str, node: Node, priority: int = 0) -> Pod:
    return Pod.objects.create(
        namespace=namespace,
        name=name,
        status=Pod.RUNNING,
        node=node,
        priority=priority,
        scheduled_at=timezone.now() - timedelta(hours=1),
    )


def build_scene(urgent_name: str = "urgent", low_name: str = "low-train") -> Scene:
    now = timezone.now()
    node = Node.objects.create(name="gpu-a")
    cards = [Card.objects.create(node=node, uuid=f"GPU-a-{i}", index=i, memory=16000) for i in range(2)]
    low = running("ml", low_name, node, priority=1)
    done = running("ml", "low-eval", node, priority=2)
    batch = running("research", "batch-1", node)
    urgent = Pod.objects.create(namespace="ml", name=urgent_name, priority=10, reason="Preempting")
    serve = Pod.objects.create(namespace="prod", name="serve", priority=5)
    stuck = Pod.objects.create(namespace="ml", name="stuck", priority=3)

    victims = [
        {
            "pod": low.key,
            "node": "gpu-a",
            "cards": ["GPU-a-0"],
            "priority": 1,
            "queue": "ml",
            "gang": None,
            "kind": "preempt",
            "why": "priority 1 < 10 in queue ml",
            "memory": 8000,
        },
        {
            "pod": done.key,
            "node": "gpu-a",
            "cards": ["GPU-a-1"],
            "priority": 2,
            "queue": "ml",
            "gang": None,
            "kind": "preempt",
            "why": "priority 2 < 10 in queue ml",
            "memory": 4000,
        },
    ]
    message = f"evicting 2 pods on gpu-a (GPU-a-0, GPU-a-1): {low.key}, {done.key}"
    preemption = {
        "node": "gpu-a",
        "victims": victims,
        "cards": ["GPU-a-0", "GPU-a-1"],
        "grants": [["GPU-a-0", 8000, 50]],
        "alternatives": [
            {"node": "gpu-b", "victims": 3, "memory": 24000, "why": "more victims or more work"}
        ],
        "dry_run": False,
        "message": message,
    }
    decision = Decision.objects.create(
        pod=urgent,
        outcome=Decision.PENDING,
        reason=f"Preempting: {message}",
        payload=pending_payload(
            urgent,
            preemption=preemption,
            batch={"reason": "Preempting", "message": message, "would_fit_on": "gpu-a"},
        ),
    )
    evictions = {
        "low": Eviction.objects.create(
            victim=low,
            preemptor=urgent,
            decision=decision,
            kind=Eviction.PREEMPT,
            node="gpu-a",
            cards=["GPU-a-0"],
            reason=victims[0]["why"],
            created_at=now - timedelta(seconds=30),
        ),
        "done": Eviction.objects.create(
            victim=done,
            preemptor=urgent,
            decision=decision,
            kind=Eviction.PREEMPT,
            node="gpu-a",
            cards=["GPU-a-1"],
            reason=victims[1]["why"],
            state=Eviction.DONE,
            message="cards released",
            created_at=now - timedelta(seconds=30),
            finished_at=now - timedelta(seconds=10),
        ),
        "batch": Eviction.objects.create(
            victim=batch,
            preemptor=serve,
            kind=Eviction.RECLAIM,
            node="gpu-a",
            cards=["GPU-a-1"],
            reason="queue research holds 16000 MiB over its fair share 8000 MiB",
            state=Eviction.REFUSED,
            message="Cannot evict pod as it would violate the pod's disruption budget.",
            created_at=now - timedelta(minutes=5),
            finished_at=now - timedelta(minutes=4),
        ),
    }
    Nomination.objects.create(
        pod=urgent,
        card=cards[0],
        memory=8000,
        cores=50,
        created_at=now - timedelta(seconds=30),
        expires_at=now + timedelta(minutes=5),
    )
    Decision.objects.create(
        pod=stuck,
        outcome=Decision.PENDING,
        reason=f"0/1 nodes are available: 2 CardInsufficientMemory. {STUCK_WHY}.",
        payload=pending_payload(stuck, preemption={"tried": True, "why": STUCK_WHY}),
    )
    return Scene(urgent, low, done, serve, batch, stuck, decision, evictions)
