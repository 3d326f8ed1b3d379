"""A scheduling worker in its own process, for the concurrency and fault tests.

Runs cycles through the same entry point as the Celery task (single-flight, which the
tests switch off with HAMI_SINGLE_FLIGHT=0) until nothing is due, then prints a summary.

The engine is deterministic, so workers reading the same queue would decide the same pods
the same way and merely skip each other's work. With `--shuffle` each cycle takes a random
sample of the due pods instead of the queue's head, so concurrent commits place different
pods on the same cards: the case the commit's row locks and re-check exist for.

With `--control DIR` the worker, once set up (Django's start takes a second or more, longer on
a busy machine), leaves `DIR/ready-<pid>` and runs its first cycle only when `DIR/go` exists:
workers started together then begin together, and a small queue is not drained by the first
one up before the others run a cycle. Once `DIR/stop` exists it stops as at its deadline (a
test whose work is done need not wait out `--until-deadline`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limits", default="5,20,60,150", help="cycle sizes to pick from")
    parser.add_argument("--deadline", type=float, default=120)
    parser.add_argument("--once", action="store_true")
    parser.add_argument("--until-deadline", action="store_true", help="keep polling when idle")
    parser.add_argument("--shuffle", action="store_true", help="take a random sample of the due pods")
    parser.add_argument("--control", default="", help="a folder: start at its `go`, end at its `stop`")
    args = parser.parse_args()

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hamiadmin.settings")
    django.setup()
    from django.test.utils import override_settings

    from scheduling.pipeline.flight import run_requested_cycles

    rng = random.Random(args.seed)
    if args.shuffle:
        from scheduling.pipeline import cycle

        queue_head = cycle.due_pods

        def due_sample(limit, now=None):
            rows = queue_head(limit * 5, now)
            rng.shuffle(rows)
            return rows[:limit]

        cycle.due_pods = due_sample
    sizes = [int(size) for size in args.limits.split(",")]
    control = Path(args.control) if args.control else None
    if control is not None:
        (control / f"ready-{os.getpid()}").touch()
        given_up = time.monotonic() + args.deadline
        while not (control / "go").exists():
            if time.monotonic() > given_up:
                raise SystemExit(f"no {control / 'go'} within {args.deadline:g} s")
            time.sleep(0.005)
    stop_at = time.monotonic() + args.deadline
    totals = {"cycles": 0, "placed": 0, "conflicts": 0, "skipped": 0}
    idle = 0
    while time.monotonic() < stop_at and not (control is not None and (control / "stop").exists()):
        with override_settings(
            HAMIADMIN={**django.conf.settings.HAMIADMIN, "CYCLE_MAX_PODS": rng.choice(sizes)}
        ):
            reports = run_requested_cycles("test worker", max_cycles=1)
        considered = sum(report.considered for report in reports)
        totals["cycles"] += sum(1 for report in reports if report.considered)
        totals["placed"] += sum(len(report.placed) for report in reports)
        totals["conflicts"] += sum(len(report.conflicts) for report in reports)
        totals["skipped"] += sum(len(report.skipped) for report in reports)
        if args.once:
            break
        idle = 0 if considered else idle + 1
        if idle >= 3 and not args.until_deadline:
            break
        if not considered:
            time.sleep(0.1)
    from scheduling import dbretry

    totals["retries"] = dict(dbretry.RETRIES)
    print(json.dumps(totals), flush=True)


if __name__ == "__main__":
    main()
