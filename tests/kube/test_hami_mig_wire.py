"""HAMi v2.10's dynamic MIG through the stand-in API server: a node registered in MIG mode
keeps its profiles, and pods placed on it carry the allocation and the reservation HAMi's
device plugin creates the instances from, byte for byte, each at its own placement."""

from __future__ import annotations

import json

import pytest

from kube.agent import KubeAgent
from scheduling.models import Card, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ONE_G = [{"start": i, "size": 1} for i in range(7)]
#: An A100-40GB as HAMi v2.10's device plugin registers it in MIG mode (Go's marshalling).
MIG_REGISTER = json.dumps(
    [
        {
            "id": "GPU-mig0",
            "count": 7,
            "devmem": 40960,
            "devcore": 100,
            "type": "NVIDIA-A100-SXM4-40GB",
            "mode": "mig",
            "migProfiles": [
                {"name": "1g.5gb", "memoryMB": 4864, "core": 15, "sliceCount": 1, "placements": ONE_G},
                {"name": "2g.10gb", "memoryMB": 9856, "core": 29, "sliceCount": 2, "placements": [
                    {"start": 0, "size": 2}, {"start": 2, "size": 2}, {"start": 4, "size": 2}]},
            ],
            "health": True,
        }
    ],
    separators=(",", ":"),
)  # fmt: skip


def pod_row(name: str) -> Pod | None:
    return Pod.objects.filter(namespace="default", name=name).first()


def test_pods_on_a_mig_card_get_hamis_mig_reservations(kube, apiserver):
    apiserver.put("nodes", node_object("a100", MIG_REGISTER))
    apiserver.put("pods", pod_object("plain", gpu=1, mem=3000))
    apiserver.put("pods", pod_object("asked", gpu=1, mem=3000, annotations={"nvidia.com/vgpu-mode": "mig"}))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Card.objects.filter(node__name="a100").exists(), what="the card")
        wait_until(lambda: pod_row("plain") and pod_row("asked"), what="the pod rows")
        card = Card.objects.get(uuid="GPU-mig0")
        assert card.mode == "mig" and [p["name"] for p in card.mig_profiles] == ["1g.5gb", "2g.10gb"]
        placed = run_cycle().placed
        assert sorted(allocated for _, _, allocated in placed) == ["GPU-mig0,NVIDIA,4864,15:;"] * 2
        wait_until(
            lambda: pod_row("plain").status == Pod.RUNNING and pod_row("asked").status == Pod.RUNNING,
            what="bound",
        )
        starts = []
        for name in ("plain", "asked"):
            annotations = apiserver.get("pods", "default", name)["metadata"]["annotations"]
            assert annotations["hami.io/vgpu-devices-allocated"] == "GPU-mig0,NVIDIA,4864,15:;"
            (reservation,) = json.loads(annotations["hami.io/vgpu-mig-allocations"])
            assert list(reservation) == ["containerIndex", "deviceIndex", "gpuUUID", "profile", "placement"]
            assert reservation["gpuUUID"] == "GPU-mig0" and reservation["profile"] == "1g.5gb"
            starts.append(reservation["placement"]["start"])
        assert sorted(starts) == [5, 6]
        # a third pod, a cycle later, sees both instances held (read back from the pod rows)
        apiserver.put("pods", pod_object("third", gpu=1, mem=3000))
        wait_until(lambda: pod_row("third"), what="the third pod row")
        (third,) = run_cycle().placed
        wait_until(lambda: pod_row("third").status == Pod.RUNNING, what="the third bound")
    annotations = apiserver.get("pods", "default", "third")["metadata"]["annotations"]
    assert json.loads(annotations["hami.io/vgpu-mig-allocations"])[0]["placement"] == {"start": 4, "size": 1}


def test_a_pod_hami_bound_holds_the_placement_its_reservation_names(kube, apiserver):
    """A pod HAMi placed before the switch holds 2g.10gb at slices 2-3 (not where its MiB
    alone would put it, 0-1): the next two 2g pods get 0 and 4, a third waits."""
    held = {
        "hami.io/vgpu-devices-allocated": "GPU-mig0,NVIDIA,9856,29:;",
        "hami.io/vgpu-mig-allocations": '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-mig0",'
        '"profile":"2g.10gb","placement":{"start":2,"size":2},"migUUID":"MIG-a","gpuInstanceID":3,'
        '"computeInstanceID":0}]',
    }
    apiserver.put("nodes", node_object("a100", MIG_REGISTER))
    apiserver.put("pods", pod_object("old", gpu=1, mem=9000, node="a100", phase="Running", annotations=held))
    for name in ("p0", "p1", "p2"):
        apiserver.put("pods", pod_object(name, gpu=1, mem=9000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: all(pod_row(name) for name in ("p0", "p1", "p2")), what="the pod rows")
        wait_until(lambda: Card.objects.filter(node__name="a100").exists(), what="the card")
        from scheduling.models import BoundPod

        wait_until(lambda: BoundPod.objects.filter(name="old").exists(), what="the bound pod")
        placed = run_cycle().placed
        assert len(placed) == 2
        wait_until(
            lambda: sum(pod_row(n).status == Pod.RUNNING for n in ("p0", "p1", "p2")) == 2, what="bound"
        )
        starts = sorted(
            json.loads(annotations["hami.io/vgpu-mig-allocations"])[0]["placement"]["start"]
            for annotations in (
                apiserver.get("pods", "default", n)["metadata"]["annotations"] for n in ("p0", "p1", "p2")
            )
            if "hami.io/vgpu-mig-allocations" in annotations
        )
        assert starts == [0, 4]
