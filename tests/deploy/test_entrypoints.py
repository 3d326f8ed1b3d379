"""What deploy/ starts exists in the code: modules, management commands, their flags,
the demo files the simulated agents read, and the URLs the probes hit.

These hold the packaging and the code together; they fail when either side renames a
flag or a command without the other.
"""

import importlib.util
import json
import subprocess
import sys

import pytest
import yaml
from django.core.management import get_commands
from django.urls import Resolver404, resolve

from .manifests import DEPLOY, OVERLAYS, REPO, command_of, containers, invocations, pod_specs, render_overlay


def compose_invocations() -> list[list[str]]:
    services = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]
    found = []
    for service in services.values():
        if "build" in service:  # built from deploy/Dockerfile: a hamiadmin process
            found += invocations(service["command"])
    return found


def manifest_invocations() -> list[list[str]]:
    found = []
    for overlay in OVERLAYS:
        for _, spec in pod_specs(render_overlay(overlay)):
            for container in containers(spec):
                if not container["image"].startswith(("postgres:", "redis:")):
                    found += invocations(command_of(container))
    return found


def flags(argv: list[str]) -> set[str]:
    return {word.split("=", 1)[0] for word in argv if word.startswith("--")}


def help_text(argv: list[str]) -> str:
    result = subprocess.run(
        [sys.executable, *argv, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"{' '.join(argv)} --help failed:\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def started():
    """Every python program compose and the rendered manifests start (kubectl needed)."""
    return [argv for argv in compose_invocations() + manifest_invocations() if argv[0] == "python"]


def test_every_python_module_started_exists_and_accepts_its_flags(started):
    modules = {}
    for argv in started:
        if argv[1] == "-m":
            modules.setdefault(argv[2], set()).update(flags(argv))
    assert {"agents.nvml", "kube"} <= set(modules)
    for module, used in sorted(modules.items()):
        runnable = importlib.util.find_spec(module)
        if runnable is not None and runnable.submodule_search_locations is not None:
            runnable = importlib.util.find_spec(module + ".__main__")
        assert runnable is not None, f"python -m {module}: no such module (or package without __main__)"
        if not used:
            continue  # nothing to check, and --help might not be a flag it knows
        text = help_text(["-m", module])
        missing = {flag for flag in used if flag not in text}
        assert not missing, f"python -m {module} does not accept {missing}"


def test_every_management_command_started_exists_and_accepts_its_flags(started):
    commands = {}
    for argv in started:
        if argv[1] == "manage.py":
            commands.setdefault(argv[2], set()).update(flags(argv))
    assert {"migrate", "agenttoken"} <= set(commands)
    available = get_commands()
    for command, used in sorted(commands.items()):
        assert command in available, f"manage.py {command} does not exist"
        text = help_text(["manage.py", command])
        missing = {flag for flag in used if flag not in text}
        assert not missing, f"manage.py {command} does not accept {missing}"


def test_simulated_agents_read_demo_files_that_exist(started):
    demo_files = {word for argv in started for word in argv if word.startswith("/app/deploy/demo/")}
    assert demo_files, "no simulated agent found"
    for path in demo_files:
        assert (REPO / path.removeprefix("/app/")).is_file(), f"{path} is not in deploy/demo/"


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probe_urls_resolve(path):
    try:
        resolve(path)
    except Resolver404:
        pytest.fail(f"{path} (web's probe, compose healthcheck) is not routed")


def test_every_gunicorn_loads_the_project_config_that_redacts_its_access_log():
    """hamiadmin/gunicorn_conf.py keeps extender tokens out of gunicorn's own access lines."""
    from hamiadmin.gunicorn_conf import RedactingLogger, logger_class

    dockerfile = (DEPLOY / "Dockerfile").read_text().splitlines()
    image = [json.loads(line.removeprefix("CMD ")) for line in dockerfile if line.startswith("CMD ")]
    servers = [
        argv for argv in image + compose_invocations() + manifest_invocations() if argv[0] == "gunicorn"
    ]
    assert len(servers) >= 1 + 1 + len(OVERLAYS), servers  # the image, compose web, web in every overlay
    for argv in servers:
        assert "python:hamiadmin.gunicorn_conf" in argv, argv
        assert argv[argv.index("python:hamiadmin.gunicorn_conf") - 1] in ("-c", "--config"), argv
    assert logger_class is RedactingLogger
