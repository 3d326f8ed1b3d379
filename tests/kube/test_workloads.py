"""Kubernetes' Workload API (scheduling.k8s.io/v1beta1): pods naming a PodGroup in
`spec.schedulingGroup` are one gang, its figures read from the PodGroup (or its Workload's
template), placed all or nothing, and the verdict written into the PodGroup's conditions and
the waiting members' `PodScheduled` condition. Bad objects are refused naming the field."""

from __future__ import annotations

import pytest

from kube import pods as pod_objects
from kube.agent import KubeAgent
from kube.groups import GroupInvalid
from kube.workloads import INITIALLY_SCHEDULED, workload_group_fields, workload_status
from scheduling.engine import PodInvalid
from scheduling.models import Card, Event, Pod, PodGroup
from scheduling.pipeline import run_cycle

from .apiserver import VOLCANO_PODGROUPS, WORKLOAD_PODGROUPS, WORKLOADS
from .conftest import fast_options, node_object, pod_object, running, t4_register, wait_until


def podgroup(name: str, min_count: int | None = 4, namespace: str = "default", **spec) -> dict:
    if min_count is not None:
        spec.setdefault("schedulingPolicy", {"gang": {"minCount": min_count}})
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": spec,
    }


def workload(name: str, *templates: dict) -> dict:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"podGroupTemplates": list(templates)},
    }


def member(name: str, group: str = "train", **kwargs) -> dict:
    pod = pod_object(name, **kwargs)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def group_row(name: str = "train") -> PodGroup | None:
    return PodGroup.objects.filter(namespace="default", name=name).first()


def condition_of(apiserver, name: str = "train") -> dict | None:
    obj = apiserver.get(WORKLOAD_PODGROUPS, "default", name) or {}
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == INITIALLY_SCHEDULED]
    return found[0] if found else None


def pod_scheduled(apiserver, name: str) -> dict | None:
    pod = apiserver.get("pods", "default", name) or {}
    found = [c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"]
    return found[0] if found else None


# -- reading the objects (pure) -------------------------------------------------------


def test_a_podgroup_gives_min_count_priority_and_topology_key():
    fields = workload_group_fields(
        podgroup(
            "train",
            priority=1000,
            schedulingConstraints={"topology": [{"key": "topology.kubernetes.io/rack"}]},
            disruptionMode={"all": {}},
        )
    )
    assert fields == {
        "namespace": "default",
        "name": "train",
        "source": "workload",
        "min_member": 4,
        "priority": 1000,
        "topology_key": "topology.kubernetes.io/rack",
        "queue": None,
    }
    basic = workload_group_fields(podgroup("web", None, schedulingPolicy={"basic": {}}))
    assert (basic["min_member"], basic["priority"], basic["topology_key"]) == (1, 0, "")


def test_what_the_podgroup_leaves_out_comes_from_its_workloads_template():
    template = {
        "name": "workers",
        "schedulingPolicy": {"gang": {"minCount": 8}},
        "priority": 50,
        "schedulingConstraints": {"topology": [{"key": "nvidia.com/nvlink-domain"}]},
    }
    workloads = {("default", "job"): workload("job", {"name": "other"}, template)}
    fields = workload_group_fields(
        podgroup("job-0", None, workloadRef={"workloadName": "job", "templateName": "workers"}),
        lambda namespace, name: workloads.get((namespace, name)),
    )
    assert (fields["min_member"], fields["priority"], fields["topology_key"]) == (
        8,
        50,
        "nvidia.com/nvlink-domain",
    )


def test_a_podgroup_with_its_own_policy_needs_no_workload():
    obj = podgroup("job-0", 3, workloadRef={"workloadName": "not-yet", "templateName": "workers"})
    assert workload_group_fields(obj)["min_member"] == 3


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"schedulingPolicy": {"gang": {"minCount": 0}}}, "spec.schedulingPolicy.gang.minCount"),
        ({"schedulingPolicy": {"gang": {"minCount": "4"}}}, "spec.schedulingPolicy.gang.minCount"),
        ({"schedulingPolicy": {"gang": {}}}, "spec.schedulingPolicy.gang.minCount"),
        ({"schedulingPolicy": {}}, "spec.schedulingPolicy"),
        ({"priority": "high"}, "spec.priority"),
        (
            {"schedulingConstraints": {"topology": [{"key": "rack"}, {"key": "zone"}]}},
            "spec.schedulingConstraints.topology",
        ),
        (
            {"schedulingConstraints": {"topology": [{"key": "not a label"}]}},
            "spec.schedulingConstraints.topology[0].key",
        ),
        (
            {"schedulingPolicy": {}, "workloadRef": {"workloadName": "gone", "templateName": "w"}},
            "spec.workloadRef.workloadName",
        ),
    ],
)
def test_a_malformed_podgroup_is_refused_naming_the_field(spec, where):
    obj = podgroup("train", None, **spec)
    if "schedulingPolicy" not in spec:
        obj["spec"]["schedulingPolicy"] = {"gang": {"minCount": 2}}
    with pytest.raises(GroupInvalid) as caught:
        workload_group_fields(obj)
    assert caught.value.where == where


def test_the_condition_says_the_code_and_verdict_and_true_is_never_taken_back():
    waiting = workload_status(
        None,
        PodGroup.PENDING,
        "gang default/train: 3/4 members known",
        [{"reason": "NotEnoughPods", "at": "2026-01-02T03:04:05+00:00"}],
        generation=2,
    )
    assert waiting == {
        "conditions": [
            {
                "type": INITIALLY_SCHEDULED,
                "status": "False",
                "reason": "Unschedulable",
                "message": "NotEnoughPods: gang default/train: 3/4 members known",
                "lastTransitionTime": "2026-01-02T03:04:05Z",
                "observedGeneration": 2,
            }
        ]
    }
    shown = {"conditions": [{"type": INITIALLY_SCHEDULED, "status": "True", "reason": "Scheduled"}]}
    assert workload_status(shown, PodGroup.INQUEUE, "gang default/train: 3/4 members placeable", []) is None
    assert workload_status(None, PodGroup.PENDING, "", []) is None, "no verdict yet: nothing said"


def test_a_pod_names_its_podgroup_in_spec_scheduling_group():
    ref = pod_objects.submission(member("w0"))["group"]
    assert (ref.name, ref.source, ref.min_member) == ("train", "workload", None)
    assert "group" not in pod_objects.submission(pod_object("alone"))


@pytest.mark.parametrize(
    ("scheduling_group", "annotations", "field"),
    [
        ("train", {"hami.io/group-name": "other"}, "spec.schedulingGroup.podGroupName"),
        ({"podGroupName": 7}, {}, "spec.schedulingGroup.podGroupName"),
        ("bad", {}, "spec.schedulingGroup"),
    ],
)
def test_two_groups_claiming_a_pod_or_a_malformed_name_refuse_it(scheduling_group, annotations, field):
    pod = pod_object("w0", annotations=annotations)
    pod["spec"]["schedulingGroup"] = (
        {"podGroupName": scheduling_group}
        if isinstance(scheduling_group, str) and scheduling_group != "bad"
        else scheduling_group
    )
    with pytest.raises(PodInvalid) as caught:
        pod_objects.submission(pod)
    assert caught.value.field == field


def test_the_same_group_named_twice_is_one_claim():
    pod = member("w0", annotations={"hami.io/group-name": "train"})
    assert pod_objects.submission(pod)["group"].name == "train"


# -- against the stand-in -------------------------------------------------------------

db = pytest.mark.django_db(transaction=True)


def serve_workload_api(apiserver) -> None:
    apiserver.serve(WORKLOAD_PODGROUPS)
    apiserver.serve(WORKLOADS)


def members_due() -> None:
    """Wait until the group's members are due: a group's change clears their back-off in a
    statement of its own, just after the group's (pods are never locked after a group)."""
    wait_until(
        lambda: not Pod.objects.filter(group__name="train", next_attempt_at__isnull=False).exists(),
        what="the members due again",
    )


@db
def test_a_gang_of_four_waits_for_its_fourth_pod_then_is_placed_whole(kube, apiserver):
    serve_workload_api(apiserver)
    rack = {"topology": [{"key": "topology.kubernetes.io/rack"}]}
    apiserver.put(WORKLOAD_PODGROUPS, podgroup("train", 4, priority=100, schedulingConstraints=rack))
    gpu_node = node_object("gpu-1", t4_register("GPU-a", 4))
    gpu_node["metadata"]["labels"]["topology.kubernetes.io/rack"] = "rack-a"
    apiserver.put("nodes", gpu_node)
    for i in range(3):
        apiserver.put("pods", member(f"w{i}", gpu=1, mem=1000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Pod.objects.filter(name="w2").exists() and Card.objects.exists(), what="queued")
        row = group_row()
        assert (row.source, row.min_member, row.priority) == ("workload", 4, 100)
        assert row.topology_key == "topology.kubernetes.io/rack"
        assert Pod.objects.get(name="w0").group_id == row.pk
        assert not run_cycle().placed, "3 of 4 known: none placed"
        condition = wait_until(lambda: condition_of(apiserver), what="the PodGroup's condition")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert condition["message"] == "NotEnoughPods: gang default/train: 3/4 members known"
        waiting = wait_until(lambda: pod_scheduled(apiserver, "w0"), what="the member's condition")
        assert (waiting["status"], waiting["reason"]) == ("False", "Unschedulable")
        assert waiting["message"].startswith("NotEnoughPods: gang default/train: 3/4 members known")

        apiserver.put("pods", member("w3", gpu=1, mem=1000))
        wait_until(lambda: Pod.objects.filter(name="w3").exists(), what="the fourth member queued")
        assert len(run_cycle().placed) == 4
        wait_until(
            lambda: all(Pod.objects.get(name=f"w{i}").status == Pod.RUNNING for i in range(4)),
            what="all four bound",
        )
        scheduled = wait_until(
            lambda: (c := condition_of(apiserver)) and c["status"] == "True" and c,
            what="the condition turned True",
        )
    assert scheduled["reason"] == "Scheduled"
    assert apiserver.calls(
        "PATCH", "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups/train/status"
    )


@db
def test_a_waiting_gangs_members_carry_the_gang_verdict_in_their_condition(kube, apiserver):
    serve_workload_api(apiserver)
    apiserver.put(
        WORKLOADS, workload("train", {"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}}})
    )
    apiserver.put(
        WORKLOAD_PODGROUPS,
        podgroup(
            "train",
            None,
            schedulingPolicy={},
            workloadRef={"workloadName": "train", "templateName": "workers"},
        ),
    )
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 3)))
    for i in range(4):
        apiserver.put("pods", member(f"worker-{i}", gpu=1, mem=12000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(
            lambda: Pod.objects.filter(name="worker-3").exists() and Card.objects.exists(), what="queued"
        )
        # minCount from the Workload's template, once its PodGroup is read (the pods may come
        # first: the gang's size is unknown until then)
        wait_until(lambda: group_row().min_member == 4, what="minCount from the Workload's template")
        members_due()
        assert not run_cycle().placed, "3 cards for 4 members: none placed"
        condition = wait_until(
            lambda: (c := pod_scheduled(apiserver, "worker-0")) and "Gang" in c["message"] and c,
            what="the gang verdict on a member",
        )
        group_condition = wait_until(
            lambda: (c := condition_of(apiserver)) and "Gang" in c["message"] and c, what="on the PodGroup"
        )
    assert condition["reason"] == "Unschedulable"
    assert condition["message"].startswith(
        "GangUnschedulable: gang default/train: 3/4 members placeable; worker-3: "
    )
    assert group_condition["message"].startswith(
        "GangUnschedulable: gang default/train: 3/4 members placeable"
    )
    assert Pod.objects.filter(status=Pod.RUNNING).count() == 0
    assert not apiserver.calls("POST", "/binding"), "never a partially placed gang"


@db
def test_a_malformed_podgroup_is_refused_out_loud_and_its_pods_wait(kube, apiserver):
    serve_workload_api(apiserver)
    apiserver.put(WORKLOAD_PODGROUPS, podgroup("train", 0))
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 4)))
    for i in range(2):
        apiserver.put("pods", member(f"w{i}", gpu=1, mem=1000))
    with running(KubeAgent(kube, fast_options())):
        refused = wait_until(
            lambda: Event.objects.filter(kind=Event.OBJECT_REFUSED, subject="podgroup/default/train").first(),
            what="the refusal",
        )
        wait_until(lambda: Pod.objects.filter(name="w1").exists() and Card.objects.exists(), what="queued")
        assert not run_cycle().placed, "a gang of unknown size is not placed pod by pod"
        apiserver.update(
            WORKLOAD_PODGROUPS,
            "default",
            "train",
            lambda g: g["spec"].update(schedulingPolicy={"gang": {"minCount": 2}}),
        )
        wait_until(lambda: group_row().min_member == 2, what="the corrected object read")
        members_due()
        assert len(run_cycle().placed) == 2
    assert refused.reason == "PodGroupInvalid"
    assert refused.message.startswith("spec.schedulingPolicy.gang.minCount: must be between 1 and")


@db
def test_pods_naming_a_podgroup_not_created_yet_wait_for_it_then_start_whole(kube, apiserver):
    """The job controller made the pods first: their group has no size until its object is
    read, so none is placed pod by pod (kube-scheduler waits for the object too)."""
    serve_workload_api(apiserver)
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 4)))
    for i in range(2):
        apiserver.put("pods", member(f"w{i}", gpu=1, mem=1000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Pod.objects.filter(name="w1").exists() and Card.objects.exists(), what="queued")
        assert group_row().source == "workload"
        assert not run_cycle().placed, "a gang of unknown size is not placed pod by pod"
        apiserver.put(WORKLOAD_PODGROUPS, podgroup("train", 2))
        wait_until(lambda: group_row().min_member == 2, what="the object read")
        members_due()
        assert len(run_cycle().placed) == 2


@db
def test_two_objects_claiming_one_group_the_second_is_refused_naming_it(kube, apiserver):
    apiserver.serve(VOLCANO_PODGROUPS)
    apiserver.put(
        VOLCANO_PODGROUPS, {"metadata": {"name": "train", "namespace": "default"}, "spec": {"minMember": 2}}
    )
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: group_row() is not None, what="the Volcano PodGroup read")
        serve_workload_api(apiserver)  # read from the next resync on
        apiserver.put(WORKLOAD_PODGROUPS, podgroup("train", 4))
        refused = wait_until(
            lambda: Event.objects.filter(
                kind=Event.OBJECT_REFUSED, subject="podgroup/default/train", message__contains="claimed"
            ).first(),
            what="the refusal",
        )
    assert refused.message.startswith(
        "metadata.name: pod group default/train is claimed by a volcano PodGroup"
    )
    assert (group_row().source, group_row().min_member) == ("volcano", 2), "the first claim kept"


@db
def test_a_pod_whose_annotation_names_another_group_is_refused_and_the_gang_waits(kube, apiserver):
    serve_workload_api(apiserver)
    apiserver.put(WORKLOAD_PODGROUPS, podgroup("train", 2))
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 4)))
    apiserver.put("pods", member("w0", gpu=1))
    apiserver.put("pods", member("w1", gpu=1, annotations={"hami.io/group-name": "other"}))
    with running(KubeAgent(kube, fast_options())):
        refused = wait_until(
            lambda: Event.objects.filter(kind=Event.OBJECT_REFUSED, subject="pod/default/w1").first(),
            what="the pod refused",
        )
        wait_until(lambda: Pod.objects.filter(name="w0").exists() and Card.objects.exists(), what="queued")
        assert not run_cycle().placed
    assert "spec.schedulingGroup.podGroupName" in refused.message
    assert not Pod.objects.filter(name="w1").exists()
    assert group_row().reason == "gang default/train: 1/2 members known"


@db
def test_without_the_workload_api_nothing_is_listed(kube, apiserver):
    apiserver.put("pods", member("w0"))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Pod.objects.filter(name="w0").exists(), what="queued")
    assert not apiserver.calls(contains="scheduling.k8s.io/v1beta1/podgroups")
    assert not apiserver.calls(contains="/workloads")
    assert (group_row().source, group_row().min_member) == ("workload", 1)
