"""`manage.py simulate FILE`: run a scenario (SPEC 9) through the engine; no database, no broker.

`manage.py simulate --live FILE`: the pods of FILE (`{"pods": [...], "edits": {...}}`, the
body of `POST /api/v1/whatif/`) against the live cluster as the next cycle would see it, after
the edits; the database is read, never written.
"""

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand

from scheduling.engine.batch_scenario import run_batch_scenario, wants_batch
from scheduling.engine.errors import ScenarioError
from scheduling.engine.scenario import parse_scenario, read_scenario_file, read_scenario_text
from scheduling.engine.scheduler import Scheduler
from scheduling.engine.whatif import apply_edits, decide_all, parse_whatif
from scheduling.pipeline.snapshot import load_snapshot


def read_whatif(path: str):
    """The pods and edits of a what-if file (JSON, or YAML); ScenarioError saying where."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(path, f"cannot read: {exc.strerror}") from None
    return parse_whatif(read_scenario_text(text, path))


class Command(BaseCommand):
    help = (
        "Schedule the pods of a scenario file (JSON, or YAML by extension) and print the decisions as JSON;"
        " with --live, the pods of a what-if file against the live cluster (nothing is written)."
    )
    requires_system_checks = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument(
            "--top", type=int, default=None, help="keep the K best node scores and K failed nodes per pod"
        )
        parser.add_argument(
            "--indent", type=int, default=2, help="indent of the envelope, one pod a line (0: one line)"
        )
        parser.add_argument(
            "--live",
            action="store_true",
            help="FILE holds {pods, edits} (the what-if body); decide them against the database's cluster",
        )

    def handle(self, *args, **options):
        top = options["top"]
        if top is not None and top < 0:
            sys.stderr.write(f"simulate: --top must be 0 or more, got {top}\n")
            sys.exit(2)
        try:
            if options["live"]:
                pods, edits = read_whatif(options["file"])
                snapshot = load_snapshot()
                cluster, config = apply_edits(snapshot.cluster, snapshot.config, edits)
                decisions = decide_all(cluster, config, pods)
            else:
                raw = read_scenario_file(options["file"])
                cluster, config, pods = parse_scenario(raw)
                if wants_batch(raw):  # queues or groups: decided as jobs, with their results
                    result = run_batch_scenario(raw, cluster, config, pods, top=top)
                    pods_out = result.pop("pods")
                    sys.stdout.write(render(pods_out, options["indent"], result))
                    return
                scheduler = Scheduler(cluster, config)
                decisions = [scheduler.schedule(pod) for pod in pods]
        except ScenarioError as exc:
            sys.stderr.write(f"simulate: {options['file']}: {exc}\n")
            sys.exit(2)
        sys.stdout.write(render([decision.as_dict(top=top) for decision in decisions], options["indent"]))


def render(pods: list[dict], indent: int | None, extra: dict | None = None) -> str:
    """`{"pods": [...]}` with the C JSON encoder (`json.dumps` with an indent runs the pure-Python
    one, several times slower on big outputs): the indent lays out the envelope, one pod a line.
    `extra` (a batch scenario's `groups` and `queues`) follows the pods, one key a line."""
    extra = extra or {}
    if not indent or not pods:
        return json.dumps({"pods": pods, **extra}) + "\n"
    pad = " " * indent
    lines = f",\n{pad}{pad}".join(json.dumps(pod) for pod in pods)
    tail = "".join(f",\n{pad}{json.dumps(key)}: {json.dumps(value)}" for key, value in extra.items())
    return f'{{\n{pad}"pods": [\n{pad}{pad}{lines}\n{pad}]{tail}\n}}\n'
