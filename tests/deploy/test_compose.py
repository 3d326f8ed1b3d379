"""deploy/docker-compose.yml, read as data: no Docker engine runs here, so nothing is started.

What is checked is what the bring-up relies on: the services exist, workers can be scaled,
web migrates before serving, worker and beat are health-checked by the liveness command,
every agent's token is the one web registers for its node, and every required variable is
documented in deploy/.env.example.
"""

import os
import re
import shlex
import time

import pytest
import yaml

from scheduling.ops import liveness

from .manifests import DEPLOY, REPO, invocations

COMPOSE_FILE = DEPLOY / "docker-compose.yml"
ENV_EXAMPLE = DEPLOY / ".env.example"
REQUIRED_VARIABLE = re.compile(r"\$\{(\w+):\?[^}]*\}")
DEMO_NODES = {"gpu-t4.yaml": "t4-node", "gpu-a100.yaml": "a100-node"}


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose):
    return compose["services"]


def argv(service) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else list(command)


def agent_services(services) -> dict[str, dict]:
    return {
        name: service
        for name, service in services.items()
        if "command" in service
        and any(a[:3] == ["python", "-m", "agents.nvml"] for a in invocations(argv(service)))
    }


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_the_stack_has_its_services(services):
    assert {"postgres", "redis", "web", "worker", "simulator", "beat"} <= set(services)
    agents = agent_services(services)
    simulated = sorted(flag(argv(s), "--simulate").rsplit("/", 1)[-1] for s in agents.values())
    assert simulated == sorted(DEMO_NODES)
    for service in agents.values():
        assert flag(argv(service), "--api") == "http://web:8000"


def test_app_services_share_one_image_built_from_the_repository(services):
    app = {name: s for name, s in services.items() if name not in {"postgres", "redis"}}
    assert len({s["image"] for s in app.values()}) == 1
    for name, service in app.items():
        build = service["build"]
        assert (DEPLOY / build["context"]).resolve() == REPO, name
        assert (DEPLOY / build["context"] / build["dockerfile"]).is_file(), name


def test_workers_scale_no_container_name_and_no_host_port(services):
    assert argv(services["worker"]) == ["celery", "-A", "hamiadmin", "worker", "-l", "info", "-Q", "celery"]
    for name, service in services.items():
        assert "container_name" not in service, f"{name}: a fixed name blocks --scale"
    assert "ports" not in services["worker"]


def test_beat_runs_celery_beat(services):
    assert argv(services["beat"])[:4] == ["celery", "-A", "hamiadmin", "beat"]


def test_web_migrates_then_serves_with_gunicorn_and_is_health_checked(services):
    web = services["web"]
    programs = invocations(argv(web))
    names = [" ".join(p[:3]) for p in programs]
    assert "python manage.py migrate" in names
    gunicorn = next(i for i, p in enumerate(programs) if p[0] == "gunicorn")
    assert names.index("python manage.py migrate") < gunicorn
    assert programs[gunicorn][1] == "hamiadmin.wsgi:application"
    assert flag(programs[gunicorn], "--bind") == "0.0.0.0:8000"
    assert "/healthz" in " ".join(web["healthcheck"]["test"])
    for dependency in ("postgres", "redis"):
        assert web["depends_on"][dependency]["condition"] == "service_healthy"


def seconds(duration: str) -> float:
    """A compose duration such as `20s`, `1m30s` or `500ms`."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"not a compose duration: {duration}"
    return sum(float(number) * units[unit] for number, unit in parts)


def test_simulations_have_a_worker_of_their_own_and_the_scheduling_worker_never_takes_them(services):
    from django.conf import settings

    queue = settings.HAMIADMIN["SIMULATE_QUEUE"]
    simulator = argv(services["simulator"])
    assert simulator[:4] == ["celery", "-A", "hamiadmin", "worker"]
    assert flag(simulator, "-Q") == queue and flag(simulator, "--concurrency") == "1"
    assert queue not in flag(argv(services["worker"]), "-Q").split(",")
    assert "ports" not in services["simulator"]


@pytest.mark.parametrize("role", ["worker", "beat"])
def test_worker_and_beat_are_health_checked_by_their_heartbeat_file(services, role, tmp_path, monkeypatch):
    """The healthcheck as written runs here, as the k8s liveness probe does: fresh file 0, stale 1."""
    check = services[role]["healthcheck"]
    assert check["test"][0] == "CMD"
    command = check["test"][1:]
    assert command[:4] == ["python", "-m", "scheduling.ops.liveness", role]
    heartbeat = tmp_path / role
    monkeypatch.setenv(liveness.ROLES[role][0], str(heartbeat))
    liveness.touch(heartbeat)
    assert liveness.main(command[3:]) == 0
    old = time.time() - 3600
    os.utime(heartbeat, (old, old))
    assert liveness.main(command[3:]) == 1
    max_age = float(command[command.index("--max-age") + 1])
    assert max_age >= 3 * 10 and seconds(check["interval"]) <= max_age  # several 10 s heartbeats fit
    assert seconds(check["timeout"]) < seconds(check["interval"])
    assert check["retries"] >= 1 and seconds(check["start_period"]) > 0


def test_each_agent_reads_the_token_web_registers_for_its_node(compose, services):
    web_env = services["web"]["environment"]
    registered = {}
    for program in invocations(argv(services["web"])):
        if program[:3] == ["python", "manage.py", "agenttoken"]:
            key_variable = flag(program, "--key").lstrip("$")
            registered[program[3]] = web_env[key_variable]
    for name, service in agent_services(services).items():
        args = argv(service)
        node = DEMO_NODES[flag(args, "--simulate").rsplit("/", 1)[-1]]
        secret = flag(args, "--token-file").removeprefix("/run/secrets/")
        assert secret in service["secrets"], name
        source = compose["secrets"][secret]["environment"]
        assert registered[node] == f"${{{source}:?set {source} in deploy/.env}}", (
            f"{name} reads ${source} but web registers {node} with {registered.get(node)}"
        )


def test_django_services_get_production_settings_and_secrets_from_the_environment(services):
    for name in ("web", "worker", "simulator", "beat"):
        env = services[name]["environment"]
        assert env["HAMIADMIN_ENV"] == "production", name
        assert env["REDIS_URL"] == "redis://redis:6379/0", name
        assert env["DATABASE_URL"].startswith("postgres://"), name
        assert env["SECURE_SSL_REDIRECT"] == "false", name
        assert REQUIRED_VARIABLE.fullmatch(env["SECRET_KEY"]), (
            f"{name}: SECRET_KEY must come from the environment"
        )
        assert REQUIRED_VARIABLE.search(env["DATABASE_URL"]), (
            f"{name}: database password must come from the environment"
        )


def test_redis_keeps_an_append_only_file(services):
    assert "--appendonly" in argv(services["redis"])
    assert flag(argv(services["redis"]), "--appendonly") == "yes"


def test_every_required_variable_is_in_env_example_without_a_value():
    required = set(REQUIRED_VARIABLE.findall(COMPOSE_FILE.read_text()))
    assert {"SECRET_KEY", "POSTGRES_PASSWORD"} <= required
    documented = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            documented[key.strip()] = value.strip()
    assert required <= set(documented), f"undocumented: {required - set(documented)}"
    assert all(documented[key] == "" for key in required), "the example must not ship secret values"
