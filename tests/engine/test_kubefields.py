"""SPEC 10: the Kubernetes fields of pods and nodes are checked in the API's own forms, every
problem at once, each naming its full field path."""

import copy
import re

import pytest

from scheduling.engine.kubefields import (
    node_field_problems,
    node_fields,
    node_object_fields,
    node_object_problems,
    pod_field_problems,
    pod_object_fields,
    pod_object_problems,
    pod_spec_fields,
    running_pod_problems,
)
from scheduling.engine.model import Node, PodSpec

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
NODE_TERM = f"affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms[0]"


def good_pod() -> dict:
    """A pod using every field SPEC 10 names, each in a valid form."""
    return {
        "name": "trainer",
        "labels": {"app": "trainer", "hamiadmin.io/team": "a"},
        "nodeName": "",
        "nodeSelector": {"pool": "training"},
        "affinity": {
            "nodeAffinity": {
                REQUIRED: {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "zone", "operator": "In", "values": ["a", "b"]},
                                {"key": "gpus", "operator": "Gt", "values": ["3"]},
                                {"key": "spot", "operator": "DoesNotExist"},
                            ],
                            "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}],
                        }
                    ]
                },
                PREFERRED: [
                    {
                        "weight": 100,
                        "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]},
                    }
                ],
            },
            "podAffinity": {
                REQUIRED: [
                    {
                        "labelSelector": {"matchLabels": {"app": "cache"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            },
            "podAntiAffinity": {
                PREFERRED: [
                    {
                        "weight": 1,
                        "podAffinityTerm": {
                            "labelSelector": {
                                "matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]
                            },
                            "namespaces": ["default"],
                            "topologyKey": "topology.kubernetes.io/zone",
                            "matchLabelKeys": ["pod-template-hash"],
                        },
                    }
                ]
            },
        },
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"},
            {"operator": "Exists"},
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "trainer"}},
                "minDomains": 2,
                "nodeAffinityPolicy": "Honor",
                "nodeTaintsPolicy": "Ignore",
                "matchLabelKeys": ["pod-template-hash"],
            }
        ],
        "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
        "priority": 100,
        "containers": [
            {
                "name": "main",
                "resources": {
                    "requests": {"cpu": "500m", "memory": "16Gi", "ephemeral-storage": "1e9"},
                    "limits": {"nvidia.com/gpu": 1, "huawei.com/Ascend910": "1", "cpu": 2},
                },
                "ports": [{"containerPort": 8080, "hostPort": 8080, "protocol": "UDP", "hostIP": "10.0.0.1"}],
            }
        ],
        "initContainers": [
            {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "0.1"}}}
        ],
    }


def good_node() -> dict:
    return {
        "name": "n1",
        "labels": {"pool": "training", "topology.kubernetes.io/zone": "a"},
        "taints": [
            {"key": "dedicated", "value": "team-b", "effect": "NoSchedule"},
            {"key": "gpu", "effect": "NoExecute"},
        ],
        "unschedulable": False,
        "allocatable": {
            "cpu": "4",
            "memory": "16Gi",
            "pods": 110,
            "huawei.com/Ascend910": "8",
            "ephemeral-storage": "100G",
        },
    }


def test_a_pod_using_every_field_well_has_no_problem():
    assert pod_field_problems(good_pod(), "pods[0]") == []


def test_a_node_using_every_field_well_has_no_problem():
    assert node_field_problems(good_node(), "nodes[0]") == []


def test_a_pod_without_any_kubernetes_field_has_no_problem():
    plain = {"name": "p", "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    assert pod_field_problems(plain) == []


def at(path: str, value):
    """A change putting `value` at a dotted path of the good pod/node (`a.b[0].c`; a key
    holding dots in angle brackets: `limits.<nvidia.com/gpu>`)."""

    def change(raw: dict) -> dict:
        raw = copy.deepcopy(raw)
        keys: list = []
        for part in re.findall(r"<[^>]*>|[^.]+", path.replace("]", "")):
            if part.startswith("<"):
                keys.append(part[1:-1])
                continue
            name, *indexes = part.split("[")
            keys.append(name)
            keys.extend(int(i) for i in indexes)
        target = raw
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
        return raw

    return change


POD_MALFORMED = [
    pytest.param(
        f"{NODE_TERM}.matchExpressions[0].operator", "Near", "unknown operator 'Near'", id="node-operator"
    ),
    pytest.param(f"{NODE_TERM}.matchExpressions[0].values", [], "non-empty", id="in-without-values"),
    pytest.param(f"{NODE_TERM}.matchExpressions[1].values[0]", "three", "integer", id="gt-not-a-number"),
    pytest.param(f"{NODE_TERM}.matchExpressions[2].values", ["x"], "must be empty", id="exists-with-values"),
    pytest.param(
        f"{NODE_TERM}.matchFields[0].key", "metadata.labels", "metadata.name", id="match-fields-key"
    ),
    pytest.param(
        f"{NODE_TERM}.matchFields[0].values", ["a", "b"], "exactly one", id="match-fields-two-names"
    ),
    pytest.param(
        f"affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms", [], "at least one", id="no-node-selector-terms"
    ),
    pytest.param(f"affinity.nodeAffinity.{PREFERRED}[0].weight", 0, "from 1 to 100", id="node-weight-zero"),
    pytest.param(f"affinity.podAffinity.{REQUIRED}[0].topologyKey", "", "required", id="no-topology-key"),
    pytest.param(
        f"affinity.podAntiAffinity.{PREFERRED}[0].podAffinityTerm.labelSelector.matchExpressions[0].operator",
        "Gt",
        "unknown operator 'Gt'",
        id="label-selector-gt",
    ),
    pytest.param(
        f"affinity.podAntiAffinity.{PREFERRED}[0].weight", 101, "from 1 to 100", id="pod-weight-101"
    ),
    pytest.param("affinity.nodeAfinity", {}, "unknown field", id="affinity-typo"),
    pytest.param("nodeSelector.pool", 3, "must be a string", id="selector-value-not-text"),
    pytest.param("labels.bad key!", "x", "not a label key", id="label-key"),
    pytest.param(
        "tolerations[0].effect",
        "NoRun",
        "must be NoSchedule, PreferNoSchedule or NoExecute, not 'NoRun'",
        id="toleration-effect",
    ),
    pytest.param("tolerations[0].operator", "Matches", "must be Equal or Exists", id="toleration-operator"),
    pytest.param(
        "tolerations[1].value", "x", "must be empty when operator is Exists", id="exists-with-value"
    ),
    pytest.param(
        "tolerations[2].effect", "NoSchedule", "NoExecute when tolerationSeconds", id="seconds-not-noexecute"
    ),
    pytest.param("topologySpreadConstraints[0].maxSkew", 0, "from 1", id="max-skew-zero"),
    pytest.param("topologySpreadConstraints[0].whenUnsatisfiable", "Sometimes", "DoNotSchedule", id="when"),
    pytest.param("topologySpreadConstraints[0].topologyKey", None, "required", id="spread-without-key"),
    pytest.param("topologySpreadConstraints[0].minDomains", 0, "from 1", id="min-domains-zero"),
    pytest.param(
        "topologySpreadConstraints[0].nodeAffinityPolicy", "Always", "Honor or Ignore", id="affinity-policy"
    ),
    pytest.param(
        "topologySpreadConstraints[0].nodeTaintsPolicy", "honor", "Honor or Ignore", id="taints-policy"
    ),
    pytest.param(
        "topologySpreadConstraints[0].matchLabelKeys[0]",
        "app",
        "also in the labelSelector",
        id="match-label-keys",
    ),
    pytest.param("schedulingGates[0]", {"name": ""}, "required", id="gate-without-name"),
    pytest.param("schedulingGates", ["kueue"], "{name}", id="gate-not-an-object"),
    pytest.param("priority", "high", "integer", id="priority-not-int"),
    pytest.param("priority", 2**31, "from", id="priority-beyond-32-bits"),
    pytest.param("nodeName", 7, "must be a string", id="node-name-not-text"),
    pytest.param(
        "containers[0].resources.requests.cpu", "4 cores", "not a quantity: '4 cores'", id="cpu-4-cores"
    ),
    pytest.param("containers[0].resources.requests.memory", "-1Gi", "negative", id="memory-negative"),
    pytest.param(
        "containers[0].resources.limits.<huawei.com/Ascend910>", "one", "not a quantity", id="extended"
    ),
    pytest.param("containers[0].ports[0].hostPort", 70000, "from 0 to 65535", id="host-port-range"),
    pytest.param("containers[0].ports[0].containerPort", None, "required", id="container-port-missing"),
    pytest.param("containers[0].ports[0].protocol", "HTTP", "TCP, UDP or SCTP", id="protocol"),
    pytest.param("containers[0].ports[0].hostIP", "localhost", "not an IP address", id="host-ip"),
    pytest.param("initContainers[0].restartPolicy", "OnFailure", "must be Always", id="init-restart-policy"),
]


@pytest.mark.parametrize("path, value, words", POD_MALFORMED)
def test_a_malformed_pod_field_is_named_by_its_full_path(path, value, words):
    problems = pod_field_problems(at(path, value)(good_pod()), "pods[2]")
    named = {field: message for field, message in problems}
    expected = f"pods[2].{path.replace('<', '').replace('>', '')}"
    if path.startswith("schedulingGates[") or path == "schedulingGates":
        expected = "pods[2].schedulingGates[0]" + (".name" if path.endswith("]") else "")
    assert expected in named, problems
    assert words in named[expected]


def test_the_gpu_resources_are_left_to_the_engine():
    """A bad `nvidia.com/gpu` rejects the pod in the engine (SPEC 9), not the file."""
    pod = at("containers[0].resources.limits.<nvidia.com/gpu>", "lots")(good_pod())
    assert pod_field_problems(pod) == []


def test_every_problem_of_a_pod_is_reported_at_once():
    pod = at(f"{NODE_TERM}.matchExpressions[0].operator", "Near")(good_pod())
    pod = at("tolerations[0].effect", "NoRun")(pod)
    pod = at("containers[0].resources.requests.cpu", "4 cores")(pod)
    problems = pod_field_problems(pod, "pods[2]")
    assert problems == [
        (
            f"pods[2].{NODE_TERM}.matchExpressions[0].operator",
            "unknown operator 'Near' (known: In, NotIn, Exists, DoesNotExist, Gt, Lt)",
        ),
        ("pods[2].tolerations[0].effect", "must be NoSchedule, PreferNoSchedule or NoExecute, not 'NoRun'"),
        ("pods[2].containers[0].resources.requests.cpu", "not a quantity: '4 cores'"),
    ]


NODE_MALFORMED = [
    pytest.param("allocatable.cpu", "4 cores", "not a quantity: '4 cores'", id="allocatable-cpu"),
    pytest.param("allocatable.memory", "-16Gi", "negative", id="allocatable-negative"),
    pytest.param(
        "taints[0].effect",
        "NoRun",
        "must be NoSchedule, PreferNoSchedule or NoExecute, not 'NoRun'",
        id="taint-effect",
    ),
    pytest.param("taints[1].effect", None, "required", id="taint-without-effect"),
    pytest.param("taints[0].key", "", "required", id="taint-without-key"),
    pytest.param("taints[0].color", "red", "unknown field", id="taint-unknown-field"),
    pytest.param("unschedulable", "yes", "true or false", id="unschedulable-not-bool"),
    pytest.param("labels.pool", ["a"], "must be a string", id="label-not-text"),
]


@pytest.mark.parametrize("path, value, words", NODE_MALFORMED)
def test_a_malformed_node_field_is_named_by_its_full_path(path, value, words):
    named = dict(node_field_problems(at(path, value)(good_node()), "nodes[1]"))
    assert f"nodes[1].{path}" in named, named
    assert words in named[f"nodes[1].{path}"]


def test_every_problem_of_a_node_is_reported_at_once():
    node = at("allocatable.cpu", "4 cores")(good_node())
    node = at("taints[0].effect", "NoRun")(node)
    assert node_field_problems(node, "nodes[0]") == [
        ("nodes[0].taints[0].effect", "must be NoSchedule, PreferNoSchedule or NoExecute, not 'NoRun'"),
        ("nodes[0].allocatable.cpu", "not a quantity: '4 cores'"),
    ]


def test_a_repeated_taint_is_refused():
    node = good_node()
    node["taints"].append({"key": "dedicated", "value": "other", "effect": "NoSchedule"})
    assert [field for field, _ in node_field_problems(node, "nodes[0]")] == ["nodes[0].taints[2]"]


def test_the_pod_object_names_fields_as_the_api_does():
    pod = good_pod()
    labels = pod.pop("labels")
    pod["tolerations"][0]["effect"] = "NoRun"
    problems = pod_object_problems(
        {"metadata": {"name": "p", "labels": {**labels, "x": "not ok!"}}, "spec": pod}
    )
    assert [field for field, _ in problems] == ["metadata.labels.x", "spec.tolerations[0].effect"]


def test_running_pods_are_read_for_labels_affinity_and_requests():
    running = {
        "name": "db",
        "node": "n1",
        "labels": {"app": "db"},
        "affinity": {"podAntiAffinity": {REQUIRED: [{"labelSelector": {}}]}},
        "containers": [{"name": "db", "resources": {"requests": {"cpu": "lots"}}}, "not a container"],
    }
    assert [field for field, _ in running_pod_problems(running, "running[0]")] == [
        f"running[0].affinity.podAntiAffinity.{REQUIRED}[0].topologyKey",
        "running[0].containers[1]",
        "running[0].containers[0].resources.requests.cpu",
    ]


def test_the_converters_give_the_engine_its_keyword_arguments():
    pod = good_pod()
    spec = PodSpec(name="trainer", containers=pod["containers"], **pod_spec_fields(pod))
    assert spec.node_selector == {"pool": "training"}
    assert spec.scheduling_gates == ["kueue.x-k8s.io/admission"]
    assert spec.tolerations == pod["tolerations"]
    assert spec.topology_spread_constraints == pod["topologySpreadConstraints"]
    assert spec.affinity == pod["affinity"] and spec.labels == pod["labels"] and spec.node_name == ""
    labels = pod.pop("labels")
    assert pod_object_fields({"metadata": {"labels": labels}, "spec": pod}) == pod_spec_fields(
        {**pod, "labels": labels}
    )
    node = Node(name="n1", **node_fields(good_node()))
    assert node.taints[1] == {"key": "gpu", "value": "", "effect": "NoExecute"}
    assert node.allocatable["huawei.com/Ascend910"] == "8" and node.unschedulable is False


def test_the_node_object_names_fields_as_the_api_does():
    fields = good_node()
    node = {
        "metadata": {"name": "n1", "labels": fields["labels"]},
        "spec": {"taints": [{"key": "gpu", "effect": "NoRun"}], "unschedulable": True},
        "status": {"allocatable": {**fields["allocatable"], "cpu": "4 cores"}},
    }
    assert [field for field, _ in node_object_problems(node)] == [
        "spec.taints[0].effect",
        "status.allocatable.cpu",
    ]
    node["spec"]["taints"][0]["effect"] = "NoSchedule"
    node["status"]["allocatable"]["cpu"] = "4"
    read = node_object_fields(node)
    assert read["unschedulable"] is True and read["allocatable"]["cpu"] == "4"
    assert read["labels"] == fields["labels"] and read["taints"] == [
        {"key": "gpu", "value": "", "effect": "NoSchedule"}
    ]
