"""Backfill the structured reasons into decisions stored before the engine wrote them.

Decisions written from now on carry, next to `failed_nodes` (`{node: "N/M Reason, ..."}`) and
`node_scores` (`{node: score}`), the same facts as data:

- `failed_reasons`: `{node: {"cards": M, "reasons": {code: n}}}`, the same nodes;
- `node_order`: `[[node, score], ...]`, the fitting nodes in node-policy order (binpack: high
  first, spread: low first, ties by name), since a JSONB object keeps no key order.

The pages and events read only the new keys (`scheduling.engine.explain`), so older rows get
them here, parsed from the text once. This is the only place that parses that text.
Going back leaves the added keys in place: older code ignores them.
"""

import re

from django.db import migrations
from django.db.models import Q

BATCH = 500

_NODE_REASON = re.compile(r"(\d+)/(\d+) (\w+)")


def failed_reasons(failed_nodes: dict) -> dict:
    """`{"n1": "2/4 CardInsufficientMemory, 2/4 CardTypeMismatch"}` ->
    `{"n1": {"cards": 4, "reasons": {"CardInsufficientMemory": 2, "CardTypeMismatch": 2}}}`."""
    parsed = {}
    for node, text in failed_nodes.items():
        found = _NODE_REASON.findall(text or "")
        parsed[node] = {
            "cards": int(found[0][1]) if found else 0,
            "reasons": {code: int(n) for n, _, code in found},
        }
    return parsed


def node_order(node_scores: dict, node_policy) -> list:
    """The fitting nodes best first: spread ranks low scores first, binpack (and anything else,
    as the engine does) high scores first; equal scores by node name."""
    sign = 1.0 if node_policy == "spread" else -1.0
    return [
        [node, score]
        for node, score in sorted(node_scores.items(), key=lambda item: (sign * item[1], item[0]))
    ]


def with_structured_reasons(payload):
    """The payload with `failed_reasons` and `node_order` added where missing; None if it has
    both already (or is not a SPEC 9 pod object)."""
    if not isinstance(payload, dict) or ("failed_reasons" in payload and "node_order" in payload):
        return None
    payload = dict(payload)
    if "failed_reasons" not in payload:
        payload["failed_reasons"] = failed_reasons(payload.get("failed_nodes") or {})
    if "node_order" not in payload:
        policy = payload.get("policy") or {}
        payload["node_order"] = node_order(payload.get("node_scores") or {}, policy.get("node"))
    return payload


def backfill(apps, schema_editor):
    Decision = apps.get_model("scheduling", "Decision")
    missing = Decision.objects.exclude(
        Q(payload__has_key="failed_reasons") & Q(payload__has_key="node_order")
    )
    changed = []
    for decision in missing.only("id", "payload").order_by("id").iterator(chunk_size=BATCH):
        payload = with_structured_reasons(decision.payload)
        if payload is None:
            continue
        decision.payload = payload
        changed.append(decision)
        if len(changed) >= BATCH:
            Decision.objects.bulk_update(changed, ["payload"])
            changed = []
    if changed:
        Decision.objects.bulk_update(changed, ["payload"])


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0003_events_card_over_capacity"),
    ]

    operations = [
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]
