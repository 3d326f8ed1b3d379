"""The Kubernetes agent SIGKILLed mid-bind against the stand-in API server, repeated with
randomized timing.

Two agent processes (`tests.chaos.kube_agent`: the real `KubeAgent`, its Lease shortened
to 1 s) share the stand-in; a cycle worker places the pods they submit. Each round puts
pods into the stand-in, slows every Binding it answers by `BIND_PAUSE` (so the leader's
bind sequence of lock, `allocating`, Binding, `success` is long enough to be hit), and
SIGKILLs the Lease's holder at a random moment after the first Binding began. The standby
takes over and a new standby is started.

Recovery: from the kill until every pod is bound in Kubernetes with `bind-phase: success`
and `running` here on the same node. The stated bound is `RECOVERY_BOUND` seconds: the
Lease (1 s) plus a node lock left by the dead leader (`HAMI_NODE_LOCK_SECONDS`, 3 s here)
plus the binds themselves. Afterwards nothing is stuck: no pod `allocating` or `scheduled`
(placed, unbound), no node lock held for a bind that has not ended, counters consistent.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time

import pytest

from tests.kube.apiserver import StandInApiServer
from tests.kube.conftest import node_object, pod_object, t4_register

from .conftest import (
    REPO,
    SIZES,
    WorkerLog,
    driver_env,
    spawn,
    sql_value,
    stop_all,
    summary,
    wait_until,
)
from .test_faults import record_end_state

pytestmark = [pytest.mark.chaos]

REPEATS = SIZES["kube_kills"]
NODES = 4
PODS_PER_ROUND = SIZES["kube_pods_per_round"]
#: Seconds the stand-in holds each Binding before it answers (and applies) it.
BIND_PAUSE = 0.15
NODE_LOCK_SECONDS = 3
RECOVERY_BOUND = 30.0
PHASE = "hami.io/bind-phase"
NODE_LOCK = "hami.io/mutex.lock"


class Agents:
    """The agent processes, by the identity they hold the Lease with."""

    def __init__(self, url: str, apiserver: StandInApiServer):
        self.url, self.apiserver = url, apiserver
        self.processes: dict[str, subprocess.Popen] = {}
        self.started = 0

    def start(self) -> None:
        self.started += 1
        identity = f"agent-{self.started}"
        log = WorkerLog()  # a file: a pipe nobody drains would stall a chatty agent
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.kube_agent", "--url", self.apiserver.url]
            + ["--identity", identity],
            cwd=REPO,
            env=driver_env(self.url, HAMI_NODE_LOCK_SECONDS=NODE_LOCK_SECONDS, LOG_LEVEL="WARNING"),
            stdout=subprocess.DEVNULL,
            stderr=log.file,
        )
        process.log = log  # type: ignore[attr-defined]
        self.processes[identity] = process

    def leader(self) -> str | None:
        lease = self.apiserver.get("leases", "default", "kube-agent")
        holder = (lease or {}).get("spec", {}).get("holderIdentity")
        return holder if holder in self.processes else None

    def kill_leader(self) -> None:
        process = self.processes.pop(self.leader())
        process.kill()
        process.wait(10)
        process.log.file.close()
        os.unlink(process.log.file.name)

    def dead(self) -> list[str]:
        """The logs of agents that exited on their own."""
        return [p.log.tail() for p in self.processes.values() if p.poll() is not None]

    def stop(self) -> None:
        stop_all(list(self.processes.values()))


def half_done(apiserver: StandInApiServer) -> int:
    """Pods whose bind has begun (`allocating`) and not ended."""
    return sum(
        (pod["metadata"].get("annotations") or {}).get(PHASE) == "allocating" for pod in apiserver.all("pods")
    )


def unsettled(apiserver: StandInApiServer, url: str) -> list[str]:
    """Pods not yet bound with `bind-phase: success` in Kubernetes and `running` here on
    that node; empty when everything is settled."""
    here = {
        name: (status, node)
        for name, status, node in sql_value(
            url,
            "SELECT coalesce(json_agg(json_build_array(p.name, p.status, n.name)), '[]')"
            " FROM scheduling_pod p LEFT JOIN scheduling_node n ON n.id = p.node_id",
        )
    }
    wrong = []
    for pod in apiserver.all("pods"):
        name = pod["metadata"]["name"]
        node = pod["spec"].get("nodeName")
        phase = (pod["metadata"].get("annotations") or {}).get(PHASE)
        if not node or phase != "success" or here.get(name) != ("running", node):
            wrong.append(f"{name}: {node} {phase} / {here.get(name)}")
    return wrong


def live_node_locks(apiserver: StandInApiServer) -> int:
    """Node locks naming a pod whose bind has not ended (a stale one, whose pod settled, is
    taken over at once and blocks nobody)."""
    settled = {
        pod["metadata"]["name"]
        for pod in apiserver.all("pods")
        if (pod["metadata"].get("annotations") or {}).get(PHASE) in ("success", "failed")
    }
    held = [(node["metadata"].get("annotations") or {}).get(NODE_LOCK) for node in apiserver.all("nodes")]
    return sum(1 for value in held if value and value.rsplit(",", 1)[-1] not in settled)


def test_the_kube_agent_sigkilled_mid_bind(private_postgres, figures):
    rng = random.Random(1604)
    url = private_postgres.fresh_database("fault_kube")
    apiserver = StandInApiServer().start()
    for n in range(NODES):
        apiserver.put("nodes", node_object(f"gpu-{n}", t4_register(f"GPU-{n}", 4)))
    cycles = spawn("tests.pipeline.cycle_worker", url, "--until-deadline", "--deadline", "1200")
    agents = Agents(url, apiserver)
    bindings_began: list[float] = []
    guard = threading.Lock()

    def slow_binding() -> None:
        with guard:
            bindings_began.append(time.monotonic())
        time.sleep(BIND_PAUSE)

    recoveries: list[float] = []
    inside = 0
    try:
        agents.start()
        agents.start()
        wait_until(lambda: agents.leader() is not None, 60, "an agent leads")
        wait_until(lambda: sql_value(url, "SELECT count(*) FROM scheduling_node") == NODES, 60, "nodes")
        apiserver.put("pods", pod_object("warm", mem=1000))
        wait_until(lambda: not unsettled(apiserver, url), 60, "the first pod bound")
        for n in range(REPEATS):
            with apiserver.lock:
                apiserver.hooks.clear()
            for _ in range(PODS_PER_ROUND):
                apiserver.before("POST", "/binding", slow_binding)
            with guard:
                bindings_began.clear()
            for i in range(PODS_PER_ROUND):
                apiserver.put("pods", pod_object(f"r{n:02d}-{i}", mem=1000))
            try:
                wait_until(lambda: bindings_began, 30, "a Binding began")
            except BaseException:
                print("UNSETTLED", unsettled(apiserver, url), agents.dead(), flush=True)
                raise
            time.sleep(rng.uniform(0.0, PODS_PER_ROUND * BIND_PAUSE))
            assert agents.leader() is not None, "nobody leads"
            agents.kill_leader()
            killed = time.monotonic()
            inside += half_done(apiserver) > 0
            agents.start()  # the next standby
            try:
                wait_until(lambda: not unsettled(apiserver, url), RECOVERY_BOUND, "every pod bound again")
            except BaseException:
                print("UNSETTLED", unsettled(apiserver, url), flush=True)
                raise
            recoveries.append(time.monotonic() - killed)
        assert agents.dead() == [], "an agent died on its own"
        assert cycles.poll() is None, cycles.stderr.read()[-3000:]
        figures["kills"] = len(recoveries)
        figures["kills_with_a_bind_half_done"] = inside
        figures["recovery_max_ms"], figures["recovery_median_ms"] = summary(recoveries)
        figures["pods_bound"] = len(apiserver.all("pods"))
        figures["bindings_posted"] = len(apiserver.calls("POST", "/binding"))
        figures["binds_repaired"] = sql_value(
            url, "SELECT count(*) FROM scheduling_event WHERE kind = 'bind_repaired'"
        )
        figures["left_allocating"] = half_done(apiserver)
        figures["scheduled_unbound"] = sql_value(
            url, "SELECT count(*) FROM scheduling_pod WHERE status = 'scheduled'"
        )
        figures["disagreements"] = len(unsettled(apiserver, url))
        figures["live_node_locks"] = live_node_locks(apiserver)
    finally:
        agents.stop()
        stop_all([cycles])
        apiserver.stop()
    # After the cycle worker stopped: while it polls, it holds the cycle lock for a moment
    # every tenth of a second, which the advisory-lock count would catch.
    record_end_state(figures, url)
    figures.require("kills", REPEATS)
    figures.at_least("kills_with_a_bind_half_done", (REPEATS + 1) // 2)
    for key in ("left_allocating", "scheduled_unbound", "disagreements", "live_node_locks"):
        figures.require(key, 0)
    figures.at_most("recovery_max_ms", RECOVERY_BOUND * 1000)
    figures.require("pods", figures["pods_bound"])  # every pod accounted for, here and there
