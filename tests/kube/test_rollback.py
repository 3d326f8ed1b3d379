"""The rollback of docs/migrating-from-hami.md (*Rolling back*), walked: hamiadmin places and binds
through the stand-in API server, its agent stops, and what it left on the pods and nodes is
read back the way HAMi v2.10's scheduler reads it when it starts again, decoded here by HAMi's
own rules, not by hamiadmin's decoder:

- `onAddPod` (pkg/scheduler/scheduler.go) takes a pod only with `hami.io/vgpu-node`, then
  `DecodePodDevices` (pkg/device/devices.go) splits `hami.io/vgpu-devices-allocated` on `;`
  into one entry per container, keeping empty ones (init containers first), each entry on
  `:` into devices, each device `UUID,Type,Usedmem,Usedcores` (at least four fields);
- the node's usage and the namespace quota usage it rebuilds are the sums of those devices;
- `hami.io/bind-time` is parsed as a Unix time (`strconv.ParseInt`), the node lock is
  `RFC3339 time,namespace,name` or gone.

So HAMi's rebuilt usage must equal what hamiadmin booked, card by card and namespace by
namespace. The other wire round trips: tests/engine/test_encoding.py (allocation and register)
and tests/kube/test_hami_wire.py (a HAMi 2.10 JSON register, init containers first)."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from kube.agent import KubeAgent
from scheduling.models import Allocation, Card, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, wait_until
from .test_hami_wire import JSON_REGISTER

pytestmark = pytest.mark.django_db(transaction=True)

HAMI_LOCK = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d),[^,]+,[^,]+$")


def hami_decode(value: str) -> list[list[tuple[str, str, int, int]]]:
    """`DecodePodDevices` for one device type, as HAMi v2.10 writes it (module docstring)."""
    containers = []
    for entry in value.split(";"):
        devices = []
        for device in entry.split(":") if entry else []:
            if "," not in device:
                continue
            fields = device.split(",")
            assert len(fields) >= 4, f"HAMi refuses {device!r}: missing fields"
            devices.append((fields[0], fields[1], int(fields[2]), int(fields[3])))
        containers.append(devices)
    return containers


def test_hamis_scheduler_rebuilds_the_usage_hamiadmin_booked(kube, apiserver):
    apiserver.put("nodes", node_object("hami-1", JSON_REGISTER))
    init = [
        {
            "name": "warm",
            "image": "cuda",
            "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}},
        }
    ]
    apiserver.put("pods", pod_object("train", gpu=2, mem=4000, cores=30, namespace="ml"))
    apiserver.put("pods", pod_object("infer", gpu=1, mem=1000, namespace="ml", init=init))
    apiserver.put("pods", pod_object("solo", gpu=1, mem=3000, cores=10))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Pod.objects.count() == 3 and Card.objects.count() == 2, what="pods and cards")
        assert len(run_cycle().placed) == 3
        wait_until(lambda: Pod.objects.filter(status=Pod.RUNNING).count() == 3, what="all bound")
    # hamiadmin's agent is gone; HAMi's scheduler starts and lists the pods.

    rebuilt_cards: Counter = Counter()
    rebuilt_namespaces: Counter = Counter()
    for namespace, name in (("ml", "train"), ("ml", "infer"), ("default", "solo")):
        pod = apiserver.get("pods", namespace, name)
        annotations = pod["metadata"]["annotations"]
        assert annotations["hami.io/vgpu-node"] == "hami-1"  # without it HAMi skips the pod
        assert pod["spec"].get("nodeName", "hami-1") == "hami-1"
        assert annotations["hami.io/bind-phase"] in ("allocating", "success")
        assert int(annotations["hami.io/bind-time"]) > 0
        containers = hami_decode(annotations["hami.io/vgpu-devices-allocated"])
        inits = len(pod["spec"].get("initContainers", []))
        # one entry per container, init containers first, then the trailing `;`'s empty one
        assert len(containers) == inits + len(pod["spec"]["containers"]) + 1 and containers[-1] == []
        apps = containers[inits:-1]
        booked = sorted(
            Allocation.objects.filter(pod__namespace=namespace, pod__name=name, active=True).values_list(
                "container_index", "card__uuid", "memory", "cores"
            )
        )
        assert (
            sorted(
                (index, uuid, mem, cores) for index, devs in enumerate(apps) for uuid, _, mem, cores in devs
            )
            == booked
        )
        for devices in apps:
            for uuid, vendor, memory, cores in devices:
                assert vendor == "NVIDIA"
                rebuilt_cards[(uuid, "memory")] += memory
                rebuilt_cards[(uuid, "cores")] += cores
                rebuilt_cards[(uuid, "count")] += 1
                rebuilt_namespaces[(namespace, "memory")] += memory
    for card in Card.objects.all():
        assert (
            rebuilt_cards[(card.uuid, "count")],
            rebuilt_cards[(card.uuid, "memory")],
            rebuilt_cards[(card.uuid, "cores")],
        ) == (card.used_slots, card.used_memory, card.used_cores)
    assert rebuilt_namespaces[("ml", "memory")] == 2 * 4000 + 1000
    assert rebuilt_namespaces[("default", "memory")] == 3000
    lock = apiserver.get("nodes", "", "hami-1")["metadata"].get("annotations", {}).get("hami.io/mutex.lock")
    assert lock is None or HAMI_LOCK.match(lock), lock
