"""Colours a colour-blind operator can tell apart: the usage steps darken in order (lightness
survives every kind of colour blindness), and states are patterns, not another red."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

STATIC = Path(settings.BASE_DIR) / "static" / "scheduling"
#: Viénot, Brettel & Mollon (1999): linear RGB as a protanope and a deuteranope see it.
SIGHTS = {
    "protan": ((0.11238, 0.88762, 0.0), (0.11238, 0.88762, 0.0), (0.00401, -0.00401, 1.0)),
    "deutan": ((0.29275, 0.70725, 0.0), (0.29275, 0.70725, 0.0), (-0.02234, 0.02234, 1.0)),
    "normal": ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
}


def linear(hex_colour: str) -> tuple[float, float, float]:
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    return tuple(c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)


def seen(hex_colour: str, sight: str) -> tuple[float, ...]:
    rgb = linear(hex_colour)
    return tuple(max(0.0, sum(m * c for m, c in zip(row, rgb, strict=True))) for row in SIGHTS[sight])


def lightness(rgb) -> float:
    """CIE L* of a linear RGB colour."""
    y = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    return 116 * y ** (1 / 3) - 16 if y > 0.008856 else 903.3 * y


def test_usage_steps_darken_in_order_for_every_sight():
    css = (STATIC / "components.css").read_text(encoding="utf-8")
    fills = [re.search(rf"--fill-{step}: (#[0-9a-f]{{6}})", css).group(1) for step in range(1, 5)]
    for sight in SIGHTS:
        steps = [lightness(seen(colour, sight)) for colour in fills]
        assert all(a - b >= 8 for a, b in zip(steps, steps[1:], strict=False)), (sight, steps)


def test_unhealthy_and_cordoned_cells_are_patterns_not_a_colour():
    css = (STATIC / "dashboard.css").read_text(encoding="utf-8")
    unhealthy = re.search(r"\.heatmap i\.unhealthy \{ background: ([^;]+);", css).group(1)
    cordoned = re.search(r"\.heatmap i\.cordoned \{ background: ([^;]+);", css).group(1)
    assert "gradient" in unhealthy and "#fff" in unhealthy  # a white slash on a dark cell
    assert "repeating-linear-gradient" in cordoned  # stripes
    assert unhealthy != cordoned
