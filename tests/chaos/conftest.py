"""The chaos suite's scale, its figures, and the private servers its faults are done to.

`CHAOS_SCALE=ci` (the default) keeps every test small enough for CI on two cores (the
whole suite in about 90 s there; every figure is still asserted, on fewer pods and kills);
`CHAOS_SCALE=full` runs the sizes of issue 16 (3,000 pods on 200 nodes, 20 repetitions of
every fault, the 2-minute load). Everything listens on 127.0.0.1 only.

Each test collects its figures in a `Figures` and asserts them; the figures are printed
when the test ends, again at the end of the run, and appended (one JSON object a line) to
`CHAOS_FIGURES_FILE` when that is set (`make chaos` sets it).

The private PostgreSQL and Redis are started by the tests in temporary folders, on ports of
their own, and stopped and killed at will: never the machine's shared servers.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from tests.conftest import missing_service

REPO = Path(__file__).resolve().parents[2]
SCALE = os.environ.get("CHAOS_SCALE", "ci")
if SCALE not in ("ci", "full"):
    raise pytest.UsageError(f"CHAOS_SCALE must be ci or full, got {SCALE!r}")

SIZES = {
    "ci": {
        "nodes": 40,
        "cards": 8,
        "pods": 400,
        "sqlite_pods": 200,
        "churn_seconds": 6,
        "fault_repeats": 2,
        "kube_kills": 3,
        "kube_pods_per_round": 4,
        "fuzz_examples": 100,
        "dashboard_nodes": 100,
        "dashboard_pods": 500,
        "load_seconds": 0,
    },
    "full": {
        "nodes": 200,
        "cards": 8,
        "pods": 3000,
        "sqlite_pods": 1000,
        "churn_seconds": 8,
        "fault_repeats": 20,
        "kube_kills": 20,
        "kube_pods_per_round": 6,
        "fuzz_examples": 500,
        "dashboard_nodes": 1000,
        "dashboard_pods": 5000,
        "load_seconds": 120,
    },
}[SCALE]

_ALL_FIGURES: list[dict] = []


class Figures:
    """The numbers a chaos test prints and asserts: `figures["pods"] = 300`, then
    `figures.require("over_commits", 0)` and friends, which fail the test with the figures."""

    def __init__(self, name: str):
        self.name = name
        self.values: dict[str, object] = {"scale": SCALE}

    def __setitem__(self, key: str, value) -> None:
        self.values[key] = value

    def __getitem__(self, key: str):
        return self.values[key]

    def line(self) -> str:
        return f"CHAOS {self.name}: " + " ".join(f"{key}={value}" for key, value in self.values.items())

    def require(self, key: str, expected) -> None:
        assert self.values[key] == expected, (
            f"{key} = {self.values[key]!r}, must be {expected!r}\n{self.line()}"
        )

    def at_least(self, key: str, floor) -> None:
        assert self.values[key] >= floor, f"{key} = {self.values[key]!r}, must be >= {floor!r}\n{self.line()}"

    def at_most(self, key: str, ceiling) -> None:
        assert self.values[key] <= ceiling, (
            f"{key} = {self.values[key]!r}, must be <= {ceiling!r}\n{self.line()}"
        )


@pytest.fixture
def figures(request):
    collected = Figures(request.node.name)
    yield collected
    print("\n" + collected.line(), flush=True)
    _ALL_FIGURES.append({"test": collected.name, **collected.values})
    path = os.environ.get("CHAOS_FIGURES_FILE")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as out:
            out.write(json.dumps({"test": collected.name, **collected.values}, default=str) + "\n")


def pytest_terminal_summary(terminalreporter):
    if not _ALL_FIGURES:
        return
    terminalreporter.section(f"chaos figures (CHAOS_SCALE={SCALE})")
    for entry in _ALL_FIGURES:
        values = {key: value for key, value in entry.items() if key not in ("test", "scale")}
        terminalreporter.write_line(f"{entry['test']}: " + " ".join(f"{k}={v}" for k, v in values.items()))


def summary(times: list[float]) -> tuple[float, float]:
    """(max, median) in milliseconds."""
    ordered = sorted(times)
    return round(ordered[-1] * 1000, 1), round(ordered[len(ordered) // 2] * 1000, 1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate, timeout: float, what: str, step: float = 0.02) -> float:
    """Seconds until `predicate()` held; fails the test after `timeout`."""
    started = time.monotonic()
    while True:
        try:
            if predicate():
                return time.monotonic() - started
        except Exception:  # noqa: BLE001 - a server on its way back up
            pass
        if time.monotonic() - started > timeout:
            pytest.fail(f"{what}: not within {timeout:g} s")
        time.sleep(step)


class PrivateRedis:
    """A redis-server of this test's own, on its own port, killed and started at will."""

    def __init__(self):
        self.port = free_port()
        self.folder = tempfile.mkdtemp(prefix="chaos-redis-")
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ]
            + ["--dir", self.folder],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self.ping, 10, "private redis up")

    def ping(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(5)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


def pg_program(name: str) -> str:
    """`initdb` or `pg_ctl`: on the PATH, else in Debian's versioned folder."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)
    if found is None:
        missing_service(f"{name} (PostgreSQL server programs) not found for the private PostgreSQL")
    return found


class PrivatePostgres:
    """A PostgreSQL cluster of this test's own (initdb in a temporary folder, its own port,
    run as the `postgres` user), stopped with `-m immediate` (a crash) and started again."""

    def __init__(self):
        self.port = free_port()
        self.folder = tempfile.mkdtemp(prefix="chaos-pg-")
        self.data = os.path.join(self.folder, "data")
        os.chmod(self.folder, 0o777)

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _as_postgres(self, *command: str, timeout: float = 60) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *command], check=True, timeout=timeout, capture_output=True)

    def _sql(self, statement: str) -> None:
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(statement)

    def create(self) -> None:
        """initdb, start, and a migrated template database that `fresh_database` copies."""
        self._as_postgres(pg_program("initdb"), "-D", self.data, "-U", "postgres", "-A", "trust", "--no-sync")
        self.start()
        self._sql("CREATE DATABASE chaos_template")
        driver(self.url("chaos_template"), "migrate")

    def fresh_database(self, name: str) -> str:
        self._sql(f"DROP DATABASE IF EXISTS {name}")
        self._sql(f"CREATE DATABASE {name} TEMPLATE chaos_template")
        return self.url(name)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(
            pg_program("pg_ctl"),
            "-D",
            self.data,
            "-o",
            options,
            "-l",
            os.path.join(self.folder, "log"),
            "-w",
            "start",
        )

    def crash(self) -> None:
        self._as_postgres(pg_program("pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "stop")

    def close(self) -> None:
        try:
            self.crash()
        except subprocess.SubprocessError:
            pass
        shutil.rmtree(self.folder, ignore_errors=True)


def driver_env(database_url: str, redis_url: str = "", **extra) -> dict:
    """The environment of a process of this suite's own: the database and broker given, and
    nothing of the developer's (no shared Redis unless asked)."""
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    env.update(
        {
            "DATABASE_URL": database_url,
            "PYTHONPATH": str(REPO),
            "DJANGO_SETTINGS_MODULE": "hamiadmin.settings",
            "HAMIADMIN_VAR_DIR": env.get("HAMIADMIN_VAR_DIR", tempfile.gettempdir()),
        }
    )
    if redis_url:
        env["REDIS_URL"] = redis_url
    env.update({key: str(value) for key, value in extra.items()})
    return env


def driver(database_url: str, *args: str, redis_url: str = "", timeout: float = 300, **env) -> dict:
    """Run `tests.chaos.driver` to the end; its last stdout line, as JSON."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.chaos.driver", *args],
        cwd=REPO,
        env=driver_env(database_url, redis_url, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"driver {args} failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def spawn(module: str, database_url: str, *args: str, redis_url: str = "", **env) -> subprocess.Popen:
    """A long-running process of ours (`python -m module args`), output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=driver_env(database_url, redis_url, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class WorkerLog:
    """A worker's stderr, in a file (a pipe nobody drains would stall a worker that logs a
    lot, as one does while its database is down); `wait_for` the next line containing text."""

    def __init__(self):
        self.file = tempfile.NamedTemporaryFile("w+", prefix="chaos-worker-", suffix=".log", delete=False)
        self.offset = 0

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.file.name) as log:
                log.seek(self.offset)
                chunk = log.read()
            at = chunk.find(text)
            if at >= 0:
                self.offset += at + len(text)
                return True
            time.sleep(0.01)
        return False

    def skip(self) -> None:
        """Forget what was logged so far: the next `wait_for` looks at new lines only."""
        with open(self.file.name) as log:
            self.offset = len(log.read())

    def tail(self) -> str:
        with open(self.file.name) as log:
            return log.read()[-3000:]


def celery_worker(
    database_url: str, redis_url: str, *, shuffle: bool = False, log: WorkerLog | None = None, **env
) -> subprocess.Popen:
    """A real `celery -A hamiadmin worker --pool=solo`; with `shuffle`, through
    `tests.chaos.shuffled_worker`, which makes each cycle take a random sample of the due
    pods so that concurrent commits fight over the same cards."""
    args = ["worker", "--pool=solo", "--loglevel=WARNING", "--without-gossip", "--without-mingle"]
    args += ["--without-heartbeat"]
    module = ["-m", "tests.chaos.shuffled_worker"] if shuffle else ["-m", "celery", "-A", "hamiadmin"]
    log = log or WorkerLog()
    process = subprocess.Popen(
        [sys.executable, *module, *args],
        cwd=REPO,
        env=driver_env(database_url, redis_url, **env),
        stdout=subprocess.DEVNULL,
        stderr=log.file,
        text=True,
    )
    process.log = log  # type: ignore[attr-defined]
    return process


def stop_all(processes) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log = getattr(process, "log", None)
        if log is not None:
            log.file.close()
            os.unlink(log.file.name)


@pytest.fixture(autouse=True)
def local_triggers(settings):
    """In-process tests (fuzz, security) send no Celery task to whatever REDIS_URL the
    developer has; the processes of this suite get their broker explicitly."""
    settings.REDIS_URL = ""


@pytest.fixture
def private_redis():
    if shutil.which("redis-server") is None:
        missing_service("redis-server not found for the private Redis")
    server = PrivateRedis()
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def private_postgres():
    server = PrivatePostgres()
    server.create()
    yield server
    server.close()


def sql_value(database_url: str, query: str):
    """One value read straight from a private PostgreSQL (for polling, without a Django
    process per look)."""
    with psycopg.connect(database_url.replace("postgres://", "postgresql://"), connect_timeout=2) as conn:
        return conn.execute(query).fetchone()[0]


UNDECIDED = "SELECT count(*) FROM scheduling_pod WHERE status = 'pending' AND NOT parked AND attempts = 0"
