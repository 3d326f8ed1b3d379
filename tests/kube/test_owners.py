"""Gangs from owners: with no annotation written by hand, a JobSet, a RayCluster, a
PyTorchJob, an LWS group and a batch Job are each one gang, as many members as the owner
says, placed all or nothing; the PodGroups API and page name the owner. An owner gone, a
cycle of owners, two controllers or an unreadable count refuse the pod naming the object and
the field; an unknown kind is a job of one pod. Opt-in: the cluster-wide rule or the
namespace's label."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from rest_framework.test import APIClient

from kube.agent import KubeAgent
from kube.api import ApiError
from kube.owners import (
    ALL,
    ALL_REPLICAS,
    LWS_GROUP_INDEX,
    NAMESPACE_LABEL,
    OWNER_KINDS,
    OwnerGangs,
    OwnerInvalid,
    gang_name,
)
from kube.sync import NO_GANG, OWNER_REFUSED
from scheduling.api.tokens import issue_role_token
from scheduling.engine.annotations import JOBSET_JOB, KUBEFLOW_REPLICA, LWS_WORKER_INDEX
from scheduling.models import Card, Event, Pod, PodGroup
from scheduling.pipeline import run_cycle
from scheduling.roles import VIEWER, role_group

from .apiserver import KAI_PODGROUPS, OWNERS
from .conftest import fast_options, node_object, pod_object, running, t4_register, wait_until

db = pytest.mark.django_db(transaction=True)
REPLICA = KUBEFLOW_REPLICA


def owner(plural: str, name: str, spec: dict, by: dict | None = None, **metadata) -> dict:
    """An owner object as its operator writes it; `by`: its own controller."""
    group, version, kind = OWNERS[plural]
    meta = {"name": name, "namespace": "default", "uid": f"uid-{plural}-{name}", **metadata}
    if by is not None:
        meta["ownerReferences"] = [ref(by)]
    return {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": meta, "spec": spec}


def ref(obj: dict) -> dict:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def member(name: str, by: dict, labels: dict | None = None, **kwargs) -> dict:
    """A pod its controller made: an owner reference, no gang annotation."""
    pod = pod_object(name, gpu=1, mem=1000, **kwargs)
    pod["metadata"].update(uid=f"uid-pod-{name}", ownerReferences=[ref(by)], labels=dict(labels or {}))
    return pod


def opted_in(apiserver, value: str = "true", namespace: str = "default") -> None:
    apiserver.put("namespaces", {"metadata": {"name": namespace, "labels": {NAMESPACE_LABEL: value}}})


@dataclass
class Scenario:
    owners: list[tuple[str, dict]]
    pods: list[dict]
    group: str
    kind: str
    name: str
    subgroups: list[dict] = field(default_factory=list)
    crds: tuple[str, ...] = ()


def jobset() -> Scenario:
    """2 jobs x 4 pods: pod -> Job -> JobSet."""
    top = owner(
        "jobsets",
        "train",
        {
            "replicatedJobs": [
                {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4}}}
            ]
        },
    )
    jobs = [
        owner("jobs", f"train-workers-{i}", {"parallelism": 4, "completions": 4}, by=top) for i in range(2)
    ]
    stamped = {JOBSET_JOB: "workers"}  # what the JobSet controller labels its pods with
    pods = [member(f"train-workers-{i}-{k}", job, stamped) for i, job in enumerate(jobs) for k in range(4)]
    return Scenario(
        [("jobsets", top), *(("jobs", job) for job in jobs)],
        pods,
        "jobset-train",
        "JobSet",
        "train",
        [{"name": "workers", "min_member": 8}],
        ("jobsets",),
    )


def raycluster() -> Scenario:
    """A head and 8 workers, each owned by the RayCluster."""
    top = owner(
        "rayclusters",
        "ray",
        {"headGroupSpec": {}, "workerGroupSpecs": [{"groupName": "gpu", "replicas": 8, "maxReplicas": 8}]},
    )
    head = {"ray.io/node-type": "head", "ray.io/group": "headgroup"}
    worker = {"ray.io/node-type": "worker", "ray.io/group": "gpu"}
    pods = [member("ray-head", top, head)] + [member(f"ray-gpu-{k}", top, worker) for k in range(8)]
    return Scenario(
        [("rayclusters", top)],
        pods,
        "raycluster-ray",
        "RayCluster",
        "ray",
        [{"name": "head", "min_member": 1}, {"name": "gpu", "min_member": 8}],
        ("rayclusters",),
    )


def pytorchjob() -> Scenario:
    """A master and 3 workers."""
    top = owner(
        "pytorchjobs", "pt", {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}}
    )
    pods = [member("pt-master-0", top, {REPLICA: "master"})]
    pods += [member(f"pt-worker-{k}", top, {REPLICA: "worker"}) for k in range(3)]
    return Scenario(
        [("pytorchjobs", top)],
        pods,
        "pytorchjob-pt",
        "PyTorchJob",
        "pt",
        [{"name": "Master", "min_member": 1}, {"name": "Worker", "min_member": 3}],
        ("pytorchjobs",),
    )


def leaderworkerset() -> Scenario:
    """Size 4: the leader (leader StatefulSet -> LWS) and 3 workers (worker StatefulSet ->
    the leader pod -> ...), as the LWS controller makes them."""
    top = owner("leaderworkersets", "serve", {"replicas": 1, "leaderWorkerTemplate": {"size": 4}})
    leaders = owner("statefulsets", "serve", {"replicas": 1}, by=top)
    labels = {LWS_GROUP_INDEX: "0"}
    leader = member("serve-0", leaders, {**labels, LWS_WORKER_INDEX: "0"})
    workers = owner("statefulsets", "serve-0", {"replicas": 3}, by=leader)
    pods = [leader] + [
        member(f"serve-0-{k}", workers, {**labels, LWS_WORKER_INDEX: str(k)}) for k in range(1, 4)
    ]
    return Scenario(
        [("leaderworkersets", top), ("statefulsets", leaders), ("statefulsets", workers)],
        pods,
        "leaderworkerset-serve-0",
        "LeaderWorkerSet",
        "serve",
        [{"name": "leader", "min_member": 1}, {"name": "workers", "min_member": 3}],
        ("leaderworkersets",),
    )


def batch_job() -> Scenario:
    """Parallelism 6 (of 12 completions)."""
    top = owner("jobs", "batch", {"parallelism": 6, "completions": 12})
    return Scenario(
        [("jobs", top)], [member(f"batch-{k}", top) for k in range(6)], "job-batch", "Job", "batch"
    )


SCENARIOS = [jobset, raycluster, pytorchjob, leaderworkerset, batch_job]


def rows(*names: str) -> list[Pod]:
    return list(Pod.objects.filter(name__in=names))


def two_nodes(apiserver) -> None:
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 4)))
    apiserver.put("nodes", node_object("gpu-2", t4_register("GPU-b", 4)))


@db
@pytest.mark.parametrize("build", SCENARIOS, ids=lambda build: build.__name__)
def test_each_kind_is_one_gang_placed_all_or_nothing_and_shown_with_its_owner(kube, apiserver, build):
    scenario = build()
    for crd in scenario.crds:
        apiserver.serve(crd)
    opted_in(apiserver)
    for plural, obj in scenario.owners:
        apiserver.put(plural, obj)
    two_nodes(apiserver)
    *first, last = scenario.pods
    for pod in first:
        apiserver.put("pods", pod)
    names = [pod["metadata"]["name"] for pod in scenario.pods]
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: len(rows(*names)) == len(first) and Card.objects.count() == 8, what="queued")
        group = PodGroup.objects.get(namespace="default", name=scenario.group)
        assert (group.source, group.owner_kind, group.owner_name) == ("owner", scenario.kind, scenario.name)
        assert (group.min_member, group.subgroups) == (len(scenario.pods), scenario.subgroups)
        assert {pod.group_id for pod in rows(*names)} == {group.pk}
        assert not run_cycle().placed, "a member short: none is placed"
        assert "NotEnoughPods" in {c["reason"] for c in PodGroup.objects.get(pk=group.pk).conditions}
        # what `kubectl describe pod` shows of a waiting member: the gang's verdict
        short = f"gang default/{scenario.group}: {len(first)}/{len(names)} members known"
        wait_until(
            lambda: any(short in m for m in failed_scheduling(apiserver, names[0])), what="the member's event"
        )

        apiserver.put("pods", last)
        wait_until(lambda: len(rows(*names)) == len(names), what="the last member queued")
        assert len(run_cycle().placed) == len(names)
        wait_until(lambda: all(pod.status == Pod.RUNNING for pod in rows(*names)), what="all bound")
    top_plural, top = scenario.owners[0]
    assert len(apiserver.calls("GET", f"/{top_plural}/{top['metadata']['name']}")) == 1, "read once, cached"

    viewer = APIClient()
    viewer.credentials(HTTP_AUTHORIZATION=f"Token {issue_role_token('viewer-user', 'viewer')}")
    shown = viewer.get(f"/api/v1/podgroups/default/{scenario.group}/").json()
    assert shown["owner"] == {"kind": scenario.kind, "name": scenario.name}
    assert (shown["source"], shown["min_member"], shown["phase"]) == ("owner", len(names), "running")
    assert shown["subgroups"] == scenario.subgroups


def failed_scheduling(apiserver, name: str) -> list[str]:
    """The FailedScheduling events' messages on a pod: what `kubectl describe pod` shows."""
    return [
        e["message"]
        for e in apiserver.all("events")
        if e["involvedObject"]["name"] == name and e["reason"] == "FailedScheduling"
    ]


@db
def test_a_pytorchjob_of_min_available_4_never_starts_on_4_workers_without_its_master(kube, apiserver):
    """A master and 7 workers, minAvailable 4: the workers fit, the master (5 cards on nodes of
    4) never does, so nothing starts, and each member's event names the master's part."""
    apiserver.serve("pytorchjobs")
    opted_in(apiserver)
    spec = {
        "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 7}},
        "runPolicy": {"schedulingPolicy": {"minAvailable": 4}},
    }
    top = owner("pytorchjobs", "pt", spec)
    apiserver.put("pytorchjobs", top)
    two_nodes(apiserver)
    master = member("pt-master-0", top, {REPLICA: "master"})
    master["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "5"
    pods = [master] + [member(f"pt-worker-{k}", top, {REPLICA: "worker"}) for k in range(7)]
    for pod in pods:
        apiserver.put("pods", pod)
    names = [pod["metadata"]["name"] for pod in pods]
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: len(rows(*names)) == 8 and Card.objects.count() == 8, what="queued")
        group = PodGroup.objects.get(name="pytorchjob-pt")
        assert group.min_member == 4
        assert group.subgroups == [{"name": "Master", "min_member": 1}, {"name": "Worker", "min_member": 3}]
        assert not run_cycle().placed
        group.refresh_from_db()
        assert group.reason.startswith(
            "gang default/pytorchjob-pt: subgroup Master: 0/1 placeable; 3/4 members placeable"
        )
        wait_until(lambda: failed_scheduling(apiserver, "pt-worker-0"), what="the worker's event")
    assert all(pod.status == Pod.PENDING for pod in rows(*names))
    assert "subgroup Master: 0/1 placeable" in failed_scheduling(apiserver, "pt-worker-0")[-1]


@db
def test_an_owners_scale_reaches_its_gang_at_the_resync_without_a_new_pod(kube, apiserver):
    """A Job of parallelism 3 with 2 pods waits for its third; scaled to 2, the gang follows
    once the cached Job is stale (no pod submitted again) and starts, saying why."""
    opted_in(apiserver)
    job = owner("jobs", "batch", {"parallelism": 3, "completions": 3})
    apiserver.put("jobs", job)
    two_nodes(apiserver)
    for k in range(2):
        apiserver.put("pods", member(f"batch-{k}", job))
    agent = KubeAgent(kube, fast_options())
    assert agent.pod_sync.owners is not None
    agent.pod_sync.owners.ttl = 0.3  # the owner is read again this soon (30 s in a cluster)
    with running(agent):
        wait_until(lambda: len(rows("batch-0", "batch-1")) == 2 and Card.objects.count() == 8, what="queued")
        assert PodGroup.objects.get(name="job-batch").min_member == 3
        assert not run_cycle().placed, "a member short"

        apiserver.put("jobs", owner("jobs", "batch", {"parallelism": 2, "completions": 2}))
        wait_until(lambda: PodGroup.objects.get(name="job-batch").min_member == 2, what="the gang resized")
        # its members' back-off is cleared just after (pods are never locked after a group)
        wait_until(
            lambda: not Pod.objects.filter(group__name="job-batch", next_attempt_at__isnull=False).exists(),
            what="the members due again",
        )
        assert len(run_cycle().placed) == 2
    group = PodGroup.objects.get(name="job-batch")
    scaled = [c for c in group.conditions if c["reason"] == "OwnerScaled"]
    assert [c["message"] for c in scaled] == ["min_member 3 -> 2: Job batch scaled"]


@db
def test_a_kai_podgroup_object_sizes_its_gang_not_the_pods_owner(kube, apiserver):
    """KAI's pod-grouper names the gang (`pod-group-name`) and made its PodGroup (minMember
    2); the pods' Job says parallelism 6: the object's figures win, with gangs from owners on."""
    opted_in(apiserver)
    apiserver.serve(KAI_PODGROUPS)
    kai = {"metadata": {"name": "pg-batch", "namespace": "default"}, "spec": {"minMember": 2}}
    apiserver.put(KAI_PODGROUPS, kai)
    job = owner("jobs", "batch", {"parallelism": 6})
    apiserver.put("jobs", job)
    two_nodes(apiserver)
    for k in range(2):
        pod = member(f"batch-{k}", job)
        pod["metadata"]["annotations"]["pod-group-name"] = "pg-batch"
        apiserver.put("pods", pod)
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: len(rows("batch-0", "batch-1")) == 2 and Card.objects.count() == 8, what="queued")
        group = PodGroup.objects.get(name="pg-batch")
        assert (group.source, group.min_member, group.owner_kind) == ("kai", 2, "")
        assert len(run_cycle().placed) == 2


@db
def test_the_pod_groups_page_names_the_owner(kube, apiserver, client, django_user_model):
    scenario = batch_job()
    opted_in(apiserver)
    apiserver.put("jobs", scenario.owners[0][1])
    apiserver.put("pods", scenario.pods[0])
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: PodGroup.objects.filter(name="job-batch").exists(), what="the gang made")
    user = django_user_model.objects.create_user("olga", password="x")
    user.groups.add(role_group(VIEWER))
    client.force_login(user)
    assert "Job batch" in client.get("/queues/").content.decode()
    assert "Job batch" in client.get("/jobs/default/job-batch/").content.decode()


# -- the opt-in -------------------------------------------------------------------------


@db
def test_without_the_opt_in_pods_of_a_job_are_each_on_their_own(kube, apiserver):
    scenario = batch_job()
    apiserver.put("jobs", scenario.owners[0][1])
    apiserver.put("pods", scenario.pods[0])
    two_nodes(apiserver)
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: rows("batch-0") and Card.objects.exists(), what="queued")
        assert rows("batch-0")[0].group_id is None
        assert len(run_cycle().placed) == 1
    assert not apiserver.calls("GET", "/jobs/"), "the owners are not read"


@db
def test_the_cluster_wide_rule_covers_namespaces_but_one_labelled_false(kube, apiserver):
    opted_in(apiserver, "false", namespace="serving")
    for namespace in ("default", "serving"):
        job = owner("jobs", "batch", {"parallelism": 2}, namespace=namespace, uid=f"uid-job-{namespace}")
        apiserver.put("jobs", job)
        pod = member(f"batch-{namespace}", job, namespace=namespace)
        apiserver.put("pods", pod)
    with running(KubeAgent(kube, fast_options(gangs_from_owners=ALL))):
        wait_until(lambda: len(rows("batch-default", "batch-serving")) == 2, what="queued")
    groups = {
        pod.name: pod.group.name if pod.group else None for pod in rows("batch-default", "batch-serving")
    }
    assert groups == {"batch-default": "job-batch", "batch-serving": None}


@db
def test_a_group_the_pod_names_itself_wins_over_its_owner(kube, apiserver):
    opted_in(apiserver)
    job = owner("jobs", "batch", {"parallelism": 4})
    pod = member("batch-0", job)
    pod["metadata"]["annotations"] = {"hami.io/group-name": "mine", "hami.io/group-min-member": "1"}
    apiserver.put("pods", pod)  # its Job is not even there: it is never read
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: rows("batch-0"), what="queued")
    assert rows("batch-0")[0].group.name == "mine"
    assert not apiserver.calls("GET", "/jobs/")


def test_a_deployment_is_a_gang_only_with_the_all_replicas_opt_in():
    deployment = owner("deployments", "infer", {"replicas": 3})
    read = OWNER_KINDS[("apps", "Deployment")].reader
    assert read is not None
    assert read(deployment, {}) is None
    deployment["metadata"]["annotations"] = {ALL_REPLICAS: "true"}
    assert read(deployment, {}).members == 3


@db
def test_a_deployment_opted_in_is_one_gang_through_its_replica_set(kube, apiserver):
    opted_in(apiserver)
    top = owner("deployments", "infer", {"replicas": 2}, annotations={ALL_REPLICAS: "true"})
    replicas = owner("replicasets", "infer-5d8f", {"replicas": 2}, by=top)
    for plural, obj in (("deployments", top), ("replicasets", replicas)):
        apiserver.put(plural, obj)
    for k in range(2):
        apiserver.put("pods", member(f"infer-5d8f-{k}", replicas))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: len(rows("infer-5d8f-0", "infer-5d8f-1")) == 2, what="queued")
    group = PodGroup.objects.get(name="deployment-infer")
    assert (group.min_member, group.owner_kind) == (2, "Deployment")


# -- counts read from each kind (pure) ----------------------------------------------------


@pytest.mark.parametrize(
    ("plural", "spec", "members"),
    [
        ("jobs", {"parallelism": 6, "completions": 4}, 4),
        ("jobs", {}, None),  # parallelism 1: nothing to wait for together
        ("tfjobs", {"tfReplicaSpecs": {"PS": {"replicas": 1}, "Worker": {"replicas": 2}}}, 3),
        ("mpijobs", {"mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 4}}}, 5),
        (
            "pytorchjobs",
            {
                "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 7}},
                "runPolicy": {"schedulingPolicy": {"minAvailable": 4}},
            },
            4,
        ),
        (
            "rayclusters",
            {
                "enableInTreeAutoscaling": True,
                "workerGroupSpecs": [{"replicas": 8, "minReplicas": 2, "numOfHosts": 2}],
            },
            5,
        ),
        ("rayjobs", {"rayClusterSpec": {"workerGroupSpecs": [{"replicas": 2}]}}, 3),
        ("statefulsets", {"replicas": 3}, None),  # no all-replicas opt-in
    ],
)
def test_each_registered_kind_reads_its_members(plural, spec, members):
    obj = owner(plural, "x", spec)
    group, _, kind = OWNERS[plural]
    reader = OWNER_KINDS[(group, kind)].reader
    assert reader is not None
    count = reader(obj, {})
    assert (count.members if count else None) == members


@pytest.mark.parametrize(
    ("plural", "spec", "where"),
    [
        ("jobs", {"parallelism": "6"}, "spec.parallelism"),
        ("jobsets", {"replicatedJobs": [{"replicas": -1}]}, "spec.replicatedJobs[0].replicas"),
        (
            "jobsets",
            {"replicatedJobs": [{"template": {"spec": {"parallelism": 2.5}}}]},
            "spec.replicatedJobs[0].template.spec.parallelism",
        ),
        ("jobsets", {"replicatedJobs": "workers"}, "spec.replicatedJobs"),
        ("rayclusters", {"workerGroupSpecs": [{"replicas": "8"}]}, "spec.workerGroupSpecs[0].replicas"),
        ("pytorchjobs", {"pytorchReplicaSpecs": {"Worker": {"replicas": None}}}, None),
        (
            "pytorchjobs",
            {"pytorchReplicaSpecs": {"Worker": {"replicas": True}}},
            "spec.pytorchReplicaSpecs.Worker.replicas",
        ),
        ("leaderworkersets", {"leaderWorkerTemplate": {"size": 0}}, "spec.leaderWorkerTemplate.size"),
    ],
)
def test_an_unreadable_count_names_the_owner_and_its_field(plural, spec, where):
    group, _, kind = OWNERS[plural]
    reader = OWNER_KINDS[(group, kind)].reader
    assert reader is not None
    if where is None:  # absent: the default, as the operator reads it
        assert reader(owner(plural, "x", spec), {}) is None
        return
    with pytest.raises(OwnerInvalid) as caught:
        reader(owner(plural, "x", spec), {})
    assert (caught.value.subject, caught.value.where) == (f"{kind.lower()}/default/x", where)


# -- bad input: refused out loud, never a partial gang -------------------------------------


def refusals(name: str) -> list[str]:
    return list(
        Event.objects.filter(
            kind=Event.OBJECT_REFUSED, subject=f"pod/default/{name}", reason=OWNER_REFUSED
        ).values_list("message", flat=True)
    )


def warnings(apiserver, name: str) -> list[str]:
    return [
        event["message"]
        for event in apiserver.all("events")
        if event.get("reason") == OWNER_REFUSED and event["involvedObject"]["name"] == name
    ]


@db
def test_a_missing_owner_refuses_the_pod_and_the_gang_waits_for_it(kube, apiserver):
    """Two pods of a Job of 2 read; the third pod's Job is gone (404): it is refused naming its
    `ownerReferences[0]`, and the gang of 2 is placed only once both its members are there."""
    opted_in(apiserver)
    job = owner("jobs", "batch", {"parallelism": 2})
    apiserver.put("jobs", job)
    apiserver.put("pods", member("batch-0", job))
    gone = owner("jobs", "gone", {"parallelism": 2})
    apiserver.put("pods", member("gone-0", gone))
    two_nodes(apiserver)
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: refusals("gone-0") and warnings(apiserver, "gone-0"), what="refused out loud")
        wait_until(lambda: rows("batch-0") and Card.objects.exists(), what="queued")
        assert not run_cycle().placed
        apiserver.put("pods", member("batch-1", job))
        wait_until(lambda: len(rows("batch-0", "batch-1")) == 2)
        assert sorted(name for name, _, _ in run_cycle().placed) == ["default/batch-0", "default/batch-1"]
    (message,) = set(refusals("gone-0"))
    assert message == (
        "no gang from its owners: pod/default/gone-0: metadata.ownerReferences[0]: "
        "Job 'gone': not found (jobs.batch \"gone\" not found)"
    )
    assert not rows("gone-0"), "never queued, never placed alone"


@db
def test_a_crd_not_installed_reads_as_a_missing_owner(kube, apiserver):
    opted_in(apiserver)
    top = owner("jobsets", "train", {"replicatedJobs": [{"replicas": 2}]})
    apiserver.put("jobsets", top)  # stored, but the CRD is not served: 404 as on a real cluster
    job = owner("jobs", "train-0", {"parallelism": 2}, by=top)
    apiserver.put("jobs", job)
    apiserver.put("pods", member("train-0-0", job))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: refusals("train-0-0"), what="refused")
    assert refusals("train-0-0")[0].endswith(
        "job/default/train-0: metadata.ownerReferences[0]: JobSet 'train': "
        "not found (the server could not find the requested resource)"
    )


@db
def test_an_owner_cycle_and_two_controllers_are_refused_naming_the_field(kube, apiserver):
    opted_in(apiserver)
    first = owner("replicasets", "a", {"replicas": 2})
    second = owner("replicasets", "b", {"replicas": 2}, by=first)
    first["metadata"]["ownerReferences"] = [ref(second)]
    apiserver.put("replicasets", first)
    apiserver.put("replicasets", second)
    apiserver.put("pods", member("looped", first))
    torn = member("torn", first)
    torn["metadata"]["ownerReferences"].append(ref(owner("jobs", "other", {})))
    apiserver.put("pods", torn)
    with running(KubeAgent(kube, fast_options())) as _:
        wait_until(lambda: refusals("looped") and refusals("torn"), what="both refused")
    assert "closes a cycle of owners" in refusals("looped")[0]
    assert refusals("looped")[0].startswith("no gang from its owners: replicaset/default/")
    assert (
        "pod/default/torn: metadata.ownerReferences: two controllers claim it: ReplicaSet/a, Job/other"
        in (refusals("torn")[0])
    )
    assert not rows("looped", "torn")


@db
def test_an_unknown_kind_is_a_job_of_one_pod(kube, apiserver):
    opted_in(apiserver)
    pod = member("daemon-x", {**owner("jobs", "x", {}), "apiVersion": "apps/v1", "kind": "DaemonSet"})
    apiserver.put("pods", pod)
    two_nodes(apiserver)
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: rows("daemon-x") and Card.objects.exists(), what="queued")
        assert rows("daemon-x")[0].group_id is None
        assert len(run_cycle().placed) == 1
        (note,) = wait_until(
            lambda: [e for e in apiserver.all("events") if e.get("reason") == NO_GANG], what="the note"
        )
    assert (note["type"], note["involvedObject"]["name"]) == ("Normal", "daemon-x")
    assert note["message"] == (
        "pod/default/daemon-x: metadata.ownerReferences[0].kind: DaemonSet (apps) is not a kind "
        "gangs are read from; the pod is a job of its own"
    )


@pytest.mark.django_db
def test_an_owners_gang_is_resized_and_keeps_its_owner_when_the_owner_scales():
    from scheduling import services
    from scheduling.engine.annotations import GroupRef

    def ref(members: int) -> GroupRef:
        return GroupRef("job-batch", "owner", members, owner_kind="Job", owner_name="batch")

    services.submit_pod(
        "default",
        "batch-0",
        containers=[{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        origin=Pod.KUBERNETES,
        group=ref(4),
    )
    services.submit_pod(
        "default",
        "batch-1",
        containers=[{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        origin=Pod.KUBERNETES,
        group=ref(6),
    )
    group = PodGroup.objects.get(name="job-batch")
    assert (group.min_member, group.owner_kind, group.owner_name, group.source) == (
        6,
        "Job",
        "batch",
        "owner",
    )
    scaled = [c["message"] for c in group.conditions if c["reason"] == PodGroup.OWNER_SCALED]
    assert scaled == ["min_member 4 -> 6: Job batch scaled"], "said as the resync's rescale says it"


def test_an_lws_with_two_groups_makes_a_gang_of_each():
    lws = owner("leaderworkersets", "serve", {"replicas": 2, "leaderWorkerTemplate": {"size": 3}})
    read = OWNER_KINDS[("leaderworkerset.x-k8s.io", "LeaderWorkerSet")].reader
    assert read is not None
    second = read(lws, {"metadata": {"labels": {LWS_GROUP_INDEX: "1"}}})
    assert second is not None and (second.members, second.part) == (3, "1")
    assert gang_name("LeaderWorkerSet", "serve", "u", second.part) == "leaderworkerset-serve-1"
    assert gang_name("Job", "x" * 250, "0a1b") == "job-0a1b", "too long a name: the uid"


def test_the_rule_is_all_or_none():
    with pytest.raises(ValueError, match="HAMI_GANGS_FROM_OWNERS"):
        OwnerGangs(None, "some")  # type: ignore[arg-type]


def every_owner_kind(apiserver) -> list[str]:
    """Opt `default` in and put one pod under each registered kind (each gang a member short,
    so none is placed): what the RBAC test needs read once. The pods' names."""
    opted_in(apiserver)
    for plural, (group, _, _) in OWNERS.items():
        if group not in ("apps", "batch"):
            apiserver.serve(plural)
    notes = {ALL_REPLICAS: "true"}
    deployment = owner("deployments", "d", {"replicas": 2}, annotations=notes)
    jobset = owner("jobsets", "js", {"replicatedJobs": [{"replicas": 2}]})
    rayjob = owner("rayjobs", "rj", {"rayClusterSpec": {"workerGroupSpecs": [{"replicas": 1}]}})
    chains = [
        ("replicasets", owner("replicasets", "d-1", {"replicas": 2}, by=deployment), deployment),
        ("statefulsets", owner("statefulsets", "s", {"replicas": 2}, annotations=notes), None),
        ("jobs", owner("jobs", "js-0", {}, by=jobset), jobset),
        ("leaderworkersets", owner("leaderworkersets", "l", {"leaderWorkerTemplate": {"size": 2}}), None),
        ("rayclusters", owner("rayclusters", "rj-c", {}, by=rayjob), rayjob),
        (
            "pytorchjobs",
            owner("pytorchjobs", "p", {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}),
            None,
        ),
        ("tfjobs", owner("tfjobs", "t", {"tfReplicaSpecs": {"Worker": {"replicas": 2}}}), None),
        ("mpijobs", owner("mpijobs", "m", {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}}), None),
    ]
    names = []
    for plural, direct, top in chains:
        if top is not None:
            apiserver.put(f"{top['kind'].lower()}s", top)
        apiserver.put(plural, direct)
        names.append(f"{plural}-member")
        apiserver.put("pods", member(names[-1], direct))
    return names


def test_the_stand_in_discovers_the_operators_only_once_installed(kube, apiserver):
    """As a real server: `batch/v1` and `apps/v1` are built in; an operator's group is 404 until
    its CRD is installed, then lists its resource; a GET of its object is 404 before too."""
    assert "jobs" in kube.served_resources("batch", "v1")
    assert {"replicasets", "deployments", "statefulsets"} <= kube.served_resources("apps", "v1")
    assert kube.served_resources("jobset.x-k8s.io", "v1alpha2") is None
    apiserver.put("jobsets", owner("jobsets", "train", {}))
    with pytest.raises(ApiError) as caught:
        kube.get_jobsets("jobset.x-k8s.io", "v1alpha2", "default", "train")
    assert caught.value.status == 404
    apiserver.serve("jobsets")
    assert kube.served_resources("jobset.x-k8s.io", "v1alpha2") == {"jobsets"}
    assert kube.get_jobsets("jobset.x-k8s.io", "v1alpha2", "default", "train")["kind"] == "JobSet"
