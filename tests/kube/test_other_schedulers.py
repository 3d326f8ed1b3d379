"""Other schedulers' names and annotations: the agent serves several scheduler names at once
(`HAMI_SCHEDULER_NAMES`: operators that stamp `volcano` are routed here), reads KAI's
`pod-group-name` (the gang sized by its owner, or by `hami.io/group-min-member`), and
Volcano's `minTaskMember` onto the group."""

from __future__ import annotations

import pytest

from kube.agent import KubeAgent
from kube.webhook.review import takes
from scheduling.models import Card, Pod, PodGroup, Queue
from scheduling.pipeline import run_cycle

from .apiserver import VOLCANO_PODGROUPS
from .conftest import fast_options, node_object, pod_object, running, t4_register, wait_until
from .test_owners import member, opted_in, owner

db = pytest.mark.django_db(transaction=True)
KAI_GROUP = "pod-group-name"


def rows(*names: str) -> dict[str, Pod]:
    return {pod.name: pod for pod in Pod.objects.select_related("group", "queue").filter(name__in=names)}


@db
def test_pods_of_every_scheduler_name_served_are_placed_and_no_others(kube, apiserver):
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 4)))
    for name, scheduler in (
        ("ours", "hami-scheduler"),
        ("from-volcano", "volcano"),
        ("kais", "kai-scheduler"),
        ("defaults", "default-scheduler"),
    ):
        apiserver.put("pods", pod_object(name, gpu=1, mem=1000, scheduler=scheduler))
    agent = KubeAgent(kube, fast_options(other_scheduler_names=("volcano",)))
    assert agent.pod_selector() == "spec.schedulerName!=default-scheduler"
    with running(agent):
        wait_until(lambda: len(rows("ours", "from-volcano")) == 2 and Card.objects.exists(), what="queued")
        assert sorted(name for name, _, _ in run_cycle().placed) == ["default/from-volcano", "default/ours"]
        wait_until(
            lambda: all(pod.status == Pod.RUNNING for pod in rows("ours", "from-volcano").values()),
            what="both bound",
        )
    assert set(rows("ours", "from-volcano", "kais", "defaults")) == {"ours", "from-volcano"}
    assert apiserver.get("pods", "default", "kais")["spec"].get("nodeName") is None
    listed = [path for _, path, *_ in apiserver.calls("GET", "/api/v1/pods?")]
    assert any("fieldSelector=spec.schedulerName%21%3Ddefault-scheduler" in path for path in listed), listed


def test_one_name_keeps_the_narrow_selector_and_default_scheduler_among_them_watches_all(kube):
    assert KubeAgent(kube, fast_options()).pod_selector() == "spec.schedulerName=hami-scheduler"
    every = KubeAgent(kube, fast_options(other_scheduler_names=("default-scheduler",)))
    assert every.pod_selector() == ""


def test_the_webhook_takes_pods_of_every_name_served():
    served = ("hami-scheduler", "volcano")
    assert takes({"spec": {"schedulerName": "volcano"}}, served, "off")
    assert not takes({"spec": {"schedulerName": "kai-scheduler"}}, served, "off")
    assert takes({"spec": {"schedulerName": "hami-scheduler"}}, "hami-scheduler", "off")


@db
def test_kais_annotation_names_the_gang_and_its_owner_sizes_it(kube, apiserver):
    """KAI's pod-grouper stamps `pod-group-name` and the `kai.scheduler/queue` label: the gang
    keeps KAI's name and queue, its size is the Job's parallelism."""
    Queue.objects.create(name="research")
    opted_in(apiserver)
    job = owner("jobs", "batch", {"parallelism": 2})
    apiserver.put("jobs", job)
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 2)))
    labels = {"kai.scheduler/queue": "research"}
    first = member("batch-0", job, labels, annotations={KAI_GROUP: "pg-batch-0a1b"})
    apiserver.put("pods", first)
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: rows("batch-0") and Card.objects.exists(), what="queued")
        group = PodGroup.objects.get(name="pg-batch-0a1b")
        assert (group.source, group.min_member, group.owner_kind, group.owner_name) == (
            "kai",
            2,
            "Job",
            "batch",
        )
        assert rows("batch-0")["batch-0"].queue.name == "research"
        assert not run_cycle().placed, "one of two: none placed"
        apiserver.put("pods", member("batch-1", job, labels, annotations={KAI_GROUP: "pg-batch-0a1b"}))
        wait_until(lambda: len(rows("batch-0", "batch-1")) == 2, what="the second queued")
        assert len(run_cycle().placed) == 2


@db
def test_kais_annotation_alone_takes_the_min_member_annotation(kube, apiserver):
    apiserver.put("pods", pod_object("w0", annotations={KAI_GROUP: "pg", "hami.io/group-min-member": "3"}))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: rows("w0"), what="queued")
    group = PodGroup.objects.get(name="pg")
    assert (group.source, group.min_member, group.owner_kind) == ("kai", 3, "")


@db
def test_two_groups_claiming_one_pod_park_it_naming_the_field(kube, apiserver):
    """Volcano's annotation and KAI's name two groups: neither is taken, the pod waits parked
    with the field named, and no gang is made of it."""
    notes = {"scheduling.k8s.io/group-name": "a", KAI_GROUP: "b"}
    apiserver.put("pods", pod_object("torn", annotations=notes))
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 2)))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: rows("torn") and Card.objects.exists(), what="stored")
        assert not run_cycle().placed
    torn = rows("torn")["torn"]
    assert torn.group is None and not PodGroup.objects.exists()
    assert torn.status in (Pod.REJECTED, Pod.PENDING)
    assert "pod-group-name" in f"{torn.error} {torn.reason}"
    assert "names group 'b' but scheduling.k8s.io/group-name names 'a'" in f"{torn.error} {torn.reason}"


@db
def test_volcanos_task_minimums_are_recorded_on_the_group(kube, apiserver):
    apiserver.serve(VOLCANO_PODGROUPS)
    apiserver.put(
        VOLCANO_PODGROUPS,
        {
            "metadata": {"name": "job", "namespace": "default"},
            "spec": {"minMember": 3, "minTaskMember": {"master": 1, "worker": 2}},
        },
    )
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: PodGroup.objects.filter(name="job").exists(), what="read")
    group = PodGroup.objects.get(name="job")
    assert (group.min_member, group.subgroups) == (
        3,
        [{"name": "master", "min_member": 1}, {"name": "worker", "min_member": 2}],
    )
