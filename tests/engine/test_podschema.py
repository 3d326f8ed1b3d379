"""One pod schema for every door (`engine.podschema`): unknown keys refused naming the field,
GPU-like resource names hamiadmin does not read refused with the closest one, unknown
`hami.io/` annotations warned about; every problem at once, by its full path."""

from __future__ import annotations

import pytest

from scheduling.engine.batch.preempt import PREEMPTIBLE_ANNOTATION
from scheduling.engine.errors import ScenarioProblems
from scheduling.engine.model import ClusterConfig, PodSpec
from scheduling.engine.pod import parse_pod
from scheduling.engine.podschema import (
    PREEMPTIBLE,
    RUNNING_POD_KEYS,
    annotation_warnings,
    edits,
    pod_problems,
    resource_problem,
)
from scheduling.engine.scenario import parse_pod_entry, parse_running_pod, run_scenario
from scheduling.engine.whatif import parse_whatif


def gpu_container(**limits) -> dict:
    return {"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, **limits}}}


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("nvidia.com/gpumemory", "nvidia.com/gpumem"),
        ("nvidia.com/gpucore", "nvidia.com/gpucores"),
        ("nvidia.com/gpumem-percent", "nvidia.com/gpumem-percentage"),
        ("hami.io/gpu", "nvidia.com/gpu"),  # HAMi's renamed name: only the Kubernetes reader maps it
        ("nvidia.con/gpumem", "nvidia.com/gpumem"),
        ("nvidai.com/gpu", "nvidia.com/gpu"),
    ],
)
def test_a_gpu_like_resource_name_is_refused_with_the_one_meant(name, meant):
    problem = resource_problem(name)
    assert problem is not None and f"did you mean {meant}?" in problem


@pytest.mark.parametrize(
    "name",
    [
        "nvidia.com/gpu",
        "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores",
        "cpu",
        "memory",
        "ephemeral-storage",
        "hugepages-2Mi",
        "huawei.com/Ascend910",
        "example.com/fpga",
        "nvidia.com/mig-1g.5gb",
    ],
)
def test_known_gpu_resources_and_every_other_resource_stay_accepted(name):
    assert resource_problem(name) is None


def test_every_problem_of_a_pod_is_named_by_its_path_at_once():
    raw = {
        "name": "p",
        "annotatons": {"hami.io/gpu-scheduler-policy": "binpack"},
        "containers": [
            {"name": "a", "resouces": {}, "image": "cuda:12"},
            {"name": "b", "resources": {"limts": {}, "limits": {"nvidia.com/gpumemory": 3000, "cpu": "1"}}},
        ],
        "initContainers": [{"name": "i", "resources": {"requests": {"nvidia.com/gpucore": 30}}}],
    }
    problems = dict(pod_problems(raw, "pods[2]"))
    assert list(problems) == [
        "pods[2].annotatons",
        "pods[2].containers[0].resouces",
        "pods[2].containers[1].resources.limts",
        "pods[2].containers[1].resources.limits.nvidia.com/gpumemory",
        "pods[2].initContainers[0].resources.requests.nvidia.com/gpucore",
    ]
    assert problems["pods[2].annotatons"].startswith("unknown field; did you mean annotations?")
    assert "did you mean resources?" in problems["pods[2].containers[0].resouces"]
    assert (
        "did you mean nvidia.com/gpumem?"
        in problems["pods[2].containers[1].resources.limits.nvidia.com/gpumemory"]
    )


def test_a_swap_of_two_letters_is_one_edit():
    assert edits("tpye", "type") == 1 and edits("annotatons", "annotations") == 1


def test_unknown_hami_annotations_and_near_misses_of_nvidia_ones_are_warnings():
    warnings = dict(
        annotation_warnings(
            {
                "hami.io/gpu-scheduler-policy": "binpack",
                "hami.io/gpu-schedular-policy": "spread",
                "hami.io/team": "a",
                "nvidia.com/use-gputpye": "T4",
                "nvidia.com/gpu.product": "A100",  # another tool's: far from any hamiadmin reads
                "example.com/owner": "b",
            }
        )
    )
    assert list(warnings) == [
        "annotations.hami.io/gpu-schedular-policy",
        "annotations.hami.io/team",
        "annotations.nvidia.com/use-gputpye",
    ]
    assert (
        "did you mean hami.io/gpu-scheduler-policy?" in warnings["annotations.hami.io/gpu-schedular-policy"]
    )
    assert "did you mean nvidia.com/use-gputype?" in warnings["annotations.nvidia.com/use-gputpye"]


def test_the_preemptible_annotation_is_the_one_the_batch_rules_read():
    assert PREEMPTIBLE == PREEMPTIBLE_ANNOTATION
    assert annotation_warnings({PREEMPTIBLE: "true"}) == []


def test_a_parsed_pod_warns_about_an_unread_hami_annotation_and_still_reads():
    spec = PodSpec(
        name="p", namespace="default", annotations={"hami.io/tenant": "x"}, containers=[gpu_container()]
    )
    warnings = parse_pod(spec, ClusterConfig()).warnings()
    assert warnings == {"annotations.hami.io/tenant": ["not an annotation hamiadmin reads, ignored"]}


def test_the_scenario_reader_refuses_a_pod_and_a_running_entry_naming_every_key():
    with pytest.raises(ScenarioProblems) as refused:
        parse_pod_entry(
            {"name": "p", "tpye": "x", "containers": [gpu_container(**{"nvidia.com/gpumemory": 1})]},
            "pods[0]",
        )
    assert [problem.where for problem in refused.value.problems] == [
        "pods[0].tpye",
        "pods[0].containers[0].resources.limits.nvidia.com/gpumemory",
    ]
    with pytest.raises(ScenarioProblems) as refused:
        parse_running_pod({"name": "r", "node": "n1", "nodee": "n2"}, "running[0]", {})
    assert "running[0].nodee" in [problem.where for problem in refused.value.problems]


def test_a_running_entry_takes_every_tenant_field_the_batch_rules_read():
    from scheduling.engine.batch.scenario import TENANT_FIELDS

    assert set(TENANT_FIELDS) <= set(RUNNING_POD_KEYS)


def test_a_running_entry_takes_its_batch_keys():
    from scheduling.engine.model import Node

    running = {
        "name": "r",
        "node": "n1",
        "priority": 5,
        "queue": "q",
        "group": "g",
        "preemptible": True,
        "runtime_seconds": 60,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
    }
    assert parse_running_pod(running, "running[0]", {"n1": Node(name="n1", cards=[])}).name == "r"


def test_what_if_names_every_problem_of_its_pods_and_edits_at_once():
    body = {
        "pods": [
            {"name": "a", "annotatons": {}, "containers": [gpu_container()]},
            {"name": "b", "containers": [gpu_container(**{"nvidia.com/gpumemory": 1})]},
        ],
        "edits": {"cordon": "GPU-0", "drian": ["n1"], "add": [{"like": "n1", "count": 0}]},
        "extra": 1,
    }
    with pytest.raises(ScenarioProblems) as refused:
        parse_whatif(body)
    assert [problem.where for problem in refused.value.problems] == [
        "extra",
        "pods[0].annotatons",
        "pods[1].containers[0].resources.limits.nvidia.com/gpumemory",
        "edits.drian",
        "edits.cordon",
        "edits.add[0].count",
    ]


def test_a_scenario_pod_with_an_unknown_hami_annotation_schedules_and_says_so():
    scenario = {
        "nodes": [{"name": "n1", "devices": [{"uuid": "A", "memory": 8000}]}],
        "pods": [
            {"name": "p", "annotations": {"hami.io/tenant": "x"}, "containers": [gpu_container()]},
        ],
    }
    (pod,) = run_scenario(scenario)["pods"]
    assert pod["status"] == "scheduled"
    assert pod["warnings"] == ["annotations.hami.io/tenant: not an annotation hamiadmin reads, ignored"]
