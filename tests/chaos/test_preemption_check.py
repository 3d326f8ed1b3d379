"""The half-written-preemption figures of `driver.preemption_check` (used by
test_preemption_faults.py) can fail: each is 0 on what a real cycle committed and counts the
damage when a part of that commit is missing. Not marked chaos: it runs in `make test`."""

from __future__ import annotations

import uuid

import pytest

from scheduling import services
from scheduling.models import Card, Eviction, Nomination, Pod
from scheduling.pipeline import run_cycle
from tests.chaos.driver import gpu, preemption_check

pytestmark = pytest.mark.django_db(transaction=True)  # in `make test`: seconds, no private servers


@pytest.fixture
def preempting():
    """One 16,000 MiB card with two running Kubernetes tenants; a priority-1000 pod evicts both."""
    services.report_inventory("node000", {}, {}, [{"uuid": "GPU-0-0", "index": 0, "memory": 16000}])
    for t in range(2):
        services.submit_pod(
            "tenants", f"t{t}", {}, gpu(8000), priority=0, uid=str(uuid.uuid4()), origin=Pod.KUBERNETES
        )
    assert len(run_cycle().placed) == 2
    services.submit_pod("chaos", "high", {}, gpu(16000), priority=1000)
    assert len(run_cycle().evictions) == 2
    figures = preemption_check()
    assert (figures["evictions"], figures["nominations"]) == (2, 1)
    assert [value for key, value in figures.items() if key not in ("evictions", "nominations")] == [0] * 5


def test_nominations_missing(preempting):
    Nomination.objects.all().delete()
    assert preemption_check()["evictions_without_nominations"] == 1


def test_an_eviction_missing(preempting):
    Eviction.objects.order_by("pk").first().delete()
    assert preemption_check()["partial_evictions"] == 1


def test_evictions_missing(preempting):
    Eviction.objects.all().delete()
    assert preemption_check()["nominations_without_evictions"] == 1


def test_an_eviction_without_its_decision(preempting):
    Eviction.objects.filter(pk=Eviction.objects.order_by("pk").first().pk).update(decision=None)
    assert preemption_check()["evictions_without_decision"] == 1


def test_a_card_booked_twice(preempting):
    Eviction.objects.update(state=Eviction.CANCELLED)  # the tenants stay: their cards plus the nomination
    assert preemption_check()["overbooked_cards"] == Card.objects.count() == 1
