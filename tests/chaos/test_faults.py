"""Faults, repeated with randomized timing, and the time the scheduler took to recover.

- a cycle worker SIGKILLed inside its commit (after it wrote allocation rows), with a
  standby worker waiting for the advisory lock;
- the broker (a private Redis) SIGKILLed while cycles run, submissions made while it is
  down, then started again (empty: queued tasks, flags and leases are lost);
- the database (a private PostgreSQL) stopped with `-m immediate` mid-cycle and started
  again, under a real Celery worker.

Recovery: from the kill (or from the server being back) until every pod submitted so far
has been decided. Afterwards nothing is stuck (no pod left undecided, no advisory lock
held by an idle worker), no card is over capacity, counters equal the allocations, and the
workers are still alive.
"""

from __future__ import annotations

import json
import random
import select
import subprocess
import sys
import time

import pytest

from .conftest import (
    REPO,
    SIZES,
    UNDECIDED,
    celery_worker,
    driver,
    driver_env,
    spawn,
    sql_value,
    stop_all,
    summary,
    wait_until,
)

pytestmark = [pytest.mark.chaos]

REPEATS = SIZES["fault_repeats"]
#: Each commit of the Celery worker under fault holds its transaction this long (test hook), so
#: that a kill at a random moment of it lands inside the commit.
PAUSE = 0.3


class Feeder:
    """`tests.chaos.driver serve`: submissions and looks into the database, one JSON line each."""

    def __init__(self, url: str, redis_url: str = ""):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.driver", "serve"],
            cwd=REPO,
            env=driver_env(url, redis_url),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def ask(self, **command) -> dict:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            pytest.fail(f"the feeder died: {self.process.stderr.read()[-3000:]}")
        return json.loads(line)

    def submit(self, prefix: str, count: int, timeout: float = 60) -> float:
        """Submit until accepted (the database may be on its way back); seconds it took."""
        started = time.monotonic()
        while True:
            answer = self.ask(op="submit", prefix=prefix, count=count)
            if "error" not in answer:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                pytest.fail(f"submissions refused for {timeout} s: {answer}")
            time.sleep(0.1)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def saw_line(process: subprocess.Popen, text: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([process.stderr], [], [], 0.05)
        if ready and text in process.stderr.readline():
            return True
    return False


def stuck_state(url: str) -> str:
    """Who holds the cycle lock and what the sessions do: printed when pods stay undecided."""
    return sql_value(
        url,
        "SELECT json_agg(json_build_object('pid', a.pid, 'state', a.state, 'query', left(a.query, 80),"
        " 'advisory', l.granted, 'xact_age', extract(epoch from now() - a.xact_start)))"
        " FROM pg_stat_activity a LEFT JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory'"
        " WHERE a.datname = current_database()",
    )


def advisory_locks_held(url: str, found: int, looks: int = 25) -> int:
    """The fewest advisory locks seen over a few looks 0.2 s apart: a live worker takes the
    cycle lock for each poll and drops it between polls, a stuck lock never drops."""
    fewest = found
    for _ in range(looks):
        if fewest == 0:
            break
        time.sleep(0.2)
        fewest = min(fewest, sql_value(url, ADVISORY_LOCKS))
    return fewest


ADVISORY_LOCKS = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"


def record_end_state(figures, url: str) -> None:
    found = driver(url, "check")
    found["advisory_locks"] = advisory_locks_held(url, found["advisory_locks"])
    figures["pods"] = found["pods"]
    figures["cycles"] = found["cycles"]
    for key in (
        "over_commits",
        "counter_drift",
        "ghosts",
        "double_placements",
        "undecided",
        "advisory_locks",
    ):
        figures[key] = found[key]
    for key in (
        "over_commits",
        "counter_drift",
        "ghosts",
        "double_placements",
        "undecided",
        "advisory_locks",
    ):
        figures.require(key, 0)


def test_a_worker_sigkilled_inside_its_commit(private_postgres, figures):
    rng = random.Random(1601)
    url = private_postgres.fresh_database("fault_sigkill")
    driver(url, "seed", "--nodes", "20", "--cards", "8", "--pods", "0")
    feeder = Feeder(url)
    standby = spawn("tests.pipeline.cycle_worker", url, "--until-deadline", "--deadline", "600")
    victim = None
    recoveries: list[float] = []
    attempts = 0
    try:
        while len(recoveries) < REPEATS:
            attempts += 1
            assert attempts <= REPEATS * 6, f"the victim won the lock only {len(recoveries)} times"
            if victim is None:
                victim = spawn(
                    "tests.pipeline.cycle_worker",
                    url,
                    "--until-deadline",
                    "--deadline",
                    "300",
                    HAMI_FAULT_COMMIT_PAUSE_SECONDS=1.0,
                )
                time.sleep(2.5)  # Django up, polling
            feeder.submit(f"k{attempts}", 8)
            if not saw_line(victim, "commit paused", 3):
                assert standby.poll() is None, f"the standby died: {standby.stderr.read()[-3000:]}"
                if victim.poll() is not None:
                    pytest.fail(f"the victim exited {victim.returncode}: {victim.stderr.read()[-3000:]}")
                try:
                    wait_until(lambda: sql_value(url, UNDECIDED) == 0, 30, "the standby placed them")
                except BaseException:
                    print("STUCK", stuck_state(url), "victim", victim.pid, "standby", standby.pid, flush=True)
                    raise
                continue  # the standby won this round
            time.sleep(rng.uniform(0.0, 0.9))  # somewhere inside the paused commit
            killed = time.monotonic()
            victim.kill()
            victim.wait(10)
            victim = None
            wait_until(lambda: sql_value(url, UNDECIDED) == 0, 30, "pods decided after the kill")
            recoveries.append(time.monotonic() - killed)
        assert standby.poll() is None, standby.stderr.read()[-3000:]
        figures["kills"] = len(recoveries)
        figures["attempts"] = attempts
        figures["recovery_max_ms"], figures["recovery_median_ms"] = summary(recoveries)
        record_end_state(figures, url)
    finally:
        stop_all([process for process in (victim, standby) if process is not None])
        feeder.close()
    figures.require("kills", REPEATS)
    figures.at_most("recovery_max_ms", 5000)


def test_the_broker_killed_while_cycles_run_and_brought_back(private_postgres, private_redis, figures):
    rng = random.Random(1602)
    url = private_postgres.fresh_database("fault_broker")
    driver(url, "seed", "--nodes", "20", "--cards", "8", "--pods", "0")
    worker = celery_worker(url, private_redis.url, HAMI_FAULT_COMMIT_PAUSE_SECONDS=PAUSE)
    feeder = Feeder(url, redis_url=private_redis.url)
    recoveries: list[float] = []
    refused_while_down = inside = 0
    try:
        feeder.submit("warm", 4)  # queued in the broker until the worker has connected
        wait_until(lambda: sql_value(url, UNDECIDED) == 0, 60, "the worker runs cycles")
        for n in range(REPEATS):
            worker.log.skip()
            feeder.submit(f"b{n}", 10)
            inside += worker.log.wait_for("commit paused", 5)
            time.sleep(rng.uniform(0.0, PAUSE))  # inside the commit of those
            private_redis.kill()
            time.sleep(rng.uniform(0.1, 0.5))
            answer = feeder.ask(op="submit", prefix=f"down{n}", count=3)  # writes go on without a broker
            refused_while_down += "error" in answer
            time.sleep(rng.uniform(0.1, 0.8))
            private_redis.start()
            back = time.monotonic()
            feeder.submit(f"probe{n}", 1)
            wait_until(lambda: sql_value(url, UNDECIDED) == 0, 60, "pods decided after the broker came back")
            recoveries.append(time.monotonic() - back)
        assert worker.poll() is None, f"the Celery worker died: {worker.log.tail()}"
        figures["broker_kills"] = len(recoveries)
        figures["kills_inside_a_commit"] = inside
        figures["submissions_refused_while_down"] = refused_while_down
        figures["recovery_max_ms"], figures["recovery_median_ms"] = summary(recoveries)
        record_end_state(figures, url)
    finally:
        stop_all([worker])
        feeder.close()
    figures.require("submissions_refused_while_down", 0)
    figures.at_least("kills_inside_a_commit", REPEATS // 2)
    figures.at_most("recovery_max_ms", 30000)


def test_the_database_stopped_mid_cycle_and_brought_back(private_postgres, private_redis, figures):
    rng = random.Random(1603)
    url = private_postgres.fresh_database("fault_database")
    driver(url, "seed", "--nodes", "20", "--cards", "8", "--pods", "0")
    worker = celery_worker(url, private_redis.url, HAMI_FAULT_COMMIT_PAUSE_SECONDS=PAUSE)
    feeder = Feeder(url, redis_url=private_redis.url)
    recoveries: list[float] = []
    inside = 0
    try:
        feeder.submit("warm", 4)
        wait_until(lambda: sql_value(url, UNDECIDED) == 0, 60, "the worker runs cycles")
        for n in range(REPEATS):
            worker.log.skip()
            feeder.submit(f"d{n}", 10)
            inside += worker.log.wait_for("commit paused", 5)
            time.sleep(rng.uniform(0.0, PAUSE))  # inside the commit of those
            private_postgres.crash()
            time.sleep(rng.uniform(0.2, 1.0))
            private_postgres.start()
            back = time.monotonic()
            feeder.submit(f"probe{n}", 1)
            wait_until(
                lambda: sql_value(url, UNDECIDED) == 0, 60, "pods decided after the database came back"
            )
            recoveries.append(time.monotonic() - back)
        assert worker.poll() is None, f"the Celery worker died: {worker.log.tail()}"
        figures["database_stops"] = len(recoveries)
        figures["stops_inside_a_commit"] = inside
        figures["recovery_max_ms"], figures["recovery_median_ms"] = summary(recoveries)
        record_end_state(figures, url)
    finally:
        stop_all([worker])
        feeder.close()
    figures.at_least("stops_inside_a_commit", REPEATS // 2)
    figures.at_most("recovery_max_ms", 30000)


def test_driver_env_never_points_at_the_shared_servers(private_postgres, private_redis):
    """The faults above are done to our own servers only."""
    env = driver_env(private_postgres.url("x"), private_redis.url)
    assert ":5432/" not in env["DATABASE_URL"] and ":6379/" not in env["REDIS_URL"]
