"""VolumeBinding in watcher mode, through the stand-in API server: a pod is bound only to a
node that can mount its claims, the claims get kube-scheduler's PreBind writes, and a pod
whose claim is missing waits, saying which."""

from __future__ import annotations

import pytest

from kube.agent import KubeAgent
from kube.api import ApiError
from scheduling.engine.noderules.volumes import SELECTED_NODE
from scheduling.models import Card, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, t4_register, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WFFC = "WaitForFirstConsumer"


def row(name: str) -> Pod | None:
    return Pod.objects.select_related("node").filter(namespace="default", name=name).first()


def node_of(apiserver, name: str) -> str:
    return (apiserver.get("pods", "default", name).get("spec") or {}).get("nodeName") or ""


def bindings(apiserver, name: str) -> int:
    return len(apiserver.calls("POST", f"/pods/{name}/binding"))


def claiming(name: str, *claims: str) -> dict:
    pod = pod_object(name, gpu=1, mem=1000)
    pod["spec"]["volumes"] = [
        {"name": f"vol-{i}", "persistentVolumeClaim": {"claimName": claim}} for i, claim in enumerate(claims)
    ] + [{"name": "config", "configMap": {"name": "settings"}}]
    return pod


def claim_object(name: str, cls: str = "", volume: str = "") -> dict:
    spec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
    if cls:
        spec["storageClassName"] = cls
    if volume:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
        "status": {"phase": "Bound" if volume else "Pending"},
    }


def volume_object(name: str, host: str, cls: str = "", claim: str = "") -> dict:
    spec: dict = {
        "capacity": {"storage": "100Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": cls,
        "local": {"path": "/mnt/disks/ssd1"},
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}
                        ]
                    }
                ]
            }
        },
    }
    if claim:
        spec["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": "default", "name": claim}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}


def class_object(name: str, provisioner: str, mode: str = WFFC) -> dict:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
    }


def two_nodes(apiserver) -> None:
    apiserver.put("nodes", node_object("gpu-a", t4_register("GPU-a", 1)))
    apiserver.put("nodes", node_object("gpu-b", t4_register("GPU-b", 1)))


# -- the stand-in answers as the API server does -------------------------------------------


def test_the_stand_in_answers_claims_and_volumes_as_kubernetes_does(kube, apiserver):
    with pytest.raises(ApiError) as missing:
        kube.get_persistent_volume_claim("default", "data")
    assert (missing.value.status, missing.value.message) == (404, 'persistentvolumeclaims "data" not found')
    created = apiserver.put("persistentvolumes", volume_object("pv-1", "gpu-a"))
    assert kube.list_persistent_volumes()[0][0]["metadata"]["name"] == "pv-1"
    stale = created["metadata"]["resourceVersion"]
    kube.patch_persistent_volume(
        "pv-1", {"metadata": {"resourceVersion": stale}, "spec": {"claimRef": {"name": "x"}}}
    )
    with pytest.raises(ApiError) as conflict:
        kube.patch_persistent_volume(
            "pv-1", {"metadata": {"resourceVersion": stale}, "spec": {"claimRef": None}}
        )
    assert conflict.value.status == 409
    assert conflict.value.message.startswith('Operation cannot be fulfilled on persistentvolumes "pv-1"')
    apiserver.put("storageclasses", class_object("ssd", "ebs.csi.aws.com"))
    assert [c["metadata"]["name"] for c in kube.list_storage_classes()[0]] == ["ssd"]


# -- VolumeBinding end to end ----------------------------------------------------------------


def test_a_pod_whose_claim_is_bound_to_a_volume_on_node_a_is_never_bound_to_node_b(kube, apiserver):
    two_nodes(apiserver)
    apiserver.put("persistentvolumes", volume_object("pv-a", "gpu-a", claim="data"))
    apiserver.put("persistentvolumeclaims", claim_object("data", volume="pv-a"))
    apiserver.put("pods", claiming("reader", "data"))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("reader") and Card.objects.count() == 2, what="queued, two nodes")
        assert row("reader").scheduling["persistentVolumes"][0]["name"] == "pv-a"
        report = run_cycle()
        assert [node for _, node, _ in report.placed] == ["gpu-a"]
        decision = row("reader").latest_decision.payload
        assert decision["failed_nodes"]["gpu-b"] == "VolumeBinding: node(s) had volume node affinity conflict"
        wait_until(lambda: node_of(apiserver, "reader"), what="bound")
    assert node_of(apiserver, "reader") == "gpu-a"
    assert not apiserver.calls("PATCH", "/persistentvolume")  # bound already: nothing to write


def test_a_wait_for_first_consumer_claim_gets_the_node_the_pod_is_bound_to(kube, apiserver):
    two_nodes(apiserver)
    apiserver.put("storageclasses", class_object("ssd", "ebs.csi.aws.com"))
    apiserver.put("persistentvolumeclaims", claim_object("ckpt", cls="ssd"))
    apiserver.put("pods", claiming("trainer", "ckpt"))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("trainer") and Card.objects.count() == 2, what="queued")
        assert len(run_cycle().placed) == 1
        wait_until(lambda: node_of(apiserver, "trainer"), what="bound")
    annotations = (
        apiserver.get("persistentvolumeclaims", "default", "ckpt")["metadata"].get("annotations") or {}
    )
    assert annotations[SELECTED_NODE] == node_of(apiserver, "trainer")
    claim_patch = apiserver.calls("PATCH", "/persistentvolumeclaims/ckpt")
    binding = apiserver.calls("POST", "/pods/trainer/binding")
    assert (
        claim_patch
        and binding
        and apiserver.requests.index(claim_patch[0]) < apiserver.requests.index(binding[0])
    )


def test_a_local_volume_is_claimed_for_the_claim_and_the_pod_goes_where_it_is(kube, apiserver):
    two_nodes(apiserver)
    apiserver.put("storageclasses", class_object("local-nvme", "kubernetes.io/no-provisioner"))
    apiserver.put("persistentvolumes", volume_object("nvme-b", "gpu-b", cls="local-nvme"))
    apiserver.put("persistentvolumeclaims", claim_object("scratch", cls="local-nvme"))
    apiserver.put("pods", claiming("local", "scratch"))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("local") and Card.objects.count() == 2, what="queued")
        assert [node for _, node, _ in run_cycle().placed] == ["gpu-b"]
        wait_until(lambda: node_of(apiserver, "local"), what="bound")
    ref = apiserver.get("persistentvolumes", "", "nvme-b")["spec"]["claimRef"]
    assert (ref["namespace"], ref["name"], ref["kind"]) == ("default", "scratch", "PersistentVolumeClaim")
    assert ref["uid"] == apiserver.get("persistentvolumeclaims", "default", "scratch")["metadata"]["uid"]


def test_a_volume_taken_before_the_bind_fails_it_and_the_pod_is_never_bound_there(kube, apiserver):
    two_nodes(apiserver)
    apiserver.put("storageclasses", class_object("local-nvme", "kubernetes.io/no-provisioner"))
    apiserver.put("persistentvolumes", volume_object("nvme-b", "gpu-b", cls="local-nvme"))
    apiserver.put("persistentvolumeclaims", claim_object("scratch", cls="local-nvme"))
    apiserver.put("pods", claiming("late", "scratch"))

    def taken() -> None:  # another scheduler's claim takes the volume between placement and bind
        apiserver.update(
            "persistentvolumes",
            "",
            "nvme-b",
            lambda pv: pv["spec"].update(claimRef={"namespace": "other", "name": "theirs"}),
        )

    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("late") and Card.objects.count() == 2, what="queued")
        apiserver.before("PATCH", "/pods/late", taken)
        assert [node for _, node, _ in run_cycle().placed] == ["gpu-b"]
        wait_until(lambda: row("late").status == Pod.PENDING, what="the bind failed and the pod waits again")
        reason = row("late").reason
        if not reason:
            # the volume's change reached the watcher before the bind looked: the pod was
            # submitted again (its placement let go, unbound), and the next cycle judges it
            run_cycle()
            reason = row("late").reason
            assert "didn't find available persistent volumes to bind" in reason, reason
        else:
            assert "held by claim other/theirs" in reason, reason
    assert bindings(apiserver, "late") == 0
    assert apiserver.get("persistentvolumes", "", "nvme-b")["spec"]["claimRef"]["name"] == "theirs"


def test_a_missing_claim_leaves_the_pod_pending_naming_it_until_the_claim_comes(kube, apiserver):
    two_nodes(apiserver)
    apiserver.put("pods", claiming("waits", "results"))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: row("waits") and Card.objects.count() == 2, what="queued")
        assert run_cycle().placed == []
        assert 'persistentvolumeclaim "results" not found' in row("waits").reason

        def condition():
            conditions = (apiserver.get("pods", "default", "waits").get("status") or {}).get(
                "conditions"
            ) or []
            return next((c for c in conditions if c.get("type") == "PodScheduled"), None)

        written = wait_until(condition, what="PodScheduled written")
        assert written["reason"] == "Unschedulable"
        assert written["message"].startswith(
            '0/2 nodes are available: 2 persistentvolumeclaim "results" not found'
        )
        assert bindings(apiserver, "waits") == 0
        apiserver.put("persistentvolumes", volume_object("pv-b", "gpu-b", claim="results"))
        apiserver.put("persistentvolumeclaims", claim_object("results", volume="pv-b"))
        wait_until(
            lambda: row("waits").scheduling.get("persistentVolumes"),
            what="submitted again with its claim and its volume",
        )
        assert [node for _, node, _ in run_cycle().placed] == ["gpu-b"]
        wait_until(lambda: node_of(apiserver, "waits"), what="bound")
    assert node_of(apiserver, "waits") == "gpu-b"
