"""Amounts in the units an operator reads: GiB for memory, cards for summed cores."""

from __future__ import annotations

import pytest

from scheduling.templatetags.charts import amount, meter


@pytest.mark.parametrize(
    ("used", "total", "unit", "shown"),
    [
        (12000, 32000, "MiB", ("11.7/31.2", "GiB")),
        (16384, 16384, "MiB", ("16/16", "GiB")),
        (206960, 700000, "%", ("2,069.6/7,000", "cards")),  # the audit's cluster total
        (250, 800, "%", ("2.5/8", "cards")),
        (25, 100, "%", ("25", "%")),  # one card's cores
        (2, 10, "", ("2/10", "")),
        (None, 0, "MiB", ("0/0", "GiB")),
    ],
)
def test_amounts_read_in_gib_and_cards(used, total, unit, shown):
    assert amount(used, total, unit) == shown


def test_a_meter_shows_gib_and_keeps_the_exact_mib_in_its_tooltip():
    html = meter("memory", 12000, 32000, "MiB")
    assert 'title="memory: 12000/32000 MiB (38%)"' in html and 'data-used="12000"' in html
    assert '<span class="meter-value">11.7/31.2 <small>GiB</small></span>' in html
    assert '<span class="meter-value">25%</span>' in meter("", 25, 100, "%")
