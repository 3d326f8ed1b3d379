"""Strict input on every door: `POST pods/`, bulk, what-if and simulate refuse an unknown key
or a GPU-like resource name hamiadmin does not read (`engine.podschema`), naming the field
and every problem at once; an unknown `hami.io/` annotation is a warning, and the pod still
schedules."""

from __future__ import annotations

import copy

import pytest

from scheduling.api.serializers import PodSubmitSerializer
from scheduling.api.views.bulk import PodBulkItemSerializer
from scheduling.engine.podschema import API_POD_KEYS
from scheduling.models import Pod
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod

pytestmark = pytest.mark.django_db

MEANT = "did you mean nvidia.com/gpumem?"
TYPO = "containers[0].resources.limits.nvidia.com/gpumemory"


def typo_pod(name: str) -> dict:
    """A pod asking 3,000 MiB under a misspelt name: read as asking none, it got a whole card."""
    pod = gpu_pod(name)
    pod["containers"][0]["resources"]["limits"]["nvidia.com/gpumemory"] = 3000
    return pod


SCENARIO = {
    "nodes": [{"name": "n1", "devices": [{"uuid": "A", "memory": 8000, "type": "T4"}]}],
    "pods": [{"name": "p", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}],
}


def test_the_submission_serializers_take_the_pod_schemas_keys():
    assert set(PodSubmitSerializer().fields) == set(API_POD_KEYS)
    assert set(PodBulkItemSerializer().fields) == set(API_POD_KEYS)


def test_post_pods_refuses_a_misspelt_key_naming_it(operator):
    pod = gpu_pod("p")
    pod["annotatons"] = pod.pop("annotations")
    answer = operator.post("/api/v1/pods/", pod, format="json")
    assert answer.status_code == 400, answer.content
    assert "did you mean annotations?" in answer.json()["annotatons"][0]
    assert not Pod.objects.exists()


def test_post_pods_names_every_problem_at_once(operator):
    pod = typo_pod("Not_A_Name")
    pod["annotatons"] = {}
    errors = operator.post("/api/v1/pods/", pod, format="json").json()
    assert set(errors) == {"name", "annotatons", TYPO}


def test_a_gpu_like_resource_name_is_refused_on_every_door(cluster, operator):
    one = operator.post("/api/v1/pods/", typo_pod("one"), format="json")
    assert one.status_code == 400 and MEANT in one.json()[TYPO][0]

    bulk = operator.post("/api/v1/pods/bulk/", {"pods": [gpu_pod("fine"), typo_pod("two")]}, format="json")
    fine, two = bulk.json()["pods"]
    assert fine["outcome"] == "created" and fine["errors"] == []
    assert two["outcome"] == "refused" and two["error"]["field"] == TYPO and MEANT in two["error"]["message"]
    assert two["error"]["message"] == one.json()[TYPO][0]  # the same words

    whatif = operator.post("/api/v1/whatif/", {"pods": [typo_pod("three")]}, format="json")
    assert whatif.status_code == 400 and MEANT in whatif.json()[f"pods[0].{TYPO}"][0]

    scenario = copy.deepcopy(SCENARIO)
    scenario["pods"].append(typo_pod("four"))
    simulated = operator.post("/api/v1/simulate/", scenario, format="json")
    assert simulated.status_code == 400 and MEANT in simulated.json()[f"pods[1].{TYPO}"][0]
    assert set(Pod.objects.values_list("name", flat=True)) == {"fine"}


def test_bulk_lists_every_problem_of_an_item(operator):
    pod = typo_pod("p")
    pod["annotatons"] = {}
    (item,) = operator.post("/api/v1/pods/bulk/", {"pods": [pod]}, format="json").json()["pods"]
    assert [error["field"] for error in item["errors"]] == ["annotatons", TYPO]
    assert item["error"] == item["errors"][0]


def test_simulate_reports_a_misspelt_key_annotation_and_resource_together(operator):
    scenario = copy.deepcopy(SCENARIO)
    pod = scenario["pods"][0]
    pod["tpye"] = "T4"
    pod["annotatons"] = {"nvidia.com/use-gputype": "T4"}
    pod["containers"][0]["resources"]["limits"]["nvidia.com/gpumemory"] = 3000
    answer = operator.post("/api/v1/simulate/", scenario, format="json")
    assert answer.status_code == 400
    assert set(answer.json()) == {"pods[0].tpye", "pods[0].annotatons", f"pods[0].{TYPO}"}


def test_what_if_reports_every_problem_not_the_first(cluster, operator):
    bad = gpu_pod("a")
    bad["annotatons"] = {}
    body = {"pods": [bad, typo_pod("b")], "edits": {"cordon": "GPU-0"}}
    answer = operator.post("/api/v1/whatif/", body, format="json")
    assert answer.status_code == 400
    assert set(answer.json()) == {"pods[0].annotatons", f"pods[1].{TYPO}", "edits.cordon"}


def test_an_unknown_hami_annotation_is_a_warning_and_the_pod_still_schedules(cluster, operator):
    pod = gpu_pod("p", mem=1000, annotations={"hami.io/tenant": "research"})
    answer = operator.post("/api/v1/pods/", pod, format="json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["warnings"] == {
        "annotations.hami.io/tenant": ["not an annotation hamiadmin reads, ignored"]
    }
    run_cycle(trigger="test")
    assert Pod.objects.get(name="p").status == Pod.SCHEDULED

    (item,) = operator.post("/api/v1/pods/bulk/", {"pods": [{**pod, "name": "q"}]}, format="json").json()[
        "pods"
    ]
    assert item["outcome"] == "created" and "annotations.hami.io/tenant" in item["warnings"]

    (decided,) = operator.post("/api/v1/whatif/", {"pods": [{**pod, "name": "r"}]}, format="json").json()[
        "pods"
    ]
    assert decided["payload"]["status"] == "scheduled"
    assert decided["payload"]["warnings"] == [
        "annotations.hami.io/tenant: not an annotation hamiadmin reads, ignored"
    ]
