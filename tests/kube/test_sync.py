"""The watcher keeps the tables in step with the (stand-in) API server through trouble:
relist after 410, resume after the server was down, a malformed node annotation."""

from __future__ import annotations

import logging

import pytest

from kube.agent import KubeAgent
from scheduling.models import Allocation, Card, Node, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, settled_cards, t4_register, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def pod_row(name: str, namespace: str = "default") -> Pod | None:
    return Pod.objects.select_related("node").filter(namespace=namespace, name=name).first()


def test_pods_of_our_scheduler_and_gpu_nodes_reach_the_tables(kube, apiserver):
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 2)))
    apiserver.put("nodes", node_object("cpu-1"))  # no register: not described
    ours = apiserver.put("pods", pod_object("train", gpu=1, mem=3000, namespace="ml", priority=100))
    apiserver.put("pods", pod_object("web", scheduler="default-scheduler"))
    agent = KubeAgent(kube, fast_options())
    with running(agent):
        wait_until(lambda: pod_row("train", "ml"), what="the pod row")
        wait_until(lambda: Card.objects.filter(node__name="gpu-1").count() == 2, what="the cards")
        row = pod_row("train", "ml")
        assert (row.uid, row.priority, row.status) == (ours["metadata"]["uid"], 100, Pod.PENDING)
        limits = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}
        assert row.containers == [{"name": "main", "resources": {"limits": limits}}]
        assert pod_row("web") is None
        assert not Node.objects.filter(name="cpu-1").exists()

        apiserver.put("pods", pod_object("later", gpu=1))
        wait_until(lambda: pod_row("later"), what="a pod created while watching")
        apiserver.delete("pods", "ml", "train")
        wait_until(lambda: pod_row("train", "ml").status == Pod.DELETED, what="the deleted pod released")


def test_a_pod_that_ends_gives_its_cards_back(kube, apiserver):
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 1)))
    apiserver.put("pods", pod_object("job", gpu=1, mem=4000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: pod_row("job") and Card.objects.filter(uuid="GPU-a-0").exists())
        assert run_cycle().placed
        wait_until(lambda: pod_row("job").status == Pod.RUNNING, what="bound")
        assert Card.objects.get(uuid="GPU-a-0").used_memory == 4000
        apiserver.update("pods", "default", "job", lambda pod: pod["status"].update(phase="Succeeded"))
        wait_until(lambda: pod_row("job").status == Pod.SUCCEEDED, what="released on Succeeded")
        card = settled_cards().get(uuid="GPU-a-0")
        assert (card.used_slots, card.used_memory, card.used_cores) == (0, 0, 0)


def test_expired_watch_history_is_recovered_by_listing_again(kube, apiserver, caplog):
    """Changes the watch never saw (silent) are found by the relist that 410 forces."""
    caplog.set_level(logging.INFO, "hamiadmin.kube")
    apiserver.put("pods", pod_object("stays"))
    apiserver.put("pods", pod_object("vanishes"))
    agent = KubeAgent(kube, fast_options(watch_timeout=30))
    with running(agent):
        wait_until(lambda: pod_row("stays") and pod_row("vanishes"), what="both pods")
        assert agent.pods.lists == 1
        apiserver.put("pods", pod_object("missed"), silent=True)
        apiserver.delete("pods", "default", "vanishes", silent=True)
        apiserver.expire_history()
        wait_until(lambda: pod_row("missed"), what="the pod created in the gap")
        wait_until(lambda: pod_row("vanishes").status == Pod.DELETED, what="the pod deleted in the gap")
        assert agent.pods.lists == 2
        assert pod_row("stays").status == Pod.PENDING
        apiserver.put("pods", pod_object("after"))
        wait_until(lambda: pod_row("after"), what="watching again after the relist")
    assert "listing again" in caplog.text


def test_api_server_down_then_back_resumes_without_losing_changes(kube, apiserver, caplog):
    """The server restarts on the same port with its history: the watch resumes from the
    last resourceVersion (no relist) and delivers what changed meanwhile."""
    apiserver.put("pods", pod_object("first"))
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 1)))
    agent = KubeAgent(kube, fast_options(watch_timeout=30))
    with running(agent):
        wait_until(lambda: pod_row("first") and Node.objects.filter(name="gpu-1").exists())
        apiserver.stop()
        wait_until(lambda: "retrying in" in caplog.text, what="the agent noticing")
        apiserver.put("pods", pod_object("while-down"))
        apiserver.delete("pods", "default", "first")
        apiserver.start()
        wait_until(lambda: pod_row("while-down"), what="the change made while down")
        wait_until(lambda: pod_row("first").status == Pod.DELETED, what="the deletion made while down")
        assert agent.pods.lists == 1, "resumed from its resourceVersion, not listed again"


def test_a_malformed_node_annotation_marks_that_node_not_ready_and_the_loop_goes_on(kube, apiserver, caplog):
    apiserver.put("nodes", node_object("good", t4_register("GPU-g", 1)))
    apiserver.put("nodes", node_object("broken", "GPU-b,10,lots-of-memory,100,T4,0,true,0,x:"))
    with running(KubeAgent(kube, fast_options())):
        wait_until(
            lambda: Node.objects.filter(name="broken").exists() and Card.objects.filter(uuid="GPU-g-0")
        )
        broken = Node.objects.get(name="broken")
        assert not broken.ready
        assert "hami.io/node-nvidia-register[0]" in broken.not_ready_reason
        assert Node.objects.get(name="good").ready
        # The loop keeps going: a fixed annotation makes the node ready, with its cards.
        apiserver.update(
            "nodes",
            "",
            "broken",
            lambda node: node["metadata"]["annotations"].update(
                {"hami.io/node-nvidia-register": t4_register("GPU-b", 1)}
            ),
        )
        wait_until(lambda: Node.objects.get(name="broken").ready, what="the fixed node")
        assert Node.objects.get(name="broken").not_ready_reason == ""
        assert Card.objects.filter(node__name="broken", uuid="GPU-b-0").exists()
    assert "malformed hami.io/node-nvidia-register[0]" in caplog.text


def test_a_pending_pod_sees_node_not_ready_for_a_malformed_node(kube, apiserver):
    apiserver.put("nodes", node_object("broken", "GPU-b,10,1:"))
    apiserver.put("pods", pod_object("waits", gpu=1))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: pod_row("waits") and Node.objects.filter(name="broken").exists())
        report = run_cycle()
        assert report.pending == [("default/waits", "0/1 nodes are available: 1 NodeNotReady.")]


def test_node_reported_not_ready_by_kubernetes(kube, apiserver):
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 1)))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Node.objects.filter(name="gpu-1", ready=True).exists())
        apiserver.update(
            "nodes",
            "",
            "gpu-1",
            lambda node: node["status"].update(conditions=[{"type": "Ready", "status": "False"}]),
        )
        wait_until(lambda: not Node.objects.get(name="gpu-1").ready, what="not ready")
        assert Node.objects.get(name="gpu-1").not_ready_reason == "Kubernetes reports the node NotReady"
        assert Card.objects.filter(node__name="gpu-1", present=True).count() == 1, "cards kept"


def test_resync_keeps_a_quiet_node_beating(kube, apiserver):
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 1)))
    with running(KubeAgent(kube, fast_options(resync_seconds=0.2))):
        first = wait_until(
            lambda: Node.objects.filter(name="gpu-1").values_list("last_heartbeat", flat=True).first()
        )
        wait_until(lambda: Node.objects.get(name="gpu-1").last_heartbeat > first, what="a later heartbeat")


def test_a_pod_replaced_unseen_by_one_of_the_same_name_frees_the_old_cards(kube, apiserver):
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 1)))
    apiserver.put("pods", pod_object("p", gpu=1, mem=5000))
    agent = KubeAgent(kube, fast_options(watch_timeout=30))
    with running(agent):
        wait_until(lambda: pod_row("p") and Card.objects.exists())
        run_cycle()
        wait_until(lambda: pod_row("p").status == Pod.RUNNING, what="bound")
        old_uid = pod_row("p").uid
        apiserver.delete("pods", "default", "p", silent=True)
        apiserver.put("pods", pod_object("p", gpu=1, mem=5000), silent=True)
        apiserver.expire_history()
        wait_until(lambda: pod_row("p").uid != old_uid, what="the new pod queued")
        row = pod_row("p")
        assert row.status == Pod.PENDING, (row.uid, old_uid, row.status, row.reason, row.revision)
        assert not Allocation.objects.filter(card__uuid="GPU-a-0", active=True).exists(), "released"
        # a release beside a writer holding the card (the nodes' relist reports it) owes its
        # decrement instead of waiting (`pipeline.settle`); a worker settles it before its next cycle
        assert settled_cards().get(uuid="GPU-a-0").used_memory == 0, "the old pod's cards are free"


def test_resync_does_not_rewrite_pods_that_did_not_change(kube, apiserver):
    apiserver.put("pods", pod_object("quiet", gpu=1))
    agent = KubeAgent(kube, fast_options(resync_seconds=0.05))
    with running(agent):
        before = wait_until(lambda: pod_row("quiet"))
        wait_until(lambda: agent.pods is not None and agent.pods.has_synced.is_set())
        for _ in range(10):
            agent.pods.resync()
    after = pod_row("quiet")
    assert (after.updated_at, after.revision) == (before.updated_at, before.revision)


def test_extender_mode_releases_pods_kube_scheduler_placed(kube, apiserver):
    """Those pods carry another scheduler name: only the all-pods watch sees them end."""
    from kube.binder import Binder
    from kube.extender import bind_pod, filter_pod

    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 1)))
    created = apiserver.put("pods", pod_object("ext", gpu=1, mem=6000, scheduler="default-scheduler"))
    apiserver.put("pods", pod_object("named-for-us", gpu=1))  # kube-scheduler's business here
    agent = KubeAgent(kube, fast_options(extender=True))
    with running(agent):
        wait_until(lambda: Card.objects.filter(uuid="GPU-a-0").exists())
        wait_until(lambda: agent.pods is not None and agent.pods.has_synced.is_set(), what="pods listed")
        assert agent.pods.get("default", "named-for-us") is not None, "all pods are watched"
        assert pod_row("named-for-us") is None, "extender mode queues nothing itself"
        assert filter_pod(created, ["gpu-1"]).chosen == "gpu-1"
        assert bind_pod(Binder(kube), "default", "ext", created["metadata"]["uid"], "gpu-1") == ""
        assert Card.objects.get(uuid="GPU-a-0").used_memory == 6000
        apiserver.update("pods", "default", "ext", lambda pod: pod["status"].update(phase="Failed"))
        wait_until(lambda: pod_row("ext").status == Pod.FAILED, what="released when it ended")
        assert settled_cards().get(uuid="GPU-a-0").used_memory == 0


def test_a_card_in_device_cordon_takes_no_new_pod(kube, apiserver):
    """`hami.io/device-cordon` on the Node keeps GPU-a-0 free; the pod goes to GPU-a-1."""
    apiserver.put(
        "nodes", node_object("gpu-1", t4_register("GPU-a", 2), **{"hami.io/device-cordon": "GPU-a-0"})
    )
    apiserver.put("pods", pod_object("p", gpu=1, mem=1000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: pod_row("p") and Card.objects.filter(node__name="gpu-1").count() == 2)
        (placed,) = run_cycle().placed
        assert placed == ("default/p", "gpu-1", "GPU-a-1,NVIDIA,1000,0:;")


def test_a_relist_never_touches_pods_submitted_through_the_api(kube, apiserver):
    """An API pod with a uid is unknown to Kubernetes: the cleanup after a relist leaves it
    placed, and does not even ask the API server about it; a watched pod gone unseen is released."""
    from scheduling import services

    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 2)))
    apiserver.put("pods", pod_object("watched", gpu=1, mem=1000))
    agent = KubeAgent(kube, fast_options(watch_timeout=30))
    with running(agent):
        wait_until(lambda: pod_row("watched") and Card.objects.filter(node__name="gpu-1").count() == 2)
        services.submit_pod(
            "default",
            "from-api",
            {},
            [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000}}}],
            uid="api-given-uid",
        )
        assert {pod for pod, _, _ in run_cycle().placed} == {"default/watched", "default/from-api"}
        wait_until(lambda: pod_row("watched").status == Pod.RUNNING, what="bound")
        apiserver.delete("pods", "default", "watched", silent=True)
        apiserver.expire_history()
        wait_until(lambda: pod_row("watched").status == Pod.DELETED, what="the watched pod released")
    assert pod_row("watched").origin == Pod.KUBERNETES
    api_pod = pod_row("from-api")
    assert (api_pod.origin, api_pod.status) == (Pod.API, Pod.SCHEDULED)
    assert Card.objects.filter(used_memory=2000).count() == 1
    assert apiserver.calls("GET", "/pods/from-api") == []
