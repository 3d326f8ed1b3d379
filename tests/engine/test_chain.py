"""SPEC 6: the GPU policy chain: parsing, filters, sort keys, tiebreak, numa-bind, topology-aware,
and the one filter protocol (a toy filter registered here changes decisions, nothing else edited)."""

from typing import TYPE_CHECKING

import pytest

from scheduling.engine.annotations import parse_policy
from scheduling.engine.chain import FILTERS, SORT_KEYS, BaseFilter, Filter, chain_names
from scheduling.engine.model import ClusterConfig

from .builders import (
    GPU_POLICY,
    NUMA_BIND,
    T4,
    ask,
    card,
    card_row,
    container,
    failure,
    node,
    picked,
    pod,
    run,
    run_one,
    table_order,
)

ONE_GIB = ask(gpu=1, mem=1000)


def policy_of(chain: str | None, **config) -> dict:
    annotations = {GPU_POLICY: chain} if chain is not None else None
    return run_one([node("n1", card("G0"))], pod("p", annotations, ONE_GIB), **config)["policy"]


# -- 6.1 parsing ------------------------------------------------------------------------------


def test_chain_is_trimmed_lowercased_and_deduplicated_first_stays():
    policy = policy_of(" Mutex , BINPACK,mutex ,numa, binpack")
    assert policy["gpu"] == ["mutex", "binpack", "numa"]
    assert policy["filters"] == ["mutex"]
    assert policy["sort_keys"] == ["binpack", "numa"]
    assert policy["ignored"] == []


def test_unknown_names_are_ignored_and_reported_never_failing():
    out = run_one([node("n1", card("G0"))], pod("p", {GPU_POLICY: "binpack,fastest,gang"}, ONE_GIB))
    assert out["status"] == "scheduled"
    assert out["policy"]["gpu"] == ["binpack"]
    assert out["policy"]["ignored"] == ["fastest", "gang"]


def test_missing_annotation_uses_the_cluster_default_spread():
    policy = policy_of(None)
    assert (policy["gpu"], policy["sort_keys"]) == (["spread"], ["spread"])


def test_missing_annotation_uses_a_configured_default():
    policy = policy_of(None, gpu_scheduler_policy="mutex,binpack")
    assert (policy["filters"], policy["sort_keys"]) == (["mutex"], ["binpack"])


def sizes_node():
    """Spread prefers BIG (4000 MiB is a smaller share of it), binpack SMALL."""
    return node("n1", card("SMALL", 8000), card("BIG", 16000))


def test_present_annotation_replaces_the_default_even_when_nothing_in_it_is_known():
    out = run_one(
        [sizes_node()],
        pod("p", {GPU_POLICY: "fastest"}, ask(gpu=1, mem=4000)),
        gpu_scheduler_policy="binpack",
    )
    assert out["policy"]["gpu"] == []
    assert out["policy"]["ignored"] == ["fastest"]
    assert out["policy"]["sort_keys"] == ["spread"]
    assert picked(out) == ["BIG"]


@pytest.mark.parametrize(
    "chain, filters",
    [("mutex", ["mutex"]), ("mutex,topology-aware", ["mutex", "topology-aware"]), ("", [])],
)
def test_filter_only_chain_ranks_by_spread(chain, filters):
    out = run_one(
        [sizes_node()], pod("p", {GPU_POLICY: chain}, ask(gpu=1, mem=4000)), gpu_scheduler_policy="binpack"
    )
    assert out["policy"]["filters"] == filters
    assert out["policy"]["sort_keys"] == ["spread"]
    assert picked(out) == ["BIG"]


@pytest.mark.parametrize("chain, expected", [("binpack", "SMALL"), ("spread", "BIG")])
def test_single_value_behaves_as_before_chains(chain, expected):
    out = run_one([sizes_node()], pod("p", {GPU_POLICY: chain}, ask(gpu=1, mem=4000)))
    assert out["policy"]["sort_keys"] == [chain]
    assert picked(out) == [expected]


# -- 6.2 filters, 6.3 sort keys ---------------------------------------------------------------


def test_filters_remove_cards_but_never_rank():
    """`mutex` after `binpack` still filters; ranking among free cards stays binpack."""
    one = node("n1", card("BUSY", used=(1, 1000, 0)), card("BIG", 16000), card("SMALL", 8000))
    out = run_one([one], pod("p", {GPU_POLICY: "binpack,mutex"}, ask(gpu=1, mem=4000)))
    assert out["policy"]["filters"] == ["mutex"]
    assert out["policy"]["sort_keys"] == ["binpack"]
    assert picked(out) == ["SMALL"]
    assert card_row(out, "BUSY")["reason"] == "ExclusiveDeviceAllocateConflict"


def numa_versus_load():
    """BUSY sits on NUMA 1 with a tenant; IDLE on NUMA 0."""
    return node("n1", card("BUSY", numa=1, used=(1, 4000, 0)), card("IDLE", numa=0))


@pytest.mark.parametrize("chain, expected", [("binpack,numa", "BUSY"), ("numa,binpack", "IDLE")])
def test_the_first_sort_key_decides(chain, expected):
    out = run_one([numa_versus_load()], pod("p", {GPU_POLICY: chain}, ONE_GIB))
    assert picked(out) == [expected]


def test_the_next_sort_key_is_consulted_only_on_a_tie():
    one = node(
        "n1",
        card("N1-BUSIEST", numa=1, used=(3, 3000, 0)),
        card("N0-IDLE", numa=0),
        card("N0-BUSY", numa=0, used=(1, 1000, 0)),
    )
    out = run_one([one], pod("p", {GPU_POLICY: "numa,binpack"}, ONE_GIB))
    assert table_order(out) == ["N0-BUSY", "N0-IDLE", "N1-BUSIEST"]
    assert picked(out) == ["N0-BUSY"]


def test_card_table_lists_eligible_cards_in_chain_order_first():
    one = node(
        "n1",
        card("G0", health=False),
        card("G1", used=(1, 1000, 0)),
        card("G2"),
        card("G3", used=(2, 3000, 0)),
    )
    out = run_one([one], pod("p", {GPU_POLICY: "binpack"}, ONE_GIB))
    assert table_order(out) == ["G3", "G1", "G2", "G0"]
    assert [row["eligible"] for row in out["containers"][0]["cards"]] == [True, True, True, False]
    assert card_row(out, "G0")["reason"] == "CardNotHealth"
    assert card_row(out, "G3")["reason"] is None


# -- 6.4 tiebreak -----------------------------------------------------------------------------


@pytest.mark.parametrize("chain", ["binpack", "spread", "numa"])
def test_equal_cards_go_to_the_lower_index_whatever_the_listing_order(chain):
    one = node("n1", card("THIRD", index=3), card("FIRST", index=1), card("SECOND", index=2))
    out = run_one([one], pod("p", {GPU_POLICY: chain}, ONE_GIB))
    assert picked(out) == ["FIRST"]
    assert table_order(out) == ["FIRST", "SECOND", "THIRD"]


@pytest.mark.parametrize("chain", ["binpack", "spread"])
def test_scores_within_1e_9_are_equal(chain):
    """1 MiB on a 10^11 MiB card moves the score by 1e-10: a tie, so the index decides."""
    used_by_later = (0, 1, 0) if chain == "binpack" else (0, 0, 0)
    used_by_first = (0, 1, 0) if chain == "spread" else (0, 0, 0)
    one = node("n1", card("G0", 10**11, used=used_by_first), card("G1", 10**11, used=used_by_later))
    out = run_one([one], pod("p", {GPU_POLICY: chain}, ONE_GIB))
    assert picked(out) == ["G0"]


@pytest.mark.parametrize("chain", ["binpack", "spread"])
def test_scores_more_than_1e_9_apart_are_not_equal(chain):
    """1 MiB on a 10^9 MiB card moves the score by 1e-8: the score decides."""
    used_g1 = (0, 1, 0) if chain == "binpack" else (0, 0, 0)
    used_g0 = (0, 1, 0) if chain == "spread" else (0, 0, 0)
    one = node("n1", card("G0", 10**9, used=used_g0), card("G1", 10**9, used=used_g1))
    out = run_one([one], pod("p", {GPU_POLICY: chain}, ONE_GIB))
    assert picked(out) == ["G1"]


# -- the seed walk-through ---------------------------------------------------------------------


def t4_node():
    return node(
        "t4-node",
        card("GPU-0", type=T4, used=(2, 2000, 0)),
        card("GPU-1", type=T4, used=(1, 1000, 0)),
        card("GPU-2", type=T4),
        card("GPU-3", type=T4),
    )


def test_mutex_filters_busy_cards_binpack_ties_index_decides():
    out = run_one([t4_node()], pod("latency-tier", {GPU_POLICY: "mutex,binpack"}, ONE_GIB))
    assert picked(out) == ["GPU-2"]
    assert out["allocated"] == "GPU-2,NVIDIA,1000,0:;"
    assert (
        card_row(out, "GPU-0")["reason"]
        == card_row(out, "GPU-1")["reason"]
        == "ExclusiveDeviceAllocateConflict"
    )
    assert card_row(out, "GPU-2")["score"] == pytest.approx(card_row(out, "GPU-3")["score"], abs=1e-9)


def test_pure_binpack_takes_the_busiest_card():
    out = run_one([t4_node()], pod("plain", {GPU_POLICY: "binpack"}, ONE_GIB))
    assert picked(out) == ["GPU-0"]


def test_mutex_guarantees_no_tenant_at_placement_only():
    """After the mutex pod lands on GPU-2, a later plain-binpack pod may share GPU-2."""
    one = node("n1", card("GPU-0"), card("GPU-1"))
    pods = [
        pod("mutex", {GPU_POLICY: "mutex,binpack"}, ONE_GIB),
        pod("plain", {GPU_POLICY: "binpack"}, ONE_GIB),
    ]
    first, second = run([one], pods)
    assert picked(first) == ["GPU-0"]
    assert picked(second) == ["GPU-0"]


def test_a_later_mutex_pod_avoids_cards_taken_by_earlier_pods():
    one = node("n1", card("GPU-0"), card("GPU-1"))
    pods = [pod("a", {GPU_POLICY: "binpack"}, ONE_GIB), pod("b", {GPU_POLICY: "mutex,binpack"}, ONE_GIB)]
    first, second = run([one], pods)
    assert picked(first) == ["GPU-0"]
    assert picked(second) == ["GPU-1"]


# -- several containers ------------------------------------------------------------------------


def test_containers_accumulate_usage_within_one_pod():
    """Binpack puts container a on G0; container b would too, but G0 no longer has the memory."""
    one = node("n1", card("G0", 10000), card("G1", 10000))
    containers = [container("a", ask(gpu=1, mem=6000)), container("b", ask(gpu=1, mem=6000))]
    out = run_one([one], pod("p", {GPU_POLICY: "binpack"}, containers=containers))
    assert picked(out, 0) == ["G0"]
    assert picked(out, 1) == ["G1"]
    assert card_row(out, "G0", 1)["reason"] == "CardInsufficientMemory"
    assert out["allocated"] == "G0,NVIDIA,6000,0:;G1,NVIDIA,6000,0:;"


def test_an_exclusive_container_sees_its_sibling_as_a_tenant():
    one = node("n1", card("G0"), card("G1"))
    containers = [container("a", ask(gpu=1, mem=1000)), container("b", ask(gpu=1, mem=1000, cores=100))]
    out = run_one([one], pod("p", {GPU_POLICY: "binpack"}, containers=containers))
    assert picked(out, 0) == ["G0"]
    assert picked(out, 1) == ["G1"]
    assert card_row(out, "G0", 1)["reason"] == "ExclusiveDeviceAllocateConflict"


def test_a_multi_card_container_gets_different_cards():
    one = node("n1", *(card(f"G{i}") for i in range(4)))
    out = run_one([one], pod("p", {GPU_POLICY: "binpack"}, ask(gpu=3, mem=1000)))
    assert len(set(picked(out))) == 3


# -- 6.7 numa-bind ---------------------------------------------------------------------------


def test_numa_bind_takes_the_numa_node_of_the_first_card_that_has_enough():
    """Binpack order is A, B, C, D; A's NUMA 1 also has D, so A and D: not A and B (no NUMA
    binding), nor B and C (the lower NUMA number, which also has enough)."""
    one = node(
        "n1",
        card("A", numa=1, used=(4, 4000, 0)),
        card("B", numa=0, used=(3, 3000, 0)),
        card("C", numa=0, used=(2, 2000, 0)),
        card("D", numa=1, used=(1, 1000, 0)),
    )
    bound = run_one([one], pod("p", {GPU_POLICY: "binpack", NUMA_BIND: "true"}, ask(gpu=2, mem=1000)))
    free = run_one([one], pod("p", {GPU_POLICY: "binpack"}, ask(gpu=2, mem=1000)))
    assert picked(bound) == ["A", "D"]
    assert picked(free) == ["A", "B"]


def test_numa_bind_skips_a_numa_node_without_enough_fitting_cards():
    one = node(
        "n1",
        card("A", numa=0, used=(4, 4000, 0)),
        card("B", numa=1, used=(3, 3000, 0)),
        card("C", numa=1, used=(2, 2000, 0)),
        card("D", numa=0, health=False),
    )
    out = run_one([one], pod("p", {GPU_POLICY: "binpack", NUMA_BIND: "true"}, ask(gpu=2, mem=1000)))
    assert picked(out) == ["B", "C"]


# -- 6.8 topology-aware ----------------------------------------------------------------------


def linked_node(links: dict[tuple[str, str], int], used: dict[str, tuple] | None = None, **per_card) -> dict:
    """Four cards G0..G3 with pair scores given once per pair (on the first card)."""
    used = used or {}
    cards = []
    for i in range(4):
        uuid = f"G{i}"
        own = {b: score for (a, b), score in links.items() if a == uuid}
        fields = dict(per_card.get(uuid, {}))
        if own:
            fields["links"] = own
        cards.append(card(uuid, used=used.get(uuid), **fields))
    return node("n1", *cards)


HUB = {
    ("G0", "G1"): 100,
    ("G0", "G2"): 100,
    ("G0", "G3"): 100,
    ("G1", "G2"): 10,
    ("G1", "G3"): 20,
    ("G2", "G3"): 30,
}


def test_topology_asking_one_takes_the_least_linked_card():
    """Sums to the other cards: G0 300, G1 130, G2 140, G3 150. Spread alone would take G0."""
    out = run_one([linked_node(HUB)], pod("p", {GPU_POLICY: "topology-aware"}, ONE_GIB))
    assert picked(out) == ["G1"]


def test_topology_asking_several_takes_the_best_linked_combination():
    links = {
        ("G0", "G1"): 10,
        ("G0", "G2"): 20,
        ("G0", "G3"): 10,
        ("G1", "G2"): 30,
        ("G1", "G3"): 40,
        ("G2", "G3"): 200,
    }
    out = run_one([linked_node(links)], pod("p", {GPU_POLICY: "topology-aware"}, ask(gpu=2, mem=1000)))
    assert sorted(picked(out)) == ["G2", "G3"]


def test_topology_three_cards_maximise_the_summed_pair_score():
    """Triples sum G0,G1,G2 = 160, G0,G1,G3 = 160, G1,G2,G3 = 150, G0,G2,G3 = 70."""
    links = {
        ("G0", "G1"): 100,
        ("G0", "G2"): 10,
        ("G0", "G3"): 10,
        ("G1", "G2"): 50,
        ("G1", "G3"): 50,
        ("G2", "G3"): 50,
    }
    out = run_one([linked_node(links)], pod("p", {GPU_POLICY: "topology-aware"}, ask(gpu=3, mem=1000)))
    # Two triples tie at 160: the first in chain order (spread, all idle: by index) wins.
    assert sorted(picked(out)) == ["G0", "G1", "G2"]


def test_topology_takes_exactly_the_fitting_cards_when_they_are_as_many_as_asked():
    links = {("G0", "G1"): 100, ("G2", "G3"): 0}
    one = linked_node(links, **{"G0": {"health": False}, "G1": {"health": False}})
    out = run_one([one], pod("p", {GPU_POLICY: "topology-aware"}, ask(gpu=2, mem=1000)))
    assert sorted(picked(out)) == ["G2", "G3"]


def test_topology_tie_for_one_card_goes_to_chain_order():
    """G1 and G3 both sum 130; binpack ranks the busier G3 first, so G3, not the lower index."""
    links = {
        ("G0", "G1"): 100,
        ("G0", "G2"): 100,
        ("G0", "G3"): 100,
        ("G1", "G2"): 20,
        ("G1", "G3"): 10,
        ("G2", "G3"): 20,
    }
    busy_g3 = {"G3": (1, 1000, 0)}
    by_binpack = run_one(
        [linked_node(links, busy_g3)], pod("p", {GPU_POLICY: "topology-aware,binpack"}, ONE_GIB)
    )
    by_spread = run_one(
        [linked_node(links, busy_g3)], pod("p", {GPU_POLICY: "topology-aware,spread"}, ONE_GIB)
    )
    assert picked(by_binpack) == ["G3"]
    assert picked(by_spread) == ["G1"]


def test_topology_tie_between_combinations_goes_to_chain_order():
    links = {("G0", "G1"): 100, ("G2", "G3"): 100}
    busy = {"G2": (2, 2000, 0), "G3": (1, 1000, 0)}
    by_binpack = run_one(
        [linked_node(links, busy)], pod("p", {GPU_POLICY: "topology-aware,binpack"}, ask(gpu=2, mem=1000))
    )
    by_spread = run_one(
        [linked_node(links, busy)], pod("p", {GPU_POLICY: "topology-aware,spread"}, ask(gpu=2, mem=1000))
    )
    assert sorted(picked(by_binpack)) == ["G2", "G3"]
    assert sorted(picked(by_spread)) == ["G0", "G1"]


def test_topology_with_numa_bind_chooses_the_numa_node_first():
    """G1-G2 is the best pair but crosses NUMA nodes; spread's first card G0 picks NUMA 0."""
    links = {("G0", "G1"): 10, ("G1", "G2"): 100, ("G2", "G3"): 10}
    numa = {"G0": {"numa": 0}, "G1": {"numa": 0}, "G2": {"numa": 1}, "G3": {"numa": 1}}
    annotations = {GPU_POLICY: "topology-aware", NUMA_BIND: "true"}
    bound = run_one([linked_node(links, **numa)], pod("p", annotations, ask(gpu=2, mem=1000)))
    free = run_one(
        [linked_node(links, **numa)], pod("p", {GPU_POLICY: "topology-aware"}, ask(gpu=2, mem=1000))
    )
    assert sorted(picked(bound)) == ["G0", "G1"]
    assert sorted(picked(free)) == ["G1", "G2"]


def test_topology_with_too_few_fitting_cards_reports_k_over_m():
    one = linked_node(HUB, **{"G0": {"health": False}, "G1": {"health": False}})
    out = run_one([one], pod("p", {GPU_POLICY: "topology-aware"}, ask(gpu=3, mem=1000)))
    assert failure(out, "n1") == "2/4 AllocatedCardsInsufficientRequest, 2/4 CardNotHealth"


def test_topology_links_given_on_one_side_are_symmetric():
    """G3 names its link to G2 only on G3's side; the pair still wins."""
    one = node(
        "n1",
        card("G0", links={"G1": 10}),
        card("G1"),
        card("G2"),
        card("G3", links={"G2": 100}),
    )
    out = run_one([one], pod("p", {GPU_POLICY: "topology-aware"}, ask(gpu=2, mem=1000)))
    assert sorted(picked(out)) == ["G2", "G3"]


# -- the filter registry ---------------------------------------------------------------------


class ReverseFilter(BaseFilter):
    """A toy choice filter: takes the cards the chain ranked last."""

    name = "reverse"
    words = "last-ranked cards first"
    decides_fit = False

    def select(self, ranked, count, node, policy):
        return ranked[::-1]


class NumaOneOnlyFilter(BaseFilter):
    """A toy card-level filter: cards on NUMA node 1 stay out."""

    name = "numa0-only"
    words = "only cards on NUMA node 0 pass"

    def rejects(self, card, used):
        return ("CardUuidMismatch", "toy") if card.numa == 1 else None


class FewFilter(BaseFilter):
    """A toy fitting-cards filter: a container may not take half or more of the fitting cards."""

    name = "few"
    words = "never half of the fitting cards"

    def rejects_fitting(self, fitting, count):
        return ("NumaNotFit", "few") if 2 * count >= len(fitting) else None


if TYPE_CHECKING:
    _toys: tuple[type[Filter], ...] = (ReverseFilter, NumaOneOnlyFilter, FewFilter)


def busy_and_idle():
    return node("n1", card("BUSY", used=(3, 3000, 0)), card("MID", used=(1, 1000, 0)), card("IDLE"))


def test_a_registered_choice_filter_changes_the_choice(monkeypatch):
    before = run_one([busy_and_idle()], pod("p", {GPU_POLICY: "reverse,binpack"}, ONE_GIB))
    monkeypatch.setitem(FILTERS, "reverse", ReverseFilter())
    after = run_one([busy_and_idle()], pod("p", {GPU_POLICY: "reverse,binpack"}, ONE_GIB))
    assert (before["policy"]["ignored"], picked(before)) == (["reverse"], ["BUSY"])
    assert (after["policy"]["filters"], picked(after)) == (["reverse"], ["IDLE"])
    assert table_order(after) == ["BUSY", "MID", "IDLE"], "a filter chooses, it never ranks"


def test_a_registered_card_filter_runs_at_check_6(monkeypatch):
    monkeypatch.setitem(FILTERS, "numa0-only", NumaOneOnlyFilter())
    one = node(
        "n1",
        card("FULL", numa=1, slots=1, used=(1, 1000, 0)),
        card("SMALL", 500, numa=1),
        card("OK", numa=0),
    )
    out = run_one([one], pod("p", {GPU_POLICY: "numa0-only"}, ONE_GIB))
    assert picked(out) == ["OK"]
    assert card_row(out, "FULL")["reason"] == "CardTimeSlicingExhausted", "check 5 comes first"
    assert (card_row(out, "SMALL")["reason"], card_row(out, "SMALL")["stage"]) == ("CardUuidMismatch", "toy")


def test_a_registered_fitting_filter_fails_every_fitting_card(monkeypatch):
    monkeypatch.setitem(FILTERS, "few", FewFilter())
    nodes = [node("n1", card("A0"), card("A1")), node("n2", card("B0"), card("B1"), card("B2"))]
    out = run_one(nodes, pod("p", {GPU_POLICY: "few"}, ONE_GIB))
    assert out["node"] == "n2"
    assert out["failed_nodes"] == {"n1": "2/2 NumaNotFit"}


def test_filters_run_in_registry_order_whatever_the_chain_order():
    """numa-bind picks the NUMA node before topology picks within it (SPEC 6.8): binpack ranks
    G0 first, so NUMA 0; topology over all four cards would take the better linked G2, G3."""
    links = {("G0", "G1"): 10, ("G2", "G3"): 200}
    numa = {"G0": {"numa": 0}, "G1": {"numa": 0}, "G2": {"numa": 1}, "G3": {"numa": 1}}
    used = {"G0": (3, 3000, 0)}
    one = linked_node(links, used, **numa)
    for chain in ("topology-aware,binpack", "binpack,topology-aware"):
        bound = run_one([one], pod("p", {GPU_POLICY: chain, NUMA_BIND: "true"}, ask(gpu=2, mem=1000)))
        free = run_one([one], pod("p", {GPU_POLICY: chain}, ask(gpu=2, mem=1000)))
        assert (picked(bound), sorted(picked(free))) == (["G0", "G1"], ["G2", "G3"]), chain


def test_the_registry_holds_the_filters_in_hook_order():
    assert list(FILTERS) == ["mutex", "numa-bind", "gang-spread", "topology-aware"]
    assert chain_names() == ("binpack", "spread", "numa", "mutex", "gang-spread", "topology-aware")


def test_numa_bind_is_registered_but_is_no_chain_name():
    policy = policy_of("numa-bind,binpack")
    assert (policy["gpu"], policy["ignored"], policy["filters"]) == (["binpack"], ["numa-bind"], [])


def test_active_filters_follow_the_chain_and_the_numa_bind_annotation():
    def active(annotations):
        return [f.name for f in parse_policy(annotations, ClusterConfig()).active_filters]

    assert active({GPU_POLICY: "topology-aware,binpack,mutex"}) == ["mutex", "topology-aware"]
    assert active({GPU_POLICY: "binpack", NUMA_BIND: "true"}) == ["numa-bind"]
    assert active({GPU_POLICY: "topology-aware", NUMA_BIND: "TRUE"}) == ["numa-bind", "topology-aware"]
    assert active({}) == []


@pytest.mark.parametrize(
    "name, words",
    [
        ("mutex", "only cards without tenants pass"),
        ("topology-aware", "picks among fitting cards by NVLink/PCIe pair scores"),
        ("numa-bind", "all cards of a container on one NUMA node"),
        ("binpack", "fuller card first (higher score)"),
        ("spread", "emptier card first (lower score)"),
        ("numa", "lower NUMA node first"),
    ],
)
def test_each_filter_and_sort_key_carries_its_words(name, words):
    assert {**FILTERS, **SORT_KEYS}[name].words == words
