"""bench.limit, the numpy lower bound `make bench` compares `simulate` with: it must do the
real work (every card checked, placements applied), or the ratio it prints means nothing."""

from __future__ import annotations

from bench.limit import decide_all


def card(uuid: str, memory: int = 10000, **extra) -> dict:
    return {"uuid": uuid, "memory": memory, **extra}


def pod(name: str, **limits) -> dict:
    limits = {f"nvidia.com/{key}": value for key, value in limits.items()}
    return {"name": name, "containers": [{"name": "main", "resources": {"limits": limits}}]}


def test_placements_are_applied_so_later_pods_see_them():
    raw = {"nodes": [{"name": "a", "devices": [card("A0", 10000)]}]}
    pods = [pod(f"p{i}", gpu=1, gpumem=4000) for i in range(3)]
    answers = decide_all(raw, pods, top=10)
    assert [a["status"] for a in answers] == ["scheduled", "scheduled", "pending"]
    assert answers[2]["reasons"] == {"CardInsufficientMemory": 1}


def test_checks_run_in_spec_order_and_count_per_card():
    raw = {
        "nodes": [
            {"name": "a", "devices": [card("A0", health=False), card("A1", 100)]},
            {"name": "b", "devices": [card("B0", used={"slots": 10, "memory": 0, "cores": 0}, slots=10)]},
        ]
    }
    answer = decide_all(raw, [pod("p", gpu=1, gpumem=500)], top=10)[0]
    assert answer["status"] == "pending" and answer["nodes_failed"] == 2
    assert answer["reasons"] == {
        "CardNotHealth": 1,
        "CardInsufficientMemory": 1,
        "CardTimeSlicingExhausted": 1,
    }


def test_binpack_node_policy_takes_the_fuller_node():
    raw = {
        "config": {"node_scheduler_policy": "binpack"},
        "nodes": [
            {"name": "empty", "devices": [card("E0")]},
            {"name": "busy", "devices": [card("B0", used={"slots": 1, "memory": 4000, "cores": 0})]},
        ],
    }
    answer = decide_all(raw, [pod("p", gpu=1, gpumem=1000)], top=10)[0]
    assert answer["node"] == "busy" and list(answer["node_scores"]) == ["busy", "empty"]
