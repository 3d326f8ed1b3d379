"""Preemption under faults: a cycle worker SIGKILLed while it commits a preemption.

Every card is full of running Kubernetes tenants at priority 0 (`driver preempt-seed`);
each round submits one 16,000 MiB pod at priority 1000, which fits only by evicting the
two tenants of one card. The victim worker pauses inside its commit (test hook
`HAMI_FAULT_COMMIT_PAUSE_SECONDS`) and is killed at a random moment of it; a standby worker
waits on the advisory lock and commits the preemption instead. No kube agent runs, so the
evictions stay `requested` and the nominations stay, which is the state a half-written
commit would break; then the round's victims are deleted (as Kubernetes would) and the
preemptor is placed on its nominated card.

Afterwards: no Eviction row without its decision or its Nominations, and the reverse; no
decision whose Eviction rows are not exactly the victims it names; no card booked (active
allocations of pods not being evicted, plus nominations) beyond its capacity; counters
equal the allocations; no preemption committed by a killed worker.
"""

from __future__ import annotations

import random
import select
import time

import pytest

from .conftest import SIZES, driver, spawn, stop_all, summary, wait_until
from .test_faults import Feeder, record_end_state, saw_line

pytestmark = [pytest.mark.chaos]

ROUNDS = max(3, SIZES["fault_repeats"])
WORKER_ENV = {"HAMI_PREEMPT_GRACE_SECONDS": 600}  # nominations outlive the test


def drain(process) -> None:
    """Forget what the worker wrote so far (an earlier round's "commit paused")."""
    while select.select([process.stderr], [], [], 0)[0]:
        if not process.stderr.readline():
            return


def test_a_worker_sigkilled_while_it_commits_a_preemption(private_postgres, figures):
    rng = random.Random(1604)
    url = private_postgres.fresh_database("fault_preempt")
    seeded = driver(url, "preempt-seed", "--nodes", str(ROUNDS + 2))  # a card for each attempt
    feeder = Feeder(url)
    standby = spawn("tests.pipeline.cycle_worker", url, "--until-deadline", "--deadline", "600", **WORKER_ENV)
    victim = None
    recoveries: list[float] = []
    worst: dict[str, int] = {}
    by_the_killed = attempts = 0
    try:
        while len(recoveries) < ROUNDS:
            attempts += 1
            assert attempts <= 2 * ROUNDS + 4, f"the victim won the lock only {len(recoveries)} times"
            if victim is None:
                victim = spawn(
                    "tests.pipeline.cycle_worker",
                    url,
                    "--until-deadline",
                    "--deadline",
                    "300",
                    HAMI_FAULT_COMMIT_PAUSE_SECONDS=1.0,
                    **WORKER_ENV,
                )
                time.sleep(2.5)  # Django up, polling
            drain(victim)
            name = f"preemptor-{attempts:03d}"
            feeder.ask(op="preemptor", name=name)
            if not saw_line(victim, "commit paused", 3):
                assert standby.poll() is None, f"the standby died: {standby.stderr.read()[-3000:]}"
                if victim.poll() is not None:
                    pytest.fail(f"the victim exited {victim.returncode}: {victim.stderr.read()[-3000:]}")
            else:
                time.sleep(rng.uniform(0.0, 0.9))  # somewhere inside the paused commit
                killed, pid = time.monotonic(), victim.pid
                victim.kill()
                victim.wait(10)
                victim = None
                wait_until(
                    lambda name=name: feeder.ask(op="preemption", name=name).get("evictions", 0) > 0,
                    30,
                    "the standby committed the preemption",
                )
                recoveries.append(time.monotonic() - killed)
                seen = feeder.ask(op="preemption", name=name)
                by_the_killed += sum(worker.endswith(f":{pid}") for worker in seen["decided_by"])
            wait_until(
                lambda name=name: feeder.ask(op="preemption", name=name).get("evictions", 0) > 0,
                30,
                "evictions",
            )
            for key, value in feeder.ask(op="preemption_check").items():  # mid-preemption state
                worst[key] = max(worst.get(key, 0), value)
            assert feeder.ask(op="release_victims", name=name)["released"] == 2
            try:
                wait_until(
                    lambda name=name: feeder.ask(op="preemption", name=name)["status"] == "scheduled",
                    30,
                    "the preemptor placed on its nominated card",
                )
            except BaseException:
                print(
                    "STUCK", name, feeder.ask(op="preemption", name=name), feeder.ask(op="check"), flush=True
                )
                raise
        assert standby.poll() is None, standby.stderr.read()[-3000:]
        final = feeder.ask(op="preemption_check")
        figures["tenants"] = seeded["tenants"]
        figures["kills"] = len(recoveries)
        figures["attempts"] = attempts
        figures["recovery_max_ms"], figures["recovery_median_ms"] = summary(recoveries)
        figures["evictions"], figures["nominations_left"] = final["evictions"], final["nominations"]
        figures["preemptions_committed_by_a_killed_worker"] = by_the_killed
        for key in (
            "evictions_without_decision",
            "partial_evictions",
            "evictions_without_nominations",
            "nominations_without_evictions",
            "overbooked_cards",
        ):
            figures[key] = max(worst.get(key, 0), final[key])
        record_end_state(figures, url)  # the standby still polls: a lock it keeps past a poll is stuck
    finally:
        stop_all([process for process in (victim, standby) if process is not None])
        feeder.close()
    figures.require("kills", ROUNDS)
    figures.require("evictions", 2 * attempts)
    figures.require("nominations_left", 0)
    for key in (
        "preemptions_committed_by_a_killed_worker",
        "evictions_without_decision",
        "partial_evictions",
        "evictions_without_nominations",
        "nominations_without_evictions",
        "overbooked_cards",
    ):
        figures.require(key, 0)
    figures.at_most("recovery_max_ms", 5000)
