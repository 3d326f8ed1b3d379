"""The engine's two rooms: the policy core (`scheduling/engine/*.py`) and the batch layer
(`scheduling/engine/batch/`). The core imports nothing from the batch layer, except the
front doors that hand a scenario with queues or groups to it (the scenario reader, and the
`simulate` command's Django-free path); and no engine module imports Django."""

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "scheduling" / "engine"
FRONT_DOORS = {"scenario.py", "scenario_cli.py"}


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, resolved to a dotted name inside `scheduling.engine`."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(ENGINE.parents[1]).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_core_imports_nothing_from_the_batch_layer():
    offenders = {
        path.name: sorted(m for m in imported_modules(path) if m.startswith("scheduling.engine.batch"))
        for path in ENGINE.glob("*.py")
        if path.name not in FRONT_DOORS
    }
    assert {name: mods for name, mods in offenders.items() if mods} == {}


def test_no_engine_module_imports_django():
    for path in ENGINE.rglob("*.py"):
        assert not any(m == "django" or m.startswith("django.") for m in imported_modules(path)), path


def test_the_rooms_hold_what_they_say():
    batch = {path.name for path in (ENGINE / "batch").glob("*.py")}
    assert {"queues.py", "statement.py", "jobs.py", "preempt.py", "consolidate.py", "scenario.py"} <= batch
    assert not (ENGINE / "batch.py").exists()
