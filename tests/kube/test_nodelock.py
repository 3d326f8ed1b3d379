"""HAMi's node lock (`hami.io/mutex.lock`) around a bind, against the stand-in API server:
written in HAMi's format before the first annotation, honoured while another pod's live bind
holds it, given back when it should be, and taken over in seconds when its binder is dead
(the pod gone or done, the lock unreadable or older than HAMI_NODE_LOCK_SECONDS), with an
Event saying so."""

from __future__ import annotations

import re
import time

import pytest

from kube.agent import KubeAgent
from kube.binder import NODE_LOCK_TAKEN_OVER, Binder, BindOutcome
from kube.nodelock import KEY, NodeLock, lock_value, parse_lock, stamp
from scheduling import services
from scheduling.models import Event, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, t4_register, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

NODE = "gpu-1"
HAMI_FORMAT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ,default,train$")


def row(name: str) -> Pod:
    return Pod.objects.select_related("node").get(namespace="default", name=name)


def lock_of(apiserver) -> str | None:
    return (apiserver.get("nodes", "", NODE)["metadata"].get("annotations") or {}).get(KEY)


def set_lock(apiserver, value: str | None) -> None:
    def change(node):
        if value is None:
            node["metadata"]["annotations"].pop(KEY, None)
        else:
            node["metadata"]["annotations"][KEY] = value

    apiserver.update("nodes", "", NODE, change)


def place(apiserver, name: str = "train") -> Pod:
    """A node Kubernetes knows, and a pod placed on it by a cycle (the binder driven directly)."""
    if apiserver.get("nodes", "", NODE) is None:
        apiserver.put("nodes", node_object(NODE, t4_register("GPU-a", 2)))
        services.report_inventory(
            NODE,
            {},
            {},
            [{"uuid": f"GPU-a-{i}", "index": i, "memory": 15360} for i in range(2)],
        )
    created = apiserver.put("pods", pod_object(name, gpu=1, mem=1000))
    services.submit_pod(
        "default",
        name,
        {},
        [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}],
        [],
        0,
        created["metadata"]["uid"],
    )
    assert run_cycle().placed
    return row(name)


def other_pod(apiserver, name: str = "other", bound: bool = True, scheduler: str = "hami-old") -> None:
    """Another pod in the middle of its bind to the node (by HAMi's own scheduler, say, while
    a cluster moves over)."""
    apiserver.put(
        "pods",
        pod_object(
            name,
            scheduler=scheduler,
            node=NODE if bound else None,
            annotations={"hami.io/bind-phase": "allocating", "hami.io/vgpu-node": NODE},
        ),
    )


def taken_over() -> list[Event]:
    return list(Event.objects.filter(kind=Event.BIND_REPAIRED, reason=NODE_LOCK_TAKEN_OVER))


def test_the_lock_is_taken_in_hamis_format_before_the_annotations_and_given_back_after_success(
    kube, apiserver
):
    placed = place(apiserver)
    seen_at_binding = []
    apiserver.before("POST", "/pods/train/binding", lambda: seen_at_binding.append(lock_of(apiserver)))
    assert Binder(kube).bind(placed).outcome == BindOutcome.BOUND
    [value] = seen_at_binding
    assert HAMI_FORMAT.match(value), value
    holder = parse_lock(value)
    assert (holder.namespace, holder.name) == ("default", "train")
    assert abs(holder.at - time.time()) < 5
    order = [
        (method, path.split("?")[0])
        for method, path, *_ in apiserver.requests
        if method != "GET" or path.startswith("/api/v1/nodes/")
    ]
    assert order == [
        ("GET", f"/api/v1/nodes/{NODE}"),
        ("PATCH", f"/api/v1/nodes/{NODE}"),  # the lock
        ("PATCH", "/api/v1/namespaces/default/pods/train"),  # bind-phase allocating
        ("POST", "/api/v1/namespaces/default/pods/train/binding"),
        ("PATCH", "/api/v1/namespaces/default/pods/train"),  # bind-phase success
        ("GET", f"/api/v1/nodes/{NODE}"),
        ("PATCH", f"/api/v1/nodes/{NODE}"),  # given back: nobody else will
    ]
    assert lock_of(apiserver) is None
    assert taken_over() == []


def test_with_hamis_device_plugin_the_lock_stays_for_the_plugin_to_give_back(kube, apiserver):
    """HAMi's plugin reads the pod from the lock and removes it after Allocate."""
    placed = place(apiserver)
    assert Binder(kube, complete_phase=False).bind(placed).outcome == BindOutcome.BOUND
    assert parse_lock(lock_of(apiserver)).name == "train"
    # The plugin allocates and gives the lock back (it checks the suffix `,default,train`).
    assert lock_of(apiserver).endswith(",default,train")
    set_lock(apiserver, None)
    assert Binder(kube, complete_phase=False).bind(place(apiserver, "second")).outcome == BindOutcome.BOUND
    assert parse_lock(lock_of(apiserver)).name == "second"


def test_a_live_bind_of_another_pod_is_waited_for_and_nothing_is_written(kube, apiserver):
    placed = place(apiserver)
    other_pod(apiserver)
    held = lock_value("default", "other", time.time())
    set_lock(apiserver, held)
    result = Binder(kube).bind(placed)
    assert result.outcome == BindOutcome.LOCKED
    assert "locked by default/other's bind" in result.detail
    assert lock_of(apiserver) == held
    assert "hami.io/bind-phase" not in apiserver.get("pods", "default", "train")["metadata"]["annotations"]
    assert row("train").status == Pod.SCHEDULED  # still placed: the next pass tries again
    # The other bind ends (HAMi's plugin marks it success): the lock is free at once, whatever its age.
    apiserver.update(
        "pods",
        "default",
        "other",
        lambda p: p["metadata"]["annotations"].update({"hami.io/bind-phase": "success"}),
    )
    assert Binder(kube).bind(row("train")).outcome == BindOutcome.BOUND
    [event] = taken_over()
    assert event.subject == f"node/{NODE}"
    assert "default/other, which held it, has ended its bind (bind-phase success)" in event.message


@pytest.mark.parametrize(
    "value, why",
    [
        (
            lambda now: lock_value("default", "other", now - 20),
            "default/other's lock is 20s old, older than 15s",
        ),
        (lambda now: lock_value("default", "gone", now), "default/gone, which held it, no longer exists"),
        (lambda now: "yesterday,default,other", "does not read"),
        (lambda now: stamp(now - 60), "no pod's lock is 60s old"),
        (lambda now: lock_value("default", "other", now + 3600), "dated 3600s in the future"),
    ],
    ids=["expired", "pod-gone", "unreadable", "old-time-only-form", "future"],
)
def test_a_stale_lock_is_taken_over_and_an_event_says_why(kube, apiserver, value, why):
    placed = place(apiserver)
    other_pod(apiserver)
    now = 1_800_000_000.0
    set_lock(apiserver, value(now))
    binder = Binder(kube, clock=lambda: now, node_lock=NodeLock(kube, 15, clock=lambda: now))
    assert binder.bind(placed).outcome == BindOutcome.BOUND
    [event] = taken_over()
    assert why in event.message and event.message.startswith(f"took over {KEY} to bind pod default/train")
    assert lock_of(apiserver) is None  # given back after the bind


def test_a_fresh_lock_in_the_old_time_only_form_is_honoured(kube, apiserver):
    placed = place(apiserver)
    set_lock(apiserver, stamp(time.time()))
    assert Binder(kube).bind(placed).outcome == BindOutcome.LOCKED


def test_a_refused_binding_gives_the_lock_back(kube, apiserver):
    placed = place(apiserver)
    apiserver.fail("POST", "/pods/train/binding", 403, reason="Forbidden")
    assert Binder(kube, complete_phase=False).bind(placed).outcome == BindOutcome.FAILED
    assert lock_of(apiserver) is None


def test_of_two_binders_racing_for_one_node_only_one_takes_the_lock(kube, apiserver):
    """Ours reads the free node, the other writes its lock first: our patch carries the old
    resourceVersion, is refused (409), and the node read again shows the other's live lock."""
    placed = place(apiserver)
    other_pod(apiserver)
    theirs = lock_value("default", "other", time.time())
    apiserver.before("PATCH", f"/api/v1/nodes/{NODE}", lambda: set_lock(apiserver, theirs))
    assert Binder(kube).bind(placed).outcome == BindOutcome.LOCKED
    assert lock_of(apiserver) == theirs


def test_the_lock_can_be_switched_off(kube, apiserver, settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "NODE_LOCK_SECONDS": 0}
    placed = place(apiserver)
    assert Binder(kube).bind(placed).outcome == BindOutcome.BOUND
    assert apiserver.calls(contains="/api/v1/nodes/") == []


def test_the_agent_recovers_from_a_dead_binders_lock_in_seconds(kube, apiserver, settings):
    """A binder died holding the node, before its Binding (its pod waits, annotated
    `allocating`, unbound): the agent keeps trying, and binds as soon as the lock is older
    than HAMI_NODE_LOCK_SECONDS."""
    settings.HAMIADMIN = {**settings.HAMIADMIN, "NODE_LOCK_SECONDS": 2}
    apiserver.put("nodes", node_object(NODE, t4_register("GPU-a", 2)))
    other_pod(apiserver, "dead-binders-pod", bound=False)
    set_lock(apiserver, lock_value("default", "dead-binders-pod", time.time()))
    apiserver.put("pods", pod_object("train", gpu=1, mem=1000))
    started = time.monotonic()
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Pod.objects.filter(name="train").exists(), what="queued")
        wait_until(lambda: run_cycle().placed or row("train").status != Pod.PENDING, what="placed")
        wait_until(lambda: row("train").status == Pod.RUNNING, timeout=15, what="bound")
    assert time.monotonic() - started < 12
    assert apiserver.get("pods", "default", "train")["spec"]["nodeName"] == NODE
    [event] = taken_over()
    assert "default/dead-binders-pod's lock is" in event.message and "older than 2s" in event.message


def test_a_half_done_bind_repaired_frees_its_lock_at_once(kube, apiserver):
    """A binder died after the Binding: the repair marks the pod's bind failed, and its lock,
    however fresh, no longer holds the node."""
    apiserver.put("nodes", node_object(NODE, t4_register("GPU-a", 2)))
    other_pod(apiserver, "orphan", bound=True, scheduler="hami-scheduler")
    set_lock(apiserver, lock_value("default", "orphan", time.time()))
    apiserver.put("pods", pod_object("train", gpu=1, mem=1000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Pod.objects.filter(name="train").exists(), what="queued")
        wait_until(lambda: run_cycle().placed or row("train").status != Pod.PENDING, what="placed")
        wait_until(lambda: row("train").status == Pod.RUNNING, timeout=10, what="bound")
    [event] = taken_over()
    assert "default/orphan, which held it, has ended its bind (bind-phase failed)" in event.message
