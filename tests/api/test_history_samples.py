"""`GET history/samples/` (the charts' series) and the agent report's optional measurements."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Card, UsageSample

from .conftest import report_body, t4

pytestmark = pytest.mark.django_db

SAMPLES = "/api/v1/history/samples/"


def test_samples_come_oldest_first_within_the_window(viewer, cluster):
    now = timezone.now()
    for minutes, share in ((400, 0.1), (30, 0.2), (1, 0.3)):
        UsageSample.objects.create(
            at=now - timedelta(minutes=minutes),
            slots_share=share,
            pending_reasons={"CardInsufficientMemory": 2},
            nodes={"node1": 40, "node2": 10},
        )

    answer = viewer.get(SAMPLES)

    assert answer.status_code == 200, answer.content
    rows = answer.json()["results"]
    assert [row["slots"] for row in rows] == [0.2, 0.3]  # the default window is 6 hours
    assert rows[0]["pending_reasons"] == {"CardInsufficientMemory": 2} and rows[0]["node"] is None
    since = (now - timedelta(hours=8)).isoformat()
    node_rows = viewer.get(SAMPLES, {"since": since, "node": "node1"}).json()["results"]
    assert [row["node"] for row in node_rows] == [0.4, 0.4, 0.4] and node_rows[0]["pending_reasons"] is None


@pytest.mark.parametrize(
    ("params", "field", "status"),
    [
        ({"since": "yesterday"}, "since", 400),
        ({"window": "6h"}, "window", 400),
        ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "since", 400),
    ],
)
def test_bad_parameters_are_a_400_naming_them(viewer, params, field, status):
    answer = viewer.get(SAMPLES, params)
    assert answer.status_code == status and field in answer.json()


def test_an_unknown_node_is_a_404(viewer, cluster):
    assert viewer.get(SAMPLES, {"node": "nowhere"}).status_code == 404


def test_an_agent_reports_measurements_and_a_bad_one_is_a_400_naming_it(client_for):
    agent = client_for("agent:node1")
    measured = t4("GPU-a", 0, observed={"memory": 2048, "utilization": 40, "temperature": 55, "power": 70.2})
    assert (
        agent.post("/api/v1/agents/report/", report_body("node1", measured), format="json").status_code == 200
    )
    card = Card.objects.get(uuid="GPU-a")
    assert (card.observed_memory, card.utilization, card.temperature, card.power) == (2048, 40, 55, 70.2)

    hot = t4("GPU-a", 0, observed={"temperature": 999})
    answer = agent.post("/api/v1/agents/report/", report_body("node1", hot), format="json")
    assert answer.status_code == 400 and "devices[0].observed.temperature" in answer.json()
    assert Card.objects.get(uuid="GPU-a").temperature == 55


FIGURES = {"vgpus": 1.0, "memory": 2048.0, "pending": 0.0}


def test_queue_figures_come_in_bounded_pages_that_follow_one_another(viewer):
    from scheduling.api.views.history_samples import QUEUE_ROWS

    now = timezone.now()
    UsageSample.objects.bulk_create(
        UsageSample(at=now - timedelta(minutes=minute), slots_share=minute / 1000, queues={"q": FIGURES})
        for minute in range(1, 8)
    )
    since = (now - timedelta(hours=1)).isoformat()
    first = viewer.get(SAMPLES, {"queues": "true", "since": since, "limit": 3}).json()
    assert [row["slots"] for row in first["results"]] == [0.007, 0.006, 0.005]
    assert first["results"][0]["queues"] == {"q": FIGURES}
    seen = [row["slots"] for row in first["results"]]
    page = first
    while page["next"]:
        page = viewer.get(page["next"]).json()
        seen += [row["slots"] for row in page["results"]]
    assert seen == [0.007, 0.006, 0.005, 0.004, 0.003, 0.002, 0.001]
    # without a limit a queues page holds QUEUE_ROWS rows at most, and asking more is a 400
    assert viewer.get(SAMPLES, {"queues": "true", "since": since}).json()["next"] is None
    refused = viewer.get(SAMPLES, {"queues": "true", "limit": QUEUE_ROWS + 1})
    assert refused.status_code == 400 and "limit" in refused.json()
    assert viewer.get(SAMPLES, {"limit": QUEUE_ROWS + 1}).status_code == 200  # plain rows: up to MAX_ROWS
    assert viewer.get(SAMPLES, {"offset": -1}).status_code == 400
