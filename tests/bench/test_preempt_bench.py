"""bench.preempt, the contended-cluster benchmark `make bench` prints: at a tiny size it must
really place every arriving pod by evicting, and never beat the lower bound it reports."""

from __future__ import annotations

from bench.preempt import build_cluster, lower_bound, report, run


def test_every_arriving_pod_is_placed_and_the_evictions_respect_the_lower_bounds():
    result = run(nodes=20, pods=10, max_cards=16)
    assert result.unplaced == [] and result.placed == 10
    assert result.faults == []  # every card holds exactly what the running pods hold
    assert result.cycles >= 2  # evictions in one cycle, placements in the next
    assert result.evicted >= result.bound > 0
    assert result.evicted_cards >= result.cards_asked  # each card asked had to be emptied
    assert "evicted per pod placed" in report(result)


def test_kais_gang_arrives_first_and_is_placed_with_the_singles():
    result = run(nodes=40, pods=20, max_cards=64)
    assert result.unplaced == [] and result.faults == []
    assert result.evicted >= result.bound


def test_the_lower_bound_charges_a_card_by_its_tenants_widths():
    cluster, tenants, _ = build_cluster(8, seed=3)
    cards = sum(len(node.cards) for node in cluster.nodes)
    # emptying every card means evicting every tenant
    assert abs(lower_bound(cluster, tenants, cards) - len(tenants)) < 1e-6
    assert lower_bound(cluster, tenants, 0) == 0
