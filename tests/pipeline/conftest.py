"""Pipeline fixtures: a cluster through the same write paths agents use, and pods as dicts.

Tests run on SQLite by default and on PostgreSQL when DATABASE_URL points there (CI).
Triggers are kept local (no Redis) unless a test asks for `redis_url` and sets it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from scheduling import services
from scheduling.models import Pod
from scheduling.pipeline.consistency import counter_drift, overcommitted

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def local_triggers(settings):
    """No Celery tasks from ordinary tests; the Celery test turns Redis back on."""
    settings.REDIS_URL = ""


def t4(uuid: str, index: int, **extra) -> dict:
    return {"uuid": uuid, "index": index, "type": "NVIDIA-Tesla T4", "memory": 15360, **extra}


def card(uuid: str, index: int, memory: int = 8000, **extra) -> dict:
    return {"uuid": uuid, "index": index, "memory": memory, **extra}


def limits(gpu=None, mem=None, pct=None, cores=None) -> dict:
    values = {
        "nvidia.com/gpu": gpu,
        "nvidia.com/gpumem": mem,
        "nvidia.com/gpumem-percentage": pct,
        "nvidia.com/gpucores": cores,
    }
    return {"limits": {key: value for key, value in values.items() if value is not None}}


def pod_kind(rng: random.Random) -> tuple[dict, dict]:
    """(annotations, resources) of a random pod from a mix that over-asks the cluster: shared,
    multi-card, mutex, whole-card, percentage, NUMA (the concurrency and chaos suites)."""
    roll = rng.random()
    if roll < 0.40:
        return {}, limits(gpu=1, mem=rng.choice([1000, 2000, 4000]), cores=rng.choice([0, 10, 30]))
    if roll < 0.60:
        return {"hami.io/gpu-scheduler-policy": "binpack"}, limits(
            gpu=2, mem=rng.choice([2000, 6000]), cores=20
        )
    if roll < 0.75:
        return {"hami.io/gpu-scheduler-policy": "mutex,binpack"}, limits(gpu=1, mem=2000)
    if roll < 0.85:
        return {}, limits(gpu=1)
    if roll < 0.95:
        return {"hami.io/node-scheduler-policy": "spread"}, limits(
            pct=rng.choice([25, 50]), cores=rng.choice([0, 25])
        )
    return {"nvidia.com/numa-bind": "true"}, limits(gpu=2, mem=3000, cores=10)


def submit(
    name: str, gpu=None, mem=None, pct=None, cores=None, annotations=None, priority=0, **kwargs
) -> Pod:
    containers = kwargs.pop("containers", None) or [
        {"name": "main", "resources": limits(gpu, mem, pct, cores)}
    ]
    return services.submit_pod(
        "default", name, annotations or {}, containers, kwargs.pop("init", []), priority, **kwargs
    )


def reload(pod: Pod) -> Pod:
    pod.refresh_from_db()
    return pod


def nominate(pod: Pod, uuid: str, memory: int, *, whole: bool = False, minutes: float = 5) -> None:
    """A nomination of `pod` to card `uuid` (`memory` MiB, no cores), as a commit that chose
    victims for it writes one, expiring in `minutes`."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.models import Card, Nomination

    now = timezone.now()
    Nomination.objects.create(
        pod=pod,
        card=Card.objects.get(uuid=uuid),
        memory=memory,
        cores=0,
        whole=whole,
        created_at=now,
        expires_at=now + timedelta(minutes=minutes),
    )


def assert_consistent() -> None:
    """Counters equal the sum of active allocations, and no card holds more than it has."""
    assert counter_drift() == []
    assert overcommitted() == []


def database_url() -> str:
    """The test database as a DATABASE_URL, for worker processes."""
    conf = connection.settings_dict
    if conf["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{Path(conf['NAME']).resolve()}"
    auth = quote(conf["USER"] or "")
    if conf.get("PASSWORD"):
        auth += ":" + quote(conf["PASSWORD"])
    host = f"{conf.get('HOST') or '127.0.0.1'}:{conf.get('PORT') or 5432}"
    return f"postgres://{auth}@{host}/{conf['NAME']}"


def worker_env(**extra) -> dict:
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    env.update(
        {
            "DATABASE_URL": database_url(),
            "PYTHONPATH": str(REPO),
            "DJANGO_SETTINGS_MODULE": "hamiadmin.settings",
        }
    )
    env.update({key: str(value) for key, value in extra.items()})
    return env


def start_worker(*args: str, **env) -> subprocess.Popen:
    """`tests.pipeline.cycle_worker` in its own process, against the test database."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.pipeline.cycle_worker", *args],
        cwd=REPO,
        env=worker_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def start_workers_together(
    *argv: tuple[str, ...], envs: list[dict] | None = None, **env
) -> tuple[list[subprocess.Popen], Path]:
    """One `cycle_worker` per argument tuple, each with `--control` on one folder, told `go`
    once every one is set up: their first cycles start together, whichever process started
    slowest. `envs`: each worker's own environment beside `env`. Returns the workers and the
    folder (touch its `stop` to end them)."""
    control = Path(tempfile.mkdtemp(prefix="cycle-workers-"))
    own = envs or [{} for _ in argv]
    workers = [
        start_worker(*args, "--control", str(control), **env, **mine)
        for args, mine in zip(argv, own, strict=True)
    ]
    given_up = time.monotonic() + 60
    while len(list(control.glob("ready-*"))) < len(workers):
        dead = [process for process in workers if process.poll() is not None]
        if dead or time.monotonic() > given_up:
            for process in workers:
                stop(process)
            errors = dead[0].stderr.read()[-3000:] if dead and dead[0].stderr else ""
            pytest.fail(f"the cycle workers were not all set up within 60 s: {errors}")
        time.sleep(0.01)
    (control / "go").touch()
    return workers, control


def summaries(workers: list[subprocess.Popen], timeout: float) -> list[dict]:
    """What each cycle worker printed last (its summary), in order, once it exited with 0."""
    results = []
    for process in workers:
        out, err = process.communicate(timeout=timeout)
        assert process.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@contextmanager
def celery_worker_process(redis_url: str, loglevel: str = "WARNING", queues: str | None = None, **env):
    """A real `celery -A hamiadmin worker` (solo pool) on the test database and `redis_url`,
    with the trigger flags and the cycle lock cleared first; terminated on exit. `queues`:
    its `-Q` (default: celery's default queue only); `env`: more of its environment."""
    from scheduling.pipeline import triggers
    from scheduling.pipeline.locks import REDIS_LOCK_KEY, redis_client

    redis_client().delete(triggers.REQUESTED_KEY, triggers.QUEUED_KEY, REDIS_LOCK_KEY)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "hamiadmin",
            "worker",
            "--pool=solo",
            f"--loglevel={loglevel}",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            *(["-Q", queues] if queues else []),
        ],
        cwd=REPO,
        env=worker_env(REDIS_URL=redis_url, **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(10)
