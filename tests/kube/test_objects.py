"""Reading pods and HAMi node annotations (pure functions, no server)."""

from __future__ import annotations

import json

import pytest

from kube import nodes, pods

from .conftest import T4, node_object, pod_object, register


def test_a_pod_becomes_what_submit_pod_takes():
    pod = pod_object(
        "train",
        gpu=2,
        mem=3000,
        cores=30,
        namespace="ml",
        priority=1000,
        annotations={
            "hami.io/gpu-scheduler-policy": "mutex,binpack",
            "kubectl.kubernetes.io/last-applied-configuration": "{...}",
            "hami.io/vgpu-node": "old-node",
        },
    )
    pod["metadata"]["uid"] = "uid-1"
    pod["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "100m"}}}
    ]
    submitted = pods.submission(pod)
    assert submitted == {
        "namespace": "ml",
        "name": "train",
        "annotations": {"hami.io/gpu-scheduler-policy": "mutex,binpack"},
        "labels": {},
        "containers": [
            {
                "name": "main",
                "resources": {
                    "limits": {
                        "cpu": "1",
                        "memory": "1Gi",
                        "nvidia.com/gpu": 2,
                        "nvidia.com/gpumem": 3000,
                        "nvidia.com/gpucores": 30,
                    }
                },
            }
        ],
        "init_containers": [
            {"name": "warm", "resources": {"requests": {"nvidia.com/gpu": 1, "cpu": "100m"}}}
        ],
        "priority": 1000,
        "uid": "uid-1",
        "scheduling": {},
    }


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("3", 3),
        ("3k", 3000),
        ("2Ki", 2048),
        ("2000m", 2),
        ("1e3", 1000),
        ("1500m", "1500m"),
        ("lots", "lots"),
    ],
)
def test_quantities_are_read_as_kubernetes_writes_them(written, read):
    """Whole quantities become ints; the rest stays as written so the engine names the field."""
    assert pods.quantity(written) == read


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("3000", 3000),
        ("3k", 3000),  # how the API server writes a manifest's 3000
        ("16k", 16000),
        ("1.0", 1),
        ("3e3", 3000),
        (" 2 ", 2),
        ("16Gi", "16Gi"),
        ("16384Mi", "16384Mi"),
        ("500M", "500M"),
        ("2000m", "2000m"),
        ("1.5", "1.5"),
        ("lots", "lots"),
    ],
)
def test_gpu_resources_are_plain_numbers_as_the_api_server_writes_them(written, read):
    """SPEC 2 resources take no unit: `k` and exponents are how the API server spells plain
    numbers; any other unit stays as written, for the engine to refuse naming the field."""
    pod = pod_object("p", gpu=1, mem=written)
    limits = pods.submission(pod)["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1, "nvidia.com/gpumem": read}


@pytest.mark.parametrize(
    "resource", ["nvidia.com/gpu", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage"]
)
def test_every_gpu_resource_refuses_units_the_same_way(resource):
    pod = pod_object("p", gpu=None)
    pod["spec"]["containers"][0]["resources"]["limits"][resource] = "1Ki"
    limits = pods.submission(pod)["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "1", "memory": "1Gi", resource: "1Ki"}


def test_a_pod_without_priority_gets_zero_and_no_gpu_is_seen():
    pod = pod_object("web", gpu=None)
    assert pods.submission(pod)["priority"] == 0
    assert not pods.asks_gpu(pod)
    assert pods.asks_gpu(pod_object("gpu", gpu=1))


def test_phases_that_end_a_pod():
    assert pods.final_status(pod_object("a", phase="Succeeded")) == "succeeded"
    assert pods.final_status(pod_object("a", phase="Failed")) == "failed"
    assert pods.final_status(pod_object("a", phase="Running")) is None


def test_nine_field_register_with_scores_and_cordon():
    value = register(
        ("GPU-a", 10, 15360, 100, T4, 0, True, 0, "hami-core"),
        ("GPU-b", 4, 15360, 50, T4, 1, False, 1, "hami-core"),
    )
    scores = json.dumps([{"uuid": "GPU-a", "score": {"GPU-b": 200, "GPU-gone": 90}}])
    found = nodes.inventory(
        node_object(
            "n1",
            value,
            **{
                "hami.io/node-nvidia-score": scores,
                "hami.io/device-cordon": "GPU-b",
                "hami.io/node-handshake": "Reported 2024",
            },
        )
    )
    assert found.name == "n1"
    assert found.annotations == {"hami.io/device-cordon": "GPU-b"}
    assert found.devices == [
        {
            "uuid": "GPU-a",
            "index": 0,
            "type": T4,
            "slots": 10,
            "memory": 15360,
            "cores": 100,
            "numa": 0,
            "health": True,
            "links": {"GPU-b": 200},
            "mode": "hami-core",
        },
        {
            "uuid": "GPU-b",
            "index": 1,
            "type": T4,
            "slots": 4,
            "memory": 15360,
            "cores": 50,
            "numa": 1,
            "health": False,
            "links": {"GPU-a": 200},
            "mode": "hami-core",
        },
    ]


#: A HAMi 2.10 node's register, written by hand in the JSON form of HAMi 2.8 and later: card 0
#: has no `index` and no `numa` (Go leaves zero values out), card 1 no `health` (unhealthy).
JSON_REGISTER = (
    '[{"id":"GPU-j0","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
    '"mode":"hami-core","health":true,"devicevendor":"NVIDIA"},'
    '{"id":"GPU-j1","index":1,"count":4,"devmem":15360,"devcore":50,"type":"NVIDIA-Tesla T4",'
    '"numa":1,"mode":"hami-core"}]'
)


def test_json_register_with_scores_and_cordon():
    scores = json.dumps([{"uuid": "GPU-j0", "score": {"GPU-j1": 200}}])
    found = nodes.inventory(
        node_object(
            "j1", JSON_REGISTER, **{"hami.io/node-nvidia-score": scores, "hami.io/device-cordon": "GPU-j1"}
        )
    )
    assert found.annotations == {"hami.io/device-cordon": "GPU-j1"}
    assert found.devices == [
        {
            "uuid": "GPU-j0",
            "index": 0,
            "type": T4,
            "slots": 10,
            "memory": 15360,
            "cores": 100,
            "numa": 0,
            "health": True,
            "links": {"GPU-j1": 200},
            "mode": "hami-core",
        },
        {
            "uuid": "GPU-j1",
            "index": 1,
            "type": T4,
            "slots": 4,
            "memory": 15360,
            "cores": 50,
            "numa": 1,
            "health": False,
            "links": {"GPU-j0": 200},
            "mode": "hami-core",
        },
    ]


def test_json_register_card_without_type_is_nvidia():
    found = nodes.inventory(node_object("j1", '[{"id":"GPU-j0","count":10,"devmem":8000,"health":true}]'))
    assert [(d["uuid"], d["type"], d["cores"]) for d in found.devices] == [("GPU-j0", "NVIDIA", 0)]
    assert "mode" not in found.devices[0]


@pytest.mark.parametrize(
    ("register_value", "named"),
    [
        (
            '[{"id":"GPU-a","health":true},{"id":"GPU-b","devmem":-1}]',
            "hami.io/node-nvidia-register[1].devmem",
        ),
        ('[{"id":"GPU-a\\u0000"}]', "hami.io/node-nvidia-register[0].id"),
        ('[{"id":"GPU-a","type":"T4\\ud800"}]', "hami.io/node-nvidia-register[0].type"),
        ('[{"id":"GPU-a","mode":"\\u0000"}]', "hami.io/node-nvidia-register[0].mode"),
        ('[{"id":"GPU-a"', "hami.io/node-nvidia-register"),
    ],
)
def test_malformed_json_register_names_card_and_field(register_value, named):
    with pytest.raises(nodes.InventoryInvalid) as caught:
        nodes.inventory(node_object("bad", register_value))
    assert caught.value.where == named
    assert "node bad" in str(caught.value)


def test_seven_field_register_indexes_by_position():
    value = "GPU-x,10,32768,100,NVIDIA-V100,1,true:GPU-y,10,32768,100,NVIDIA-V100,1,true:"
    found = nodes.inventory(node_object("old", value))
    assert [(d["uuid"], d["index"], d["numa"]) for d in found.devices] == [("GPU-x", 0, 1), ("GPU-y", 1, 1)]
    assert "mode" not in found.devices[0]


def test_a_node_without_the_register_is_not_described():
    assert nodes.inventory(node_object("cpu-only")) is None


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        (
            {"hami.io/node-nvidia-register": "GPU-a,10,lots,100,T4,0,true,0,x:"},
            "hami.io/node-nvidia-register[0].devmem",
        ),
        ({"hami.io/node-nvidia-register": "GPU-a,10,100:"}, "hami.io/node-nvidia-register[0]"),
        (
            {"hami.io/node-nvidia-register": "GPU-a,10,1,100,T4,0,maybe,0,x:"},
            "hami.io/node-nvidia-register[0].health",
        ),
        (
            {
                "hami.io/node-nvidia-register": "GPU-a,10,1,100,T4,0,true,0,x:",
                "hami.io/node-nvidia-score": "{not json",
            },
            "hami.io/node-nvidia-score",
        ),
    ],
)
def test_malformed_annotations_name_the_annotation(annotations, named):
    node = node_object("bad")
    node["metadata"]["annotations"] = annotations
    with pytest.raises(nodes.InventoryInvalid) as caught:
        nodes.inventory(node)
    assert caught.value.where == named
    assert "bad" in str(caught.value)


def test_ready_condition():
    assert nodes.is_ready(node_object("a"))
    assert not nodes.is_ready(node_object("a", ready=False))
    assert nodes.is_ready({"metadata": {"name": "fresh"}})


def test_owner_references_are_submitted_slim_and_unstorable_text_is_refused_naming_it():
    pod = pod_object("train")
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j-1"}
    pod["metadata"]["ownerReferences"] = [{**job, "controller": True, "blockOwnerDeletion": True}, "odd"]
    assert pods.submission(pod)["scheduling"]["ownerReferences"] == [{**job, "controller": True}]
    assert "ownerReferences" not in pods.submission(pod_object("alone"))["scheduling"]
    pod["metadata"]["ownerReferences"] = [{**job, "name": "a\x00b"}]
    with pytest.raises(pods.PodInvalid) as refused:
        pods.submission(pod)
    assert refused.value.field == "ownerReferences[0].name"
