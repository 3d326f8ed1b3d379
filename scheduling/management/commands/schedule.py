"""`manage.py schedule`: run scheduling cycles in this process, for setups without Celery.

`--once` runs one cycle and prints what it placed and what stays pending; without it the
command loops (woken by writes in this process, polling for the others) until Ctrl-C.
"""

import time

from django.core.management.base import BaseCommand, CommandError

from scheduling.models import Pod
from scheduling.ops.metrics import serve_from_env
from scheduling.pipeline import run_cycle
from scheduling.pipeline.locks import cycle_lock
from scheduling.pipeline.loop import SchedulerLoop
from scheduling.pipeline.plan import CycleReport


class Command(BaseCommand):
    help = "Run scheduling cycles in-process: one with --once, else a loop until interrupted."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="run one cycle, print it, and exit")
        parser.add_argument("--limit", type=int, default=None, help="at most this many pods in a cycle")
        parser.add_argument("--poll", type=float, default=None, help="seconds between polls in the loop")

    def handle(self, *args, **options):
        if options["once"]:
            self.once(options["limit"])
        else:
            self.loop(options["poll"])

    def once(self, limit):
        with cycle_lock(wait=30) as held:
            if not held:
                raise CommandError("another scheduling cycle holds the lock; try again")
            report = run_cycle(trigger="manage.py schedule --once", limit=limit)
        self.print_report(report)
        waiting = Pod.objects.filter(status=Pod.PENDING)
        total, parked = waiting.count(), waiting.filter(parked=True).count()
        self.stdout.write(
            f"waiting now: {total} pending pods ({parked} invalid, parked until their spec changes)"
        )

    def print_report(self, report: CycleReport):
        if not report.considered:
            self.stdout.write("nothing to schedule: no pending pod is due")
            return
        self.stdout.write(
            f"cycle {report.cycle_id}: {report.considered} considered, {len(report.placed)} placed, "
            f"{len(report.pending) + len(report.conflicts)} pending, {len(report.rejected)} rejected "
            f"({report.duration_ms:.0f} ms)"
        )
        for key, node, allocated in report.placed:
            self.stdout.write(f"  placed    {key} on {node}: {allocated}")
        for key, reason in report.pending:
            self.stdout.write(f"  pending   {key}: {reason}")
        for key, why in report.conflicts:
            self.stdout.write(f"  pending   {key}: lost a race ({why}), retried next cycle")
        for key, error in report.rejected:
            self.stdout.write(f"  rejected  {key}: {error}")

    def loop(self, poll):
        serve_from_env("manage.py schedule")  # counters and histograms on HAMI_METRICS_PORT, if set
        loop = SchedulerLoop(poll=poll, on_cycle=self.print_report)
        loop.start()
        self.stdout.write(f"scheduling in-process (poll {loop.poll}s); Ctrl-C to stop")
        try:
            while loop.is_alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            self.stdout.write("stopping")
        finally:
            loop.stop()
