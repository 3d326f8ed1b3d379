"""SPEC 3: pod annotations (node policy, use/nouse, numa-bind) and the node's cordon annotation."""

import pytest

from scheduling.engine.annotations import parse_policy
from scheduling.engine.model import ClusterConfig

from .builders import (
    GPU_POLICY,
    NODE_POLICY,
    NOUSE_TYPE,
    NOUSE_UUID,
    NUMA_BIND,
    T4,
    USE_TYPE,
    USE_UUID,
    ask,
    card,
    card_row,
    container,
    node,
    picked,
    pod,
    run,
    run_one,
)

A100 = "NVIDIA-A100-SXM4-80GB"
ONE_GIB = ask(gpu=1, mem=1000)


def two_nodes():
    """`busy` holds a tenant, `idle` holds none: node binpack picks busy, spread picks idle."""
    return [node("busy", card("B0", used=(1, 4000, 0))), node("idle", card("I0"))]


# -- node policy ------------------------------------------------------------------------------


def test_node_policy_annotation_overrides_the_cluster_default():
    out = run_one(two_nodes(), pod("p", {NODE_POLICY: "spread"}, ONE_GIB), node_scheduler_policy="binpack")
    assert out["node"] == "idle"
    assert out["policy"]["node"] == "spread"
    assert out["policy"]["node_ignored"] is None


def test_cluster_node_default_is_binpack():
    out = run_one(two_nodes(), pod("p", None, ONE_GIB))
    assert out["node"] == "busy"
    assert out["policy"]["node"] == "binpack"


@pytest.mark.parametrize("default, expected_node", [("binpack", "busy"), ("spread", "idle")])
def test_unknown_node_policy_falls_back_to_cluster_default_and_is_reported(default, expected_node):
    out = run_one(two_nodes(), pod("p", {NODE_POLICY: "fastest"}, ONE_GIB), node_scheduler_policy=default)
    assert out["status"] == "scheduled"
    assert out["node"] == expected_node
    assert out["policy"]["node"] == default
    assert out["policy"]["node_ignored"] == "fastest"


# -- use / nouse UUID and type -----------------------------------------------------------------


def gpus():
    return node(
        "n1",
        card("GPU-0", type=T4),
        card("GPU-1", type=A100),
        card("GPU-2", type=T4),
    )


def test_use_uuid_restricts_to_the_listed_cards():
    out = run_one([gpus()], pod("p", {USE_UUID: " GPU-2 , GPU-1"}, ask(gpu=2, mem=1000)))
    assert sorted(picked(out)) == ["GPU-1", "GPU-2"]
    assert card_row(out, "GPU-0")["reason"] == "CardUuidMismatch"


def test_nouse_uuid_avoids_the_listed_cards():
    out = run_one([gpus()], pod("p", {NOUSE_UUID: "GPU-0,GPU-1"}, ONE_GIB))
    assert picked(out) == ["GPU-2"]
    assert card_row(out, "GPU-1")["reason"] == "CardUuidMismatch"


@pytest.mark.parametrize("fragment", ["a100", "Sxm4", "-A100-"])
def test_use_type_matches_a_case_insensitive_substring(fragment):
    out = run_one([gpus()], pod("p", {USE_TYPE: fragment}, ONE_GIB))
    assert picked(out) == ["GPU-1"]
    assert card_row(out, "GPU-0")["reason"] == card_row(out, "GPU-2")["reason"] == "CardTypeMismatch"


def test_use_type_any_fragment_of_the_list_matches():
    out = run_one([gpus()], pod("p", {USE_TYPE: "V100, sxm4"}, ONE_GIB))
    assert picked(out) == ["GPU-1"]


def test_nouse_type_avoids_matching_cards():
    out = run_one([gpus()], pod("p", {NOUSE_TYPE: "TESLA"}, ONE_GIB))
    assert picked(out) == ["GPU-1"]


def test_nouse_type_can_exclude_every_card():
    out = run_one([gpus()], pod("p", {NOUSE_TYPE: "nvidia"}, ONE_GIB))
    assert out["failed_nodes"] == {"n1": "3/3 CardTypeMismatch"}


@pytest.mark.parametrize("annotation", [USE_UUID, NOUSE_UUID, USE_TYPE, NOUSE_TYPE])
def test_empty_use_or_nouse_value_is_no_constraint(annotation):
    out = run_one([gpus()], pod("p", {annotation: ""}, ask(gpu=3, mem=1000)))
    assert out["status"] == "scheduled"
    assert sorted(picked(out)) == ["GPU-0", "GPU-1", "GPU-2"]


# -- numa-bind --------------------------------------------------------------------------------


def split_numa():
    """NUMA 0 has one card, NUMA 1 two; spread would start on the idle NUMA 0 card."""
    return node(
        "n1",
        card("N0-A", numa=0),
        card("N1-A", numa=1, used=(1, 1000, 0)),
        card("N1-B", numa=1, used=(1, 2000, 0)),
    )


def test_numa_bind_keeps_a_containers_cards_on_one_numa_node():
    out = run_one([split_numa()], pod("p", {NUMA_BIND: "true", GPU_POLICY: "spread"}, ask(gpu=2, mem=1000)))
    assert sorted(picked(out)) == ["N1-A", "N1-B"]


def test_without_numa_bind_cards_may_cross_numa_nodes():
    out = run_one([split_numa()], pod("p", {GPU_POLICY: "spread"}, ask(gpu=2, mem=1000)))
    assert picked(out) == ["N0-A", "N1-A"]


@pytest.mark.parametrize("value", ["false", "", "0", "F", " False "])
def test_numa_bind_false_or_empty_is_off(value):
    out = run_one([split_numa()], pod("p", {NUMA_BIND: value, GPU_POLICY: "spread"}, ask(gpu=2, mem=1000)))
    assert picked(out) == ["N0-A", "N1-A"]


@pytest.mark.parametrize("value", ["1", "t", "TRUE", " true "])
def test_numa_bind_reads_booleans_as_hamis_device_plugin_does(value):
    out = run_one([split_numa()], pod("p", {NUMA_BIND: value, GPU_POLICY: "spread"}, ask(gpu=2, mem=1000)))
    assert sorted(picked(out)) == ["N1-A", "N1-B"]


def test_numa_bind_that_is_not_a_boolean_is_refused_naming_the_annotation():
    """`yes` would otherwise silently mean no binding at all."""
    out = run_one([split_numa()], pod("p", {NUMA_BIND: "yes"}, ask(gpu=2, mem=1000)))
    assert out["status"] == "rejected"
    assert (
        out["error"] == "annotations.nvidia.com/numa-bind: nvidia.com/numa-bind: 'yes' is not true or false"
    )


@pytest.mark.parametrize(
    "annotation, value, what",
    [
        (USE_UUID, "GPU-a GPU-b", "a card UUID"),
        (NOUSE_UUID, "GPU-a,GPU-b\tGPU-c", "a card UUID"),
        (USE_TYPE, "T4\nA100", "a card type"),
        (NOUSE_TYPE, "A100,V100\x00", "a card type"),
        ("nvidia.com/vgpu-mode", "hami core", "a card mode"),
    ],
)
def test_a_malformed_list_entry_is_refused_naming_the_annotation(annotation, value, what):
    out = run_one([gpus()], pod("p", {annotation: value}, ONE_GIB))
    assert out["status"] == "rejected"
    field, _, message = out["error"].partition(": ")
    assert field == f"annotations.{annotation}"
    assert message.startswith(f"{annotation}: ") and f"is not {what}; separate entries with commas" in message


def test_list_entries_may_carry_blanks_around_them_and_empty_entries():
    policy = parse_policy({USE_UUID: " GPU-a , ,GPU-b,", USE_TYPE: "Tesla T4, A100"}, ClusterConfig())
    assert policy.use_uuids == {"GPU-a", "GPU-b"}
    assert policy.use_types == ("tesla t4", "a100")


def test_numa_bind_is_per_container():
    """Each container lands on one NUMA node; two containers may use different ones."""
    containers = [container("a", ask(gpu=1, mem=1000)), container("b", ask(gpu=2, mem=1000))]
    one = node(
        "n1",
        card("N0-A", numa=0),
        card("N1-A", numa=1, used=(1, 100, 0)),
        card("N1-B", numa=1, used=(1, 100, 0)),
    )
    out = run_one([one], pod("p", {NUMA_BIND: "true", GPU_POLICY: "spread"}, containers=containers))
    assert picked(out, 0) == ["N0-A"]
    assert sorted(picked(out, 1)) == ["N1-A", "N1-B"]


# -- cordon -----------------------------------------------------------------------------------


def test_cordoned_cards_take_no_new_allocation():
    one = node("n1", card("GPU-0"), card("GPU-1"), card("GPU-2"), cordon=" GPU-0 , GPU-1")
    out = run_one([one], pod("p", {GPU_POLICY: "spread"}, ONE_GIB))
    assert picked(out) == ["GPU-2"]
    assert card_row(out, "GPU-0")["reason"] == card_row(out, "GPU-1")["reason"] == "CardCordoned"


def test_cordon_keeps_the_tenants_usage():
    """A cordoned card still holds its tenants: the node score still counts their usage."""
    one = node("n1", card("GPU-0", 10000, used=(5, 5000, 50)), card("GPU-1", 10000), cordon="GPU-0")
    out = run_one([one], pod("p", None, ask(gpu=1, mem=1000, cores=10)))
    assert picked(out) == ["GPU-1"]
    # slots 6/20, cores 60/200, memory 6000/20000
    assert out["node_scores"]["n1"] == pytest.approx(10 * (6 / 20 + 60 / 200 + 6000 / 20000), abs=1e-3)


def test_empty_cordon_cordons_nothing():
    out = run_one([node("n1", card("GPU-0"), cordon="")], pod("p", None, ONE_GIB))
    assert picked(out) == ["GPU-0"]


def test_cordon_on_one_node_does_not_affect_another():
    nodes = [node("a", card("A-0"), cordon="A-0"), node("b", card("B-0"))]
    out = run(nodes, [pod("p", None, ONE_GIB)])[0]
    assert out["node"] == "b"
    assert out["failed_nodes"] == {"a": "1/1 CardCordoned"}


# -- accepted but ignored ---------------------------------------------------------------------


def warnings_of(annotations: dict) -> dict[str, list[str]]:
    return parse_policy(annotations, ClusterConfig()).warnings()


def test_a_policy_that_reads_whole_has_no_warnings():
    assert warnings_of({GPU_POLICY: "mutex,binpack", NODE_POLICY: "Spread"}) == {}


def test_unknown_chain_names_are_warned_about_one_by_one_naming_the_known():
    warnings = warnings_of({GPU_POLICY: "binpack,fastest,numa-bind"})
    known = "known: binpack, spread, numa, mutex, gang-spread, topology-aware"
    assert warnings == {
        "annotations.hami.io/gpu-scheduler-policy": [
            f"unknown policy 'fastest' ignored ({known})",
            f"unknown policy 'numa-bind' ignored ({known})",
        ]
    }


def test_an_unknown_node_policy_is_warned_about_with_the_policy_used_instead():
    warnings = warnings_of({NODE_POLICY: "RoundRobin", GPU_POLICY: "gang"})
    assert list(warnings) == [
        "annotations.hami.io/gpu-scheduler-policy",
        "annotations.hami.io/node-scheduler-policy",
    ]
    assert warnings["annotations.hami.io/node-scheduler-policy"] == [
        "unknown node policy 'RoundRobin' ignored; using binpack"
    ]
