"""`{% pod_decision %}` and `|reason_lines`: the template side of `engine.explain`; no database."""

from __future__ import annotations

import re

from django.template import Context, Template

from tests.engine.test_explain import card, scenario


def render(payload) -> str:
    return Template("{% load decision_path %}{% pod_decision payload %}").render(
        Context({"payload": payload})
    )


def test_ignored_names_are_shown_struck_through():
    pod = scenario([card("A", 0)], "binpack, sideways", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 100})
    html = render(pod)
    assert "<s>sideways</s>" in html and 'data-role="ignored"' in html


def test_a_pending_pod_renders_its_reasons_and_a_rejected_pod_its_error():
    full = card("A", 0, used={"slots": 1, "memory": 15500})
    pending = scenario([full], "spread", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000})
    assert pending["status"] == "pending"
    html = render(pending)
    assert "Why it waits" in html and "1 of 1 cards on n1 lack the free memory asked" in html
    rejected = scenario([card("A", 0)], "spread", {"nvidia.com/gpu": 1, "nvidia.com/gpucores": -1})
    html = render(rejected)
    assert rejected["status"] == "rejected" and "gpucores" in html and 'data-testid="decision-error"' in html


def test_a_placed_pod_lists_the_nodes_that_did_not_fit():
    two_cards = {"name": "n0", "devices": [card("X", 0), card("Y", 1)]}
    pod = scenario(
        [card("A", 0)], "spread", {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1000}, extra_nodes=[two_cards]
    )
    assert (pod["status"], pod["node"]) == ("scheduled", "n0")
    html = render(pod)
    assert "1 node did not fit" in html and "n1 has fewer cards (1) than a container asks for" in html


def test_the_pending_list_row_reads_the_reasons_in_words():
    full = card("A", 0, used={"slots": 1, "memory": 15500})
    pending = scenario([full], "mutex", {"nvidia.com/gpumem": 1000})
    html = Template(
        "{% load decision_path %}{% for line in payload|reason_lines %}{{ line.words }};{% endfor %}"
    ).render(Context({"payload": pending}))
    assert html == "1 of 1 cards on n1 already have tenants (mutex);"
    assert (
        Template("{% load decision_path %}[{{ payload|reason_lines|length }}]").render(
            Context({"payload": None})
        )
        == "[0]"
    )


def test_a_pending_pod_draws_a_card_grid_per_close_node_coloured_by_reason():
    cards = [card("A", 0, used={"slots": 1, "memory": 15500}), card("B", 1)]
    pending = scenario(cards, "mutex", {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1000})
    assert pending["status"] == "pending"
    html = render(pending)
    assert 'data-testid="closest-nodes"' in html and 'data-node="n1"' in html
    grid = re.findall(r'class="card-cell reason-([a-z]+)" data-testid="close-card" data-uuid="(\w+)"', html)
    assert grid == [("capacity", "A"), ("fits", "B")]
    assert "What would make it fit" in html
    assert "n1: mutex: 1 of 2 cards have tenants; 0 cards would fit without mutex" in html


def test_an_unschedulable_pod_says_so_on_its_decision():
    pending = scenario([card("A", 0)], "spread", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 90000})
    html = render(pending)
    assert 'data-testid="unschedulable"' in html
    assert "gpumem 90,000 MiB exceeds every card (largest 16,000 MiB): never fits here" in html
