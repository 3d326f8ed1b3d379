"""Why a pending pod waits: the closest nodes, their card tables, and what would make it fit.

Each "what would make it fit" kind against a hand-written scenario, the closeness ranking,
the cluster-wide `unschedulable` mark, and the words `engine.explain` gives them.
"""

from __future__ import annotations

from dataclasses import replace

from scheduling.engine import explain
from scheduling.engine.scenario import parse_scenario
from scheduling.engine.scheduler import Scheduler

from .builders import GPU_POLICY, NUMA_BIND, ask, card, node, pod, run, run_one, scenario


def hints_of(out: dict, name: str) -> list[dict]:
    (close,) = [c for c in out["closest_nodes"] if c["node"] == name]
    return close["hints"]


def test_a_pending_pod_keeps_the_closest_nodes_with_every_card():
    out = run_one(
        [
            node("far", card("F0", 8000, used=(1, 7000, 0)), card("F1", 8000, used=(1, 7500, 0))),
            node("near", card("N0", 8000, used=(1, 6000, 0)), card("N1", 8000, used=(1, 5500, 0))),
        ],
        pod("p", None, ask(gpu=2, mem=3000)),
    )
    assert out["status"] == "pending" and out["unschedulable"] is False
    assert [c["node"] for c in out["closest_nodes"]] == ["near", "far"]
    near = out["closest_nodes"][0]
    assert (near["container"], near["count"], near["missing"], near["cards_total"]) == ("main", 2, 2, 2)
    by_uuid = {c["uuid"]: c for c in near["cards"]}
    assert by_uuid["N0"]["reason"] == "CardInsufficientMemory" and by_uuid["N0"]["stage"] == "memory"
    assert by_uuid["N0"]["free"] == {"slots": 9, "memory": 2000, "cores": 100}
    assert by_uuid["N0"]["ask"] == {"memory": 3000, "cores": 0}
    assert by_uuid["N0"]["short"] == {"memory": 1000, "cores": 0}
    assert by_uuid["N1"]["short"]["memory"] == 500


def test_closeness_ranks_more_fitting_cards_before_less_shortfall():
    # "one" has a card that fits and one 5,000 MiB short; "zero" has none that fit, 100 MiB short each
    out = run_one(
        [
            node("zero", card("Z0", 8000, used=(1, 5100, 0)), card("Z1", 8000, used=(1, 5100, 0))),
            node("one", card("O0", 8000), card("O1", 8000, used=(1, 8000, 0))),
        ],
        pod("p", None, ask(gpu=2, mem=3000)),
    )
    assert [(c["node"], c["missing"]) for c in out["closest_nodes"]] == [("one", 1), ("zero", 2)]


def test_closest_nodes_keep_at_most_k_configured_in_the_cluster_config():
    nodes = [node(f"n{i}", card(f"G{i}", 1000)) for i in range(8)]
    cluster, config, pods = parse_scenario(scenario(nodes, [pod("p", None, ask(gpu=1, mem=2000))]))
    decision = Scheduler(cluster, replace(config, closest_nodes=3)).decide(pods[0])
    assert [c["node"] for c in decision.as_dict(top=1)["closest_nodes"]] == ["n0", "n1", "n2"]
    assert len(Scheduler(cluster, config).decide(pods[0]).as_dict()["closest_nodes"]) == 5


def test_free_hint_names_the_card_and_the_mib_short():
    out = run_one([node("a", card("GPU-3", 8000, used=(2, 6000, 0)))], pod("p", None, ask(gpu=1, mem=4000)))
    (hint,) = hints_of(out, "a")
    assert (
        hint["kind"] == "free" and hint["cards"][0]["uuid"] == "GPU-3" and hint["cards"][0]["memory"] == 2000
    )
    tenants = {"GPU-3": [("ns/p2", 1500, 0), ("ns/p1", 1000, 0)]}
    assert explain.hint_words(hint, tenants) == (
        "a: fits if GPU-3 had 2,000 MiB more free (tenants: ns/p2 1,500 MiB, ns/p1 1,000 MiB)"
    )


def test_numa_hint_says_how_many_fit_and_the_best_numa_node():
    cards = [card(f"G{i}", 8000, numa=0 if i < 3 else 1) for i in range(4)]
    out = run_one([node("a", *cards)], pod("p", {NUMA_BIND: "true"}, ask(gpu=4, mem=1000)))
    # 4 cards on one node, numa-bind with 3 + 1: never on this node even empty
    assert out["unschedulable"] is True
    out = run_one(
        [node("a", *cards, card("G4", 8000, numa=1, used=(10, 0, 0)))],
        pod("p", {NUMA_BIND: "true"}, ask(gpu=2, mem=1000)),
    )
    assert out["status"] == "scheduled"
    cards = [card("G0", 8000, numa=0), card("G1", 8000, numa=1), card("G2", 8000, numa=0, used=(1, 8000, 0))]
    out = run_one([node("a", *cards)], pod("p", {NUMA_BIND: "true"}, ask(gpu=2, mem=1000)))
    numa = [h for h in hints_of(out, "a") if h["kind"] == "numa"]
    assert numa == [{"kind": "numa", "node": "a", "fit": 2, "cards": 3, "count": 2, "best": 1}]
    assert (
        explain.hint_words(numa[0]) == "a: fits 2 of 3 cards; numa-bind needs 2 on one NUMA node, best has 1"
    )


def test_mutex_hint_counts_the_cards_that_would_fit_without_mutex():
    cards = [
        card("G0", 8000, used=(1, 1000, 0)),
        card("G1", 8000, used=(1, 1000, 0)),
        card("G2", 8000, used=(1, 7900, 0)),
    ]
    out = run_one([node("a", *cards)], pod("p", {GPU_POLICY: "mutex,binpack"}, ask(gpu=1, mem=2000)))
    mutex = [h for h in hints_of(out, "a") if h["kind"] == "mutex"]
    assert mutex[0]["every"] is True and mutex[0]["would_fit"] == 2
    assert explain.hint_words(mutex[0]) == "a: mutex: every card has tenants; 2 cards would fit without mutex"


def test_an_ask_larger_than_every_card_never_fits_and_is_unschedulable():
    out = run_one(
        [node("a", card("A0", 81920)), node("b", card("B0", 40960))], pod("p", None, ask(gpu=1, mem=90000))
    )
    assert out["status"] == "pending" and out["unschedulable"] is True
    assert out["unschedulable_reason"]["why"] == "memory"
    assert explain.unschedulable_words(out) == (
        "gpumem 90,000 MiB exceeds every card (largest 81,920 MiB): never fits here"
    )
    assert all(c["never"] for c in out["closest_nodes"])


def test_more_cards_than_any_node_has_is_unschedulable():
    out = run_one([node("a", card("A0"), card("A1"))], pod("p", None, ask(gpu=4)))
    assert out["unschedulable"] is True and out["unschedulable_reason"]["why"] == "cards"
    (hint,) = hints_of(out, "a")
    assert explain.hint_words(hint) == "a has 2 cards, the container asks 4: never fits here"


def test_a_busy_cluster_is_not_unschedulable():
    out = run_one([node("a", card("A0", 8000, used=(10, 0, 0)))], pod("p", None, ask(gpu=1, mem=1000)))
    assert out["unschedulable"] is False and out["unschedulable_reason"] is None
    (hint,) = hints_of(out, "a")
    assert hint["cards"][0]["slots"] == 1
    assert explain.hint_words(hint) == "a: fits if A0 had a free vGPU slot"


def test_cordoned_cards_are_blocked_not_freeable():
    out = run_one([node("a", card("A0"), card("A1"), cordon="A0,A1")], pod("p", None, ask(gpu=1, mem=1000)))
    (hint,) = hints_of(out, "a")
    assert hint == {"kind": "blocked", "node": "a", "missing": 1, "stages": {"cordon": 2}}
    assert explain.hint_words(hint) == "a: 1 more card(s) needed and the rest are unavailable (2 cordoned)"


def test_scheduled_pods_carry_no_closest_nodes_and_the_cache_follows_placements():
    nodes = [node("a", card("A0", 8000))]
    first, second, third = run(nodes, [pod(f"p{i}", None, ask(gpu=1, mem=3000)) for i in range(3)])
    assert first["closest_nodes"] == [] and second["closest_nodes"] == []
    # the third sees the two placements: 2,000 MiB free, 1,000 short
    assert third["closest_nodes"][0]["cards"][0]["short"]["memory"] == 1000


def test_the_event_message_stays_within_the_limit_and_names_the_closest_cards():
    cards = [card(f"GPU-{i:02d}-with-a-long-uuid-0000-1111", 8000, used=(1, 7000, 0)) for i in range(16)]
    out = run_one([node("a", *cards)], pod("p", None, ask(gpu=1, mem=3000)))
    summary = "0/1 nodes are available: 16 CardInsufficientMemory."
    full = explain.failed_scheduling_message(out, summary, 10_000)
    assert full.startswith(summary + " closest a: GPU-00") and "CardInsufficientMemory" in full
    assert "a: fits if GPU-00" in full
    cut = explain.failed_scheduling_message(out, summary, 300)
    assert len(cut) <= 300 and cut.startswith(summary) and "more" in cut
    assert explain.failed_scheduling_message(out, summary, 20) == summary[:20]


def test_the_summary_read_from_the_payload_is_the_decisions_own_line():
    nodes = [node("a", card("A0", 8000)), node("b", card("B0", 4000, used=(10, 0, 0)))]
    pods = [
        pod("fits", None, ask(gpu=1, mem=1000)),
        pod("waits", None, ask(gpu=1, mem=9000)),
        pod("bad", None, ask(gpu=1, cores=-1)),
    ]
    cluster, config, specs = parse_scenario(scenario(nodes, pods))
    scheduler = Scheduler(cluster, config)
    for spec in specs:
        decision = scheduler.schedule(spec)
        assert explain.summary_of(decision.as_dict(top=1)) == decision.reason_text()


def test_a_type_no_card_has_never_fits_and_says_so():
    out = run_one(
        [node("a", card("A0", type="NVIDIA-T4"))], pod("p", {"nvidia.com/use-gputype": "A100"}, ask(gpu=1))
    )
    assert out["unschedulable"] is True and out["unschedulable_reason"]["why"] == "excluded"
    (hint,) = hints_of(out, "a")
    assert (
        explain.hint_words(hint) == "a: no card of the type, mode, UUID and capacity asked: never fits here"
    )
    assert out["closest_nodes"][0]["cards"][0]["stage"] == "type"
