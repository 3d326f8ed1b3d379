"""The commands README.md and docs/*.md show run in a fresh clone (issue 30): every file a
`simulate` command names ships with the repository, every `python -m` module exists, and the
`manage.py simulate` commands written out in full run as written and exit 0."""

import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]

#: `manage.py simulate ARGS` up to the end of its code span, comment or line.
SIMULATE = re.compile(r"manage\.py simulate((?: +[^\s`#]+)+)")
#: The NVML agent's `--simulate FILE` (a node description).
AGENT_SIMULATE = re.compile(r"--simulate +([^\s`]+\.(?:json|ya?ml))")
SCENARIO = re.compile(r".+\.(?:json|ya?ml)")
MODULE = re.compile(r"python -m ([A-Za-z_][\w.]*)")
#: A synopsis word such as FILE or K, or an option list such as [--top K]: not runnable as written.
PLACEHOLDER = re.compile(r"[A-Z]+|.*[\[\]|].*")


def shown(pattern: re.Pattern, pages: list[Path] = PAGES) -> list[tuple[str, str]]:
    """(page:line, first group) of every match in the pages."""
    found = []
    for page in pages:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for match in pattern.finditer(line):
                found.append((f"{page.name}:{number}", match.group(1)))
    return found


def simulate_commands(pages: list[Path] = PAGES) -> list[tuple[str, list[str]]]:
    return [(where, shlex.split(args)) for where, args in shown(SIMULATE, pages)]


def named_files(pages: list[Path] = PAGES) -> list[tuple[str, str]]:
    """(page:line, path) of every scenario a `manage.py simulate` command names and every node
    description an agent's `--simulate` names."""
    named = [
        (where, arg) for where, args in simulate_commands(pages) for arg in args if SCENARIO.fullmatch(arg)
    ]
    return named + shown(AGENT_SIMULATE, pages)


def in_repository(path: str) -> bool:
    """Whether `path` (or glob), relative to the repository's root, names a file inside it: a
    path beside the checkout (`../shared/...`) is not there in a fresh clone."""
    if Path(path).is_absolute():
        return False
    return any(found.resolve().is_relative_to(ROOT) for found in ROOT.glob(path))


def missing_files(pages: list[Path] = PAGES) -> list[str]:
    """The named files (or globs) that are not in the repository."""
    return [f"{where}: {path}" for where, path in named_files(pages) if not in_repository(path)]


def runnable() -> list[list[str]]:
    """The `manage.py simulate` argument lists written out in full, each once."""
    out: list[list[str]] = []
    for _, args in simulate_commands():
        if "--live" in args or any(PLACEHOLDER.fullmatch(arg) for arg in args):
            continue
        if args not in out:
            out.append(args)
    return out


def test_every_file_a_simulate_command_names_is_in_the_repository():
    assert "static/scheduling/examples/story1-node-binpack.json" in {path for _, path in named_files()}
    assert missing_files() == []


def test_a_path_outside_the_repository_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```sh\n"
        ".venv/bin/python manage.py simulate ../shared/examples/story1-node-binpack.json\n"
        "python -m agents.nvml --simulate deploy/demo/gpu-t4.yaml --once\n"
        "```\n"
    )
    assert missing_files([page]) == ["page.md:2: ../shared/examples/story1-node-binpack.json"]


def test_every_python_m_module_exists():
    modules = shown(MODULE)
    assert "kube" in {name for _, name in modules}  # the Kubernetes agent, docs/kubernetes.md
    missing = [f"{where}: {name}" for where, name in modules if importlib.util.find_spec(name) is None]
    assert missing == []


def test_the_written_out_simulate_commands_exit_0(monkeypatch, capsys):
    commands = runnable()
    assert ["examples/small-cluster.yaml", "--format", "table"] in commands
    monkeypatch.chdir(ROOT)
    for args in commands:
        try:
            call_command("simulate", *args)
        except SystemExit as exc:  # the command exits 2 for a file it cannot read
            pytest.fail(f"manage.py simulate {shlex.join(args)} exited {exc.code}")
        out = capsys.readouterr().out
        if "--format" in args:
            assert out.startswith("POD"), args
        else:
            assert json.loads(out)["pods"], args
