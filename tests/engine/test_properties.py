"""Properties over random clusters and pod sequences (SPEC 2, 4, 6, 9).

No card is ever given more than it has; the same input gives the same output whatever the
order cards and nodes are listed in; every chosen card passed every filter the pod asked for.
The scenarios are read from random byte tapes (`worlds`), one Hypothesis draw each.
"""

from __future__ import annotations

import copy
import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine.scenario import parse_scenario, run_scenario
from scheduling.engine.scheduler import Scheduler

from .builders import (
    CORDON,
    GPU,
    GPU_POLICY,
    GPUCORES,
    GPUMEM,
    GPUMEM_PERCENTAGE,
    NOUSE_TYPE,
    NOUSE_UUID,
    NUMA_BIND,
    USE_TYPE,
    USE_UUID,
)
from .worlds import DEFAULT_EXAMPLES, from_tape, property_examples, read_scenario

#: 100 examples a test at the default `HAMI_PROPERTY_EXAMPLES`, scaled with it.
BOUNDED = settings(
    max_examples=max(1, 100 * property_examples() // DEFAULT_EXAMPLES),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

NODE_NAMES = ["alpha", "bravo", "charlie"]
#: 1 to 3 nodes of up to 4 cards, 1 to 6 pods, the cluster policies (`worlds`).
SCENARIOS = from_tape(384, read_scenario, NODE_NAMES, (1, 3), (1, 6))


# -- helpers reading the input beside the output ----------------------------------------------


def cards_by_uuid(raw: dict) -> dict[str, tuple[str, dict]]:
    return {c["uuid"]: (n["name"], c) for n in raw["nodes"] for c in n["devices"]}


def cordoned(raw_node: dict) -> set[str]:
    value = raw_node.get("annotations", {}).get(CORDON, "")
    return {uuid.strip() for uuid in value.split(",") if uuid.strip()}


def expected_ask(container: dict) -> tuple[int, int | None, int | None, int] | None:
    """SPEC 2 read independently: (count, MiB or None, percentage or None, cores), None for no GPU."""
    resources = container["resources"]
    merged = {**resources.get("requests", {}), **resources.get("limits", {})}
    if not any(key in merged for key in (GPU, GPUMEM, GPUMEM_PERCENTAGE, GPUCORES)):
        return None
    memory, percentage = merged.get(GPUMEM), merged.get(GPUMEM_PERCENTAGE)
    whole = memory is None and percentage in (None, 100)
    cores = merged.get(GPUCORES, 100 if whole else 0)
    if memory is None and percentage is None:
        percentage = 100
    return merged.get(GPU, 1), memory, percentage, cores


def split_csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


TEXT_ITEM = re.compile(r"^(\d+)/(\d+) (\w+)$")


# -- properties -------------------------------------------------------------------------------


@BOUNDED
@given(SCENARIOS)
def test_no_card_is_ever_given_more_than_it_has(raw):
    out = run_scenario(copy.deepcopy(raw))["pods"]
    held = {
        uuid: [c["used"]["slots"], c["used"]["memory"], c["used"]["cores"]]
        for uuid, (_, c) in cards_by_uuid(raw).items()
    }
    for decision in out:
        for placement in decision["containers"]:
            for device in placement["devices"]:
                usage = held[device["uuid"]]
                usage[0] += 1
                usage[1] += device["memory"]
                usage[2] += device["cores"]
    for uuid, (_, c) in cards_by_uuid(raw).items():
        slots, memory, cores = held[uuid]
        assert slots <= c["slots"], uuid
        assert memory <= c["memory"], uuid
        assert cores <= c["cores"], uuid


@BOUNDED
@given(SCENARIOS)
def test_same_input_same_output(raw):
    first = json.dumps(run_scenario(copy.deepcopy(raw)))
    second = json.dumps(run_scenario(copy.deepcopy(raw)))
    assert first == second


@BOUNDED
@given(SCENARIOS, st.randoms(use_true_random=False))
def test_listing_order_of_nodes_and_cards_does_not_change_decisions(raw, rnd):
    shuffled = copy.deepcopy(raw)
    rnd.shuffle(shuffled["nodes"])
    for one in shuffled["nodes"]:
        rnd.shuffle(one["devices"])
    assert json.dumps(run_scenario(shuffled)) == json.dumps(run_scenario(copy.deepcopy(raw)))


@BOUNDED
@given(SCENARIOS)
def test_remembered_node_verdicts_decide_as_fresh_ones(raw):
    """The scheduler reuses node verdicts between similar pods; that must never change a decision."""
    cached_cluster, config, pods = parse_scenario(copy.deepcopy(raw))
    fresh_cluster, _, _ = parse_scenario(copy.deepcopy(raw))
    cached, fresh = Scheduler(cached_cluster, config), Scheduler(fresh_cluster, config, cached_shapes=0)
    for one in pods:
        assert cached.schedule(one).as_dict() == fresh.schedule(copy.deepcopy(one)).as_dict()


@BOUNDED
@given(SCENARIOS)
def test_chosen_cards_are_eligible_and_pass_every_filter_asked_for(raw):
    out = run_scenario(copy.deepcopy(raw))["pods"]
    by_uuid = cards_by_uuid(raw)
    raw_nodes = {n["name"]: n for n in raw["nodes"]}
    tenants = {uuid: c["used"]["slots"] for uuid, (_, c) in by_uuid.items()}
    for spec, decision in zip(raw["pods"], out, strict=True):
        if decision["status"] != "scheduled":
            continue
        annotations = spec["annotations"]
        chain = annotations.get(GPU_POLICY, raw["config"]["gpu_scheduler_policy"])
        mutex = "mutex" in [item.strip().lower() for item in chain.split(",")]
        use_uuid, nouse_uuid = (
            split_csv(annotations.get(USE_UUID, "")),
            split_csv(annotations.get(NOUSE_UUID, "")),
        )
        use_type = [t.lower() for t in split_csv(annotations.get(USE_TYPE, ""))]
        nouse_type = [t.lower() for t in split_csv(annotations.get(NOUSE_TYPE, ""))]
        assert [p["name"] for p in decision["containers"]] == [c["name"] for c in spec["containers"]]
        for container, placement in zip(spec["containers"], decision["containers"], strict=True):
            wanted = expected_ask(container)
            devices = placement["devices"]
            if wanted is None:
                assert devices == []
                continue
            count, memory, percentage, cores = wanted
            uuids = [d["uuid"] for d in devices]
            assert len(uuids) == count and len(set(uuids)) == count
            rows = {row["uuid"]: row for row in placement["cards"]}
            numas = set()
            for device in devices:
                node_name, c = by_uuid[device["uuid"]]
                assert node_name == decision["node"]
                assert rows[device["uuid"]]["eligible"] is True
                assert rows[device["uuid"]]["reason"] is None
                assert c["health"]
                assert device["uuid"] not in cordoned(raw_nodes[node_name])
                assert not use_uuid or device["uuid"] in use_uuid
                assert device["uuid"] not in nouse_uuid
                assert not use_type or any(t in c["type"].lower() for t in use_type)
                assert not any(t in c["type"].lower() for t in nouse_type)
                if mutex:
                    assert tenants[device["uuid"]] == 0
                assert device["cores"] == cores
                if memory is not None:
                    assert device["memory"] == memory
                else:
                    assert abs(device["memory"] - c["memory"] * percentage / 100) < 1
                numas.add(c["numa"])
            if annotations.get(NUMA_BIND) == "true":
                assert len(numas) == 1
            assert set(rows) == {c["uuid"] for c in raw_nodes[decision["node"]]["devices"]}
            eligible = [row["eligible"] for row in placement["cards"]]
            assert eligible == sorted(eligible, reverse=True)  # eligible cards first
        for placement in decision["containers"]:
            for device in placement["devices"]:
                tenants[device["uuid"]] += 1


@BOUNDED
@given(SCENARIOS)
def test_failure_texts_account_for_every_card_and_sum_into_reasons(raw):
    """The failed reasons (data) say what the texts say; node_order is node_scores as a list."""
    out = run_scenario(copy.deepcopy(raw))["pods"]
    sizes = {n["name"]: len(n["devices"]) for n in raw["nodes"]}
    for decision in out:
        if decision["status"] == "rejected":
            continue
        assert decision["nodes_fit"] + decision["nodes_failed"] == len(sizes)
        assert set(decision["node_scores"]) | set(decision["failed_nodes"]) == set(sizes)
        totals: dict[str, int] = {}
        for name, text in decision["failed_nodes"].items():
            items = [TEXT_ITEM.match(part) for part in text.split(", ")]
            assert all(items), text
            codes = [m.group(3) for m in items]
            assert codes == sorted(codes), text
            assert {int(m.group(2)) for m in items} == {sizes[name]}, text
            if codes != ["NodeInsufficientDevice"]:
                assert sum(int(m.group(1)) for m in items) == sizes[name], text
            for m in items:
                totals[m.group(3)] = totals.get(m.group(3), 0) + int(m.group(1))
            failed = decision["failed_reasons"][name]
            assert failed == {"cards": sizes[name], "reasons": {m.group(3): int(m.group(1)) for m in items}}
        assert list(decision["failed_reasons"]) == list(decision["failed_nodes"])
        assert decision["node_order"] == [[name, score] for name, score in decision["node_scores"].items()]
        if decision["status"] == "pending":
            assert decision["reasons"] == totals
