"""`manage.py demo` (what `make run` starts): a working scheduler with nothing else installed.

It migrates the database, makes the `admin` user, starts one simulated NVML agent per demo
node (`python -m agents.nvml --simulate deploy/demo/NODE.yaml`, each with its own agent
token, reporting to this server's API like a real agent), starts the in-process scheduler
loop, trickles demo pods (and completes them after a while, so that waiting pods get
placed), and serves the web app. With `--no-serve` there is no API to report to, so the
nodes are loaded through the same service the report endpoint calls (`DemoInventory`).
"""

from __future__ import annotations

import ctypes
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import yaml
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import close_old_connections, connection

from scheduling import services
from scheduling.api.tokens import issue_agent_token
from scheduling.models import Node, Pod, Queue
from scheduling.pipeline.loop import SchedulerLoop

log = logging.getLogger("scheduling.demo")
NAMESPACE = "demo"
#: prctl(2) option: the signal the kernel sends a child when its parent dies (Linux).
PR_SET_PDEATHSIG = 1


def gpu(count=None, memory=None, percentage=None, cores=None) -> dict:
    limits = {}
    for name, value in (
        ("nvidia.com/gpu", count),
        ("nvidia.com/gpumem", memory),
        ("nvidia.com/gpumem-percentage", percentage),
        ("nvidia.com/gpucores", cores),
    ):
        if value is not None:
            limits[name] = value
    return {"limits": limits}


#: (name prefix, annotations, containers): a handful of chains people use.
POD_KINDS = [
    (
        "infer-t4",
        {"nvidia.com/use-gputype": "T4", "hami.io/gpu-scheduler-policy": "binpack"},
        [{"name": "server", "resources": gpu(1, memory=3000, cores=25)}],
    ),
    (
        "train-a100",
        {"nvidia.com/use-gputype": "A100", "hami.io/gpu-scheduler-policy": "topology-aware,binpack"},
        [{"name": "trainer", "resources": gpu(2, memory=16000, cores=50)}],
    ),
    (
        "notebook",
        {"hami.io/gpu-scheduler-policy": "spread,numa", "nvidia.com/nouse-gputype": "V100"},
        [{"name": "jupyter", "resources": gpu(percentage=20, cores=20)}],
    ),
    (
        "v100-tenant",
        {"nvidia.com/use-gputype": "V100", "hami.io/gpu-scheduler-policy": "spread"},
        [{"name": "etl", "resources": gpu(1, memory=2000, cores=10)}],
    ),
    (
        "mutex-v100",
        {"nvidia.com/use-gputype": "V100", "hami.io/gpu-scheduler-policy": "mutex,binpack"},
        [{"name": "bench", "resources": gpu(1, memory=4000)}],
    ),
    (
        "whole-card",
        {"hami.io/node-scheduler-policy": "spread", "nvidia.com/nouse-gputype": "V100"},
        [{"name": "solver", "resources": gpu(1)}],
    ),
    (
        "numa-pair",
        {"nvidia.com/numa-bind": "true", "nvidia.com/use-gputype": "T4"},
        [{"name": "mpi", "resources": gpu(2, memory=5000, cores=30)}],
    ),
    (
        "weighted",
        {"hami.io/device-scoring-weights": "slot=1,core=1,memory=3", "nvidia.com/nouse-gputype": "V100"},
        [{"name": "app", "resources": gpu(1, memory=6000, cores=15)}],
    ),
]


def demo_node_files() -> list[Path]:
    files = sorted((Path(settings.BASE_DIR) / "deploy" / "demo").glob("*.yaml"))
    return files or [Path(__file__).resolve().parents[2] / "fixtures" / "demo-nodes.yaml"]


class DemoInventory:
    """Reports the demo nodes, and again every `every` seconds as an agent's heartbeat."""

    def __init__(self, every: float = 20.0):
        self.nodes = [
            document
            for path in demo_node_files()
            for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
            if isinstance(document, dict)
        ]
        self.every = every
        self.last = 0.0

    def report(self) -> None:
        for node in self.nodes:
            services.report_inventory(
                node["name"], node.get("labels"), node.get("annotations"), node.get("devices")
            )
        self.last = time.monotonic()

    def tick(self) -> None:
        if time.monotonic() - self.last >= self.every:
            self.report()


def _die_with_parent() -> None:
    """In a demo agent, before it starts: on Linux, have the kernel send it SIGTERM when the
    demo dies, however it dies (SIGKILL, a killed `make run`), so no agent outlives it."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _stop_on_sigterm(signum, frame) -> None:
    """SIGTERM (systemd, docker, `kill`) ends the demo like Ctrl-C: agents and loop stopped."""
    raise KeyboardInterrupt


class SimulatedAgents:
    """One `agents.nvml --simulate` process per demo node, reporting to this server's API."""

    def __init__(self, api: str, interval: float = 15.0):
        self.api = api
        self.interval = interval
        self.processes: list[subprocess.Popen] = []
        self.files = demo_node_files()

    def node_names(self) -> list[str]:
        return [
            document["name"]
            for path in self.files
            for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
            if isinstance(document, dict) and document.get("name")
        ]

    def start(self) -> None:
        for path, node in zip(self.files, self.node_names(), strict=True):
            # The key goes through the environment, not the command line (visible in `ps`).
            env = {**os.environ, "HAMIADMIN_AGENT_TOKEN": issue_agent_token(node), "NODE_NAME": node}
            command = [
                sys.executable,
                "-m",
                "agents.nvml",
                "--api",
                self.api,
                "--simulate",
                str(path),
                "--interval",
                str(self.interval),
                "--log-level",
                "WARNING",
            ]
            self.processes.append(
                subprocess.Popen(command, env=env, cwd=settings.BASE_DIR, preexec_fn=_die_with_parent)
            )

    def wait_for_nodes(self, timeout: float = 30.0) -> bool:
        """True once every demo node has reported through the API."""
        names = set(self.node_names())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if set(Node.objects.filter(name__in=names).values_list("name", flat=True)) == names:
                return True
            time.sleep(0.25)
        return False

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()


class DemoWorkload:
    """Submits a pod every `interval` seconds (at most `active` alive), marks placed pods
    running, and completes each after a lifetime of 15-45 s (one in ten fails)."""

    def __init__(self, interval: float = 2.0, active: int = 24):
        self.interval = interval
        self.active = active
        self.counter = Pod.objects.filter(namespace=NAMESPACE).count()

    def start_fresh(self) -> None:
        """Pods left by an earlier run are deleted, and two first pods keep the V100 cards busy,
        so the mutex pod right after them waits (ExclusiveDeviceAllocateConflict) until one ends.
        An invalid and an oversized pod show how waiting is explained."""
        for pod in Pod.objects.filter(namespace=NAMESPACE).exclude(status__in=Pod.FINISHED):
            services.release_pod(pod, Pod.DELETED)
        for kind in ("v100-tenant", "v100-tenant", "mutex-v100"):
            self.submit(kind, priority=0)  # queue order = submission order: tenants first
        services.submit_pod(
            NAMESPACE,
            f"bad-weights-{self.counter}",
            {"hami.io/device-scoring-weights": "slot=1,core=1"},
            [{"name": "app", "resources": gpu(1, memory=1000)}],
            validate=False,
        )
        services.submit_pod(
            NAMESPACE,
            f"sixteen-gpus-{self.counter}",
            {},
            [{"name": "huge", "resources": gpu(16, memory=1000)}],
        )
        self.submit_gangs()

    def submit_gangs(self) -> None:
        """A queue with a memory limit and two gangs: `train` (2 A100 workers, placed together)
        and `allreduce` (4 whole cards at once, min_member 4), which waits whole while the
        cluster is busy and says which member did not fit (GangUnschedulable)."""
        research, _ = Queue.objects.get_or_create(name="research", defaults={"limit_gpumem": 40960})
        n = self.counter
        for i in range(2):
            services.submit_pod(
                NAMESPACE,
                f"train-{n}-w{i}",
                {
                    "hami.io/group-name": f"train-{n}",
                    "hami.io/group-min-member": "2",
                    "hami.io/queue": research.name,
                },
                [{"name": "worker", "resources": gpu(1, memory=8000, cores=30)}],
                labels={"app": "train"},
            )
        for i in range(4):
            services.submit_pod(
                NAMESPACE,
                f"allreduce-{n}-r{i}",
                {"hami.io/group-name": f"allreduce-{n}", "hami.io/group-min-member": "4"},
                [{"name": "rank", "resources": gpu(1)}],
            )

    def submit(self, kind: str | None = None, priority: int | None = None) -> None:
        self.counter += 1
        prefix, annotations, containers = (
            next(k for k in POD_KINDS if k[0] == kind) if kind else POD_KINDS[self.counter % len(POD_KINDS)]
        )
        if priority is None:
            priority = 5 if prefix.startswith("mutex") else self.counter % 3
        services.submit_pod(
            NAMESPACE, f"{prefix}-{self.counter:04d}", annotations, containers, priority=priority
        )

    @staticmethod
    def lifetime(name: str) -> int:
        return 15 + zlib.crc32(name.encode()) % 31

    def tick(self, now) -> None:
        for pod in Pod.objects.select_related("node").filter(namespace=NAMESPACE, status__in=Pod.BOUND):
            age = (now - pod.scheduled_at).total_seconds() if pod.scheduled_at else 0
            if pod.status == Pod.SCHEDULED and age >= 1:
                services.mark_bound(pod, pod.node.name)
            if age >= self.lifetime(pod.name):
                failed = zlib.crc32(pod.name.encode()) % 10 == 0
                services.release_pod(pod, Pod.FAILED if failed else Pod.SUCCEEDED)
        alive = Pod.objects.filter(
            namespace=NAMESPACE, status__in=(Pod.PENDING, *Pod.BOUND), parked=False
        ).count()
        if alive < self.active:
            self.submit()


def run_demo_feed(inventory, workload, stopping: threading.Event, ready=None) -> None:
    """Waits for the nodes (`ready()`), then keeps the workload (and any inventory) ticking."""
    from django.utils import timezone

    if ready is not None and not ready():
        log.error("the demo nodes did not report in time; demo pods start anyway")
    close_old_connections()
    workload.start_fresh()
    while not stopping.wait(workload.interval):
        close_old_connections()
        try:
            if inventory is not None:
                inventory.tick()
            workload.tick(timezone.now())
        except Exception:  # noqa: BLE001 - the demo keeps going
            log.exception("demo feed")
    connection.close()


class Command(BaseCommand):
    help = "Migrate, load a demo cluster, schedule in-process, trickle demo pods, and serve the web app."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", default="8000")
        parser.add_argument("--no-pods", action="store_true", help="load the nodes but submit no demo pods")
        parser.add_argument(
            "--no-serve", action="store_true", help="do not start the web server (keep scheduling)"
        )

    def handle(self, *args, **options):
        (Path(settings.VAR_DIR)).mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        self.ensure_admin()
        address = f"{options['host']}:{options['port']}"
        agent_host = "127.0.0.1" if options["host"] in ("0.0.0.0", "::") else options["host"]
        agents = inventory = None
        ready = None
        if options["no_serve"]:
            inventory = DemoInventory()
            inventory.report()
            names = [node["name"] for node in inventory.nodes]
        else:
            agents = SimulatedAgents(f"http://{agent_host}:{options['port']}")
            agents.start()
            ready = agents.wait_for_nodes
            names = agents.node_names()
        self.stdout.write(
            f"demo cluster: {', '.join(names)} ({'simulated NVML agents' if agents else 'loaded directly'})"
        )
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
        loop = SchedulerLoop()
        loop.start()
        stopping = threading.Event()
        workload = _Idle() if options["no_pods"] else DemoWorkload()
        feed = threading.Thread(
            target=run_demo_feed, args=(inventory, workload, stopping, ready), daemon=True, name="demo-feed"
        )
        feed.start()
        self.stdout.write(f"open http://{address}/ (pods and nodes) or http://{address}/admin/")
        try:
            if options["no_serve"]:
                while True:
                    time.sleep(1)
            else:
                call_command("runserver", address, use_reloader=False, insecure_serving=True)
        except KeyboardInterrupt:
            pass
        finally:
            stopping.set()
            loop.stop()
            if agents is not None:
                agents.stop()

    def ensure_admin(self) -> None:
        """User `admin`: password from DEMO_PASSWORD, else generated and shown once."""
        users = get_user_model()
        password = os.environ.get("DEMO_PASSWORD", "")
        user = users.objects.filter(username="admin").first()
        if user is None:
            shown = password or secrets.token_urlsafe(12)
            users.objects.create_superuser("admin", "admin@example.invalid", shown)
            if password:
                self.stdout.write("login: admin / (DEMO_PASSWORD)")
            else:
                self.stdout.write(
                    self.style.WARNING(f"login: admin / {shown}   (shown once; set DEMO_PASSWORD to choose)")
                )
        elif password:
            user.set_password(password)
            user.save(update_fields=["password"])
            self.stdout.write("login: admin / (DEMO_PASSWORD)")
        else:
            self.stdout.write(
                "login: admin (password shown when it was created; set DEMO_PASSWORD to reset it)"
            )


class _Idle:
    """A workload that does nothing (--no-pods)."""

    interval = 2.0

    def start_fresh(self) -> None:
        return None

    def tick(self, now) -> None:
        return None
