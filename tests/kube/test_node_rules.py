"""A real Kubernetes scheduler through the stand-in API server (SPEC 10): node constraints
honoured in watcher mode, pods others bound counted, scheduling gates, and the pod status
autoscalers read (`PodScheduled`, `nominatedNodeName`)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from kube.agent import KubeAgent
from kube.binder import Binder, BindOutcome
from kube.status import GATED_MESSAGE
from scheduling import services
from scheduling.models import BoundPod, Card, Nomination, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, t4_register, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

GATE = "kueue.x-k8s.io/admission"


def row(name: str) -> Pod | None:
    return Pod.objects.select_related("node").filter(namespace="default", name=name).first()


def kube_pod(apiserver, name: str) -> dict:
    return apiserver.get("pods", "default", name)


def pod_scheduled(apiserver, name: str) -> dict | None:
    conditions = (kube_pod(apiserver, name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


def status_patches(apiserver, name: str) -> int:
    return len(apiserver.calls("PATCH", f"/pods/{name}/status"))


def bindings(apiserver, name: str) -> int:
    return len(apiserver.calls("POST", f"/pods/{name}/binding"))


def gpu_node(name: str, prefix: str, labels=None, taints=None, unschedulable=False, cpu="8") -> dict:
    node = node_object(name, t4_register(prefix, 1))
    node["metadata"]["labels"].update(labels or {})
    node["spec"] = {"taints": taints or [], "unschedulable": unschedulable}
    node["status"]["allocatable"] = {"cpu": cpu, "memory": "64Gi", "pods": "110"}
    return node


def bound_by_others(name: str, node: str, cpu: str = "1", allocated: str | None = None) -> dict:
    """A pod kube-scheduler (or HAMi before the switch) bound: it names its node already."""
    pod = pod_object(name, gpu=None, scheduler="default-scheduler", node=node, phase="Running")
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    pod["metadata"]["labels"] = {"app": "web"}
    if allocated is not None:
        pod["spec"]["schedulerName"] = "hami-scheduler"
        pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = allocated
    return pod


# -- the stand-in answers as the API server does -----------------------------------------


def test_the_stand_in_refuses_to_bind_a_gated_pod_as_kubernetes_does(kube, apiserver):
    pod = pod_object("held")
    pod["spec"]["schedulingGates"] = [{"name": GATE}]
    apiserver.put("pods", pod)
    with pytest.raises(Exception) as refused:
        kube.bind_pod("default", "held", "", "gpu-1")
    assert refused.value.status == 409
    assert refused.value.message == (
        'Operation cannot be fulfilled on pods/binding "held": pod held has non-empty .spec.schedulingGates'
    )
    assert not kube_pod(apiserver, "held")["spec"].get("nodeName")


def test_the_stand_in_status_patch_keeps_only_status_and_refuses_a_stale_version(kube, apiserver):
    created = apiserver.put("pods", pod_object("p"))
    written = kube.patch_pod_status(
        "default",
        "p",
        {
            "metadata": {"resourceVersion": created["metadata"]["resourceVersion"], "labels": {"x": "y"}},
            "status": {"nominatedNodeName": "gpu-1"},
        },
    )
    assert written["status"]["nominatedNodeName"] == "gpu-1"
    assert "x" not in (written["metadata"].get("labels") or {})
    with pytest.raises(Exception) as stale:
        kube.patch_pod_status(
            "default",
            "p",
            {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "status": {}},
        )
    assert stale.value.status == 409


# -- node constraints in watcher mode ------------------------------------------------------


def test_a_selector_taint_cordon_and_cpu_case_is_bound_only_to_the_node_that_fits(kube, apiserver):
    """One node of each kind the issue met a pod bound to; only `right` may take it."""
    apiserver.put("nodes", gpu_node("inference", "GPU-i", labels={"pool": "inference"}))
    apiserver.put(
        "nodes",
        gpu_node(
            "dedicated",
            "GPU-d",
            labels={"pool": "training"},
            taints=[{"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}],
        ),
    )
    apiserver.put("nodes", gpu_node("draining", "GPU-c", labels={"pool": "training"}, unschedulable=True))
    apiserver.put("nodes", gpu_node("busy", "GPU-b", labels={"pool": "training"}, cpu="2"))
    apiserver.put("pods", bound_by_others("web", "busy", cpu="2"))
    apiserver.put("nodes", gpu_node("right", "GPU-r", labels={"pool": "training"}))
    pod = pod_object("train", gpu=1, mem=1000)
    pod["spec"]["nodeSelector"] = {"pool": "training"}
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1"}
    apiserver.put("pods", pod)
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("train") and Card.objects.count() == 5, what="queued, five nodes")
        wait_until(lambda: BoundPod.objects.filter(name="web").exists(), what="the busy node's pod counted")
        report = run_cycle()
        assert [node for _, node, _ in report.placed] == ["right"]
        wait_until(lambda: kube_pod(apiserver, "train")["spec"].get("nodeName"), what="bound")
    assert kube_pod(apiserver, "train")["spec"]["nodeName"] == "right"


def test_a_pod_no_node_fits_is_never_bound_and_says_why_in_its_status(kube, apiserver):
    apiserver.put("nodes", gpu_node("inference", "GPU-i", labels={"pool": "inference"}))
    apiserver.put("nodes", gpu_node("draining", "GPU-c", labels={"pool": "training"}, unschedulable=True))
    pod = pod_object("train", gpu=1, mem=1000)
    pod["spec"]["nodeSelector"] = {"pool": "training"}
    apiserver.put("pods", pod)
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("train") and Card.objects.count() == 2, what="queued")
        assert run_cycle().placed == []
        condition = wait_until(lambda: pod_scheduled(apiserver, "train"), what="PodScheduled written")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert condition["message"].startswith("0/2 nodes are available: ")
        assert "1 node(s) didn't match Pod's node affinity/selector" in condition["message"]
    assert bindings(apiserver, "train") == 0


def test_a_malformed_scheduling_field_parks_the_pod_naming_it_and_it_is_never_bound(kube, apiserver):
    apiserver.put("nodes", gpu_node("gpu-1", "GPU-a"))
    pod = pod_object("odd", gpu=1, mem=1000)
    pod["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "b", "effect": "NoRun"}]
    apiserver.put("pods", pod)
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("odd") and Card.objects.exists(), what="queued")
        assert row("odd").parked and "tolerations[0].effect" in row("odd").error
        run_cycle()
        condition = wait_until(lambda: pod_scheduled(apiserver, "odd"), what="the status says why")
        assert condition["reason"] == "SchedulerError" and "tolerations[0].effect" in condition["message"]
        wait_until(
            lambda: [e for e in apiserver.all("events") if "tolerations[0].effect" in e["message"]],
            what="an event naming the field",
        )
    assert bindings(apiserver, "odd") == 0


def test_an_unknown_affinity_operator_parks_the_pod_naming_it_and_its_owners_are_kept(kube, apiserver):
    apiserver.put("nodes", gpu_node("gpu-1", "GPU-a"))
    pod = pod_object("near", gpu=1, mem=1000)
    term = {"matchExpressions": [{"key": "pool", "operator": "Near", "values": ["a"]}]}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-1", "controller": True}
    pod["metadata"]["ownerReferences"] = [{**owner, "blockOwnerDeletion": True}]
    field = "nodeSelectorTerms[0].matchExpressions[0].operator"
    apiserver.put("pods", pod)
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("near") and Card.objects.exists(), what="queued")
        assert row("near").parked and row("near").error_field.endswith(field)
        assert row("near").scheduling["ownerReferences"] == [owner]
        run_cycle()
        wait_until(
            lambda: [e for e in apiserver.all("events") if field in e["message"]],
            what="an event naming the field",
        )
    assert bindings(apiserver, "near") == 0


# -- pods others bound ----------------------------------------------------------------------


def test_a_pod_hami_placed_before_the_switch_holds_its_card(kube, apiserver):
    """15,000 of the card's 15,360 MiB are HAMi's: an 8,000 MiB pod waits until that pod ends."""
    apiserver.put("nodes", gpu_node("gpu-1", "GPU-a"))
    apiserver.put("pods", bound_by_others("old", "gpu-1", allocated="GPU-a-0,NVIDIA,15000,0:;"))
    apiserver.put("pods", pod_object("new", gpu=1, mem=8000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("new") and Card.objects.exists(), what="queued")
        held = wait_until(lambda: BoundPod.objects.filter(name="old").first(), what="the HAMi pod counted")
        assert (held.node_name, held.allocated) == ("gpu-1", "GPU-a-0,NVIDIA,15000,0:;")
        assert run_cycle().placed == []
        apiserver.update("pods", "default", "old", lambda pod: pod["status"].update(phase="Succeeded"))
        wait_until(lambda: not BoundPod.objects.filter(name="old").exists(), what="forgotten when it ended")
        # the freed capacity wakes the backed-off pod once the capacity version moves, just
        # after the row is forgotten (and that asks for the next cycle): a cycle between waits
        report = wait_until(lambda: (r := run_cycle()).placed and r, what="placed once woken")
        assert [pod for pod, _, _ in report.placed] == ["default/new"]


def test_pods_others_bound_are_stored_slim_and_forgotten_when_deleted(kube, apiserver):
    apiserver.put("nodes", gpu_node("gpu-1", "GPU-a"))
    web = bound_by_others("web", "gpu-1", cpu="1500m")
    web["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    web["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        },
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    apiserver.put("pods", web)
    apiserver.put("pods", pod_object("pending-elsewhere", gpu=None, scheduler="default-scheduler"))
    agent = KubeAgent(kube, fast_options())
    with running(agent):
        stored = wait_until(lambda: BoundPod.objects.filter(name="web").first(), what="stored")
        assert stored.labels == {"app": "web"}
        assert stored.containers == [
            {
                "name": "",
                "resources": {"requests": {"cpu": "1500m", "memory": str(2**30)}},
                "ports": [{"hostPort": 8080, "protocol": "TCP"}],
            }
        ]
        assert list(stored.affinity) == ["podAntiAffinity"]
        assert not BoundPod.objects.filter(name="pending-elsewhere").exists()
        assert agent.all_pods.get("default", "pending-elsewhere") is None, "unbound pods are not cached"
        apiserver.delete("pods", "default", "web")
        wait_until(lambda: not BoundPod.objects.filter(name="web").exists(), what="forgotten")


def test_a_pod_deleted_while_the_watch_was_down_is_forgotten_after_the_relist(kube, apiserver):
    apiserver.put("nodes", gpu_node("gpu-1", "GPU-a"))
    apiserver.put("pods", bound_by_others("web", "gpu-1"))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: BoundPod.objects.filter(name="web").exists(), what="stored")
        apiserver.delete("pods", "default", "web", silent=True)
        apiserver.expire_history()
        wait_until(lambda: not BoundPod.objects.filter(name="web").exists(), what="forgotten after a relist")


def test_pods_hamiadmin_placed_are_not_counted_twice(kube, apiserver):
    apiserver.put("nodes", gpu_node("gpu-1", "GPU-a"))
    apiserver.put("pods", pod_object("ours", gpu=1, mem=1000))
    agent = KubeAgent(kube, fast_options())
    with running(agent):
        wait_until(lambda: row("ours") and Card.objects.exists(), what="queued")
        run_cycle()
        wait_until(lambda: row("ours").status == Pod.RUNNING, what="bound")
        wait_until(
            lambda: agent.all_pods.get("default", "ours") is not None, what="seen bound by the all-pods watch"
        )
        wait_until(lambda: not agent.bound_sync.pending, what="its change flushed")
    assert not BoundPod.objects.filter(name="ours").exists()


# -- scheduling gates -----------------------------------------------------------------------


def test_a_gated_pod_is_never_bound_and_is_placed_once_its_gate_goes(kube, apiserver):
    apiserver.put("nodes", gpu_node("gpu-1", "GPU-a"))
    pod = pod_object("held", gpu=1, mem=1000)
    pod["spec"]["schedulingGates"] = [{"name": GATE}]
    apiserver.put("pods", pod)
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("held") and Card.objects.exists(), what="queued")
        assert row("held").gated and row("held").status == Pod.PENDING
        assert run_cycle().placed == []
        condition = wait_until(lambda: pod_scheduled(apiserver, "held"), what="SchedulingGated shown")
        assert (condition["status"], condition["reason"], condition["message"]) == (
            "False",
            "SchedulingGated",
            GATED_MESSAGE,
        )
        apiserver.update("pods", "default", "held", lambda p: p["spec"].pop("schedulingGates"))
        wait_until(lambda: not row("held").gated, what="the gate seen gone")
        assert [pod for pod, _, _ in run_cycle().placed] == ["default/held"]
        wait_until(lambda: row("held").status == Pod.RUNNING, what="bound")
    assert pod_scheduled(apiserver, "held")["status"] == "True"
    assert bindings(apiserver, "held") == 1


def test_the_binder_never_binds_a_pod_that_still_has_gates(kube, apiserver):
    """Should a gated pod ever be placed, it is not annotated nor bound: its cards go back."""
    apiserver.put("nodes", gpu_node("gpu-1", "GPU-a"))
    apiserver.put("pods", pod_object("p", gpu=1, mem=1000))
    services.report_inventory("gpu-1", {}, {}, [{"uuid": "GPU-a-0", "index": 0, "memory": 15360}])
    uid = kube_pod(apiserver, "p")["metadata"]["uid"]
    services.submit_pod(
        "default", "p", containers=[{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}], uid=uid
    )
    (placed,) = run_cycle().placed
    apiserver.update("pods", "default", "p", lambda p: p["spec"].update(schedulingGates=[{"name": GATE}]))
    result = Binder(kube, node_lock=None).bind(row("p"))
    assert result.outcome == BindOutcome.GATED
    assert bindings(apiserver, "p") == 0
    assert "hami.io/bind-phase" not in kube_pod(apiserver, "p")["metadata"]["annotations"]
    assert row("p").status == Pod.PENDING and Card.objects.get(uuid="GPU-a-0").used_slots == 0


# -- status: PodScheduled and nominatedNodeName ------------------------------------------------


def test_pod_scheduled_is_written_when_the_verdict_changes_only_and_true_once_bound(kube, apiserver):
    apiserver.put("nodes", gpu_node("gpu-1", "GPU-a"))
    apiserver.put("pods", bound_by_others("old", "gpu-1", allocated="GPU-a-0,NVIDIA,15000,0:;"))
    apiserver.put("pods", pod_object("waits", gpu=1, mem=8000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("waits") and BoundPod.objects.exists(), what="queued, the card held")
        run_cycle()
        wait_until(lambda: pod_scheduled(apiserver, "waits"), what="Unschedulable written")
        for _ in range(3):
            run_cycle()
        time.sleep(0.5)  # ten report passes at least (event_seconds 0.05)
        assert status_patches(apiserver, "waits") == 1, "the same verdict is not written again"
        apiserver.delete("pods", "default", "old")
        wait_until(lambda: not BoundPod.objects.exists(), what="the card freed")
        # woken once the capacity version moves, just after (a cycle between them waits)
        wait_until(lambda: run_cycle().placed or row("waits").status != Pod.PENDING, what="placed")
        wait_until(lambda: row("waits").status == Pod.RUNNING, what="bound")
    assert pod_scheduled(apiserver, "waits")["status"] == "True"


def test_a_preemptor_shows_its_nominated_node_while_victims_leave_then_not(kube, apiserver):
    apiserver.put("nodes", gpu_node("gpu-1", "GPU-a"))
    apiserver.put("pods", bound_by_others("old", "gpu-1", allocated="GPU-a-0,NVIDIA,15000,0:;"))
    apiserver.put("pods", pod_object("urgent", gpu=1, mem=8000, priority=100))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("urgent") and BoundPod.objects.exists(), what="queued")
        run_cycle()
        nomination = Nomination.objects.create(
            pod=row("urgent"),
            card=Card.objects.get(uuid="GPU-a-0"),
            memory=8000,
            cores=0,
            expires_at=timezone.now() + timedelta(minutes=5),
        )
        wait_until(
            lambda: (kube_pod(apiserver, "urgent").get("status") or {}).get("nominatedNodeName") == "gpu-1",
            what="nominatedNodeName written",
        )
        nomination.delete()
        wait_until(
            lambda: not (kube_pod(apiserver, "urgent").get("status") or {}).get("nominatedNodeName"),
            what="nominatedNodeName cleared",
        )
    assert pod_scheduled(apiserver, "urgent")["reason"] == "Unschedulable"


def test_extender_mode_counts_pods_others_bound_from_its_one_watch_of_every_pod(kube, apiserver):
    apiserver.put("nodes", gpu_node("gpu-1", "GPU-a"))
    apiserver.put("pods", bound_by_others("old", "gpu-1", allocated="GPU-a-0,NVIDIA,15000,0:;"))
    agent = KubeAgent(kube, fast_options(extender=True))
    with running(agent):
        held = wait_until(lambda: BoundPod.objects.filter(name="old").first(), what="the HAMi pod counted")
        assert held.allocated == "GPU-a-0,NVIDIA,15000,0:;"
        assert agent.all_pods is None, "no second watch of every pod"
        apiserver.delete("pods", "default", "old")
        wait_until(lambda: not BoundPod.objects.filter(name="old").exists(), what="forgotten")
