"""Usage bars, heat colours and inline-SVG charts. No JavaScript, no fonts or files from outside."""

from __future__ import annotations

from dataclasses import dataclass

from django import template
from django.utils.html import format_html

register = template.Library()

HEAT_STEPS = 5


def fraction(used, total) -> float:
    """used/total clipped to 0..1; a zero capacity counts as empty."""
    if not total:
        return 0.0
    return max(0.0, min(1.0, (used or 0) / total))


@register.filter
def percent(used, total) -> int:
    return round(100 * fraction(used, total))


@register.filter
def heat(value) -> int:
    """0..1 (or a percent above 1) to a heat step 0..4 for the `heat-N` CSS classes."""
    value = float(value or 0)
    if value > 1:
        value /= 100
    if value <= 0:
        return 0
    return min(HEAT_STEPS - 1, 1 + int(value * (HEAT_STEPS - 1) - 1e-9))


def _figure(value: float) -> str:
    """A number as people read it: thousands grouped, one decimal at most (`2,069.6`, `8`)."""
    text = f"{value:,.1f}"
    return text[:-2] if text.endswith(".0") else text


def amount(used, total, unit: str = "") -> tuple[str, str]:
    """(`used/total`, unit) in the units an operator thinks in: memory in GiB, cores summed over
    several cards in cards (100% of one card's cores is one card); one card's cores stay a
    percentage, other units are shown as given."""
    used, total = used or 0, total or 0
    if unit == "MiB":
        return f"{_figure(used / 1024)}/{_figure(total / 1024)}", "GiB"
    if unit == "%" and total > 100:
        return f"{_figure(used / 100)}/{_figure(total / 100)}", "cards"
    if unit == "%":
        return f"{used}", "%"
    return f"{used}/{total}", unit


@register.simple_tag
def meter(label, used, total, unit=""):
    """One usage bar: `slots 2/10`, `memory 11.7/31.2 GiB`, filled and coloured by how much is
    taken; the tooltip keeps the exact figures (MiB, core percent).

    Built in Python rather than an included template: the Cluster page draws three per card.
    """
    share = fraction(used, total)
    used, total, percent = used or 0, total or 0, round(100 * share)
    shown, shown_unit = amount(used, total, unit)
    unit_html = format_html(" <small>{}</small>", shown_unit) if shown_unit and shown_unit != "%" else ""
    if shown_unit == "%":
        shown += "%"
    return format_html(
        '<div class="meter heat-{}" title="{}: {}/{} {} ({}%)" data-label="{}" data-used="{}" data-total="{}">'
        '<span class="meter-label">{}</span><span class="meter-track"><span class="meter-fill" style="width: {}%">'
        '</span></span><span class="meter-value">{}{}</span></div>',
        heat(share),
        label,
        used,
        total,
        unit,
        percent,
        label,
        used,
        total,
        label,
        percent,
        shown,
        unit_html,
    )


@dataclass
class Bar:
    label: str
    value: float
    x: float
    y: float
    width: float
    height: float
    highlight: bool = False
    href: str = ""
    text: str = ""


@register.inclusion_tag("scheduling/includes/hbar_chart.html")
def hbar_chart(rows, unit="", label_width=140, width=520, row_height=22):
    """Horizontal bars, one per (label, value, highlight) row; the longest bar fills the width."""
    rows = list(rows)
    top = max((abs(r[1]) for r in rows), default=0) or 1
    plot = width - label_width - 70
    bars = []
    for i, (label, value, *rest) in enumerate(rows):
        highlight = bool(rest[0]) if rest else False
        bars.append(
            Bar(
                label=str(label),
                value=value,
                x=label_width,
                y=i * row_height + 3,
                width=max(1.0, plot * abs(value) / top),
                height=row_height - 6,
                highlight=highlight,
                text=f"{value:.3f}".rstrip("0").rstrip("."),
            )
        )
    return {
        "bars": bars,
        "width": width,
        "height": max(row_height, len(bars) * row_height),
        "label_width": label_width,
        "unit": unit,
        "row_height": row_height,
    }


@register.inclusion_tag("scheduling/includes/column_chart.html")
def column_chart(points, title="", unit="", width=720, height=140):
    """Vertical bars over time, oldest left: `points` are (label, value) pairs."""
    points = list(points)
    top = max((p[1] for p in points), default=0) or 1
    pad_left, pad_bottom = 44, 18
    plot_w, plot_h = width - pad_left - 6, height - pad_bottom - 8
    step = plot_w / max(1, len(points))
    bars = []
    for i, (label, value) in enumerate(points):
        h = plot_h * (value or 0) / top
        bars.append(
            Bar(
                label=str(label),
                value=value,
                x=pad_left + i * step + step * 0.1,
                y=8 + plot_h - h,
                width=max(1.0, step * 0.8),
                height=h,
                text=f"{value:.1f}".rstrip("0").rstrip("."),
            )
        )
    ticks = [(8 + plot_h * (1 - f), f"{top * f:.1f}".rstrip("0").rstrip(".")) for f in (0, 0.5, 1)]
    return {
        "bars": bars,
        "width": width,
        "height": height,
        "title": title,
        "unit": unit,
        "ticks": ticks,
        "pad_left": pad_left,
        "base": 8 + plot_h,
        "first": points[0][0] if points else "",
        "last": points[-1][0] if points else "",
    }


@register.filter
def link_heat(score) -> int:
    """Pair score (SPEC 6.8: 10 across CPUs ... 100+ NVLink) to a heat step 0..4."""
    score = score or 0
    if score <= 0:
        return 0
    if score < 30:
        return 1
    if score < 60:
        return 2
    if score < 100:
        return 3
    return 4
