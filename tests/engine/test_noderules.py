"""SPEC 10: kube-scheduler's filters as node rules, each from kube-scheduler's documented behaviour."""

from __future__ import annotations

import pytest

from scheduling.engine import explain
from scheduling.engine.decision import PENDING, REJECTED, SCHEDULED, Decision
from scheduling.engine.model import Card, Cluster, Node, PodSpec, RunningPod
from scheduling.engine.noderules import account_running
from scheduling.engine.scheduler import Scheduler

GPU = "nvidia.com/gpu"


def gpu_node(name: str, cards: int = 1, memory: int = 16000, **fields) -> Node:
    return Node(
        name, cards=[Card(uuid=f"{name}-{i}", index=i, memory=memory) for i in range(cards)], **fields
    )


def pod(
    name: str = "p", gpu: int = 1, requests: dict | None = None, ports=None, init=None, **fields
) -> PodSpec:
    container: dict = {"name": "main", "resources": {"limits": {GPU: gpu}}}
    if requests:
        container["resources"]["requests"] = requests
    if ports:
        container["ports"] = ports
    return PodSpec(name, containers=[container], init_containers=init or [], **fields)


def decide(nodes: list[Node], spec: PodSpec, running=()):
    cluster = Cluster(nodes=nodes, running=list(running))
    account_running(cluster)
    return Scheduler(cluster).decide(spec)


def refused(decision) -> dict[str, str]:
    return dict(decision.failed_nodes)


def test_a_cordoned_node_is_refused_unless_the_pod_tolerates_the_unschedulable_taint():
    nodes = [gpu_node("a", unschedulable=True), gpu_node("b", unschedulable=True)]
    decision = decide(nodes, pod())
    assert decision.status == PENDING
    assert decision.reasons == {"NodeUnschedulable": 2}
    assert refused(decision)["a"] == "NodeUnschedulable: node(s) were unschedulable"
    tolerant = pod(
        tolerations=[
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
        ]
    )
    assert decide([gpu_node("a", unschedulable=True)], tolerant).node == "a"


def test_node_name_refuses_every_other_node_and_the_named_node_still_checks_its_cards():
    decision = decide([gpu_node("a"), gpu_node("b")], pod(node_name="b"))
    assert decision.node == "b"
    assert decision.reasons == {"NodeName": 1}
    full = decide([gpu_node("a"), gpu_node("b", memory=10)], _mem_pod(100, node_name="b"))
    assert full.status == PENDING
    assert full.reasons == {"NodeName": 1, "CardInsufficientMemory": 1}


def _mem_pod(mib: int, **fields) -> PodSpec:
    return PodSpec(
        "p",
        containers=[{"name": "main", "resources": {"limits": {GPU: 1, "nvidia.com/gpumem": mib}}}],
        **fields,
    )


TAINT = {"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("tolerations", "fits"),
    [
        ([], False),
        ([{"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"}], True),
        ([{"key": "dedicated", "value": "team-b"}], True),  # Equal by default, every effect
        ([{"key": "dedicated", "value": "team-a", "effect": "NoSchedule"}], False),
        ([{"key": "dedicated", "operator": "Exists"}], True),
        ([{"operator": "Exists"}], True),  # empty key with Exists tolerates everything
        ([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], False),
    ],
)
def test_taint_toleration_follows_the_operators_and_effects(tolerations, fits):
    decision = decide([gpu_node("a", taints=[TAINT])], pod(tolerations=tolerations))
    assert (decision.status == SCHEDULED) is fits
    if not fits:
        assert refused(decision)["a"] == "TaintToleration: node(s) had untolerated taint {dedicated: team-b}"


def test_no_execute_filters_and_prefer_no_schedule_does_not():
    assert (
        decide([gpu_node("a", taints=[{"key": "k", "value": "", "effect": "NoExecute"}])], pod()).status
        == PENDING
    )
    assert (
        decide([gpu_node("a", taints=[{"key": "k", "value": "", "effect": "PreferNoSchedule"}])], pod()).node
        == "a"
    )


def test_a_node_counts_once_under_the_first_rule_it_fails():
    node = gpu_node("a", unschedulable=True, taints=[TAINT], labels={"pool": "inference"})
    decision = decide([node], pod(node_selector={"pool": "training"}))
    assert decision.reasons == {"NodeUnschedulable": 1}


def _affinity(*terms) -> dict:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


@pytest.mark.parametrize(
    ("expression", "fits_on"),
    [
        ({"key": "zone", "operator": "In", "values": ["z1", "z2"]}, {"a", "b"}),
        ({"key": "zone", "operator": "NotIn", "values": ["z1"]}, {"b", "c"}),  # absent label: NotIn holds
        ({"key": "zone", "operator": "Exists"}, {"a", "b"}),
        ({"key": "zone", "operator": "DoesNotExist"}, {"c"}),
        ({"key": "gpus", "operator": "Gt", "values": ["4"]}, {"b"}),
        ({"key": "gpus", "operator": "Lt", "values": ["8"]}, {"a"}),
    ],
)
def test_node_affinity_operators(expression, fits_on):
    nodes = [
        gpu_node("a", labels={"zone": "z1", "gpus": "4"}),
        gpu_node("b", labels={"zone": "z2", "gpus": "8"}),
        gpu_node("c", labels={"gpus": "many"}),
    ]
    decision = decide(nodes, pod(affinity=_affinity({"matchExpressions": [expression]})))
    assert {name for name, _ in decision.node_ranking} == fits_on
    assert decision.reasons == {"NodeAffinity": 3 - len(fits_on)}


def test_terms_are_ored_expressions_anded_and_match_fields_reads_the_node_name():
    nodes = [gpu_node("a", labels={"x": "1", "y": "1"}), gpu_node("b", labels={"x": "1"}), gpu_node("c")]
    both = {"matchExpressions": [{"key": "x", "operator": "Exists"}, {"key": "y", "operator": "Exists"}]}
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]}
    decision = decide(nodes, pod(affinity=_affinity(both, by_name)))
    assert {name for name, _ in decision.node_ranking} == {"a", "c"}


def test_node_selector_and_affinity_must_both_hold():
    nodes = [
        gpu_node("a", labels={"pool": "training", "zone": "z1"}),
        gpu_node("b", labels={"pool": "training"}),
    ]
    spec = pod(
        node_selector={"pool": "training"},
        affinity=_affinity({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}),
    )
    decision = decide(nodes, spec)
    assert decision.node == "a"
    assert refused(decision)["b"] == "NodeAffinity: node(s) didn't match Pod's node affinity/selector"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            pod(
                affinity=_affinity({"matchExpressions": [{"key": "x", "operator": "Near", "values": ["1"]}]})
            ),
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
        (pod(tolerations=[{"key": "k", "effect": "NoRun"}]), "tolerations[0].effect"),
        (pod(requests={"cpu": "4 cores"}), "containers[0].resources.requests.cpu"),
    ],
)
def test_malformed_fields_are_refused_naming_the_field(spec, field):
    decision = decide([gpu_node("a")], spec)
    assert decision.status == REJECTED
    assert decision.error_field == field


def test_host_ports_conflict_on_protocol_and_port_with_the_wildcard_address():
    holder = RunningPod("web", node="a", containers=[{"ports": [{"containerPort": 80, "hostPort": 8080}]}])
    other_ip = RunningPod(
        "web2", node="b", containers=[{"ports": [{"hostPort": 8080, "hostIP": "10.0.0.1"}]}]
    )
    udp = RunningPod("dns", node="c", containers=[{"ports": [{"hostPort": 8080, "protocol": "UDP"}]}])
    nodes = [gpu_node("a"), gpu_node("b"), gpu_node("c")]
    wildcard = decide(nodes, pod(ports=[{"containerPort": 80, "hostPort": 8080}]), [holder, other_ip, udp])
    assert {name for name, _ in wildcard.node_ranking} == {"c"}
    assert refused(wildcard)["a"] == "NodePorts: node(s) didn't have free ports for the requested pod ports"
    nodes = [gpu_node("a"), gpu_node("b"), gpu_node("c")]
    pinned = decide(nodes, pod(ports=[{"hostPort": 8080, "hostIP": "10.0.0.2"}]), [holder, other_ip, udp])
    assert {name for name, _ in pinned.node_ranking} == {"b", "c"}


def test_resources_fit_counts_running_pods_and_names_each_resource_short():
    nodes = [
        gpu_node("a", allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"}),
        gpu_node("b", allocatable={"cpu": "4", "memory": "1Gi"}),
        gpu_node("c", allocatable={"pods": "1"}),
    ]
    running = [
        RunningPod("busy", node="a", containers=[{"resources": {"requests": {"cpu": "3500m"}}}]),
        RunningPod("one", node="c"),
    ]
    decision = decide(nodes, pod(requests={"cpu": "1", "memory": "2Gi"}), running)
    assert decision.reasons == {"NodeResourcesFit": 3}
    assert refused(decision) == {
        "a": "NodeResourcesFit: Insufficient cpu",
        "b": "NodeResourcesFit: Insufficient memory",
        "c": "NodeResourcesFit: Too many pods",
    }


def test_an_extended_resource_the_node_lacks_does_not_fit_and_gpu_resources_are_decided_on_cards():
    ascend = {"huawei.com/Ascend910": "1"}
    nodes = [gpu_node("a"), gpu_node("b", allocatable={"huawei.com/Ascend910": "8"})]
    decision = decide(nodes, pod(requests=ascend))
    assert decision.node == "b"
    assert refused(decision)["a"] == "NodeResourcesFit: Insufficient huawei.com/Ascend910"
    # nvidia.com/gpu is never checked against allocatable
    assert decide([gpu_node("a", allocatable={"cpu": "1"})], pod(gpu=1)).node == "a"


def test_effective_request_takes_the_largest_init_container_with_the_sidecars_before_it():
    init = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
        {"name": "setup", "resources": {"limits": {"cpu": "3"}}},  # requests default to limits
    ]
    # app 1 cpu + sidecar 1 = 2; setup 3 + sidecar 1 = 4
    assert (
        decide([gpu_node("a", allocatable={"cpu": "3900m"})], pod(requests={"cpu": "1"}, init=init)).status
        == PENDING
    )
    assert (
        decide([gpu_node("a", allocatable={"cpu": "4"})], pod(requests={"cpu": "1"}, init=init)).node == "a"
    )


def test_the_one_line_reason_counts_nodes_in_kube_schedulers_form():
    nodes = [
        gpu_node("a", allocatable={"cpu": "1"}, labels={"pool": "training"}),
        gpu_node("b", labels={"pool": "inference"}),
        gpu_node("c", taints=[TAINT], labels={"pool": "training"}),
    ]
    decision = decide(nodes, pod(requests={"cpu": "2"}, node_selector={"pool": "training"}))
    assert decision.reason_text() == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {dedicated: team-b}."
    )


def test_card_reasons_are_counted_in_nodes_after_the_rules():
    nodes = [
        gpu_node("a", cards=4, memory=1000),
        gpu_node("b", cards=4, memory=1000),
        gpu_node("c", unschedulable=True),
    ]
    decision = decide(nodes, _mem_pod(2000))
    assert decision.reasons == {"CardInsufficientMemory": 8, "NodeUnschedulable": 1}
    assert decision.reason_text() == (
        "0/3 nodes are available: 1 node(s) were unschedulable, 2 CardInsufficientMemory."
    )


def test_a_gated_pod_is_not_tried():
    decision = decide([gpu_node("a")], pod(scheduling_gates=["kueue.x-k8s.io/admission"]))
    assert decision.status == PENDING
    assert decision.reasons == {"SchedulingGated": 1}
    assert decision.node_ranking == [] and decision.node_failures == []
    assert decision.reason_text().startswith("SchedulingGated")


def test_placed_pods_hold_cpu_until_unassumed():
    cluster = Cluster(nodes=[gpu_node("a", cards=2, allocatable={"cpu": "2"})])
    scheduler = Scheduler(cluster)
    first = scheduler.schedule(pod("one", requests={"cpu": "2"}))
    assert first.node == "a"
    second = scheduler.decide(pod("two", requests={"cpu": "1"}))
    assert second.reasons == {"NodeResourcesFit": 1}
    scheduler.unassume(first)
    assert scheduler.decide(pod("two", requests={"cpu": "1"})).node == "a"


def test_running_hami_pods_hold_their_cards_and_accounting_is_idempotent():
    node = gpu_node("a", memory=15360)
    held = RunningPod("old", node="a", annotations={"hami.io/vgpu-devices-allocated": "a-0,NVIDIA,15000,0:;"})
    cluster = Cluster(nodes=[node], running=[held])
    account_running(cluster)
    account_running(cluster)
    assert node.cards[0].used_memory == 15000 and node.cards[0].used_slots == 1
    assert Scheduler(cluster).decide(_mem_pod(8000)).status == PENDING
    cluster.running = []
    account_running(cluster)
    assert node.cards[0].used_memory == 0


def _zone_nodes() -> list[Node]:
    return [gpu_node(n, cards=4, labels={"zone": z}) for n, z in (("a", "z1"), ("b", "z1"), ("c", "z2"))]


def _web(name: str, node: str) -> RunningPod:
    return RunningPod(name, node=node, labels={"app": "web"})


SPREAD = {
    "maxSkew": 1,
    "topologyKey": "zone",
    "whenUnsatisfiable": "DoNotSchedule",
    "labelSelector": {"matchLabels": {"app": "web"}},
}


def test_hard_spread_keeps_the_skew_within_max_skew():
    decision = decide(
        _zone_nodes(), pod(labels={"app": "web"}, topology_spread_constraints=[SPREAD]), [_web("w1", "a")]
    )
    assert [name for name, _ in decision.node_ranking] == ["c"]
    assert decision.reasons == {"PodTopologySpread": 2}
    assert refused(decision)["a"] == "PodTopologySpread: node(s) didn't match pod topology spread constraints"


def test_min_domains_counts_missing_domains_as_empty():
    nodes = [gpu_node(n, labels={"zone": "z1"}) for n in ("a", "b")]
    spread = {**SPREAD, "minDomains": 2}
    decision = decide(
        nodes, pod(labels={"app": "web"}, topology_spread_constraints=[spread]), [_web("w1", "a")]
    )
    assert decision.status == PENDING and decision.reasons == {"PodTopologySpread": 2}


def _anti(selector: dict, key: str = "zone") -> dict:
    term = {"labelSelector": {"matchLabels": selector}, "topologyKey": key}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_anti_affinity_refuses_the_domains_of_matching_pods():
    decision = decide(_zone_nodes(), pod(affinity=_anti({"app": "web"})), [_web("w1", "a")])
    assert [name for name, _ in decision.node_ranking] == ["c"]
    assert refused(decision)["b"] == "InterPodAffinity: node(s) didn't match pod anti-affinity rules"


def test_an_existing_pods_anti_affinity_refuses_the_newcomer():
    guard = RunningPod("guard", node="a", affinity=_anti({"app": "web"}))
    decision = decide(_zone_nodes(), pod(labels={"app": "web"}), [guard])
    assert [name for name, _ in decision.node_ranking] == ["c"]
    assert (
        refused(decision)["a"] == "InterPodAffinity: node(s) didn't satisfy existing pods anti-affinity rules"
    )
    assert decide(_zone_nodes(), pod(labels={"app": "db"}), [guard]).status == SCHEDULED


def test_affinity_needs_a_matching_pod_in_the_domain_except_for_the_first_of_its_group():
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    decision = decide(_zone_nodes(), pod(labels={"app": "web"}, affinity=affinity), [_web("w1", "c")])
    assert [name for name, _ in decision.node_ranking] == ["c"]
    assert refused(decision)["a"] == "InterPodAffinity: node(s) didn't match pod affinity rules"
    first = decide(_zone_nodes(), pod(labels={"app": "web"}, affinity=affinity))
    assert first.status == SCHEDULED
    stranger = decide(_zone_nodes(), pod(labels={"app": "db"}, affinity=affinity))
    assert stranger.reasons == {"InterPodAffinity": 3}


def test_preferred_node_affinity_orders_nodes_before_the_node_score():
    nodes = [gpu_node("a", labels={"disk": "hdd"}), gpu_node("b", labels={"disk": "ssd"})]
    plain = decide(nodes, pod())
    preference = {
        "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
        "weight": 10,
    }
    nodes = [gpu_node("a", labels={"disk": "hdd"}), gpu_node("b", labels={"disk": "ssd"})]
    preferring = decide(
        nodes,
        pod(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [preference]}}),
    )
    assert plain.node == "a"  # equal scores: by name
    assert preferring.node == "b"


def test_the_columnar_sweep_and_the_node_by_node_path_agree_on_rules():
    nodes = [
        gpu_node(f"n{i:03}", labels={"pool": "training" if i % 7 == 0 else "inference"}) for i in range(100)
    ]
    swept = decide(nodes, pod(node_selector={"pool": "training"}))
    assert swept.nodes_fit == 15 and swept.reasons == {"NodeAffinity": 85}
    assert all(name.startswith("n") and int(name[1:]) % 7 == 0 for name, _ in swept.node_ranking)


def test_hints_say_what_would_make_a_refused_node_pass():
    nodes = [
        gpu_node("node-3", allocatable={"cpu": "4"}),
        gpu_node("tainted", taints=[TAINT]),
        gpu_node("other", labels={"pool": "inference"}),
    ]
    running = [RunningPod("busy", node="node-3", containers=[{"resources": {"requests": {"cpu": "3"}}}])]
    spec = pod(requests={"cpu": "3"})
    decision = decide(nodes[:2], spec, running)
    payload = decision.as_dict()
    assert payload["failed_reasons"]["node-3"]["hints"] == ["free 2 cpu on node-3"]
    assert payload["failed_reasons"]["tainted"]["hints"] == ["tolerate dedicated=team-b"]
    assert explain.what_would_fit(payload) == ["free 2 cpu on node-3", "tolerate dedicated=team-b"]
    labelled = decide([nodes[2]], pod(node_selector={"pool": "training"}))
    assert labelled.as_dict()["failed_reasons"]["other"]["hints"] == ["label other pool=training"]
    assert Decision.read_back(payload).reason_text() == decision.reason_text()


@pytest.mark.parametrize(
    "running, requests",
    [
        (
            [RunningPod("guard", node="big", affinity=_anti({"app": "web"}, key="kubernetes.io/hostname"))],
            None,
        ),
        (
            [
                RunningPod(
                    "hog", node="big", containers=[{"name": "c", "resources": {"requests": {"cpu": "4"}}}]
                )
            ],
            {"cpu": "1"},
        ),
    ],
    ids=["existing-anti-affinity", "cpu-held"],
)
def test_a_pod_is_not_called_never_fitting_while_a_node_it_fits_is_held_by_pods(running, requests):
    """The only node whose cards could take the pod is refused for what its pods hold
    (an existing pod's anti-affinity, its cpu): the pod waits, it is not `unschedulable`."""
    nodes = [
        gpu_node("small", memory=8000),
        gpu_node("big", memory=40000, labels={"kubernetes.io/hostname": "big"}, allocatable={"cpu": "4"}),
    ]
    spec = pod(labels={"app": "web"}, requests=requests)
    spec.containers[0]["resources"]["limits"]["nvidia.com/gpumem"] = 30000
    decision = decide(nodes, spec, running)
    assert decision.status == PENDING and "CardInsufficientMemory" in decision.reasons
    assert not decision.unschedulable
