"""HAMi's wire formats through the stand-in API server: a node carrying only the JSON register
of HAMi 2.8 and later schedules, a pod with an init container gets the allocation HAMi's
device plugin reads (init containers first, SPEC 8), and a memory quantity with a unit is
refused naming the field instead of waiting forever (SPEC 2)."""

from __future__ import annotations

import pytest

from kube.agent import KubeAgent
from scheduling.engine.encoding import decode_allocation
from scheduling.models import Allocation, Card, Node, Pod
from scheduling.pipeline import run_cycle

from .conftest import T4, fast_options, node_object, pod_object, running, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

#: Written by hand as a HAMi 2.10 device plugin marshals two T4s: card 0 leaves out `index`
#: and `numa` (Go omits zero values); keys hamiadmin does not read are there too.
JSON_REGISTER = (
    '[{"id":"GPU-j0","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
    '"mode":"hami-core","health":true,"devicevendor":"NVIDIA"},'
    '{"id":"GPU-j1","index":1,"count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
    '"numa":1,"mode":"hami-core","health":true,"devicevendor":"NVIDIA"}]'
)


def pod_row(name: str) -> Pod | None:
    return Pod.objects.filter(namespace="default", name=name).first()


def test_a_node_with_only_a_json_register_schedules_a_pod_with_an_init_container(kube, apiserver):
    apiserver.put("nodes", node_object("hami-1", JSON_REGISTER))
    init = [
        {"name": "clone", "image": "git", "resources": {"limits": {"cpu": "1"}}},
        {
            "name": "warm",
            "image": "cuda",
            "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "15k"}},
        },
    ]
    apiserver.put("pods", pod_object("train", gpu=1, mem="1k", cores=30, init=init))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Card.objects.filter(node__name="hami-1").count() == 2, what="the cards")
        wait_until(lambda: pod_row("train"), what="the pod row")
        node = Node.objects.get(name="hami-1")
        assert node.ready
        cards = {card.uuid: card for card in node.cards.all()}
        assert {uuid: (c.index, c.numa, c.memory, c.slots, c.cores, c.type) for uuid, c in cards.items()} == {
            "GPU-j0": (0, 0, 15360, 10, 100, T4),
            "GPU-j1": (1, 1, 15360, 10, 100, T4),
        }
        (placed,) = run_cycle().placed
        allocated = ";GPU-j0,NVIDIA,15000,0:;GPU-j0,NVIDIA,1000,30:;"
        assert placed == ("default/train", "hami-1", allocated)
        wait_until(lambda: pod_row("train").status == Pod.RUNNING, what="bound")
    annotations = apiserver.get("pods", "default", "train")["metadata"]["annotations"]
    assert annotations["hami.io/vgpu-devices-allocated"] == allocated
    assert annotations["hami.io/vgpu-devices-to-allocate"] == allocated
    # What HAMi's plugin hands out container by container: clone, warm, then main.
    assert decode_allocation(annotations["hami.io/vgpu-devices-allocated"]) == [
        [],
        [("GPU-j0", 15000, 0)],
        [("GPU-j0", 1000, 30)],
    ]
    # Only the app container holds its card: one allocation row, and the card's usage is its.
    rows = list(
        Allocation.objects.filter(pod__name="train", active=True).values_list("container_index", "memory")
    )
    assert rows == [(0, 1000)]
    card = Card.objects.get(uuid="GPU-j0")
    assert (card.used_slots, card.used_memory, card.used_cores) == (1, 1000, 30)


def test_gpu_memory_with_a_unit_is_refused_naming_the_field(kube, apiserver):
    apiserver.put("nodes", node_object("hami-1", JSON_REGISTER))
    apiserver.put("pods", pod_object("bytes", gpu=1, mem="16Gi"))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: pod_row("bytes") and Card.objects.exists(), what="the pod and cards")
        assert pod_row("bytes").containers[0]["resources"]["limits"]["nvidia.com/gpumem"] == "16Gi"
        assert not run_cycle().placed
    row = pod_row("bytes")
    assert (row.status, row.parked) == (Pod.PENDING, True)
    assert row.error_field == "containers[0].resources.limits.nvidia.com/gpumem"
    assert "got '16Gi': a plain number, without a unit" in row.error
