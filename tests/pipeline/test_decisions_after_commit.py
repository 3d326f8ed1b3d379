"""A cycle's decision rows written after its commit (`pipeline.decisionlog`, issue 29): on
PostgreSQL, outside a caller's transaction, by a thread of their own while the next cycle
plans; every one of them is in when `run_requested_cycles` returns; a pod's decisions keep
their order by id; a pod gone before its row is written loses that row only; a cycle that
chooses victims, SQLite, a caller's transaction and `DECISIONS_AFTER_COMMIT` off write them
in the commit."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections
from django.db.models import Count

from scheduling import services
from scheduling.models import Cycle, Decision, Pod
from scheduling.pipeline import commit
from scheduling.pipeline.commit import DECISIONS, insert_rows
from scheduling.pipeline.decisionlog import DecisionLog, deferrable
from scheduling.pipeline.flight import run_cycle, run_requested_cycles

from .conftest import assert_consistent, card, submit

pytestmark = pytest.mark.django_db(transaction=True)


def needs_postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("written after the commit on PostgreSQL only (SQLite has one writer)")


def test_every_decision_is_in_when_the_cycles_return_and_each_pod_keeps_its_order(monkeypatch):
    needs_postgresql()
    assert deferrable()
    monkeypatch.setattr(commit, "DECISIONS_LATER_FROM", 1)  # these few cycles' rows too
    services.report_inventory("n1", {}, {}, [card(f"GPU-{i}", i, memory=8000) for i in range(2)])
    written = DECISIONS.written
    # 2 fit now; 3 wait (too big for any card now), decided again when a release wakes them
    for i in range(2):
        submit(f"fits-{i}", gpu=1, mem=8000)
    for i in range(3):
        submit(f"waits-{i}", gpu=1, mem=8000)
    run_requested_cycles("test")
    assert DECISIONS.written - written == 5  # written after their commit, all in on return
    services.release_pod(Pod.objects.get(name="fits-0"), Pod.SUCCEEDED)
    run_requested_cycles("test")
    assert DECISIONS.written - written > 5
    per_pod = Decision.objects.values("pod__name").annotate(n=Count("id"))
    assert {row["pod__name"] for row in per_pod} == {"fits-0", "fits-1", "waits-0", "waits-1", "waits-2"}
    for pod in Pod.objects.exclude(name="fits-0"):  # released: its reason is the release's
        latest = pod.decisions.order_by("-id").first()
        assert latest is not None
        # the latest decision by id is the one the pod's row says
        assert latest.reason == pod.reason
        cycles = list(pod.decisions.order_by("id").values_list("cycle_id", flat=True))
        assert cycles == sorted(cycles)
    assert Pod.objects.filter(status=Pod.SCHEDULED).count() == 2
    assert_consistent()


def session_open(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone()[0] > 0


def session_ends(pid: int, within: float = 5.0) -> bool:
    """A closed client's backend leaves pg_stat_activity a moment after the client hangs up
    (the server process exits on its own time), so a close is seen within a deadline."""
    deadline = time.monotonic() + within
    while session_open(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_pod_gone_before_its_row_is_written_loses_that_row_only():
    needs_postgresql()
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0)])
    kept, gone = submit("kept", gpu=1, mem=1000), submit("gone", gpu=1, mem=1000)
    cycle = Cycle.objects.create(trigger="test", worker="test")
    rows = [
        {"pod_id": pod.pk, "cycle_id": cycle.pk, "outcome": "pending", "payload": {"name": pod.name}}
        for pod in (kept, gone)
    ]
    Pod.objects.filter(pk=gone.pk).delete()
    log = DecisionLog(lambda rows: insert_rows(Decision, rows))
    log.submit(rows)
    log.flush(close=True)
    assert list(Decision.objects.values_list("pod__name", "cycle_id")) == [("kept", cycle.pk)]
    assert (log.written, log.dropped) == (1, 1)


def test_a_write_that_fails_is_logged_and_the_next_one_still_runs(caplog):
    """A lost explanation never stops the scheduler: the writer logs and goes on."""
    needs_postgresql()
    pod = submit("explained", gpu=1, mem=1000)
    calls = []

    def write(rows):
        calls.append(len(rows))
        if len(calls) == 1:
            raise RuntimeError("disk full")
        Decision.objects.bulk_create([Decision(**row) for row in rows])

    log = DecisionLog(write)
    log.submit([{"pod_id": pod.pk, "outcome": "pending"}])
    log.flush(close=True)
    log.submit([{"pod_id": pod.pk, "outcome": "pending"}])
    log.flush(close=True)
    assert calls == [1, 1]
    assert (log.written, log.dropped) == (1, 1)
    assert Decision.objects.filter(pod=pod).count() == 1
    assert "1 decision rows not written" in caplog.text


def test_the_writer_thread_uses_its_own_connection_and_a_flush_closes_it():
    needs_postgresql()
    pod = submit("explained", gpu=1, mem=1000)
    seen = []

    def write(rows):
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            seen.append((threading.current_thread().name, cursor.fetchone()[0]))
        Decision.objects.bulk_create([Decision(**row) for row in rows])

    log = DecisionLog(write)
    log.submit([{"pod_id": pod.pk, "outcome": "pending"}])
    log.submit([{"pod_id": pod.pk, "outcome": "pending"}])
    log.flush()
    (name, pid), (_, again) = seen
    assert name.startswith("hamiadmin-decisions") and pid != connection.connection.info.backend_pid
    assert again == pid and session_open(pid)  # kept between the writes of a run
    log.flush(close=True)
    assert session_ends(pid)


def test_a_cycle_alone_a_small_cycle_and_the_option_off_write_decisions_in_the_commit(settings):
    """`run_cycle` by itself (no flush to come), a cycle of fewer than DECISIONS_LATER_FROM
    pods (a waking pod's: the hand-over would cost it more) and `DECISIONS_AFTER_COMMIT` off
    keep them in."""
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0)])
    written = DECISIONS.written
    submit("alone", gpu=1, mem=1000)
    run_cycle("test")
    assert Decision.objects.filter(pod__name="alone").count() == 1
    submit("small", gpu=1, mem=1000)
    run_requested_cycles("test")
    assert Decision.objects.filter(pod__name="small").count() == 1
    settings.HAMIADMIN = {**getattr(settings, "HAMIADMIN", {}), "DECISIONS_AFTER_COMMIT": False}
    assert not deferrable()
    submit("off", gpu=1, mem=1000)
    run_requested_cycles("test")
    assert Decision.objects.filter(pod__name="off").count() == 1
    assert DECISIONS.written == written


@pytest.mark.django_db(transaction=False)
def test_inside_a_callers_transaction_decisions_are_written_in_the_commit():
    """A test's transaction (or any caller's) holds rows no other connection sees."""
    assert not deferrable()
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0)])
    submit("inside", gpu=1, mem=1000)
    written = DECISIONS.written
    run_requested_cycles("test")
    assert Decision.objects.filter(pod__name="inside").count() == 1
    assert DECISIONS.written == written
