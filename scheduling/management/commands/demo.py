"""`manage.py demo` (what `make run` starts): a working scheduler with nothing else installed.

It migrates the database, makes the `admin` user, starts one simulated NVML agent per demo
node (`python -m agents.nvml --simulate deploy/demo/NODE.yaml`, each with its own agent
token, reporting to this server's API like a real agent), starts the in-process scheduler
loop, trickles demo pods (and completes them after a while, so that waiting pods get
placed), and serves the web app. With `--no-serve` there is no API to report to, so the
nodes are loaded through the same service the report endpoint calls (`DemoInventory`).

`--nodes N --pods M` loads a synthetic cluster instead of the demo nodes (the dashboard at
scale), `--scenario FILE` the nodes and pods of a simulate scenario. The demo's logs go to
`var/demo.log` (`--verbose`: to the console), so the dashboard login is the last thing
printed; `--password` prints it again (a generated password is kept in `var/demo-login`,
mode 0600).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import faulthandler
import functools
import io
import logging
import logging.config
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from datetime import datetime
from pathlib import Path

import yaml
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from scheduling import services
from scheduling.api.tokens import issue_agent_token
from scheduling.engine.errors import ScenarioError
from scheduling.engine.scenario import parse_scenario, read_scenario_file
from scheduling.management.commands.simulate import problem_text
from scheduling.models import Node, Pod, Queue
from scheduling.pipeline.loop import SchedulerLoop

log = logging.getLogger("scheduling.demo")
NAMESPACE = "demo"
#: prctl(2) option: the signal the kernel sends a child when its parent dies (Linux).
PR_SET_PDEATHSIG = 1
#: Seconds a stopping demo gives its agents to end on their own before they are killed.
AGENT_GRACE = 5.0
#: Seconds a stopping demo may take in all (agents, scheduler loop, web server, logs) before
#: it prints every thread's stack to its log and exits anyway (faulthandler's watchdog).
STOP_GRACE = 20.0


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
    """Reports the nodes (the demo's, else `nodes`), and again every `every` seconds as an
    agent's heartbeat."""

    def __init__(self, every: float = 20.0, nodes: list[dict] | None = None):
        self.nodes = (
            nodes
            if nodes is not None
            else [
                document
                for path in demo_node_files()
                for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
                if isinstance(document, dict)
            ]
        )
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
            self.heartbeat()

    def heartbeat(self) -> None:
        """Every node says it is alive: a node gone silent (not ready) by a full report, which
        makes it ready again; the others by their heartbeat alone, in one UPDATE (a full report
        of 1,000 synthetic nodes every 20 s would be most of the demo's load)."""
        names = [node["name"] for node in self.nodes]
        silent = set(Node.objects.filter(name__in=names, ready=False).values_list("name", flat=True))
        for node in self.nodes:
            if node["name"] in silent:
                services.report_inventory(
                    node["name"], node.get("labels"), node.get("annotations"), node.get("devices")
                )
        Node.objects.filter(name__in=names, ready=True).update(last_heartbeat=timezone.now())
        self.last = time.monotonic()


#: The synthetic cluster's node kinds, in turn: (card type, cards, MiB, NUMA nodes).
SYNTHETIC_KINDS = [
    ("NVIDIA-A100-SXM4-80GB", 8, 81920, 2),
    ("NVIDIA-Tesla T4", 8, 15360, 2),
    ("Tesla V100-SXM2-32GB", 8, 32768, 2),
    ("NVIDIA-H100-80GB-HBM3", 4, 81920, 1),
]
SYNTHETIC_NAMESPACE = "synthetic"
#: Pods submitted per transaction when loading many (`services.submit_pods`).
SUBMIT_CHUNK = 500
#: How many refused pods of a loaded cluster are printed (all are in the log).
SHOWN_REFUSED = 5


def synthetic_nodes(count: int) -> list[dict]:
    """`count` nodes named `syn-0000`... of the SYNTHETIC_KINDS in turn, as agents report them."""
    nodes = []
    for i in range(count):
        card_type, cards, memory, numas = SYNTHETIC_KINDS[i % len(SYNTHETIC_KINDS)]
        name = f"syn-{i:04d}"
        devices = [
            {
                "uuid": f"GPU-{name}-{k}",
                "index": k,
                "type": card_type,
                "memory": memory,
                "numa": k * numas // cards,
            }
            for k in range(cards)
        ]
        nodes.append({"name": name, "labels": {"hamiadmin.io/synthetic": "true"}, "devices": devices})
    return nodes


def synthetic_pods(count: int) -> list[dict]:
    """`count` pods of the demo's POD_KINDS in turn, as `submit_pods` items."""
    pods = []
    for j in range(count):
        prefix, annotations, containers = POD_KINDS[j % len(POD_KINDS)]
        pods.append(
            {
                "namespace": SYNTHETIC_NAMESPACE,
                "name": f"{prefix}-{j:05d}",
                "annotations": dict(annotations),
                "containers": containers,
                "priority": j % 3,
            }
        )
    return pods


def scenario_cluster(path: str) -> tuple[list[dict], list[dict]]:
    """The nodes (as agents report them) and pods (`submit_pods` items) of a simulate scenario.
    The file is checked as `simulate` checks it (ScenarioError naming every problem). A card's
    `used` is dropped: in a live cluster usage is the pods', not the report's."""
    raw = read_scenario_file(path)
    parse_scenario(raw)
    nodes = [
        {
            "name": node["name"],
            "labels": node.get("labels"),
            "annotations": node.get("annotations"),
            "devices": [{k: v for k, v in card.items() if k != "used"} for card in node.get("devices", [])],
        }
        for node in raw["nodes"]
    ]
    pods = [
        {
            "namespace": pod.get("namespace", "default"),
            "name": pod["name"],
            "annotations": pod.get("annotations") or {},
            "containers": pod["containers"],
            "init_containers": pod.get("initContainers") or [],
            **({"priority": pod["priority"]} if "priority" in pod else {}),
        }
        for pod in raw["pods"]
    ]
    return nodes, pods


def load_pods(items: list[dict]) -> tuple[int, list[str]]:
    """Submit `items` in chunks (one transaction each); how many were taken, and why each
    refused one was (`ns/name: field: message`)."""
    taken, refused = 0, []
    for start in range(0, len(items), SUBMIT_CHUNK):
        chunk = items[start : start + SUBMIT_CHUNK]
        for item, result in zip(chunk, services.submit_pods(chunk), strict=True):
            if result.error is not None:
                refused.append(f"{item.get('namespace')}/{item.get('name')}: {result.error}")
            else:
                taken += 1
    return taken, refused


def _die_with_parent() -> None:
    """In a demo agent, before it starts: on Linux, have the kernel send it SIGTERM when the
    demo dies, however it dies (SIGKILL, a killed `make run`), so no agent outlives it."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class StopRequest:
    """SIGTERM (systemd, docker, `kill`) and SIGINT (Ctrl-C) ask the demo to stop: the handler
    only notes it, and the main thread, which waits for nothing else, stops everything.

    Why not raise KeyboardInterrupt from the handler, as Ctrl-C does by default: the exception
    lands in whatever the main thread runs at that instant, and where that is a finalizer
    (`__del__`, a weakref callback) Python prints it and drops it. A demo stopped that way
    once served on past the 30 s its stop was given (a CI run; where the exception went was
    not found, a finalizer being the likely place)."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def install(self) -> None:
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, self._note)

    def _note(self, signum, frame) -> None:
        self.signal = signum

    @staticmethod
    def uninstall() -> None:
        """While stopping, a second signal acts at once (SIGTERM kills, Ctrl-C interrupts)."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _exit_within(seconds: float, stream) -> None:
    """A stopping demo ends within `seconds` whatever it waits on: past them, every thread's
    stack goes to `stream` (the demo's log; stderr when None) and the process exits (code 1),
    its agents with it (parent-death signal). Armed for good: the stop is the demo's end. The
    watchdog writes to a copy of the log's descriptor, which outlives the log's closing."""
    try:
        target = os.dup((stream if stream is not None else sys.stderr).fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # no descriptor (a captured stderr)
        target = 2
    faulthandler.dump_traceback_later(seconds, exit=True, file=target)


class SimulatedAgents:
    """One `agents.nvml --simulate` process per demo node, reporting to this server's API."""

    def __init__(self, api: str, interval: float = 15.0, output=None):
        self.api = api
        self.interval = interval
        self.output = output  # where the agents write (the demo's log file); None: the console
        self.processes: list[subprocess.Popen] = []
        self.files = demo_node_files()
        self.started = timezone.now()

    def node_names(self) -> list[str]:
        return [
            document["name"]
            for path in self.files
            for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
            if isinstance(document, dict) and document.get("name")
        ]

    def start(self) -> None:
        self.started = timezone.now()
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
                subprocess.Popen(
                    command,
                    env=env,
                    cwd=settings.BASE_DIR,
                    stdout=self.output,
                    stderr=self.output,
                    preexec_fn=_die_with_parent,
                )
            )

    def wait_for_nodes(self, timeout: float = 30.0) -> bool:
        """True once every demo node has reported through the API since the agents started
        (nodes of an earlier run are in the database already)."""
        names = set(self.node_names())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            fresh = Node.objects.filter(name__in=names, last_heartbeat__gte=self.started)
            if set(fresh.values_list("name", flat=True)) == names:
                return True
            time.sleep(0.25)
        return False

    def terminate(self) -> None:
        """Ask every agent to stop (SIGTERM: each ends after its report in flight)."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()

    def stop(self, grace: float = AGENT_GRACE) -> None:
        """Stop the agents: asked first, then, `grace` seconds after, killed. One deadline for
        all of them, not `grace` each: an agent ends only after its report in flight, which
        may wait out its HTTP timeout (10 s), and graces in a row would add up."""
        self.terminate()
        deadline = time.monotonic() + grace
        for process in self.processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


#: How many pods of one kind the trickle lets wait at once (DemoWorkload.next_kind).
WAITING_PER_KIND = 2


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

    def next_kind(self) -> tuple | None:
        """The next kind in turn, passing over kinds with WAITING_PER_KIND pods waiting already
        (None: every kind has): a mutex pod waits for an empty V100 card, and one submitted
        every eight pods would otherwise pile up until waiting pods filled the workload."""
        waiting = dict.fromkeys((k[0] for k in POD_KINDS), 0)
        names = Pod.objects.filter(namespace=NAMESPACE, status=Pod.PENDING).values_list("name", flat=True)
        for name in names:
            prefix = name.rsplit("-", 1)[0]
            if prefix in waiting:
                waiting[prefix] += 1
        for step in range(1, len(POD_KINDS) + 1):
            kind = POD_KINDS[(self.counter + step) % len(POD_KINDS)]
            if waiting[kind[0]] < WAITING_PER_KIND:
                self.counter += step - 1
                return kind
        return None

    def submit(self, kind: str | None = None, priority: int | None = None) -> bool:
        """Submit a pod of `kind`, else of the next kind in turn; False when none is due."""
        chosen = next(k for k in POD_KINDS if k[0] == kind) if kind else self.next_kind()
        if chosen is None:
            return False
        self.counter += 1
        prefix, annotations, containers = chosen
        if priority is None:
            priority = 5 if prefix.startswith("mutex") else self.counter % 3
        services.submit_pod(
            NAMESPACE, f"{prefix}-{self.counter:04d}", annotations, containers, priority=priority
        )
        return True

    @staticmethod
    def lifetime(name: str) -> int:
        return 15 + zlib.crc32(name.encode()) % 31

    def tick(self, now) -> None:
        """Bind what was placed a second ago, end what has run its lifetime. A gang's members
        share one lifetime and one end (the gang's name decides), as the ranks of one job do:
        members ending apart would leave the rest short of the gang's minimum."""
        bound = list(
            Pod.objects.select_related("node", "group").filter(namespace=NAMESPACE, status__in=Pod.BOUND)
        )
        started: dict[str, datetime] = {}  # job -> when its first member still placed was placed
        for pod in bound:
            job = pod.group.key if pod.group is not None else pod.name
            if pod.scheduled_at and (job not in started or pod.scheduled_at < started[job]):
                started[job] = pod.scheduled_at
        for pod in bound:
            age = (now - pod.scheduled_at).total_seconds() if pod.scheduled_at else 0
            if pod.status == Pod.SCHEDULED and age >= 1:
                services.mark_bound(pod, pod.node.name)
            job = pod.group.key if pod.group is not None else pod.name
            first = started.get(job)
            if first is not None and (now - first).total_seconds() >= self.lifetime(job):
                failed = zlib.crc32(job.encode()) % 10 == 0
                services.release_pod(pod, Pod.FAILED if failed else Pod.SUCCEEDED)
        alive = Pod.objects.filter(
            namespace=NAMESPACE, status__in=(Pod.PENDING, *Pod.BOUND), parked=False
        ).count()
        if alive < self.active:
            self.submit()


def run_demo_feed(inventory, workload, stopping: threading.Event, ready=None, announce=None) -> None:
    """Waits for the nodes (`ready()`), starts the workload, says the demo is up (`announce()`),
    then keeps the workload (and any inventory) ticking."""
    if ready is not None and not ready():
        log.error("the demo nodes did not report in time; demo pods start anyway")
    close_old_connections()
    workload.start_fresh()
    if announce is not None:
        announce()
    while not stopping.wait(workload.interval):
        close_old_connections()
        try:
            if inventory is not None:
                inventory.tick()
            workload.tick(timezone.now())
        except Exception:  # noqa: BLE001 - the demo keeps going
            log.exception("demo feed")
    connection.close()


def wait_for_port(host: str, port: int, timeout: float = 30.0) -> bool:
    """True once the web server accepts connections (so the login comes after its banner)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return True
        time.sleep(0.2)
    return False


# --- The login -------------------------------------------------------------------------------

ADMIN = "admin"


def login_file() -> Path:
    """Where a generated demo password is kept, readable by its owner only."""
    return Path(settings.VAR_DIR) / "demo-login"


def store_password(password: str) -> None:
    path = login_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # an older file keeps its mode through O_CREAT
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(f"{ADMIN} {password}\n")


def stored_password() -> str | None:
    try:
        user, _, password = login_file().read_text(encoding="utf-8").strip().partition(" ")
    except OSError:
        return None
    return password if user == ADMIN and password else None


def ensure_admin() -> str:
    """The `admin` user, made or updated; its login as the demo shows it. DEMO_PASSWORD, when
    set, is the password (and no file keeps it); else one is generated once and kept in
    `login_file()` so `demo --password` can show it again."""
    users = get_user_model()
    chosen = os.environ.get("DEMO_PASSWORD", "")
    user = users.objects.filter(username=ADMIN).first()
    if chosen:
        if user is None:
            users.objects.create_superuser(ADMIN, "admin@example.invalid", chosen)
        elif not user.check_password(chosen):
            user.set_password(chosen)
            user.save(update_fields=["password"])
        login_file().unlink(missing_ok=True)
        return f"{ADMIN} / (DEMO_PASSWORD)"
    if user is None:
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(ADMIN, "admin@example.invalid", password)
        store_password(password)
        return f"{ADMIN} / {password}"
    return known_login(user) or f"{ADMIN} / {UNKNOWN}"


#: What the demo shows when no password it set opens the admin any more.
UNKNOWN = "(changed since the demo set it; DEMO_PASSWORD=... make run sets a new one)"


def known_login(user) -> str | None:
    """The login of an existing admin, if a password this demo set still opens it; else None."""
    chosen = os.environ.get("DEMO_PASSWORD", "")
    if chosen and user.check_password(chosen):
        return f"{ADMIN} / (DEMO_PASSWORD)"
    password = stored_password()
    if password and user.check_password(password):
        return f"{ADMIN} / {password}"
    return None


# --- Logs ------------------------------------------------------------------------------------


@contextlib.contextmanager
def logs_to(path: Path | None):
    """The demo's log lines go to `path` instead of the console while the demo runs, in the
    console's format and redaction; yields a stream on the same file for what is printed
    rather than logged (the web server's banner, the agents). None: all left on the console.

    Through `settings.LOGGING` itself, not only the handlers: loading the WSGI application
    runs `django.setup()` again, which would put the console handler back. The loggers it
    configures get their handlers back afterwards."""
    if path is None:
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    console = settings.LOGGING
    to_file = copy.deepcopy(console)
    for name, handler in to_file.get("handlers", {}).items():
        if handler.get("class") == "logging.StreamHandler":
            to_file["handlers"][name] = {
                **{k: v for k, v in handler.items() if k != "stream"},
                "class": "logging.FileHandler",
                "filename": str(path),
                "encoding": "utf-8",
            }
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in console.get("loggers", {}))]
    saved = [(logger, list(logger.handlers), logger.level, logger.propagate) for logger in loggers]
    settings.LOGGING = to_file
    logging.config.dictConfig(to_file)
    stream = path.open("a", encoding="utf-8", buffering=1)
    try:
        yield stream
    finally:
        settings.LOGGING = console
        for logger, handlers, level, propagate in saved:
            for handler in logger.handlers:
                if handler not in handlers:
                    handler.close()
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate = propagate
        stream.close()


class Command(BaseCommand):
    help = (
        "Migrate, load a demo cluster, schedule in-process, trickle demo pods, and serve the web app;"
        " the dashboard login is printed last (again with --password)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", default="8000")
        parser.add_argument("--no-pods", action="store_true", help="load the nodes but submit no demo pods")
        parser.add_argument(
            "--no-serve", action="store_true", help="do not start the web server (keep scheduling)"
        )
        parser.add_argument(
            "--password", action="store_true", help="print the dashboard login of the demo admin and exit"
        )
        parser.add_argument(
            "--verbose", action="store_true", help="show the demo's logs here instead of in var/demo.log"
        )
        parser.add_argument(
            "--nodes",
            type=int,
            default=None,
            help="a synthetic cluster of N nodes instead of the demo's three",
        )
        parser.add_argument("--pods", type=int, default=0, help="with --nodes: M synthetic pods to schedule")
        parser.add_argument(
            "--scenario", default=None, help="load the nodes and pods of a simulate scenario (FILE) instead"
        )
        parser.add_argument(
            "--load-only",
            action="store_true",
            help="migrate, make the admin, load the cluster, print the login and exit",
        )

    def handle(self, *args, **options):
        if options["password"]:
            return self.show_login()
        if options["nodes"] is not None and options["scenario"]:
            self.fail("--nodes and --scenario both choose the cluster: give one")
        if options["nodes"] is not None and options["nodes"] < 1:
            self.fail(f"--nodes must be 1 or more, got {options['nodes']}")
        if options["pods"] < 0 or (options["pods"] and options["nodes"] is None):
            self.fail("--pods takes a count >= 0, with --nodes")
        cluster = None
        if options["scenario"]:
            try:
                cluster = scenario_cluster(options["scenario"])
            except ScenarioError as exc:
                sys.stderr.write(problem_text(options["scenario"], exc, program="demo"))
                sys.exit(2)
        elif options["nodes"] is not None:
            cluster = (synthetic_nodes(options["nodes"]), synthetic_pods(options["pods"]))
        Path(settings.VAR_DIR).mkdir(parents=True, exist_ok=True)
        log_path = None if options["verbose"] else Path(settings.VAR_DIR) / "demo.log"
        with logs_to(log_path) as log_stream:
            call_command("migrate", interactive=False, verbosity=0)
            login = ensure_admin()
            if cluster is not None or options["load_only"]:
                self.load(cluster, log_path)
            if options["load_only"]:
                self.announce(login, log_path, None, "")
                return None
            self.serve(options, login, log_path, log_stream, cluster)
        return None

    def load(self, cluster: tuple[list[dict], list[dict]] | None, log_path: Path | None) -> None:
        """Report the nodes (the demo's when `cluster` is None) and submit the pods, saying how
        long it took and which pods were refused (the first few here, all in the log)."""
        inventory = DemoInventory(nodes=cluster[0] if cluster else None)
        started = time.monotonic()
        inventory.report()
        taken, refused = load_pods(cluster[1]) if cluster else (0, [])
        took = time.monotonic() - started
        loaded = f"{len(inventory.nodes)} nodes and {taken} pods loaded in {took:.1f} s"
        log.info("%s", loaded)
        for line in refused:
            log.warning("refused: %s", line)
        for line in refused[:SHOWN_REFUSED]:
            self.stdout.write(f"refused: {line}")
        if len(refused) > SHOWN_REFUSED:
            self.stdout.write(
                f"refused: and {len(refused) - SHOWN_REFUSED} more (in {log_path or 'the log'})"
            )
        self.stdout.write(loaded)

    def serve(self, options, login: str, log_path, log_stream, cluster) -> None:
        """Run the demo until SIGTERM or Ctrl-C. The web server runs on a thread of its own;
        the main thread starts the rest and then waits for a stop request (or the server's
        end), so a stop at any point, agents half started included, runs the same cleanup."""
        stop = StopRequest()
        stop.install()
        address = f"{options['host']}:{options['port']}"
        agent_host = "127.0.0.1" if options["host"] in ("0.0.0.0", "::") else options["host"]
        agents = inventory = loop = web = None
        ready = None
        stopping = threading.Event()
        try:
            if cluster is not None:
                inventory = DemoInventory(nodes=cluster[0])
                inventory.last = time.monotonic()  # reported just now
                origin = f"scenario {options['scenario']}" if options["scenario"] else "synthetic"
                what = f"{len(cluster[0])} nodes ({origin})"
            elif options["no_serve"]:
                inventory = DemoInventory()
                inventory.report()
                what = f"{', '.join(node['name'] for node in inventory.nodes)} (loaded directly)"
            else:
                agents = SimulatedAgents(f"http://{agent_host}:{options['port']}", output=log_stream)
                agents.start()
                ready = agents.wait_for_nodes
                what = f"{', '.join(agents.node_names())} (simulated NVML agents)"
            if ready is None and not options["no_serve"]:
                ready = functools.partial(wait_for_port, agent_host, int(options["port"]))
            loop = SchedulerLoop()
            loop.start()
            trickle = not options["no_pods"] and not options["scenario"]
            workload = DemoWorkload() if trickle else _Idle()
            url = None if options["no_serve"] else f"http://{address}/"
            feed = threading.Thread(
                target=run_demo_feed,
                args=(
                    inventory,
                    workload,
                    stopping,
                    ready,
                    functools.partial(self.announce, login, log_path, url, what),
                ),
                daemon=True,
                name="demo-feed",
            )
            feed.start()
            if not options["no_serve"]:
                web = threading.Thread(
                    target=call_command,
                    args=("runserver", address),
                    kwargs={
                        "use_reloader": False,
                        "insecure_serving": True,
                        **({"stdout": log_stream, "stderr": log_stream} if log_stream else {}),
                    },
                    daemon=True,
                    name="demo-web",
                )
                web.start()
            while stop.signal is None and (web is None or web.is_alive()):
                time.sleep(0.2)
        finally:
            stop.uninstall()
            _exit_within(STOP_GRACE, log_stream)
            stopping.set()
            if agents is not None:
                agents.terminate()  # they wind down while the loop ends its cycle
            if loop is not None:
                loop.stop()
            if agents is not None:
                agents.stop()
        if stop.signal is None:
            self.fail("the web server stopped: its error is in the log above or in the demo's log", code=1)

    def announce(self, login: str, log_path: Path | None, url: str | None, what: str) -> None:
        """What the demo is, where its logs are, then the dashboard and its login: the last
        lines printed, after the startup noise."""
        lines = []
        if what:
            lines.append(f"demo cluster: {what}")
        lines.append(
            f"logs: {log_path} (--verbose shows them here)" if log_path else "logs: here (--verbose)"
        )
        if url:
            lines.append(f"dashboard: {url} (admin pages: {url}admin/)")
        lines.append(self.style.SUCCESS(f"login: {login}") + "   (again: manage.py demo --password)")
        self.stdout.write("\n".join(lines))

    def show_login(self) -> None:
        """`demo --password`: the demo admin's login, or why there is none to show (exit 1)."""
        try:
            user = get_user_model().objects.filter(username=ADMIN).first()
        except DatabaseError:
            user = None
        if user is None:
            self.fail("no demo admin yet: `make run` (manage.py demo) makes it", code=1)
        login = known_login(user)
        if login is None:
            self.fail(f"login: {ADMIN} / {UNKNOWN}", code=1)
        self.stdout.write(f"login: {login}")

    def fail(self, message: str, code: int = 2) -> None:
        sys.stderr.write(f"demo: {message}\n")
        sys.exit(code)


class _Idle:
    """A workload that does nothing (--no-pods)."""

    interval = 2.0

    def start_fresh(self) -> None:
        return None

    def tick(self, now) -> None:
        return None
