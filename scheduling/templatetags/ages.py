"""`{{ when|age }}`: how long ago, to the second for fresh things ("12s", "4m 10s", "25m",
"2h 5m", "3d 4h"). Past ten minutes the seconds are left out: a live page's row then changes
once a minute, not at every poll (`web.live` sends only the rows that changed)."""

from datetime import datetime

from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def age(when) -> str:
    if not isinstance(when, datetime):
        return ""
    seconds = max(0, int((timezone.now() - when).total_seconds()))
    minutes, s = divmod(seconds, 60)
    hours, m = divmod(minutes, 60)
    days, h = divmod(hours, 24)
    if days:
        return f"{days}d {h}h"
    if hours:
        return f"{hours}h {m}m"
    if minutes >= 10:
        return f"{minutes}m"
    if minutes:
        return f"{minutes}m {s}s"
    return f"{s}s"
