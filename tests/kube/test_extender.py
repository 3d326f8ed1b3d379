"""kube-scheduler's extender protocol: POST /extender/filter and /extender/bind with the JSON
shapes kube-scheduler sends (Go field names), answered from the database snapshot."""

from __future__ import annotations

import json

import pytest

from kube import views
from scheduling import services
from scheduling.models import Allocation, Card, Pod

from .conftest import node_object, pod_object

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def extender_api(kube):
    views.use_api(kube)
    yield
    views.use_api(None)


@pytest.fixture
def cluster():
    """small: one T4 with 8000 MiB; big: two T4 with 15360 MiB each."""
    services.report_inventory("small", {}, {}, [{"uuid": "S-0", "index": 0, "memory": 8000}])
    services.report_inventory(
        "big",
        {},
        {},
        [{"uuid": "B-0", "index": 0, "memory": 15360}, {"uuid": "B-1", "index": 1, "memory": 15360}],
    )


def gpu_pod(name: str, uid: str = "", **resources) -> dict:
    pod = pod_object(name, scheduler="default-scheduler", **resources)
    pod["metadata"]["uid"] = uid or f"uid-{name}"
    return pod


def extender_args(pod: dict, names: list[str], cache_capable: bool = False) -> dict:
    """ExtenderArgs as kube-scheduler encodes it (Go field names, no json tags)."""
    if cache_capable:
        return {"Pod": pod, "Nodes": None, "NodeNames": names}
    return {
        "Pod": pod,
        "Nodes": {"metadata": {}, "items": [node_object(name) for name in names]},
        "NodeNames": None,
    }


def post(client, verb: str, body, **headers):
    raw = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post(f"/extender/{verb}", raw, content_type="application/json", headers=headers)


def test_filter_answers_the_chosen_node_and_why_the_others_fail(client, cluster):
    response = post(
        client, "filter", extender_args(gpu_pod("train", mem=10000), ["small", "big", "cpu-only"])
    )
    assert response.status_code == 200
    result = response.json()
    assert [item["metadata"]["name"] for item in result["Nodes"]["items"]] == ["big"]
    assert result["Nodes"]["items"][0] == node_object("big"), "the node object kube-scheduler sent, unchanged"
    assert result["FailedNodes"] == {
        "small": "1/1 CardInsufficientMemory",
        "cpu-only": "0/0 NodeInsufficientDevice",
    }
    assert result["FailedAndUnresolvableNodes"] == {}
    assert result["Error"] == ""
    row = Pod.objects.get(name="train")
    assert (row.status, row.node.name, row.uid) == (Pod.SCHEDULED, "big", "uid-train")
    assert row.allocated == "B-0,NVIDIA,10000,0:;"


def test_the_reservation_made_at_filter_time_is_seen_by_the_next_pod(client, cluster):
    first = post(client, "filter", extender_args(gpu_pod("first", mem=8000), ["small"], cache_capable=True))
    assert first.json()["NodeNames"] == ["small"]
    second = post(client, "filter", extender_args(gpu_pod("second", mem=1000), ["small"], cache_capable=True))
    assert second.json()["NodeNames"] == []
    assert second.json()["FailedNodes"] == {"small": "1/1 CardInsufficientMemory"}
    assert Card.objects.get(uuid="S-0").used_memory == 8000


def test_filter_only_considers_the_nodes_offered(client, cluster):
    """Offered both, binpack takes `small` (fuller after placing); offered only `big`, big it is."""
    both = post(client, "filter", extender_args(gpu_pod("a", mem=1000), ["small", "big"], cache_capable=True))
    assert both.json()["NodeNames"] == ["small"]
    only_big = post(client, "filter", extender_args(gpu_pod("b", mem=1000), ["big"], cache_capable=True))
    assert only_big.json()["NodeNames"] == ["big"]
    assert only_big.json()["FailedNodes"] == {}


def test_filtered_again_with_other_nodes_the_reservation_moves(client, cluster):
    post(client, "filter", extender_args(gpu_pod("p", mem=1000), ["small"], cache_capable=True))
    again = post(client, "filter", extender_args(gpu_pod("p", mem=1000), ["big"], cache_capable=True))
    assert again.json()["NodeNames"] == ["big"]
    assert Card.objects.get(uuid="S-0").used_memory == 0
    assert Allocation.objects.filter(active=True, card__node__name="big").count() == 1


def test_filtered_again_with_the_same_node_keeps_the_reservation(client, cluster):
    post(client, "filter", extender_args(gpu_pod("p", mem=1000), ["small"], cache_capable=True))
    again = post(
        client, "filter", extender_args(gpu_pod("p", mem=1000), ["small", "big"], cache_capable=True)
    )
    assert again.json()["NodeNames"] == ["small"]
    assert Allocation.objects.filter(active=True).count() == 1


def test_a_pod_asking_no_gpu_passes_every_node(client, cluster):
    response = post(client, "filter", extender_args(gpu_pod("web", gpu=None), ["small", "big"]))
    assert [item["metadata"]["name"] for item in response.json()["Nodes"]["items"]] == ["small", "big"]
    assert not Pod.objects.exists()


def test_an_invalid_pod_fails_every_node_unresolvably_naming_the_annotation(client, cluster):
    pod = gpu_pod("bad", mem=1000)
    pod["metadata"]["annotations"]["hami.io/device-scoring-weights"] = "slot=1"
    result = post(client, "filter", extender_args(pod, ["small", "big"], cache_capable=True)).json()
    assert result["NodeNames"] == []
    assert set(result["FailedAndUnresolvableNodes"]) == {"small", "big"}
    assert "hami.io/device-scoring-weights" in result["FailedAndUnresolvableNodes"]["small"]


def test_bind_writes_the_annotations_and_the_binding(client, cluster, apiserver):
    pod = gpu_pod("train", mem=10000)
    created = apiserver.put("pods", pod)
    pod["metadata"]["uid"] = created["metadata"]["uid"]
    assert post(client, "filter", extender_args(pod, ["big"], cache_capable=True)).json()["NodeNames"] == [
        "big"
    ]
    args = {
        "PodName": "train",
        "PodNamespace": "default",
        "PodUID": created["metadata"]["uid"],
        "Node": "big",
    }
    response = post(client, "bind", args)
    assert response.status_code == 200
    assert response.json() == {"Error": ""}
    bound = apiserver.get("pods", "default", "train")
    assert bound["spec"]["nodeName"] == "big"
    assert bound["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] == "B-0,NVIDIA,10000,0:;"
    assert bound["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    assert Pod.objects.get(name="train").status == Pod.RUNNING
    assert post(client, "bind", args).json() == {"Error": ""}, "a repeated bind is answered as done"


def test_bind_without_a_placement_or_to_another_node_is_an_error(client, cluster, apiserver):
    unknown = post(
        client, "bind", {"PodName": "ghost", "PodNamespace": "default", "PodUID": "u", "Node": "big"}
    )
    assert "no placement" in unknown.json()["Error"]
    pod = gpu_pod("train", mem=1000)
    post(client, "filter", extender_args(pod, ["small"], cache_capable=True))
    elsewhere = post(
        client, "bind", {"PodName": "train", "PodNamespace": "default", "PodUID": "uid-train", "Node": "big"}
    )
    assert elsewhere.json()["Error"] == "pod default/train is placed on small, not big"


def test_bind_refused_by_the_api_server_releases_the_reservation(client, cluster, apiserver):
    pod = gpu_pod("train", mem=1000)
    created = apiserver.put("pods", pod)
    pod["metadata"]["uid"] = created["metadata"]["uid"]
    post(client, "filter", extender_args(pod, ["small"], cache_capable=True))
    apiserver.fail("POST", r"/pods/train/binding$", 403, reason="Forbidden")
    result = post(
        client,
        "bind",
        {
            "PodName": "train",
            "PodNamespace": "default",
            "PodUID": created["metadata"]["uid"],
            "Node": "small",
        },
    ).json()
    assert "403" in result["Error"]
    assert Card.objects.get(uuid="S-0").used_memory == 0
    assert Pod.objects.get(name="train").status == Pod.PENDING


def test_token_protects_both_verbs(client, cluster, settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "EXTENDER_TOKEN": "s3cret"}
    args = extender_args(gpu_pod("p", mem=1000), ["small"], cache_capable=True)
    assert post(client, "filter", args).status_code == 401
    assert post(client, "filter", args, Authorization="Bearer wrong").status_code == 401
    assert post(client, "bind", {"PodName": "p", "Node": "small"}).status_code == 401
    assert not Pod.objects.exists(), "nothing written for a refused call"
    assert post(client, "filter", args, Authorization="Bearer s3cret").json()["NodeNames"] == ["small"]
    keyed = client.post("/extender/key/s3cret/filter", json.dumps(args), content_type="application/json")
    assert keyed.status_code == 200
    wrong_key = client.post("/extender/key/nope/filter", json.dumps(args), content_type="application/json")
    assert wrong_key.status_code == 401


def test_without_a_token_configured_calls_are_open_and_keyed_urls_refused(client, cluster, settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "EXTENDER_TOKEN": ""}
    args = extender_args(gpu_pod("p", mem=1000), ["small"], cache_capable=True)
    assert post(client, "filter", args).status_code == 200
    keyed = client.post("/extender/key/anything/filter", json.dumps(args), content_type="application/json")
    assert keyed.status_code == 401


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not JSON"),
        ([1, 2], "JSON object"),
        ({"Pod": {"metadata": {"name": "p"}}}, "Nodes.items or NodeNames"),
        ({"NodeNames": ["small"]}, "ExtenderArgs.Pod"),
    ],
)
def test_malformed_filter_bodies_are_400_with_a_reason(client, body, message):
    response = post(client, "filter", body)
    assert response.status_code == 400
    assert message in response.json()["Error"]


def test_bind_needs_pod_and_node(client):
    response = post(client, "bind", {"PodNamespace": "default"})
    assert response.status_code == 400
    assert "PodName" in response.json()["Error"]


def test_only_post(client):
    assert client.get("/extender/filter").status_code == 405


def test_lower_case_keys_are_read_too(client, cluster):
    """Go's decoder is case-insensitive, so a hand-written config may send lower-case keys."""
    args = {"pod": gpu_pod("p", mem=1000), "nodenames": ["small"]}
    assert post(client, "filter", args).json()["NodeNames"] == ["small"]


def test_a_pod_recreated_under_the_same_name_frees_the_earlier_reservation(client, cluster):
    post(client, "filter", extender_args(gpu_pod("p", uid="first", mem=8000), ["small"], cache_capable=True))
    again = post(
        client, "filter", extender_args(gpu_pod("p", uid="second", mem=8000), ["small"], cache_capable=True)
    )
    assert again.json()["NodeNames"] == ["small"]
    assert Pod.objects.get(name="p").uid == "second"
    assert Card.objects.get(uuid="S-0").used_memory == 8000
    assert Allocation.objects.filter(active=True).count() == 1


def test_a_pod_waiting_after_a_filter_call_is_not_placed_by_cycles(client, cluster):
    """It may only go where kube-scheduler allows: a cycle must not pick a node the filter
    call did not offer, even once one has room."""
    from scheduling.pipeline import run_cycle

    answer = post(
        client, "filter", extender_args(gpu_pod("p", mem=10000), ["small"], cache_capable=True)
    ).json()
    assert answer["NodeNames"] == [] and answer["FailedNodes"] == {"small": "1/1 CardInsufficientMemory"}
    row = Pod.objects.get(name="p")
    assert (row.origin, row.status) == (Pod.EXTENDER, Pod.PENDING)
    Pod.objects.filter(pk=row.pk).update(next_attempt_at=None)
    assert run_cycle().placed == [], "big has room, but kube-scheduler did not offer it"
    assert Pod.objects.get(name="p").status == Pod.PENDING
    assert post(client, "filter", extender_args(gpu_pod("p", mem=10000), ["big"], cache_capable=True)).json()[
        "NodeNames"
    ] == ["big"]


def test_the_engines_node_rules_recheck_the_nodes_offered(client):
    """kube-scheduler filters first; hamiadmin still judges the pod's node rules on the nodes
    offered (here a node selector the offered `small` does not match) with kube-scheduler's words."""
    services.report_inventory("big", {"pool": "training"}, {}, [{"uuid": "B-0", "index": 0, "memory": 15360}])
    services.report_inventory(
        "small", {"pool": "inference"}, {}, [{"uuid": "S-0", "index": 0, "memory": 8000}]
    )
    pod = gpu_pod("train", mem=1000)
    pod["spec"]["nodeSelector"] = {"pool": "training"}
    response = post(client, "filter", extender_args(pod, ["small", "big"], cache_capable=True))
    result = response.json()
    assert result["NodeNames"] == ["big"]
    assert result["FailedNodes"] == {
        "small": "NodeAffinity: node(s) didn't match Pod's node affinity/selector"
    }
    assert Pod.objects.get(name="train").node.name == "big"
    # offered only the node it does not match: it stays pending, the node failed with the rule
    other = gpu_pod("train-2", mem=1000)
    other["spec"]["nodeSelector"] = {"pool": "training"}
    response = post(client, "filter", extender_args(other, ["small"], cache_capable=True))
    assert response.json()["NodeNames"] == []
    assert response.json()["FailedNodes"] == {
        "small": "NodeAffinity: node(s) didn't match Pod's node affinity/selector"
    }


def test_rules_that_count_the_pods_of_every_node_are_left_to_kube_scheduler(client, cluster):
    """kube-scheduler judged the pod's required pod affinity and hard spread counting every
    node's pods; the extender sees only the nodes offered (the db pod runs on one it was not
    offered), so it does not refuse them again."""
    pod = gpu_pod("near-db", mem=1000)
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
    pod["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    pod["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "minDomains": 5,
            "labelSelector": {"matchLabels": {"app": "db"}},
        }
    ]
    response = post(client, "filter", extender_args(pod, ["big"], cache_capable=True))
    assert response.json()["NodeNames"] == ["big"]
    stored = Pod.objects.get(name="near-db").scheduling
    assert stored["affinity"] == pod["spec"]["affinity"], "stored as given"
