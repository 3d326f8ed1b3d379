"""SPEC 10 `VolumeBinding`: a pod's claims decide which nodes can take it, as kube-scheduler's
VolumeBinding plugin judges them (PreFilter refusals, bound volumes' node affinity, volumes
found or provisioned for WaitForFirstConsumer claims)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduling.engine.decision import PENDING, REJECTED, SCHEDULED
from scheduling.engine.errors import PodInvalid, ScenarioError
from scheduling.engine.model import Card, Cluster, Node, PodSpec
from scheduling.engine.noderules import NodeRules
from scheduling.engine.noderules.volumes import Binding, Storage, bind, read_storage, resolve
from scheduling.engine.scenario import parse_scenario, run_scenario
from scheduling.engine.scheduler import Scheduler

GPU = "nvidia.com/gpu"
ZONE = "topology.kubernetes.io/zone"
WFFC = "WaitForFirstConsumer"


def gpu_node(name: str, **labels: str) -> Node:
    return Node(name, cards=[Card(uuid=f"{name}-0", index=0, memory=16000)], labels=dict(labels))


def on(*hosts: str) -> dict:
    """A volume's `nodeAffinity` to these hostnames."""
    return {
        "required": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": list(hosts)}
                    ]
                }
            ]
        }
    }


def hosts(*names: str, **labels: str) -> list[Node]:
    return [gpu_node(name, **{"kubernetes.io/hostname": name}, **labels) for name in names]


def claim(name: str, cls: str = "", volume: str = "", storage: str = "1Gi", modes=("ReadWriteOnce",)) -> dict:
    return {
        "name": name,
        "namespace": "default",
        "storageClassName": cls,
        "volumeName": volume,
        "resources": {"requests": {"storage": storage}},
        "accessModes": list(modes),
    }


def volume(
    name: str, cls: str = "", capacity: str = "10Gi", affinity=None, claim_ref=None, modes=None
) -> dict:
    out: dict = {
        "name": name,
        "storageClassName": cls,
        "capacity": {"storage": capacity},
        "accessModes": list(modes or ("ReadWriteOnce",)),
    }
    if affinity:
        out["nodeAffinity"] = affinity
    if claim_ref:
        out["claimRef"] = claim_ref
    return out


def storage_class(name: str, provisioner: str, mode: str = WFFC, topologies=None) -> dict:
    out = {"name": name, "provisioner": provisioner, "volumeBindingMode": mode}
    if topologies:
        out["allowedTopologies"] = topologies
    return out


def pod(*claims: str, storage: dict | Storage | None, name: str = "p", ephemeral: str = "") -> PodSpec:
    volumes: list[dict] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    volumes.append({"name": "config", "configMap": {"name": "settings"}})  # not a claim: not judged
    if ephemeral:
        volumes.append({"name": ephemeral, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    return PodSpec(
        name,
        containers=[{"name": "main", "resources": {"limits": {GPU: 1}}}],
        volumes=volumes,
        storage=storage,
    )


def world(claims=(), volumes=(), classes=()) -> dict:
    return {
        "persistentVolumeClaims": list(claims),
        "persistentVolumes": list(volumes),
        "storageClasses": list(classes),
    }


def decide(nodes: list[Node], spec: PodSpec):
    return Scheduler(Cluster(nodes=nodes)).decide(spec)


def test_a_missing_claim_refuses_every_node_naming_the_claim():
    decision = decide(hosts("a", "b"), pod("data", storage=world()))
    assert decision.status == PENDING
    assert decision.reasons == {"VolumeBinding": 2}
    assert dict(decision.failed_nodes)["a"] == 'VolumeBinding: persistentvolumeclaim "data" not found'
    assert decision.reason_text() == '0/2 nodes are available: 2 persistentvolumeclaim "data" not found.'


def test_the_missing_claim_counts_every_node_even_one_another_rule_refuses():
    nodes = hosts("a", "b")
    nodes[0].unschedulable = True
    decision = decide(nodes, pod("data", storage=world()))
    assert decision.reasons == {"VolumeBinding": 2}


def test_an_ephemeral_volume_waits_for_its_claim_named_after_pod_and_volume():
    decision = decide(hosts("a"), pod(storage=world(), name="train", ephemeral="scratch"))
    assert dict(decision.failed_nodes)["a"] == (
        'VolumeBinding: waiting for ephemeral volume controller to create the persistentvolumeclaim "train-scratch"'
    )
    made = world(claims=[claim("train-scratch", volume="pv-1")], volumes=[volume("pv-1", affinity=on("b"))])
    assert decide(hosts("a", "b"), pod(storage=made, name="train", ephemeral="scratch")).node == "b"


def test_a_claim_bound_to_a_volume_with_node_affinity_only_fits_the_nodes_it_names():
    storage = world(claims=[claim("data", volume="pv-a")], volumes=[volume("pv-a", affinity=on("a"))])
    decision = decide(hosts("a", "b", "c"), pod("data", storage=storage))
    assert decision.status == SCHEDULED and decision.node == "a"
    assert decision.reasons == {"VolumeBinding": 2}
    assert dict(decision.failed_nodes)["b"] == "VolumeBinding: node(s) had volume node affinity conflict"


def test_a_bound_volume_without_node_affinity_fits_every_node():
    storage = world(claims=[claim("data", volume="nfs")], volumes=[volume("nfs")])
    assert decide(hosts("a", "b"), pod("data", storage=storage)).nodes_fit == 2


def test_a_claim_bound_to_a_volume_that_does_not_exist_refuses_every_node():
    decision = decide(hosts("a"), pod("data", storage=world(claims=[claim("data", volume="gone")])))
    assert decision.reasons == {"VolumeBinding": 1}
    assert 'bound to non-existent persistentvolume "gone"' in dict(decision.failed_nodes)["a"]


@pytest.mark.parametrize("cls", ["", "fast"])
def test_an_unbound_claim_of_an_immediate_class_or_none_refuses_every_node(cls):
    storage = world(
        claims=[claim("data", cls=cls)], classes=[storage_class("fast", "ebs.csi.aws.com", "Immediate")]
    )
    decision = decide(hosts("a", "b"), pod("data", storage=storage))
    assert decision.reasons == {"VolumeBinding": 2}
    assert (
        decision.reason_text()
        == "0/2 nodes are available: 2 pod has unbound immediate PersistentVolumeClaims."
    )


def test_a_claim_naming_a_class_that_does_not_exist_refuses_every_node():
    decision = decide(hosts("a"), pod("data", storage=world(claims=[claim("data", cls="nope")])))
    assert dict(decision.failed_nodes)["a"] == 'VolumeBinding: storageclass.storage.k8s.io "nope" not found'


def test_wait_for_first_consumer_finds_an_available_local_volume_on_the_node():
    storage = world(
        claims=[claim("data", cls="local", storage="5Gi")],
        volumes=[
            volume("pv-b", cls="local", affinity=on("b")),
            volume("pv-c-small", cls="local", capacity="1Gi", affinity=on("c")),  # too small
            volume(
                "pv-c-taken", cls="local", affinity=on("c"), claim_ref={"namespace": "default", "name": "x"}
            ),
            volume("pv-c-rox", cls="local", affinity=on("c"), modes=["ReadOnlyMany"]),  # wrong mode
            volume("pv-c-other", cls="other", affinity=on("c")),  # another class
        ],
        classes=[storage_class("local", "kubernetes.io/no-provisioner")],
    )
    decision = decide(hosts("a", "b", "c"), pod("data", storage=storage))
    assert decision.node == "b"
    assert (
        dict(decision.failed_nodes)["c"]
        == "VolumeBinding: node(s) didn't find available persistent volumes to bind"
    )
    assert decision.reasons == {"VolumeBinding": 2}


def test_wait_for_first_consumer_provisions_where_the_class_topologies_allow():
    zone = [{"matchLabelExpressions": [{"key": ZONE, "values": ["z1"]}]}]
    storage = world(
        claims=[claim("data", cls="ssd")],
        classes=[storage_class("ssd", "pd.csi.storage.gke.io", topologies=zone)],
    )
    nodes = [*hosts("a", **{ZONE: "z1"}), *hosts("b", **{ZONE: "z2"})]
    decision = decide(nodes, pod("data", storage=storage))
    assert decision.node == "a"
    assert (
        dict(decision.failed_nodes)["b"]
        == "VolumeBinding: node(s) didn't find available persistent volumes to bind"
    )
    anywhere = world(
        claims=[claim("data", cls="ssd")], classes=[storage_class("ssd", "pd.csi.storage.gke.io")]
    )
    assert decide(nodes, pod("data", storage=anywhere)).nodes_fit == 2


def test_two_claims_never_count_on_one_volume():
    storage = world(
        claims=[claim("one", cls="local"), claim("two", cls="local")],
        volumes=[
            volume("pv-a", cls="local", affinity=on("a")),
            *(volume(f"pv-b{i}", cls="local", affinity=on("b")) for i in (1, 2)),
        ],
        classes=[storage_class("local", "kubernetes.io/no-provisioner")],
    )
    decision = decide(hosts("a", "b"), pod("one", "two", storage=storage))
    assert decision.node == "b" and decision.reasons == {"VolumeBinding": 1}


def test_bindings_pick_the_smallest_volume_or_the_provisioner():
    storage = read_storage(
        world(
            claims=[claim("data", cls="local", storage="2Gi"), claim("logs", cls="ssd")],
            volumes=[
                volume("big", cls="local", capacity="100Gi", affinity=on("a")),
                volume("small", cls="local", capacity="3Gi", affinity=on("a")),
            ],
            classes=[
                storage_class("local", "kubernetes.io/no-provisioner"),
                storage_class("ssd", "ebs.csi.aws.com"),
            ],
        )
    )
    resolved = resolve("default", "p", pod("data", "logs", storage=None).volumes, storage)
    assert resolved.bindings("a", {"kubernetes.io/hostname": "a"}) == (
        Binding("data", volume="small"),
        Binding("logs", provisioner="ebs.csi.aws.com"),
    )
    assert resolved.bindings("b", {"kubernetes.io/hostname": "b"}) == ()  # refused there: nothing to bind


def test_a_placed_pod_takes_its_volume_from_the_next_one():
    storage = read_storage(
        world(
            claims=[claim("one", cls="local"), claim("two", cls="local")],
            volumes=[volume("pv-a", cls="local", affinity=on("a"))],
            classes=[storage_class("local", "kubernetes.io/no-provisioner")],
        )
    )
    first = resolve("default", "p1", pod("one", storage=None).volumes, storage)
    bind(storage, first, "a", {"kubernetes.io/hostname": "a"})
    assert storage.claims[("default", "one")].volume == "pv-a"
    assert storage.volumes["pv-a"].claim == ("default", "one")
    second = decide(hosts("a"), pod("two", storage=storage))
    assert second.status == PENDING and second.reasons == {"VolumeBinding": 1}


def test_hints_say_what_would_let_the_node_mount_the_claim():
    storage = world(
        claims=[claim("data", cls="local"), claim("home", volume="pv-a")],
        volumes=[volume("pv-a", affinity=on("a"))],
        classes=[storage_class("local", "kubernetes.io/no-provisioner")],
    )
    decision = decide(hosts("b"), pod("data", "home", storage=storage))
    (failure,) = [f for _, f in decision.node_failures]
    assert failure.messages == (
        "node(s) had volume node affinity conflict",
        "node(s) didn't find available persistent volumes to bind",
    )
    assert failure.hints == (  # in the pod's order of claims
        "bind claim data to a volume reachable from b",
        "claim home is bound to volume pv-a, which b cannot reach",
    )


def test_pods_with_equal_claims_share_verdicts_and_different_ones_do_not():
    storage = world(
        claims=[claim("d", volume="pv-a"), claim("e", volume="pv-b")],
        volumes=[volume("pv-a", affinity=on("a")), volume("pv-b", affinity=on("b"))],
    )
    one, same, other = (NodeRules.read(pod(c, storage=storage)) for c in ("d", "d", "e"))
    assert one.key == same.key != other.key
    scheduler = Scheduler(Cluster(nodes=hosts("a", "b")))
    assert scheduler.decide(pod("d", storage=storage)).node == "a"
    assert scheduler.decide(pod("e", storage=storage)).node == "b"


def test_a_pod_without_storage_given_is_not_judged_on_its_volumes():
    assert decide(hosts("a"), pod("data", storage=None)).node == "a"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (world(volumes=[volume("pv", capacity="ten gigs")]), "persistentVolumes[0].capacity.storage"),
        (
            world(claims=[claim("c", modes=["ReadWriteSometimes"])]),
            "persistentVolumeClaims[0].accessModes[0]",
        ),
        (world(classes=[storage_class("s", "x", mode="Later")]), "storageClasses[0].volumeBindingMode"),
        (world(classes=[{"name": "s"}]), "storageClasses[0].provisioner"),
        (
            world(
                volumes=[
                    volume(
                        "pv",
                        affinity={
                            "required": {
                                "nodeSelectorTerms": [
                                    {"matchExpressions": [{"key": "k", "operator": "Near"}]}
                                ]
                            }
                        },
                    )
                ]
            ),
            "persistentVolumes[0].nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
    ],
)
def test_malformed_storage_is_refused_naming_the_field(raw, field):
    with pytest.raises(PodInvalid) as caught:
        read_storage(raw)
    assert caught.value.field == field
    decision = decide(hosts("a"), pod("c", storage=raw))
    assert decision.status == REJECTED and decision.error_field == field


def test_a_malformed_volume_entry_is_refused_naming_the_field():
    spec = pod(storage=world())
    spec.volumes = [{"name": "v", "persistentVolumeClaim": {"claimName": ""}}]
    decision = decide(hosts("a"), spec)
    assert (
        decision.status == REJECTED and decision.error_field == "volumes[0].persistentVolumeClaim.claimName"
    )


# --- scenarios (SPEC 9/10 top-level storage) --------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "static/scheduling/examples/k8s-volumes.json"


def test_the_volumes_example_places_each_pod_where_its_claims_can_be_mounted():
    out = {entry["name"]: entry for entry in run_scenario(json.loads(EXAMPLE.read_text()))["pods"]}
    assert out["reads-dataset"]["node"] == "gpu-a"  # its volume's node affinity
    assert out["local-scratch-1"]["node"] == "gpu-b"  # the one local volume of its class
    second = out["local-scratch-2"]  # that volume is taken by the pod placed before it
    assert (second["status"], second["reasons"]) == ("pending", {"VolumeBinding": 3})
    assert out["checkpointing"]["node"] == "gpu-c"  # provisioned in zone-2 only
    assert out["immediate-unbound"]["failed_nodes"]["gpu-a"] == (
        "VolumeBinding: pod has unbound immediate PersistentVolumeClaims"
    )
    assert (
        out["no-such-claim"]["failed_nodes"]["gpu-a"]
        == 'VolumeBinding: persistentvolumeclaim "results" not found'
    )


def test_a_scenario_pod_whose_claim_is_not_given_is_pending_naming_it():
    raw = {
        "nodes": [{"name": "n", "devices": [{"uuid": "G", "memory": 16000}]}],
        "pods": [
            {
                "name": "p",
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}],
                "containers": [{"name": "m", "resources": {"limits": {GPU: 1}}}],
            }
        ],
    }
    (entry,) = run_scenario(raw)["pods"]
    assert entry["status"] == "pending"
    assert entry["failed_nodes"]["n"] == 'VolumeBinding: persistentvolumeclaim "data" not found'


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"persistentVolumes": [volume("pv", capacity="lots")]}, "persistentVolumes[0].capacity.storage"),
        ({"storageClasses": "fast"}, "storageClasses"),
        (
            {
                "pods": [
                    {
                        "name": "p",
                        "volumes": [{"name": "v", "persistentVolumeClaim": {}}],
                        "containers": [{"name": "m"}],
                    }
                ]
            },
            "pods[0].volumes[0].persistentVolumeClaim.claimName",
        ),
    ],
)
def test_malformed_scenario_storage_is_a_file_error_naming_the_field(change, where):
    raw = {"nodes": [{"name": "n", "devices": [{"uuid": "G", "memory": 16000}]}], "pods": [], **change}
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(raw)
    assert caught.value.where == where


def test_a_pod_wide_refusal_hints_what_would_lift_it():
    decision = decide(hosts("a"), pod("data", storage=world()))
    (failure,) = [f for _, f in decision.node_failures]
    assert failure.hints == ("create claim data in namespace default",)


def test_many_nodes_are_judged_alike_when_decided_as_columns():
    """From `Scheduler.SWEEP_NODES` on, nodes are decided as columns: the rule holds there too."""
    many = Scheduler.SWEEP_NODES + 6
    names = [f"n{i:03d}" for i in range(many)]
    storage = world(claims=[claim("data", volume="pv")], volumes=[volume("pv", affinity=on(names[-1]))])
    decision = decide(hosts(*names), pod("data", storage=storage))
    assert decision.node == names[-1]
    assert decision.reasons == {"VolumeBinding": many - 1}
    missing = decide(hosts(*names), pod("gone", storage=storage))
    assert missing.reasons == {"VolumeBinding": many}
    cordoned = hosts(*names)
    cordoned[0].unschedulable = True
    assert decide(cordoned, pod("gone", storage=storage)).reasons == {"VolumeBinding": many}
