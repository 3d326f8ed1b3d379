"""The Kubernetes scheduling fields through the services (SPEC 10): what a pod and a node keep,
what is refused naming the field, scheduling gates, and the pods others bound."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.engine import PodInvalid, ScenarioError
from scheduling.models import BoundPod, Node, Pod
from scheduling.services.fields import FieldProblems

pytestmark = pytest.mark.django_db

GPU = {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}
GATE = [{"name": "kueue.x-k8s.io/admission"}]


def container(**resources) -> dict:
    return {
        "name": "main",
        "resources": {"limits": {**GPU["limits"]}, "requests": resources},
        "ports": [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}],
    }


def submit(name="p", scheduling=None, containers=None, **kwargs) -> Pod:
    return services.submit_pod(
        "default", name, {}, containers or [container(cpu="2", memory="4Gi")], scheduling=scheduling, **kwargs
    )


def test_a_pod_keeps_its_scheduling_fields_requests_and_host_ports():
    scheduling = {
        "nodeSelector": {"pool": "training"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
                }
            }
        },
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
        ],
        "nodeName": "node-3",
    }
    pod = submit(scheduling=scheduling, labels={"app": "train"})
    pod.refresh_from_db()
    assert pod.scheduling == scheduling and not pod.gated
    assert pod.containers[0]["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert pod.containers[0]["ports"][0]["hostPort"] == 8080
    spec = pod.as_spec()
    assert (spec.node_selector, spec.node_name, spec.labels) == (
        {"pool": "training"},
        "node-3",
        {"app": "train"},
    )
    assert spec.tolerations == scheduling["tolerations"]


def test_the_same_scheduling_fields_again_change_nothing_and_new_ones_requeue():
    submit(scheduling={"nodeSelector": {"pool": "a"}})
    before = Pod.objects.get().revision
    submit(scheduling={"nodeSelector": {"pool": "a"}})
    assert Pod.objects.get().revision == before
    submit(scheduling={"nodeSelector": {"pool": "b"}})
    assert Pod.objects.get().scheduling == {"nodeSelector": {"pool": "b"}}


@pytest.mark.parametrize(
    ("scheduling", "containers", "field"),
    [
        ({"tolerations": [{"key": "a", "effect": "NoRun"}]}, None, "tolerations[0].effect"),
        ({"tolerations": [{"key": "a", "operator": "Sometimes"}]}, None, "tolerations[0].operator"),
        ({"nodeSelector": {"pool": 3}}, None, "nodeSelector"),
        ({"schedulingGates": [{"title": "x"}]}, None, "schedulingGates[0].name"),
        (
            {"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "z"}]},
            None,
            "topologySpreadConstraints[0].maxSkew",
        ),
        ({"affinity": {"nodeAffinityX": {}}}, None, "affinity.nodeAffinityX"),
        ({"nodeClass": "x"}, None, "nodeClass"),
        (None, [container(cpu="4 cores")], "containers[0].resources.requests.cpu"),
        (
            None,
            [{"name": "m", "resources": GPU, "ports": [{"containerPort": 80, "hostPort": 70000}]}],
            "containers[0].ports[0].hostPort",
        ),
    ],
)
def test_malformed_fields_are_refused_naming_the_field(scheduling, containers, field):
    with pytest.raises(PodInvalid) as refused:
        submit(scheduling=scheduling, containers=containers)
    assert refused.value.field == field
    assert not Pod.objects.exists()


NEAR = {
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "Near", "values": ["a"]}]}
                ]
            }
        }
    }
}
NEAR_FIELD = (
    "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    ".nodeSelectorTerms[0].matchExpressions[0].operator"
)


def port(**fields) -> list[dict]:
    return [{"name": "m", "resources": GPU, "ports": [{"containerPort": 80, **fields}]}]


#: Values only the engine's rules (`engine.kubefields`) refuse, and the field each names.
DEEP_CASES = [
    (NEAR, None, None, NEAR_FIELD),
    ({"tolerations": [{"key": "a", "operator": "Exists", "value": "v"}]}, None, None, "tolerations[0].value"),
    ({"tolerations": [{"key": "a", "effect": "NoRun"}]}, None, None, "tolerations[0].effect"),
    (None, [container(cpu="4 cores")], None, "containers[0].resources.requests.cpu"),
    (None, port(hostPort=70000), None, "containers[0].ports[0].hostPort"),
    (None, port(protocol="XTP"), None, "containers[0].ports[0].protocol"),
    (None, None, {"team a": "x"}, "labels.team a"),
    ({"nodeSelector": {"pool": "a b"}}, None, None, "nodeSelector.pool"),
]


@pytest.mark.parametrize(("scheduling", "containers", "labels", "field"), DEEP_CASES)
def test_the_engine_rules_refuse_what_the_shape_allows_naming_the_field(
    scheduling, containers, labels, field
):
    with pytest.raises(PodInvalid) as refused:
        submit(scheduling=scheduling, containers=containers, labels=labels)
    assert refused.value.field == field
    assert not Pod.objects.exists()


@pytest.mark.parametrize(("scheduling", "containers", "labels", "field"), DEEP_CASES)
def test_the_watcher_path_parks_what_the_engine_rules_refuse(scheduling, containers, labels, field):
    pod = submit(
        scheduling=scheduling, containers=containers, labels=labels, validate=False, origin=Pod.KUBERNETES
    )
    pod.refresh_from_db()
    assert pod.parked and pod.error_field == field and pod.status == Pod.PENDING


def test_every_bad_field_is_named_at_once():
    bad = port(hostPort=70000, protocol="XTP")
    bad[0]["resources"] = {"limits": GPU["limits"], "requests": {"cpu": "4 cores"}}
    with pytest.raises(FieldProblems) as refused:
        submit(scheduling={**NEAR, "tolerations": [{"key": "a", "effect": "NoRun"}]}, containers=bad)
    assert [field for field, _ in refused.value.problems] == [
        NEAR_FIELD,
        "tolerations[0].effect",
        "containers[0].resources.requests.cpu",
        "containers[0].ports[0].hostPort",
        "containers[0].ports[0].protocol",
    ]
    assert refused.value.field == NEAR_FIELD and "(and 4 more)" in str(refused.value)


def test_owner_references_are_kept_apart_from_the_scheduling_fields():
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u-1", "controller": True}
    pod = submit(scheduling={"nodeSelector": {"pool": "a"}, "ownerReferences": [{**owner, "extra": 1}]})
    pod.refresh_from_db()
    assert pod.scheduling["ownerReferences"] == [owner]
    assert pod.as_spec().node_selector == {"pool": "a"}
    with pytest.raises(PodInvalid) as refused:
        submit("q", scheduling={"ownerReferences": [{"kind": 3}]})
    assert refused.value.field == "ownerReferences[0].kind"


def test_a_pod_read_from_kubernetes_with_a_malformed_field_is_stored_parked_naming_it():
    pod = submit(
        scheduling={"tolerations": [{"key": "a", "effect": "NoRun"}]}, validate=False, origin=Pod.KUBERNETES
    )
    pod.refresh_from_db()
    assert pod.parked and pod.error_field == "tolerations[0].effect" and pod.status == Pod.PENDING


def test_a_gated_pod_says_so_and_is_due_when_its_gates_go():
    pod = submit(scheduling={"schedulingGates": GATE})
    pod.refresh_from_db()
    assert pod.gated and pod.reason == "waiting for scheduling gates: kueue.x-k8s.io/admission"
    assert pod.as_spec().scheduling_gates == ["kueue.x-k8s.io/admission"]
    services.set_scheduling_gates(pod.key, [])
    pod.refresh_from_db()
    assert not pod.gated and pod.reason == "" and pod.next_attempt_at is None
    assert "schedulingGates" not in pod.scheduling
    revision = pod.revision
    submit(scheduling={})  # the watcher submits the pod as it now is: nothing changes
    assert Pod.objects.get().revision == revision


def test_gates_of_another_incarnation_are_left_alone_and_a_nameless_gate_refused():
    pod = submit(scheduling={"schedulingGates": GATE}, uid="u1")
    assert services.set_scheduling_gates(pod.key, [], expected_uid="u2") is None
    assert Pod.objects.get().gated
    with pytest.raises(PodInvalid) as refused:
        services.set_scheduling_gates(pod.key, [{"name": ""}])
    assert refused.value.field == "schedulingGates[0].name"


def bound(name="b", node="node1", **extra) -> dict:
    return {
        "namespace": "default",
        "name": name,
        "uid": f"uid-{name}",
        "node": node,
        "labels": {"app": "web"},
        "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "3"}}, "ports": [{"containerPort": 80}]}
        ],
        "phase": "Running",
        **extra,
    }


def test_bound_pods_are_upserted_in_one_batch_each_judged_alone():
    done = services.upsert_bound_pods(
        [bound("a"), bound("b", allocated="GPU-0,NVIDIA,15000,0:;"), bound("c", labels={"x": 1}), bound("a")]
    )
    assert [(d.outcome, d.error and d.error.field) for d in done] == [
        ("created", None),
        ("created", None),
        ("refused", "labels"),
        ("refused", "name"),
    ]
    assert BoundPod.objects.get(name="b").allocated == "GPU-0,NVIDIA,15000,0:;"
    again = services.upsert_bound_pods([bound("a"), bound("b", node="node2")])
    assert [d.outcome for d in again] == ["unchanged", "updated"]
    assert BoundPod.objects.get(name="b").node_name == "node2"
    refused = services.upsert_bound_pods(
        [bound("d", containers=[{"resources": {"requests": {"cpu": "lots"}}}])]
    )
    assert refused[0].error.field == "containers[0].resources.requests.cpu"


def test_bound_pods_are_forgotten_by_key_and_only_their_incarnation():
    services.upsert_bound_pods([bound("a"), bound("b")])
    assert services.forget_bound_pods([{"namespace": "default", "name": "a", "uid": "other"}]) == 0
    assert (
        services.forget_bound_pods(
            [{"namespace": "default", "name": "a"}, {"namespace": "default", "name": "x"}]
        )
        == 1
    )
    assert list(BoundPod.objects.values_list("name", flat=True)) == ["b"]
    with pytest.raises(PodInvalid) as refused:
        services.forget_bound_pods([{"namespace": "default"}])
    assert refused.value.field == "pods[0].name"


def test_a_node_keeps_its_taints_cordon_and_allocatable():
    taints = [{"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}]
    services.report_inventory("node1", {}, {}, [], taints=taints, allocatable={"cpu": "4", "memory": "16Gi"})
    node = Node.objects.get()
    assert (node.taints, node.unschedulable, node.allocatable) == (
        taints,
        False,
        {"cpu": "4", "memory": "16Gi"},
    )
    services.report_inventory("node1", {}, {}, [])  # a report without them keeps them
    services.set_node_fields("node1", unschedulable=True)
    node.refresh_from_db()
    assert node.taints == taints and node.unschedulable
    assert services.set_node_fields("unknown", unschedulable=True) is None


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"allocatable": {"cpu": "4 cores"}}, "allocatable.cpu"),
        ({"taints": [{"key": "a", "effect": "NoRun"}]}, "taints[0].effect"),
        ({"taints": [{"effect": "NoSchedule"}]}, "taints[0].key"),
        ({"unschedulable": "yes"}, "unschedulable"),
    ],
)
def test_malformed_node_fields_are_refused_naming_the_field(fields, where):
    services.report_inventory("node1", {}, {}, [])
    with pytest.raises(ScenarioError) as refused:
        services.set_node_fields("node1", **fields)
    assert refused.value.where == where
    node = Node.objects.get()
    assert (node.taints, node.unschedulable, node.allocatable) == ([], False, {})
