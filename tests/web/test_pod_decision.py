"""`{% pod_decision %}` and `|reason_lines`: the template side of `engine.explain`; no database."""

from __future__ import annotations

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
