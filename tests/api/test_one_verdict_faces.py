"""Through real cycles: for every kind of outcome in the gang, queue and preemption worlds,
`Pod.reason`, the API's decision `summary`, the pod page (its reason and its decision block)
and `simulate --format table`'s why column give the same one line."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from scheduling import services
from scheduling.engine import reasons as R
from scheduling.management.commands.simulate import why_cell
from scheduling.models import Decision, Eviction, NamespaceQuota, Pod, Queue
from scheduling.pipeline import run_cycle
from scheduling.pipeline.options import DEFAULTS
from scheduling.roles import VIEWER, role_group

pytestmark = pytest.mark.django_db(transaction=True)  # real commits, as the preemption suite

PIN = "nvidia.com/use-gpuuuid"


def limits(gpu=1, mem=1000) -> dict:
    return {"limits": {"nvidia.com/gpu": gpu, "nvidia.com/gpumem": mem}}


def submit(name, gpu=1, mem=1000, namespace="default", priority=0, validate=True, **annotations) -> Pod:
    return services.submit_pod(
        namespace,
        name,
        annotations,
        [{"name": "main", "resources": limits(gpu, mem)}],
        priority=priority,
        validate=validate,
    )


def cards(node="node1", count=2, slots=1, memory=8000) -> None:
    devices = [
        {"uuid": f"GPU-{node}-{i}", "index": i, "memory": memory, "slots": slots} for i in range(count)
    ]
    services.report_inventory(node, {}, {}, devices)


def batch_world(settings) -> list[Pod]:
    """Placed, card reasons, each batch hold and a rejected pod, in one cycle."""
    cards(count=2, slots=1)
    cards("node2", count=1, slots=1, memory=2000)  # too small for the gang: only `placed` goes there
    Queue.objects.create(name="research", limit_gpumem=1000)
    NamespaceQuota.objects.create(namespace="ml", quota="gpu-quota", resource="gpumem", hard=500)
    pods = [submit("w0", mem=6000, **{"hami.io/group-name": "train", "hami.io/group-min-member": "3"})]
    pods += [submit(f"w{i}", mem=6000, **{"hami.io/group-name": "train"}) for i in (1, 2)]
    pods.append(submit("lonely", **{"hami.io/group-name": "solo", "hami.io/group-min-member": "3"}))
    pods.append(submit("limited", mem=4000, **{"hami.io/queue": "research"}))
    pods.append(submit("quota", mem=4000, namespace="ml"))
    pods.append(submit("lost", validate=False, **{"hami.io/queue": "nowhere"}))
    pods.append(submit("huge", mem=90000))
    pods.append(submit("placed", mem=1000, **{PIN: "GPU-node2-0"}))
    pods.append(submit("bad", validate=False, **{"hami.io/device-scoring-weights": "not weights"}))
    run_cycle()
    return pods


def preemption_world(settings) -> list[Pod]:
    """A pod preempting, one whose victims are protected (said), one with nobody of lower
    priority (quiet). (The evicted tenant's reason is its eviction's, not a decision's.)"""
    settings.HAMIADMIN = {**DEFAULTS, "PREEMPT_MIN_RUNTIME_SECONDS": 3600.0}
    cards(count=1, slots=4, memory=10000)
    tenant = submit("tenant", mem=9000, **{PIN: "GPU-node1-0"})
    run_cycle()
    protected = submit("protected", mem=8000, priority=1000)
    run_cycle()
    settings.HAMIADMIN = dict(DEFAULTS)
    preempting = submit("preempting", mem=8000, priority=1000)
    quiet = submit("quiet", mem=8000, priority=0)
    run_cycle()
    assert tenant.key in seen_evicted()
    return [protected, preempting, quiet]


def seen_evicted() -> set[str]:
    return {f"{e.victim.namespace}/{e.victim.name}" for e in Eviction.objects.select_related("victim")}


def reservation_world(settings) -> list[Pod]:
    """A job waiting past `RESERVE_AFTER_SECONDS` holds its node; a later pod reads `NodeReserved`."""
    settings.HAMIADMIN = {**DEFAULTS, "RESERVE_AFTER_SECONDS": 0.001, "PREEMPTION": False}
    cards(count=1, slots=4)
    submit("tenant", mem=3000)
    run_cycle()
    big = submit("big", mem=8000, priority=10)
    small = submit("small", mem=1000)
    run_cycle()
    return [big, small]


def page_client() -> Client:
    user = get_user_model().objects.create_user("olga", password="a-long-test-passphrase-42")
    user.groups.add(role_group(VIEWER))
    web = Client()
    web.force_login(user)
    return web


def shown(page: str, name: str) -> str | None:
    found = re.search(rf'data-testid="{name}"[^>]*>(.*?)</p>', page, re.S)
    return html.unescape(found.group(1)).strip() if found else None


def faces(pod: Pod, api, web) -> dict[str, str | None]:
    pod.refresh_from_db()
    answer = api.get(f"/api/v1/pods/{pod.namespace}/{pod.name}/decision/")
    assert answer.status_code == 200, answer.content
    page = web.get(f"/pods/{pod.namespace}/{pod.name}/")
    assert page.status_code == 200
    text = page.content.decode()
    payload = Decision.objects.filter(pod=pod).order_by("-id").first().payload
    cell = why_cell(payload)
    return {
        "pod": pod.reason,
        "api": answer.json()["summary"],
        "page": shown(text, "pod-reason"),
        "decision block": shown(text, "decision-summary"),
        "table": cell[: len(pod.reason)] if payload["status"] != "scheduled" else pod.reason,
    }


@pytest.mark.parametrize("world", [batch_world, preemption_world, reservation_world])
def test_every_face_says_the_pods_one_line(settings, viewer, world):
    pods = world(settings)
    api, web = viewer, page_client()
    seen = {}
    for pod in pods:
        said = faces(pod, api, web)
        assert len(set(said.values())) == 1, (pod.key, said)
        seen[pod.name] = said["pod"]
    if world is batch_world:
        assert seen["w0"].startswith("GangUnschedulable: gang default/train: 2/3 members placeable")
        assert seen["lonely"] == "NotEnoughPods: gang default/solo: 1/3 members known"
        assert seen["limited"].startswith("QueueLimitExceeded: queue research")
        assert seen["quota"].startswith("NamespaceQuotaExceeded: namespace ml")
        assert seen["lost"].startswith("QueueNotFound")
        assert seen["placed"] == "scheduled on node2"
        assert (
            seen["huge"].startswith("0/2 nodes are available: ") and "CardInsufficientMemory" in seen["huge"]
        )
        assert "hami.io/device-scoring-weights" in seen["bad"]
    elif world is preemption_world:
        assert "preemption did not help: victims protected by min runtime" in seen["protected"]
        assert seen["preempting"].startswith("Preempting: evicting 1 pod on node1")
        assert seen["quiet"].startswith("0/1 nodes are available: ")
    else:
        assert seen["small"] == f"0/1 nodes are available: 1 {R.NODE_RESERVED}."
        assert R.NODE_NOT_READY not in seen["big"]
