"""Kubernetes fixtures: the stand-in API server (tests/kube/apiserver.py) on 127.0.0.1, the
real `kubernetes` client pointed at it, and pods and nodes as the API server writes them.

No real API server runs here, so this is the narrowest honest boundary: our code and the
official client speak real HTTP; only the server side is a stand-in.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest
from django.db import close_old_connections, connections

from kube.agent import AgentOptions, KubeAgent
from kube.api import api_for_host

from .apiserver import StandInApiServer

T4 = "NVIDIA-Tesla T4"


@pytest.fixture(autouse=True)
def local_triggers(settings):
    """No Celery tasks: cycles are run by the tests themselves."""
    settings.REDIS_URL = ""


@pytest.fixture
def apiserver():
    server = StandInApiServer().start()
    yield server
    server.stop()


@pytest.fixture
def kube(apiserver):
    return api_for_host(apiserver.url)


def register(*cards: tuple) -> str:
    """`hami.io/node-nvidia-register`, 9-field form: (uuid, slots, mem, cores, type, numa, health, index, mode)."""
    return "".join(
        ",".join(str(field).lower() if isinstance(field, bool) else str(field) for field in card) + ":"
        for card in cards
    )


def t4_register(prefix: str, count: int = 2, memory: int = 15360) -> str:
    return register(*[(f"{prefix}-{i}", 10, memory, 100, T4, 0, True, i, "hami-core") for i in range(count)])


def node_object(name: str, register_value: str | None = None, ready: bool = True, **annotations) -> dict:
    notes = dict(annotations)
    if register_value is not None:
        notes["hami.io/node-nvidia-register"] = register_value
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "annotations": notes},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pod_object(
    name: str,
    gpu=1,
    mem=None,
    cores=None,
    namespace: str = "default",
    scheduler: str = "hami-scheduler",
    annotations: dict | None = None,
    priority: int | None = None,
    node: str | None = None,
    phase: str = "Pending",
    init: list | None = None,
) -> dict:
    limits = {"cpu": "1", "memory": "1Gi"}
    for key, value in (("nvidia.com/gpu", gpu), ("nvidia.com/gpumem", mem), ("nvidia.com/gpucores", cores)):
        if value is not None:
            limits[key] = str(value)
    spec = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
    }
    if init:
        spec["initContainers"] = init
    if priority is not None:
        spec["priority"] = priority
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
        "spec": spec,
        "status": {"phase": phase},
    }


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    """Poll `predicate` (closing this thread's stale DB connections between tries)."""
    deadline = time.monotonic() + timeout
    while True:
        close_old_connections()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def fast_options(**overrides) -> AgentOptions:
    values = {
        "watch_timeout": 2,
        "resync_seconds": 0.5,
        "loop_seconds": 0.05,
        "event_seconds": 0.05,
        "bind_backoff_base": 0.2,
        "bind_backoff_cap": 0.5,
        "api_backoff_base": 0.1,
        "api_backoff_cap": 0.5,
    }
    values.update(overrides)
    return AgentOptions(**values)


@contextmanager
def running(agent: KubeAgent):
    """Run the agent's loop in a thread for the duration of the block."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def target():
        try:
            agent.run(stop)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            failures.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, name="test-kube-agent", daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(timeout=15)
    assert not failures, f"the agent loop crashed: {failures[0]!r}"
    assert not thread.is_alive(), "the agent loop did not stop"


def settled_cards():
    """The cards as a worker sees them before its next cycle: the decrements releases owe
    settled first. On PostgreSQL a release that finds a card locked by another writer (the
    agent's node report, a commit) owes its decrement (`pipeline.settle`) and asks for a
    cycle, whose worker settles it; these tests run no worker."""
    from scheduling.models import Card
    from scheduling.pipeline.settle import settle_owed

    settle_owed()
    return Card.objects
