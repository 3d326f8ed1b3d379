"""Usage samples and what agents measured: a sample records the cluster at a bounded rate,
the retention folds old samples into 5-minute and hourly rows and caps the table, and a
report's `observed` measurements land on the card beside its grants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling import services
from scheduling.engine import ScenarioError
from scheduling.models import Card, Cycle, UsageSample, apply_retention, take_sample
from scheduling.models.cluster import overused_cards
from scheduling.ops.scrape import exposition

pytestmark = pytest.mark.django_db

NOON = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def t4(uuid, index, **extra):
    return {"uuid": uuid, "index": index, "memory": 15000, "slots": 10, **extra}


def raw(at, **values):
    return UsageSample.objects.create(at=at, **values)


def test_a_sample_records_shares_pending_and_the_cycles_since_the_last_one():
    services.report_inventory("node1", {}, {}, [t4("GPU-0", 0), t4("GPU-1", 1)])
    Card.objects.filter(uuid="GPU-0").update(used_slots=5, used_memory=15000, used_cores=50)
    for duration, placed in ((10.0, 1), (30.0, 2), (20.0, 0)):
        Cycle.objects.create(considered=1, placed=placed, duration_ms=duration, finished_at=NOON)

    sample = take_sample(NOON + timedelta(seconds=5))

    assert (sample.slots_share, sample.memory_share, sample.cores_share) == (0.25, 0.5, 0.25)
    assert (sample.placements, sample.cycles, sample.cycle_p50_ms, sample.cycle_max_ms) == (3, 3, 20.0, 30.0)
    assert sample.nodes == {"node1": 50} and sample.pending == 0


def test_samples_are_taken_at_most_every_30_seconds():
    assert take_sample(NOON) is not None
    assert take_sample(NOON + timedelta(seconds=10)) is None
    assert take_sample(NOON + timedelta(seconds=30)) is not None
    assert UsageSample.objects.count() == 2


def test_retention_keeps_six_hours_raw_folds_older_into_5_minutes_and_a_week_old_into_hours():
    now = NOON
    for minute in range(10):  # 7 hours ago: two 5-minute periods of raw samples
        at = now - timedelta(hours=7) + timedelta(minutes=minute)
        raw(
            at,
            slots_share=minute / 10,
            placements=1,
            cycles=1,
            cycle_p50_ms=10,
            cycle_max_ms=minute,
            nodes={"n": minute * 10},
        )
    for period in range(12):  # 8 days ago: an hour of 5-minute rows
        at = now - timedelta(days=8) + timedelta(minutes=5 * period)
        UsageSample.objects.create(at=at, span=300, samples=10, slots_share=0.5, placements=2)
    recent = raw(now - timedelta(hours=1), slots_share=0.9)

    removed = apply_retention(now)

    rows = list(UsageSample.objects.order_by("at"))
    assert removed == 10 - 2 + 12 - 1
    assert [(row.span, row.samples) for row in rows] == [(3600, 120), (300, 5), (300, 5), (0, 1)]
    hourly, first, second, last = rows
    assert hourly.placements == 24 and hourly.slots_share == 0.5
    assert first.slots_share == 0.2 and second.slots_share == 0.7  # the means of 0..0.4 and 0.5..0.9
    assert (first.placements, first.cycle_max_ms, first.nodes) == (5, 4, {"n": 20})
    assert last.pk == recent.pk
    assert apply_retention(now) == 0  # folded rows are not folded again


def test_retention_caps_the_table_dropping_the_oldest():
    for minute in range(30):
        raw(NOON - timedelta(minutes=minute))
    apply_retention(NOON, max_rows=20)
    assert UsageSample.objects.count() == 20
    assert UsageSample.objects.order_by("at").first().at == NOON - timedelta(minutes=19)


def test_measurements_are_stored_beside_the_grants_and_overuse_is_flagged():
    observed = {
        "memory": 9000,
        "utilization": 97,
        "temperature": 71,
        "power": 68.5,
        "ecc_errors": 0,
        "xid": 31,
    }
    services.report_inventory("node1", {}, {}, [t4("GPU-0", 0, observed=observed), t4("GPU-1", 1)])
    Card.objects.filter(uuid="GPU-0").update(used_memory=4000)

    busy, idle = Card.objects.order_by("index")
    assert (busy.observed_memory, busy.utilization, busy.temperature, busy.power, busy.last_xid) == (
        9000,
        97,
        71,
        68.5,
        31,
    )
    assert busy.observed_at is not None and idle.observed_memory is None and idle.observed_at is None
    assert busy.memory_overuse == 9000 - 4000 - 512 and idle.memory_overuse == 0
    assert list(overused_cards().values_list("uuid", flat=True)) == ["GPU-0"]


def test_a_report_without_measurements_keeps_the_last_ones_and_does_not_touch_updated_at():
    services.report_inventory("node1", {}, {}, [t4("GPU-0", 0, observed={"utilization": 5})])
    before = Card.objects.get().updated_at
    services.report_inventory("node1", {}, {}, [t4("GPU-0", 0, observed={"utilization": 60})])
    services.report_inventory("node1", {}, {}, [t4("GPU-0", 0)])
    card = Card.objects.get()
    assert card.utilization == 60 and card.updated_at == before


@pytest.mark.parametrize(
    ("observed", "where"),
    [
        ({"utilization": 101}, "devices[0].observed.utilization"),
        ({"temperature": -1}, "devices[0].observed.temperature"),
        ({"memory": 1.5}, "devices[0].observed.memory"),
        ({"power": float("inf")}, "devices[0].observed.power"),
        ({"xid": True}, "devices[0].observed.xid"),
        ({"fan": 3}, "devices[0].observed.fan"),
        ("hot", "devices[0].observed"),
    ],
)
def test_a_bad_measurement_refuses_the_report_naming_the_field(observed, where):
    with pytest.raises(ScenarioError) as refused:
        services.report_inventory("node1", {}, {}, [t4("GPU-0", 0, observed=observed)])
    assert refused.value.where == where
    assert not Card.objects.exists()


def test_metrics_serve_the_measurements_and_count_the_overused_cards():
    services.report_inventory("node1", {}, {}, [t4("GPU-0", 0, observed={"memory": 9000, "temperature": 80})])
    Card.objects.update(used_memory=1000)

    text = exposition().decode()

    assert (
        'hamiadmin_card_memory_observed_bytes{node="node1",type="NVIDIA",uuid="GPU-0"} 9.437184e+09' in text
    )
    assert 'hamiadmin_card_temperature_celsius{node="node1",type="NVIDIA",uuid="GPU-0"} 80.0' in text
    assert "hamiadmin_cards_memory_overused 1.0" in text
    assert "hamiadmin_card_utilization_percent{" not in text  # not measured: no series


@pytest.mark.django_db
def test_pending_pods_held_by_a_batch_rule_count_under_it_as_on_the_pending_page():
    from scheduling.models import Decision, Pod
    from scheduling.models.samples import pending_by_reason

    pod = services.submit_pod(
        "default", "held", {}, [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
    )
    Decision.objects.create(
        pod=pod,
        outcome=Decision.PENDING,
        reason="GangUnschedulable",
        payload={
            "batch": {"reason": "GangUnschedulable"},
            "failed_reasons": {"n1": {"reasons": {"CardInsufficientMemory": 2}}},
        },
    )
    assert Pod.objects.get(pk=pod.pk).status == Pod.PENDING
    assert pending_by_reason() == (1, {"GangUnschedulable": 1})
