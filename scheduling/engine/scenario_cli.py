"""`manage.py simulate FILE` without Django: read a scenario file, decide it, print the answer.

`manage.py` hands a `simulate` of a scenario file here before Django is set up (`main`), so
the command starts in the engine's import time rather than Django's (about 0.7 CPU-s, more
than the whole numpy lower bound at 1,000 nodes); `--live`, Django's own options and anything
this parser does not know go on to the Django command, which uses this module for the same
work. Only a batch scenario reads the server's preemption options: the caller passes
`batch_settings`, which sets Django up then, and only then. Pure Python: no Django import.

JSON by default (for programs); `--format table` is for people: one line per pod, coloured
only on a terminal and never with NO_COLOR set (https://no-color.org).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager

from .batch.scenario import run_batch_scenario, wants_batch
from .dra.scenario import run_dra_scenario, wants_dra
from .errors import ScenarioError, ScenarioProblems
from .explain import SELF_EXCLUDED, as_sentence, summary_of, what_would_fit
from .scenario import parse_config, parse_scenario, read_scenario_file, schedule_in_order
from .triage import VERDICT_WORDS

#: The preemption options `run_batch_scenario` takes (`rules`, `consolidation`), read when a
#: batch scenario needs them.
BatchSettings = Callable[[], dict]


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
    if not indent or not pods:  # plain data, no cycles: the encoder need not look for them
        return json.dumps({"pods": pods, **extra}, check_circular=False) + "\n"
    pad = " " * indent
    lines = f",\n{pad}{pad}".join(json.dumps(pod) for pod in pods)
    tail = "".join(f",\n{pad}{json.dumps(key)}: {json.dumps(value)}" for key, value in extra.items())
    return f'{{\n{pad}"pods": [\n{pad}{pad}{lines}\n{pad}]{tail}\n}}\n'


def run_file(
    path: str, top: int | None, batch_settings: BatchSettings
) -> tuple[list[dict] | dict, dict | None]:
    """The decisions of a scenario file and a batch scenario's other results (groups, queues,
    evictions), or a DRA scenario's whole answer and None. Raises ScenarioError."""
    raw = read_scenario_file(path)
    if wants_dra(raw):  # ResourceSlices and claims: placements and claim statuses, as JSON
        return run_dra_scenario(raw, top, config=parse_config(raw.get("config"))), None
    cluster, config, pods = parse_scenario(raw)
    if wants_batch(raw):  # decided as one live cycle, with its results
        extra = run_batch_scenario(raw, cluster, config, pods, top=top, **batch_settings())
        return extra.pop("pods"), extra
    return schedule_in_order(cluster, config, pods, top), None


def write_answer(path: str, top: int | None, indent: int, form: str, batch_settings: BatchSettings) -> int:
    """Decide the file and print the answer; a malformed file prints where (exit status 2)."""
    if top is not None and top < 0:
        sys.stderr.write(f"simulate: --top must be 0 or more, got {top}\n")
        return 2
    with collector_paused():
        try:
            decided, extra = run_file(path, top, batch_settings)
        except ScenarioError as exc:
            sys.stderr.write(problem_text(path, exc))
            return 2
    if isinstance(decided, dict):  # a DRA scenario's answer
        sys.stdout.write(json.dumps(decided, indent=indent) + "\n")
    elif form == "table":
        sys.stdout.write(table(decided, extra, colour=wants_colour(sys.stdout)))
    else:
        sys.stdout.write(render(decided, indent, extra))
    return 0


def main(argv: list[str], batch_settings: BatchSettings) -> int | None:
    """`simulate FILE [--top K] [--indent N] [--format json|table]`: the exit status, or None
    when the arguments are not only these (`--live`, `--settings`, `--help`, ...): the Django
    command takes them."""
    parser = argparse.ArgumentParser(prog="manage.py simulate", add_help=False)
    parser.add_argument("file")
    parser.add_argument("--top", type=int, default=None)
    parser.add_argument("--indent", type=int, default=2)
    parser.add_argument("--format", choices=FORMATS, default="json")
    if any(arg.startswith("-") and arg.split("=", 1)[0] not in OWN_OPTIONS for arg in argv):
        return None
    try:
        options, unknown = parser.parse_known_args(argv)
    except SystemExit:  # a bad value: the Django command says so in its own words
        return None
    if unknown:
        return None
    return write_answer(options.file, options.top, options.indent, options.format, batch_settings)


#: The options `main` reads itself.
OWN_OPTIONS = ("--top", "--indent", "--format")
