"""`manage.py simulate FILE`: run a scenario (SPEC 9) through the engine; no database, no broker.

`manage.py simulate --live FILE`: the pods of FILE (`{"pods": [...], "edits": {...}}`, the
body of `POST /api/v1/whatif/`) against the live cluster as the next cycle would see it, after
the edits; the database is read, never written.

JSON by default (for programs); `--format table` is for people: one line per pod, coloured
only on a terminal and never with NO_COLOR set (https://no-color.org).
"""

import gc
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from django.core.management.base import BaseCommand

from scheduling.engine.batch.scenario import run_batch_scenario, wants_batch
from scheduling.engine.errors import ScenarioError, ScenarioProblems
from scheduling.engine.explain import SELF_EXCLUDED, as_sentence, summary_of, what_would_fit
from scheduling.engine.scenario import (
    parse_scenario,
    read_scenario_file,
    read_scenario_text,
    schedule_in_order,
)
from scheduling.engine.triage import VERDICT_WORDS
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


@contextmanager
def collector_paused():
    """The cyclic garbage collector off while a scenario runs, as it was after. The run builds
    millions of objects that live to the end (cards, verdicts, the decisions' dicts) and
    leaves next to no cycles, so each full collection walks the whole growing heap and frees
    nothing: 20-25% of the CPU time of 10,000 pods on 5,000 nodes, for the same peak memory."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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
        if top is not None and top < 0:
            sys.stderr.write(f"simulate: --top must be 0 or more, got {top}\n")
            sys.exit(2)
        with collector_paused():
            self.simulate(options, top)

    def simulate(self, options: dict, top: int | None) -> None:
        """Decide the pods of the file and print them (ScenarioError: exit 2 saying where)."""
        extra = None
        try:
            if options["live"]:
                pods, edits = read_whatif(options["file"])
                snapshot = load_snapshot()
                cluster, config = apply_edits(snapshot.cluster, snapshot.config, edits)
                decided = [decision.as_dict(top=top) for decision in decide_all(cluster, config, pods)]
            else:
                raw = read_scenario_file(options["file"])
                cluster, config, pods = parse_scenario(raw)
                if wants_batch(raw):  # decided as one live cycle, with its results
                    extra = run_batch_scenario(raw, cluster, config, pods, top=top, **scenario_settings())
                    decided = extra.pop("pods")
                else:
                    decided = schedule_in_order(cluster, config, pods, top)
        except ScenarioError as exc:
            sys.stderr.write(problem_text(options["file"], exc))
            sys.exit(2)
        if options["format"] == "table":
            sys.stdout.write(table(decided, extra, colour=wants_colour(sys.stdout)))
        else:
            sys.stdout.write(render(decided, options["indent"], extra))


FORMATS = ("json", "table")
#: How many problems of a malformed file are printed; the rest are counted.
SHOWN_PROBLEMS = 20


def problem_text(
    path: str, exc: ScenarioError, shown: int = SHOWN_PROBLEMS, program: str = "simulate"
) -> str:
    """What a malformed file prints: one problem on one line, as always; several under the
    file's path (named once), each with its field path, at most `shown`, then how many more.
    A file that cannot be read or decoded is named by its path once, not twice."""
    problems = exc.problems if isinstance(exc, ScenarioProblems) else [exc]
    total = exc.total if isinstance(exc, ScenarioProblems) else 1
    if total == 1:
        problem = problems[0]
        said = problem.message if problem.where == str(path) else str(problem)
        return f"{program}: {path}: {said}\n"
    lines = [f"{program}: {path}: {total} problems", *(f"  {problem}" for problem in problems[:shown])]
    if total > shown:
        lines.append(f"  and {total - shown} more")
    return "\n".join(lines) + "\n"


def wants_colour(stream) -> bool:
    """Colour on a terminal only, and never when NO_COLOR is set to anything but empty."""
    return not os.environ.get("NO_COLOR") and hasattr(stream, "isatty") and stream.isatty()


#: ANSI colours of the statuses in the table.
STATUS_COLOURS = {"scheduled": "32", "pending": "33", "rejected": "31"}
#: How many reason codes a pending pod's line names: what blocks usable cards first (as the pod
#: page orders them), then the cards the pod excluded itself; the most cards first within each.
TOP_REASONS = 3


def cards_cell(pod: dict) -> str:
    """The cards a placed pod got, with the memory granted on each, container after container."""
    return ", ".join(
        f"{device['uuid']} {device['memory']}MiB"
        for container in pod.get("containers") or []
        for device in container.get("devices") or []
    )


def why_cell(pod: dict) -> str:
    """Why a pod is not placed: its one-line verdict (`explain.summary_of`, what `Pod.reason`
    says); for a pending one then its top reasons by cards (what blocks usable cards first)
    and the first thing that would make it fit, each a sentence."""
    if pod["status"] not in ("pending", "rejected"):
        return ""
    parts = [summary_of(pod)]
    if pod["status"] != "pending":
        return parts[0]
    decisive = pod.get("verdict") or {}
    if decisive.get("fact") and decisive["fact"] not in parts[0]:
        parts.append(f"{VERDICT_WORDS.get(str(decisive.get('class')), '').capitalize()}: {decisive['fact']}")
    reasons = pod.get("reasons") or {}
    ranked = sorted(reasons, key=lambda code: (code in SELF_EXCLUDED, -reasons[code], code))[:TOP_REASONS]
    if ranked:
        parts.append(", ".join(f"{code} {reasons[code]}" for code in ranked))
    fits = what_would_fit(pod)
    if fits:
        parts.append(fits[0])
    return " ".join(as_sentence(part) for part in parts)


def table(pods: list[dict], extra: dict | None = None, colour: bool = False) -> str:
    """One line per pod (pod, status, node, cards, verdict class, why), the totals, then a batch scenario's
    groups, queues and evictions; only the status is coloured."""
    header = ("POD", "STATUS", "NODE", "CARDS", "VERDICT", "WHY")
    rows = [
        (
            f"{pod['namespace']}/{pod['name']}",
            pod["status"],
            pod.get("node") or "-",
            cards_cell(pod) or "-",
            (pod.get("verdict") or {}).get("class") or "-",
            why_cell(pod),
        )
        for pod in pods
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for number, row in enumerate([header, *rows]):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        if colour and number and row[1] in STATUS_COLOURS:
            cells[1] = f"\033[{STATUS_COLOURS[row[1]]}m{cells[1]}\033[0m"
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    counts = {status: sum(1 for pod in pods if pod["status"] == status) for status in STATUS_COLOURS}
    lines.append("")
    lines.append(f"{len(pods)} pods: " + ", ".join(f"{n} {status}" for status, n in counts.items()))
    for group in (extra or {}).get("groups") or []:
        lines.append(
            f"group {group['name']}: {group['placed']}/{group['min_member']} placed"
            + (f"; {group['verdict']}" if group.get("verdict") else "")
        )
    for queue in (extra or {}).get("queues") or []:
        used = ", ".join(f"{k} {v}" for k, v in (queue.get("used") or {}).items())
        lines.append(f"queue {queue['name']}: used {used}")
    for eviction in (extra or {}).get("evictions") or []:
        cards = ", ".join(eviction.get("cards") or ())
        lines.append(
            f"evict {eviction.get('pod')} on {eviction.get('node') or '-'} ({cards}) for {eviction.get('by')}: "
            f"{eviction.get('kind')}, {eviction.get('why')}"
        )
    return "\n".join(lines) + "\n"


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
