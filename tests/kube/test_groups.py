"""PodGroup CRDs, when served, give gangs their figures, and get the gang's phase and verdict
back in their status; absent CRDs are skipped quietly. Pod labels reach the submission."""

from __future__ import annotations

import time

import pytest

from kube import pods as pod_objects
from kube.agent import KubeAgent
from kube.groups import (
    COSCHEDULING_KIND,
    KAI_KIND,
    KAI_UNSCHEDULABLE,
    VOLCANO_KIND,
    GroupInvalid,
    GroupSync,
    group_fields,
)
from scheduling.engine import PodInvalid
from scheduling.models import Card, Event, Pod, PodGroup, Queue
from scheduling.pipeline import run_cycle

from .apiserver import COSCHEDULING_PODGROUPS, KAI_PODGROUPS, VOLCANO_PODGROUPS
from .conftest import fast_options, node_object, pod_object, running, t4_register, wait_until

VOLCANO_GROUP = "scheduling.k8s.io/group-name"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"


def podgroup(name: str, namespace: str = "default", **spec) -> dict:
    return {"kind": "PodGroup", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def member(name: str, group: str, labels: dict | None = None, **kwargs) -> dict:
    pod = pod_object(name, annotations={VOLCANO_GROUP: group} if labels is None else {}, **kwargs)
    if labels is not None:
        pod["metadata"]["labels"] = labels
    return pod


def group_row(name: str) -> PodGroup | None:
    return PodGroup.objects.select_related("queue").filter(namespace="default", name=name).first()


# -- reading the objects (pure) -------------------------------------------------------


def test_a_volcano_podgroup_gives_min_member_min_resources_queue_and_task_minimums():
    fields = group_fields(
        podgroup(
            "job",
            minMember=4,
            minTaskMember={"master": 1, "worker": 3},
            minResources={"nvidia.com/gpu": "4", "nvidia.com/gpumem": "16k", "cpu": "8"},
            queue="research",
            priorityClassName="high",
        ),
        VOLCANO_KIND,
    )
    assert fields == {
        "namespace": "default",
        "name": "job",
        "source": "volcano",
        "min_member": 4,
        "min_vgpus": 4,
        "min_gpumem": 16000,
        "min_gpucores": None,
        "queue": "research",
        "subgroups": [{"name": "master", "min_member": 1}, {"name": "worker", "min_member": 3}],
    }


def test_a_kai_podgroup_gives_min_member_queue_and_its_leaf_subgroups():
    spec = {
        "minMember": 4,
        "queue": "research",
        "priorityClassName": "train",
        "subGroups": [
            {"name": "decode", "minMember": 3},
            {"name": "decode-leader", "parent": "decode", "minMember": 1},
            {"name": "decode-workers", "parent": "decode", "minMember": 2},
            {"name": "prefill"},
        ],
    }
    fields = group_fields(podgroup("pg-serve", **spec), KAI_KIND)
    assert (fields["source"], fields["min_member"], fields["queue"]) == ("kai", 4, "research")
    assert fields["subgroups"] == [
        {"name": "decode-leader", "min_member": 1},
        {"name": "decode-workers", "min_member": 2},
        {"name": "prefill", "min_member": 0},
    ]
    spec.pop("minMember")  # KAI's minSubGroup form: the leaves' minimums together
    assert group_fields(podgroup("pg-serve", **spec), KAI_KIND)["min_member"] == 3
    with pytest.raises(GroupInvalid, match=r"spec.subGroups\[1\].minMember"):
        group_fields(podgroup("pg", subGroups=[{"name": "a"}, {"name": "b", "minMember": "x"}]), KAI_KIND)


def test_a_coscheduling_podgroup_gives_its_timeout_and_no_queue():
    fields = group_fields(
        podgroup("job", minMember=2, scheduleTimeoutSeconds=30, queue="x"), COSCHEDULING_KIND
    )
    assert (fields["min_member"], fields["schedule_timeout_seconds"], fields["queue"]) == (2, 30, None)
    assert group_fields(podgroup("job"), COSCHEDULING_KIND)["min_member"] == 1, "absent: each pod alone"


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"minMember": "three"}, "spec.minMember"),
        ({"minMember": -1}, "spec.minMember"),
        ({"minResources": {"nvidia.com/gpumem": "16Gi"}}, "spec.minResources.nvidia.com/gpumem"),
        ({"minResources": ["nvidia.com/gpu"]}, "spec.minResources"),
        ({"minTaskMember": {"worker": "3"}}, "spec.minTaskMember.worker"),
        ({"minTaskMember": ["worker"]}, "spec.minTaskMember"),
    ],
)
def test_an_unreadable_podgroup_is_refused_naming_the_field(spec, where):
    with pytest.raises(GroupInvalid) as caught:
        group_fields(podgroup("job", **spec), VOLCANO_KIND)
    assert caught.value.where == where


def test_labels_are_submitted_and_checked_like_annotations():
    pod = pod_object("w")
    pod["metadata"]["labels"] = {COSCHEDULING_LABEL: "job", "kai.scheduler/queue": "research"}
    assert pod_objects.submission(pod)["labels"] == {
        COSCHEDULING_LABEL: "job",
        "kai.scheduler/queue": "research",
    }
    pod["metadata"]["labels"] = {"team": 7}
    with pytest.raises(PodInvalid) as caught:
        pod_objects.submission(pod)
    assert caught.value.field == "labels.team"


# -- against the stand-in -------------------------------------------------------------

db = pytest.mark.django_db(transaction=True)


@db
def test_without_the_crds_nothing_is_listed_and_annotations_make_the_gang(kube, apiserver):
    apiserver.put(
        "pods", pod_object("w0", annotations={"hami.io/group-name": "job", "hami.io/group-min-member": "2"})
    )
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Pod.objects.filter(name="w0").exists(), what="the member queued")
        wait_until(lambda: len(apiserver.nonresource) >= 4, what="discovery asked again at resyncs")
    assert not apiserver.calls(contains="/podgroups"), "absent CRDs are never listed"
    assert (group_row("job").min_member, group_row("job").source) == (2, "annotation")


@db
def test_a_volcano_podgroup_makes_the_gang_and_gets_its_status(kube, apiserver, caplog):
    Queue.objects.create(name="research")
    apiserver.serve(VOLCANO_PODGROUPS)
    apiserver.put(
        VOLCANO_PODGROUPS,
        podgroup("job", minMember=3, minResources={"nvidia.com/gpu": "3"}, queue="research"),
    )
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 4)))
    for i in range(2):
        apiserver.put("pods", member(f"w{i}", "job", gpu=1))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Pod.objects.filter(name="w1").exists() and Card.objects.exists(), what="queued")
        job = group_row("job")
        assert (job.source, job.min_member, job.min_vgpus, job.queue.name) == ("volcano", 3, 3, "research")
        assert Pod.objects.get(name="w0").group_id == job.pk
        assert not run_cycle().placed
        status = wait_until(
            lambda: (apiserver.get(VOLCANO_PODGROUPS, "default", "job").get("status") or {}).get(
                "conditions"
            ),
            what="the status written",
        )
        (condition,) = status
        assert apiserver.get(VOLCANO_PODGROUPS, "default", "job")["status"]["phase"] == "Pending"
        assert (condition["type"], condition["reason"]) == ("Unschedulable", "NotEnoughPods")
        assert condition["message"] == group_row("job").reason

        apiserver.put("pods", member("w2", "job", gpu=1))
        wait_until(lambda: Pod.objects.filter(name="w2").exists())
        assert len(run_cycle().placed) == 3
        wait_until(
            lambda: apiserver.get(VOLCANO_PODGROUPS, "default", "job")["status"]["phase"] == "Running",
            what="Running written",
        )
        patches = len(apiserver.calls("PATCH", "/podgroups/job"))
        time.sleep(0.5)  # ten status passes more
    (condition,) = apiserver.get(VOLCANO_PODGROUPS, "default", "job")["status"]["conditions"]
    assert (condition["type"], condition["reason"]) == ("Scheduled", "GangScheduled")
    assert len(apiserver.calls("PATCH", "/podgroups/job")) == patches, "written only when it changes"
    assert not [r for r in caplog.records if r.levelname == "ERROR"], "resyncs apply cleanly"


def kai_member(name: str, part: str, gpu: int = 1) -> dict:
    """A pod as KAI's pod-grouper leaves it: `pod-group-name`, and its leaf subgroup's label."""
    pod = pod_object(name, annotations={"pod-group-name": "pg-serve"}, gpu=gpu)
    pod["metadata"]["labels"] = {"kai.scheduler/subgroup-name": part}
    return pod


@db
def test_a_kai_podgroup_makes_the_gang_holds_each_subgroup_and_gets_kais_condition(kube, apiserver):
    """minMember 4 of a leader and 3 workers: the workers fit, the leader (5 cards on a node
    of 4) never does, so none starts and KAI's UnschedulableOnNodePool condition says why; a
    leader that fits starts all four and the condition goes."""
    Queue.objects.create(name="research")
    apiserver.serve(KAI_PODGROUPS)
    subgroups = [{"name": "leader", "minMember": 1}, {"name": "workers", "minMember": 3}]
    apiserver.put(KAI_PODGROUPS, podgroup("pg-serve", minMember=4, queue="research", subGroups=subgroups))
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 4)))
    apiserver.put("pods", kai_member("serve-leader", "leader", gpu=5))
    for i in range(3):
        apiserver.put("pods", kai_member(f"serve-w{i}", "workers"))

    def conditions() -> list:
        return (apiserver.get(KAI_PODGROUPS, "default", "pg-serve").get("status") or {}).get(
            "schedulingConditions"
        )

    with running(KubeAgent(kube, fast_options())):
        wait_until(
            lambda: Pod.objects.filter(name="serve-w2").exists() and Card.objects.exists(), what="queued"
        )
        job = group_row("pg-serve")
        assert (job.source, job.min_member, job.queue.name) == ("kai", 4, "research")
        assert job.subgroups == [{"name": "leader", "min_member": 1}, {"name": "workers", "min_member": 3}]
        assert not run_cycle().placed
        (condition,) = wait_until(conditions, what="KAI's scheduling condition")
        assert (condition["type"], condition["reason"], condition["status"]) == (
            KAI_UNSCHEDULABLE,
            "Unschedulable",
            "True",
        )
        assert condition["message"].startswith("gang default/pg-serve: subgroup leader: 0/1 placeable; 3/4")
        assert condition["reasons"] == [{"reason": "GangUnschedulable", "message": condition["message"]}]

        apiserver.delete("pods", "default", "serve-leader")
        apiserver.put("pods", kai_member("serve-leader-1", "leader"))
        wait_until(lambda: Pod.objects.filter(name="serve-leader-1").exists(), what="the new leader queued")
        assert len(run_cycle().placed) == 4
        wait_until(lambda: conditions() == [], what="the condition removed")
    assert apiserver.calls("PATCH", "/podgroups/pg-serve/status")


@db
def test_a_coscheduling_podgroup_is_read_with_its_label_and_its_status_subresource(kube, apiserver):
    apiserver.serve(COSCHEDULING_PODGROUPS)
    apiserver.put(COSCHEDULING_PODGROUPS, podgroup("job", minMember=2, scheduleTimeoutSeconds=60))
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 2)))
    apiserver.put("pods", member("w0", "job", labels={COSCHEDULING_LABEL: "job"}, gpu=1))
    apiserver.put("pods", member("w1", "job", labels={COSCHEDULING_LABEL: "job"}, gpu=1))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Pod.objects.filter(name="w1").exists() and Card.objects.exists(), what="queued")
        job = group_row("job")
        assert (job.source, job.min_member, job.schedule_timeout_seconds) == ("coscheduling", 2, 60)
        assert Pod.objects.get(name="w0").labels == {COSCHEDULING_LABEL: "job"}
        assert len(run_cycle().placed) == 2
        wait_until(
            lambda: (
                (apiserver.get(COSCHEDULING_PODGROUPS, "default", "job").get("status") or {}).get("phase")
                == "Running"
            ),
            what="the phase written",
        )
        assert apiserver.calls("PATCH", "/podgroups/job/status")
        assert "conditions" not in apiserver.get(COSCHEDULING_PODGROUPS, "default", "job")["status"]


@db
def test_a_label_change_submits_the_pod_again(kube, apiserver):
    Queue.objects.create(name="research")
    apiserver.put("pods", pod_object("w0"))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: Pod.objects.filter(name="w0").exists(), what="queued")
        assert Pod.objects.get(name="w0").queue is None
        apiserver.update(
            "pods",
            "default",
            "w0",
            lambda p: p["metadata"].update(labels={"kai.scheduler/queue": "research"}),
        )
        wait_until(
            lambda: Pod.objects.get(name="w0").labels == {"kai.scheduler/queue": "research"},
            what="resubmitted",
        )
    assert Pod.objects.select_related("queue").get(name="w0").queue.name == "research"


@db
def test_an_unreadable_podgroup_is_refused_out_loud(kube, apiserver):
    apiserver.serve(VOLCANO_PODGROUPS)
    apiserver.put(VOLCANO_PODGROUPS, podgroup("job", minMember="three"))
    with running(KubeAgent(kube, fast_options())):
        refused = wait_until(
            lambda: Event.objects.filter(kind=Event.OBJECT_REFUSED, subject="podgroup/default/job").first(),
            what="the refusal",
        )
    assert refused.reason == "PodGroupInvalid"
    assert refused.message.startswith("spec.minMember: must be a whole number")
    assert group_row("job") is None


@db
def test_a_podgroup_the_writer_refuses_is_refused_naming_the_object_field():
    """The rows go through `services.store_pod_group`, which checks them as it checks an
    operator's job: a parent queue takes no pods, so the object is refused naming `spec.queue`
    and its row keeps what it held."""
    Queue.objects.create(name="team", parent=Queue.objects.create(name="org"))
    sync = GroupSync(api=None, kind=VOLCANO_KIND)  # the API is only used to write status back
    sync.apply(podgroup("job", minMember=2, queue="team"))
    assert (group_row("job").min_member, group_row("job").queue.name) == (2, "team")
    sync.apply(podgroup("job", minMember=3, queue="org"))
    refused = Event.objects.get(kind=Event.OBJECT_REFUSED, subject="podgroup/default/job")
    assert refused.reason == "PodGroupInvalid"
    assert refused.message == "spec.queue: queue org has children: only leaf queues take pods"
    assert (group_row("job").min_member, group_row("job").queue.name) == (2, "team")
