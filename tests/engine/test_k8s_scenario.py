"""SPEC 9 + 10: scenarios speak Kubernetes' own fields (node labels, taints, cordons,
allocatable; pod selectors, affinity, tolerations, spread, gates, cpu/memory and ports; pods
`running` already), a malformed one is refused naming every field, and the example worlds
under static/scheduling/examples/k8s-*.json place pods as kube-scheduler would."""

import json
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from scheduling.engine.errors import ScenarioError, ScenarioProblems
from scheduling.engine.scenario import parse_scenario, read_scenario_file, run_scenario
from scheduling.engine.whatif import parse_whatif

from .builders import ask, card, container, node, pod, scenario
from .test_kubefields import good_node, good_pod

EXAMPLES = Path(settings.BASE_DIR) / "static" / "scheduling" / "examples"
ONE = ask(gpu=1, mem=1000)
ALLOCATED = "hami.io/vgpu-devices-allocated"


def example(name: str) -> dict:
    return read_scenario_file(EXAMPLES / f"{name}.json")


def by_name(out: dict) -> dict[str, dict]:
    return {entry["name"]: entry for entry in out["pods"]}


# Reading: the fields reach the engine's inputs as given


def test_node_and_pod_fields_reach_the_engine_as_given():
    tainted = {
        **node("n1", card("G0")),
        "labels": {"pool": "training"},
        "taints": [{"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}],
        "unschedulable": True,
        "allocatable": {"cpu": "4", "memory": "16Gi"},
    }
    trainer = {
        **pod("p", None, ONE),
        "labels": {"app": "p"},
        "nodeName": "n1",
        "nodeSelector": {"pool": "training"},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
        "priority": 5,
    }
    cluster, _, pods = parse_scenario(scenario([tainted], [trainer]))
    parsed = cluster.node("n1")
    assert parsed.labels == {"pool": "training"}
    assert parsed.taints == [{"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}]
    assert parsed.unschedulable is True and parsed.allocatable == {"cpu": "4", "memory": "16Gi"}
    spec = pods[0]
    assert (spec.labels, spec.node_name, spec.node_selector) == ({"app": "p"}, "n1", {"pool": "training"})
    assert spec.tolerations == [{"key": "dedicated", "operator": "Exists"}]
    assert spec.scheduling_gates == ["kueue.x-k8s.io/admission"]


def test_a_scenario_without_kubernetes_fields_reads_as_before():
    cluster, _, pods = parse_scenario(scenario([node("n1", card("G0"))], [pod("p", None, ONE)]))
    parsed = cluster.node("n1")
    assert (parsed.labels, parsed.taints, parsed.unschedulable, parsed.allocatable) == ({}, [], False, {})
    assert cluster.running == []
    spec = pods[0]
    assert (spec.node_selector, spec.affinity, spec.tolerations, spec.scheduling_gates) == ({}, None, [], [])


def running_hami(node_name: str = "n1", allocated: str = "G0,NVIDIA,15000,0:;") -> dict:
    return {
        "name": "old",
        "namespace": "ml",
        "node": node_name,
        "labels": {"app": "old"},
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "1500m"}}}],
        "annotations": {ALLOCATED: allocated},
    }


def test_running_pods_hold_their_cards_and_requests_on_their_node():
    raw = scenario([node("n1", card("G0"), card("G1"))], [pod("p", None, ONE)])
    raw["running"] = [running_hami()]
    cluster, _, _ = parse_scenario(raw)
    assert [r.key for r in cluster.running] == ["ml/old"]
    used = {c.uuid: (c.used_slots, c.used_memory) for c in cluster.node("n1").cards}
    assert used == {"G0": (1, 15000), "G1": (0, 0)}


def test_a_running_hami_pod_keeps_a_new_pod_off_its_card():
    """After a switch from HAMi: 15,000 of 15,360 MiB held, an 8,000 MiB pod does not fit."""
    raw = scenario([node("n1", card("G0"))], [pod("p", None, ask(gpu=1, mem=8000))])
    assert run_scenario(raw)["pods"][0]["status"] == "scheduled"
    raw["running"] = [running_hami()]
    assert run_scenario(raw)["pods"][0]["status"] == "pending"


RUNNING_MALFORMED = [
    pytest.param({"node": "n9"}, "running[0].node", "no node 'n9'", id="unknown-node"),
    pytest.param({"node": None}, "running[0].node", "required", id="no-node"),
    pytest.param({"name": ""}, "running[0].name", "required", id="no-name"),
    pytest.param(
        {"annotations": {ALLOCATED: "H0,NVIDIA,1000,0:;"}},
        f"running[0].annotations.{ALLOCATED}[0]",
        "not a card of node 'n1'",
        id="card-of-another-node",
    ),
    pytest.param(
        {"annotations": {ALLOCATED: "G0,NVIDIA,lots,0:;"}},
        f"running[0].annotations.{ALLOCATED}[0]",
        "non-integer",
        id="allocation-not-decoded",
    ),
    pytest.param(
        {"containers": [{"name": "m", "resources": {"requests": {"memory": "2 GB"}}}]},
        "running[0].containers[0].resources.requests.memory",
        "not a quantity",
        id="bad-request",
    ),
    pytest.param({"labels": {"app": 1}}, "running[0].labels.app", "must be a string", id="label"),
]


@pytest.mark.parametrize("change, where, words", RUNNING_MALFORMED)
def test_a_malformed_running_pod_is_a_file_error_naming_the_field(change, where, words):
    raw = scenario([node("n1", card("G0")), node("n2", card("H0"))], [pod("p", None, ONE)])
    raw["running"] = [{**running_hami(), **change}]
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(raw)
    assert raised.value.where == where
    assert words in raised.value.message


def test_a_running_pod_named_twice_is_refused():
    raw = scenario([node("n1", card("G0"))], [pod("p", None, ONE)])
    raw["running"] = [running_hami(), running_hami()]
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(raw)
    assert raised.value.where == "running[1].name"


def broken_world() -> dict:
    """One malformed value in each part: node allocatable, node taint, pod operator, pod cpu."""
    bad_node = {
        **node("n1", card("G0")),
        "allocatable": {"cpu": "4 cores"},
        "taints": [{"key": "dedicated", "effect": "NoRun"}],
    }
    near = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}
                ]
            }
        }
    }
    good = pod("fine", None, ONE)
    bad_pod = {
        **pod("p", containers=[container("main", limits=ONE, requests={"cpu": "lots"})]),
        "affinity": near,
    }
    return scenario([bad_node], [good, good | {"name": "also-fine"}, bad_pod])


BROKEN_WHERE = [
    "nodes[0].taints[0].effect",
    "nodes[0].allocatable.cpu",
    "pods[2].affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    ".nodeSelectorTerms[0].matchExpressions[0].operator",
    "pods[2].containers[0].resources.requests.cpu",
]


def test_every_malformed_kubernetes_field_is_named_at_once():
    with pytest.raises(ScenarioProblems) as raised:
        parse_scenario(broken_world())
    assert [problem.where for problem in raised.value.problems] == BROKEN_WHERE
    messages = [problem.message for problem in raised.value.problems]
    assert messages[0] == "must be NoSchedule, PreferNoSchedule or NoExecute, not 'NoRun'"
    assert messages[1] == "not a quantity: '4 cores'"
    assert messages[2].startswith("unknown operator 'Near'")


def test_simulate_exits_2_naming_every_malformed_field(tmp_path, capsys):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken_world()))
    with pytest.raises(SystemExit) as exited:
        call_command("simulate", str(path))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"{path}: {len(BROKEN_WHERE)} problems" in err
    for where in BROKEN_WHERE:
        assert f"  {where}: " in err


def test_a_batch_scenario_checks_the_same_fields():
    raw = broken_world()
    raw["queues"] = [{"name": "default"}]
    with pytest.raises(ScenarioProblems) as raised:
        parse_scenario(raw)
    assert [problem.where for problem in raised.value.problems] == BROKEN_WHERE


def test_a_what_if_checks_the_same_pod_fields_naming_each():
    bad = {**pod("p", None, ONE), "tolerations": [{"key": "k", "effect": "NoRun"}], "priority": "high"}
    with pytest.raises(ScenarioProblems) as raised:
        parse_whatif({"pods": [pod("ok", None, ONE), bad]})
    assert [problem.where for problem in raised.value.problems] == [
        "pods[1].tolerations[0].effect",
        "pods[1].priority",
    ]


def test_the_gpu_resources_still_reject_the_pod_not_the_file():
    """SPEC 9 is unchanged for SPEC 2's resources: a bad one rejects the pod, the rest run."""
    out = run_scenario(
        scenario([node("n1", card("G0"))], [pod("bad", None, ask(gpu="lots")), pod("p", None, ONE)])
    )
    assert [entry["status"] for entry in out["pods"]] == ["rejected", "scheduled"]


@pytest.mark.parametrize(
    "name", ["k8s-selector-taint-cordon-cpu", "k8s-running-hami", "k8s-gated", "k8s-spread-anti-affinity"]
)
def test_the_example_worlds_read_cleanly(name):
    cluster, _, pods = parse_scenario(example(name))
    assert cluster.nodes and pods


# The example worlds, end to end, as SPEC 10 places them


def test_selector_taint_cordon_and_cpu():
    out = by_name(run_scenario(example("k8s-selector-taint-cordon-cpu")))
    assert out["trainer"]["node"] == "train-ok"
    big = out["trainer-big"]
    assert (big["status"], big["node"]) == ("pending", None)
    assert {
        rule: big["reasons"].get(rule)
        for rule in ("NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodeResourcesFit")
    } == {
        "NodeUnschedulable": 1,
        "TaintToleration": 1,
        "NodeAffinity": 1,
        "NodeResourcesFit": 2,
    }
    assert big["failed_nodes"]["inference-1"].startswith("NodeAffinity")
    assert out["team-b"]["node"] == "train-tainted"
    team_a = out["team-a"]
    assert team_a["status"] == "pending"
    # a node counts under the first rule it fails: the cordoned one under NodeUnschedulable
    rules = ("NodeUnschedulable", "NodeName", "TaintToleration")
    assert {rule: team_a["reasons"].get(rule) for rule in rules} == {
        "NodeUnschedulable": 1,
        "NodeName": 3,
        "TaintToleration": 1,
    }
    assert out["ascend"]["node"] == "inference-1"


def test_running_pods_count_their_cards_cpu_and_ports():
    out = by_name(run_scenario(example("k8s-running-hami")))
    needs = out["needs-8000"]
    assert needs["status"] == "pending"
    assert needs["reasons"].get("NodeResourcesFit") == 1  # gpu-2: 3.5 of 4 cpu held by web
    assert needs["failed_nodes"]["gpu-1"].endswith("CardInsufficientMemory")  # HAMi's 15,000 MiB
    assert out["exporter-gpu"]["node"] == "gpu-2"  # gpu-1: host port 9100 held by node-exporter
    assert out["small"]["node"] == "gpu-1"  # gpu-2: 0.4 cpu left after exporter-gpu


def test_a_gated_pod_is_pending_and_holds_nothing():
    out = by_name(run_scenario(example("k8s-gated")))
    gated = out["waiting-for-kueue"]
    assert (gated["status"], gated["node"], gated["reasons"]) == ("pending", None, {"SchedulingGated": 1})
    assert out["admitted"]["node"] == "node-1"


def test_spread_and_anti_affinity():
    out = by_name(run_scenario(example("k8s-spread-anti-affinity")))
    zone = {"zone-a-1": "a", "zone-a-2": "a", "zone-b-1": "b"}
    placed = [out[f"web-{i}"]["node"] for i in (1, 2, 3)]
    assert sorted(placed) == sorted(zone)  # anti-affinity: one web pod per node
    assert zone[placed[0]] != zone[placed[1]]  # maxSkew 1 over zones: the second goes to the other zone
    fourth = out["web-4"]
    assert fourth["status"] == "pending"
    assert {rule: fourth["reasons"].get(rule) for rule in ("PodTopologySpread", "InterPodAffinity")} == {
        "PodTopologySpread": 2,
        "InterPodAffinity": 1,
    }
    batch = out["batch-1"]
    assert batch["node"] in ("zone-a-1", "zone-a-2")  # db's anti-affinity refuses zone-b-1
    assert batch["failed_nodes"]["zone-b-1"].startswith("InterPodAffinity")


def test_simulate_table_shows_node_rules_and_the_gate(capsys):
    call_command("simulate", str(EXAMPLES / "k8s-gated.json"), "--format", "table")
    lines = capsys.readouterr().out.splitlines()
    gated = next(line for line in lines if "waiting-for-kueue" in line)
    assert "pending" in gated and "SchedulingGated" in gated
    call_command("simulate", str(EXAMPLES / "k8s-selector-taint-cordon-cpu.json"), "--format", "table")
    lines = capsys.readouterr().out.splitlines()
    big = next(line for line in lines if "trainer-big" in line)
    assert "pending" in big and "NodeResourcesFit" in big


def test_a_pod_the_checks_accept_is_never_rejected_by_the_engine():
    """The doors' checks and the engine's rules read the same forms: every field of a pod
    that passed is understood (here it waits for its node affinity, it is not rejected)."""
    world = {**good_node(), "devices": [card("G0")]}
    out = run_scenario(scenario([world], [{**good_pod(), "schedulingGates": []}]))["pods"][0]
    assert (out["status"], out["error"]) == ("pending", None)
    assert out["reasons"] == {"NodeAffinity": 1}
