"""deploy/Dockerfile and .dockerignore. No Docker engine runs here, so the image is not built:
the file is read as instructions, and the one build step that runs project code
(collectstatic under production settings) is run here with the environment the image sets.
"""

import json
import os
import re
import shlex
import subprocess
import sys
from itertools import takewhile
from pathlib import Path

import pytest

from .manifests import DEPLOY, REPO

DOCKERFILE = DEPLOY / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    found, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        pending += " " + stripped.removesuffix("\\") if pending else stripped.removesuffix("\\")
        if not stripped.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
            pending = ""
    return found


def stages(text: str) -> list[list[tuple[str, str]]]:
    result = []
    for word, rest in instructions(text):
        if word == "FROM":
            result.append([])
        if result:
            result[-1].append((word, rest))
    return result


def env_of(stage) -> dict[str, str]:
    env = {}
    for word, rest in stage:
        if word == "ENV":
            env.update(dict(pair.split("=", 1) for pair in shlex.split(rest)))
    return env


def global_args(text: str) -> dict[str, str]:
    args = {}
    for word, rest in instructions(text):
        if word == "FROM":
            break
        if word == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            args[key] = value
    return args


@pytest.fixture(scope="module")
def text():
    return DOCKERFILE.read_text()


@pytest.fixture(scope="module")
def runtime(text):
    return stages(text)[-1]


def test_builder_stage_builds_wheels_from_pyproject(text):
    all_stages = stages(text)
    assert len(all_stages) >= 2, "multi-stage: builder and runtime"
    builder_runs = [rest for word, rest in all_stages[0] if word == "RUN"]
    assert any("pip wheel . -w /wheels" in run for run in builder_runs)


def test_runtime_is_slim_python_311_installing_only_the_wheels(text, runtime):
    base = runtime[0][1].split()[0]
    for name, value in global_args(text).items():
        base = base.replace("${" + name + "}", value)
    assert base.startswith("python:3.11") and "slim" in base, base
    installs = [rest for word, rest in runtime if word == "RUN" and "pip install" in rest]
    assert installs and all("--no-index" in rest for rest in installs), "runtime must not reach an index"


def test_runtime_runs_as_a_non_root_user(runtime):
    users = [rest for word, rest in runtime if word == "USER"]
    assert users, "no USER in the runtime stage"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    created = " ".join(rest for word, rest in runtime if word == "RUN")
    assert f"--uid {user}" in created, f"USER {user} is not created in the image"


def test_runtime_serves_with_gunicorn_in_production_mode(runtime):
    [cmd] = [rest for word, rest in runtime if word == "CMD"]
    argv = json.loads(cmd)
    assert argv[:2] == ["gunicorn", "hamiadmin.wsgi:application"]
    assert argv[argv.index("--bind") + 1] == "0.0.0.0:8000"
    assert env_of(runtime)["HAMIADMIN_ENV"] == "production"


@pytest.fixture(scope="module")
def built_static(runtime, tmp_path_factory):
    """Run the image's collectstatic step here: (environment it ran with, its result)."""
    [step] = [rest for word, rest in runtime if word == "RUN" and "collectstatic" in rest]
    words = shlex.split(step.split("&&")[0])
    assignments = list(takewhile(lambda w: "=" in w and w.split("=", 1)[0].isidentifier(), words))
    argv = words[len(assignments) :]
    assert argv[:3] == ["python", "manage.py", "collectstatic"]

    root = tmp_path_factory.mktemp("image")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "SECRET_KEY", "DEBUG"}
    }
    env.update(env_of(runtime))
    env.update(dict(w.split("=", 1) for w in assignments))
    # Same settings, paths of this checkout instead of /app and /tmp.
    env.update(PYTHONPATH=str(REPO), STATIC_ROOT=str(root / "static"), HAMIADMIN_VAR_DIR=str(root / "var"))
    result = subprocess.run(
        [sys.executable, *argv[1:]], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    return env, result


def test_collectstatic_runs_at_build_time_under_production_settings(built_static):
    env, result = built_static
    assert env["HAMIADMIN_ENV"] == "production"
    assert result.returncode == 0, result.stderr
    assert (Path(env["STATIC_ROOT"]) / "admin" / "css" / "base.css").is_file()


def test_the_image_serves_its_collected_static_files(built_static):
    """gunicorn serves only the Django app, so with DEBUG off the app itself must serve /static/."""
    env, result = built_static
    assert result.returncode == 0, result.stderr
    probe = (
        "import django; django.setup()\n"
        "from django.test import Client\n"
        "print(Client().get('/static/admin/css/base.css').status_code)\n"
    )
    env = {
        **env,
        "ALLOWED_HOSTS": "testserver",
        "SECURE_SSL_REDIRECT": "false",
        "DJANGO_SETTINGS_MODULE": "hamiadmin.settings",
    }
    served = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert served.returncode == 0, served.stderr
    assert served.stdout.strip() == "200", "production settings do not serve /static/ (dashboard unstyled)"


def dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def pattern_regex(pattern: str) -> re.Pattern:
    """A .dockerignore pattern as a regex: `**/` any depth, `*` and `?` within one name."""
    regex = ""
    for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern.strip("/")):
        regex += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token, re.escape(token))
    return re.compile(regex)


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern decides, and a matching parent excludes a path."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        regex = pattern_regex(pattern.removeprefix("!"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            verdict = not negated
    return verdict


@pytest.mark.parametrize(
    "path",
    [
        ".venv",
        ".git",
        "var",
        "test-artifacts",
        "hamiadmin/__pycache__",
        "scheduling/engine/__pycache__/x.pyc",
        "deploy/.env",
        "db.sqlite3",
    ],
)
def test_dockerignore_keeps_local_state_and_secrets_out_of_the_image(path):
    assert ignored(path, dockerignore_patterns())


@pytest.mark.parametrize(
    "path",
    [
        "pyproject.toml",
        "manage.py",
        "hamiadmin/settings.py",
        "scheduling",
        "agents",
        "templates",
        "deploy/demo/gpu-t4.yaml",
    ],
)
def test_dockerignore_keeps_what_the_image_runs(path):
    assert not ignored(path, dockerignore_patterns())
