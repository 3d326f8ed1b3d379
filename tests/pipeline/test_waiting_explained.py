"""A pending decision through a real cycle: the stored payload keeps the closest nodes (K from
the CLOSEST_NODES option) and the log line says what would make the pod fit."""

from __future__ import annotations

import json
import logging

import pytest

from hamiadmin.logging import JsonFormatter
from scheduling import services
from scheduling.models import Decision
from scheduling.pipeline import run_cycle

from .conftest import card, submit

pytestmark = pytest.mark.django_db


def test_the_stored_payload_keeps_the_closest_nodes_and_the_log_line_the_hints(caplog, settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "CLOSEST_NODES": 2}
    for name in ("n1", "n2", "n3"):
        services.report_inventory(name, {}, {}, [card(f"{name}-G0", 0, memory=4000)])
    submit("huge", gpu=1, mem=100000)
    submit("wide", gpu=2, mem=1000)
    caplog.set_level(logging.INFO, logger="hamiadmin.decisions")
    run_cycle()
    huge = Decision.objects.get(pod__name="huge").payload
    assert huge["unschedulable"] is True and huge["unschedulable_reason"]["why"] == "memory"
    assert [c["node"] for c in huge["closest_nodes"]] == ["n1", "n2"]
    wide = Decision.objects.get(pod__name="wide").payload
    assert wide["unschedulable"] is True and wide["unschedulable_reason"]["why"] == "cards"
    formatter = JsonFormatter()
    lines = {
        line["pod"]: line
        for line in (
            json.loads(formatter.format(r)) for r in caplog.records if r.name == "hamiadmin.decisions"
        )
    }
    line = lines["default/huge"]
    assert line["unschedulable"] is True
    assert line["closest"] == [
        {"node": "n1", "missing": 1, "never": True},
        {"node": "n2", "missing": 1, "never": True},
    ]
    assert (
        line["would_fit"][0] == "gpumem 100,000 MiB exceeds every card (largest 4,000 MiB): never fits here"
    )
