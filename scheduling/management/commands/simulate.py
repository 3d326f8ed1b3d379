"""`manage.py simulate FILE`: run a scenario (SPEC 9) through the engine; no database, no broker.

`manage.py simulate --live FILE`: the pods of FILE (`{"pods": [...], "edits": {...}}`, the
body of `POST /api/v1/whatif/`) against the live cluster as the next cycle would see it, after
the edits; the database is read, never written.

JSON by default (for programs); `--format table` is for people: one line per pod, coloured
only on a terminal and never with NO_COLOR set (https://no-color.org).
"""

import sys
from pathlib import Path

from django.core.management.base import BaseCommand

from scheduling.engine.errors import ScenarioError
from scheduling.engine.scenario import read_scenario_text
from scheduling.engine.scenario_cli import (  # noqa: F401 - the helpers' home; names kept here for callers
    FORMATS,
    collector_paused,
    problem_text,
    render,
    table,
    wants_colour,
    why_cell,
    write_answer,
)
from scheduling.engine.whatif import apply_edits, decide_all, parse_whatif
from scheduling.pipeline.preemption import scenario_settings
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
            "--format",
            choices=FORMATS,
            default="json",
            help="json (SPEC 9's output, the default) or table (a line per pod: status, node, cards, why)",
        )
        parser.add_argument(
            "--live",
            action="store_true",
            help="FILE holds {pods, edits} (the what-if body); decide them against the database's cluster",
        )

    def handle(self, *args, **options):
        top = options["top"]
        if not options["live"]:  # a scenario file: the engine's own entry, as manage.py's fast path
            status = write_answer(
                options["file"], top, options["indent"], options["format"], scenario_settings
            )
            if status:
                sys.exit(status)
            return
        if top is not None and top < 0:
            sys.stderr.write(f"simulate: --top must be 0 or more, got {top}\n")
            sys.exit(2)
        with collector_paused():
            self.simulate_live(options, top)

    def simulate_live(self, options: dict, top: int | None) -> None:
        """Decide the what-if file's pods against the database's cluster and print them
        (ScenarioError: exit 2 saying where)."""
        try:
            pods, edits = read_whatif(options["file"])
            snapshot = load_snapshot()
            cluster, config = apply_edits(snapshot.cluster, snapshot.config, edits)
            decided = [decision.as_dict(top=top) for decision in decide_all(cluster, config, pods)]
        except ScenarioError as exc:
            sys.stderr.write(problem_text(options["file"], exc))
            sys.exit(2)
        if options["format"] == "table":
            sys.stdout.write(table(decided, None, colour=wants_colour(sys.stdout)))
        else:
            sys.stdout.write(render(decided, options["indent"], None))
