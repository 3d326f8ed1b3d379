"""Kubernetes against the tables (kube/reconcile.py, scheduling/pipeline/consistency.py):
a pod HAMi-bound in Kubernetes that is not placed here, and a pod placed here that
Kubernetes no longer has, found by `check_consistency --kubernetes` and by the kube agent's
resync; the vanished one released, the unknown one reported and left alone. The real
`kubernetes` client against the stand-in API server."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from kube.agent import KubeAgent
from scheduling.models import Card, Event, Pod
from scheduling.ops import metrics
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, t4_register, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
ALLOCATED = "hami.io/vgpu-devices-allocated"


def row(name: str) -> Pod | None:
    return Pod.objects.filter(namespace="default", name=name).first()


def found_metric(kind: str) -> float:
    return metrics.CONSISTENCY_FOUND.labels(kind)._value.get()


def placed_and_bound(kube, apiserver, *names: str) -> None:
    """The agent queues the pods and binds what a cycle placed; then it stops."""
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 2)))
    for name in names:
        apiserver.put("pods", pod_object(name, gpu=1, mem=3000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: all(row(name) for name in names) and Card.objects.count() == 2, what="rows")
        assert run_cycle().placed
        wait_until(lambda: all(row(name).status == Pod.RUNNING for name in names), what="bound")


def bound_elsewhere(
    name: str,
    scheduler: str = "hami-scheduler",
    allocated: str | None = "GPU-a-1,NVIDIA,5000,0:;",
    phase="Running",
) -> dict:
    notes = {ALLOCATED: allocated} if allocated else {}
    return pod_object(
        name, gpu=1, mem=5000, scheduler=scheduler, node="gpu-1", phase=phase, annotations=notes
    )


def check(apiserver, *flags: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("check_consistency", "--kube-host", apiserver.url, *flags, stdout=out)
    except SystemExit as exc:
        return int(exc.code), out.getvalue()
    return 0, out.getvalue()


def test_the_command_finds_both_kinds_and_repairs_the_vanished_pod(kube, apiserver):
    placed_and_bound(kube, apiserver, "train")
    assert check(apiserver)[0] == 0, "a bound pod Kubernetes has is no drift"
    apiserver.delete("pods", "default", "train")  # no agent runs to see it
    apiserver.put("pods", bound_elsewhere("stray"))  # bound by an earlier scheduler, unknown here
    apiserver.put("pods", bound_elsewhere("theirs", scheduler="default-scheduler"))  # not ours
    apiserver.put("pods", bound_elsewhere("plain", allocated=None))  # ours, no HAMi allocation
    apiserver.put("pods", bound_elsewhere("done", phase="Succeeded"))  # ended
    unknown_before = found_metric("unknown_bound_pod")

    status, out = check(apiserver)
    assert status == 1
    assert "pod/default/stray: bound to gpu-1 in Kubernetes with HAMi's allocation, unknown here" in out
    assert "pod/default/train: running on gpu-1 here, but Kubernetes no longer has it" in out
    assert not any(name in out for name in ("theirs", "plain", "done")), out
    assert found_metric("unknown_bound_pod") == unknown_before + 1
    reasons = set(Event.objects.filter(kind=Event.CONSISTENCY).values_list("subject", "reason"))
    assert {
        ("pod/default/stray", "BoundUnknownHere"),
        ("pod/default/train", "VanishedFromKubernetes"),
    } <= reasons

    status, out = check(apiserver, "--repair")
    assert "repaired pod/default/train: released, Kubernetes no longer has it" in out
    assert "left pod/default/stray: bound in Kubernetes but not placed here" in out
    assert status == 1, "the unknown pod is left for an operator"
    assert row("train").status == Pod.DELETED
    assert Card.objects.filter(used_slots__gt=0).count() == 0
    assert Event.objects.filter(subject="pod/default/train", reason="VanishedReleased").exists()


def test_a_pod_pending_here_but_bound_in_kubernetes_is_drift(kube, apiserver):
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 2)))
    apiserver.put("pods", pod_object("late", gpu=1, mem=3000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("late"), what="queued")
    apiserver.update(
        "pods",
        "default",
        "late",
        lambda pod: (
            pod["spec"].update(nodeName="gpu-1"),
            pod["metadata"]["annotations"].update({ALLOCATED: "GPU-a-0,NVIDIA,3000,0:;"}),
        ),
    )
    status, out = check(apiserver)
    assert status == 1
    assert "pod/default/late: bound to gpu-1 in Kubernetes with HAMi's allocation, pending here" in out


def test_the_agent_releases_a_pod_whose_deletion_it_missed_and_reports_an_unknown_one(kube, apiserver):
    """The deletion is hidden from the watch (lost history), so the informer's cache still
    has the pod and no relist of the informer happens: the agent's own fresh list
    (`drift_list_seconds`) finds it, a GET confirms it, and it is released."""
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 2)))
    apiserver.put("pods", pod_object("train", gpu=1, mem=3000))
    agent = KubeAgent(kube, fast_options(drift_list_seconds=1))
    with running(agent):
        wait_until(lambda: row("train") and Card.objects.count() == 2, what="rows")
        assert run_cycle().placed
        wait_until(lambda: row("train").status == Pod.RUNNING, what="bound")
        apiserver.delete("pods", "default", "train", silent=True)
        apiserver.put("pods", bound_elsewhere("stray"))
        wait_until(lambda: row("train").status == Pod.DELETED, timeout=15, what="the vanished pod released")
        wait_until(
            lambda: Event.objects.filter(subject="pod/default/stray", reason="BoundUnknownHere").exists(),
            timeout=15,
            what="the unknown pod reported",
        )
        assert agent.pods.lists == 1, "the informer did not list again"
        assert agent.pods.get("default", "train") is not None, "its cache still has the pod"
    assert Event.objects.filter(
        subject="pod/default/train", reason="VanishedReleased", actor="kube-agent"
    ).exists()
    assert Card.objects.get(uuid="GPU-a-0").used_slots == 0
    assert row("stray") is None, "reported, never adopted"


def test_a_finding_the_api_server_does_not_confirm_is_not_drift(kube, apiserver):
    """A stale list (the cache of a watch that missed events) names a pod bound and unknown
    here, and omits a placed one: a GET of each says otherwise, so neither is drift."""
    from kube.reconcile import DriftWatch

    placed_and_bound(kube, apiserver, "train")
    stale = bound_elsewhere("stray")
    stale["metadata"]["uid"] = "u-stale"  # the API server no longer has it
    found = DriftWatch(kube, "hami-scheduler", every_pod=False).run([stale])
    assert (found.unknown_bound_pods, found.vanished_pods) == ([], [])
    assert row("train").status == Pod.RUNNING
    assert not Event.objects.filter(reason__in=["BoundUnknownHere", "VanishedFromKubernetes"]).exists()


def test_an_unknown_pod_confirmed_once_is_not_asked_about_on_every_resync(kube, apiserver):
    """After a migration from HAMi hundreds of pods may run unknown here: one GET each, then
    they are reported on each resync without asking again, until they go."""
    from kube.reconcile import DriftWatch

    stray = apiserver.put("pods", bound_elsewhere("stray"))
    watch = DriftWatch(kube, "hami-scheduler", every_pod=False)
    for _ in range(3):
        assert [pod["pod"] for pod in watch.run([stray]).unknown_bound_pods] == ["default/stray"]
    assert len(apiserver.calls("GET", "/pods/stray")) == 1
    assert watch.run([]).unknown_bound_pods == [] and watch.known == frozenset()
