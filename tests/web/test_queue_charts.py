"""Per-queue history: each sample keeps every queue's own vGPUs and MiB held and pods pending
(the 50 busiest), folds them like the rest, serves them at `?queues=true`, and the Queues page
draws them with the vendored uPlot, a unit on every axis."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import services
from scheduling.models import UsageSample, apply_retention, take_sample
from scheduling.models import samples as history

from .conftest import cycle, submit
from .test_browser import WAIT_MS, browser, page, shot, sign_in  # noqa: F401 (fixtures)

SAMPLES = "/api/v1/history/samples/"


def in_queue(name: str, queue: str, mem: int, gpu: int = 1):
    return submit(name, gpu=gpu, mem=mem, annotations={"hami.io/queue": queue})


@pytest.fixture
def two_queues():
    """research holds two vGPUs (2 x 3000 MiB: one pod of two cards) and waits on a third pod;
    serving holds one 1000 MiB vGPU; a pod of no queue holds one 500 MiB vGPU (`default`)."""
    services.report_inventory(
        "n1", devices=[{"uuid": f"GPU-{i}", "index": i, "type": "A100", "memory": 16000} for i in range(2)]
    )
    services.create_queue("research")
    services.create_queue("serving")
    in_queue("train", "research", 3000, gpu=2)
    in_queue("web", "serving", 1000)
    submit("loose", mem=500)
    assert len(cycle("placing").placed) == 3
    in_queue("too-big", "research", 40000)
    cycle("waiting")


@pytest.mark.django_db
def test_a_sample_keeps_each_queues_own_usage_and_pending_pods(two_queues):
    sample = take_sample()
    assert sample.queues == {
        "default": {"vgpus": 1, "memory": 500, "pending": 0},
        "research": {"vgpus": 2, "memory": 6000, "pending": 1},
        "serving": {"vgpus": 1, "memory": 1000, "pending": 0},
    }


@pytest.mark.django_db
def test_only_the_busiest_queues_are_kept(two_queues, monkeypatch):
    monkeypatch.setattr(history, "MAX_QUEUES", 2)
    assert list(take_sample().queues) == ["default", "research"]  # serving ties default, loses on name


@pytest.mark.django_db
def test_folded_rows_average_the_queues_over_their_samples():
    old = timezone.now() - timedelta(hours=history.RAW_HOURS + 1)
    start = old.replace(minute=0, second=0, microsecond=0)
    for minute, queues in (
        (1, {"a": {"vgpus": 4, "memory": 4000, "pending": 2}}),
        (
            2,
            {"a": {"vgpus": 2, "memory": 2000, "pending": 0}, "b": {"vgpus": 1, "memory": 100, "pending": 3}},
        ),
    ):
        UsageSample.objects.create(at=start + timedelta(minutes=minute), queues=queues)
    apply_retention()
    (row,) = UsageSample.objects.all()
    assert row.span == 300 and row.samples == 2
    assert row.queues == {
        "a": {"vgpus": 3.0, "memory": 3000.0, "pending": 1.0},
        "b": {"vgpus": 0.5, "memory": 50.0, "pending": 1.5},  # idle in the sample without it
    }


@pytest.mark.django_db
def test_the_api_serves_the_queues_when_asked_and_null_otherwise(two_queues, viewer_client):
    take_sample()
    plain = viewer_client.get(SAMPLES).json()["results"]
    assert [row["queues"] for row in plain] == [None]
    rows = viewer_client.get(SAMPLES, {"queues": "true"}).json()["results"]
    assert rows[0]["queues"]["research"] == {"vgpus": 2.0, "memory": 6000.0, "pending": 1.0}
    refused = viewer_client.get(SAMPLES, {"queues": "maybe"})
    assert refused.status_code == 400 and "queues" in refused.json()


@pytest.mark.django_db
def test_the_queues_page_has_the_queue_charts(two_queues, viewer_client):
    html = viewer_client.get("/queues/").content.decode()
    assert 'data-testid="history"' in html and 'data-queues="true"' in html
    assert "History by queue" in html and f'href="{SAMPLES}?queues=true"' in html
    assert "vendor/uplot/uPlot.iife.min.js" in html and "scheduling/history.js" in html
    cluster = viewer_client.get("/").content.decode()
    assert 'data-testid="history"' in cluster and 'data-queues="true"' not in cluster


# --- In Chromium ---------------------------------------------------------------------


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_queues_page_draws_one_chart_per_figure_with_a_series_per_queue(page, viewer_user):  # noqa: F811
    services.create_queue("research")
    services.create_queue("serving")
    now = timezone.now()
    UsageSample.objects.bulk_create(
        UsageSample(
            at=now - timedelta(minutes=minute),
            queues={
                "research": {"vgpus": minute % 5, "memory": 1000 * (minute % 5), "pending": minute % 3},
                "serving": {"vgpus": 1, "memory": 500, "pending": 0},
            },
        )
        for minute in range(60)
    )
    sign_in(page)
    page.goto("/queues/")
    charts = page.locator("[data-testid=history] .uplot")
    charts.nth(2).wait_for(timeout=WAIT_MS)
    assert charts.count() == 3
    text = page.inner_text("[data-testid=history]")
    for title in (
        "vGPUs held by queue (vGPUs)",
        "Memory held by queue (MiB)",
        "Pending pods by queue (pods)",
    ):
        assert title in text, title
    legend = page.inner_text("[data-testid=history] .uplot >> nth=0")
    assert "research" in legend and "serving" in legend and "time" in legend
    shot(page, "history-queues")
