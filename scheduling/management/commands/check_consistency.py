"""`manage.py check_consistency [--repair]`: counters against allocations, ghost
allocations, placed pods holding no card, cards over capacity.

Prints one line per finding and exits 1 when anything was found (0 when clean), so it can
gate a deploy or a cron job. With `--repair` the drift is fixed through
`services.repair_consistency` and the check is run again; the exit status is then that of
the second check. Findings are recorded as events and metrics either way.
"""

from django.core.management.base import BaseCommand

from scheduling import services
from scheduling.pipeline import consistency


class Command(BaseCommand):
    help = "Check counters, allocations and pods for drift; --repair fixes it. Exit 1 when drift remains."

    def add_arguments(self, parser):
        parser.add_argument("--repair", action="store_true", help="fix the drift found, then check again")

    def handle(self, *args, **options):
        found = consistency.check()
        consistency.report(found, actor="manage.py check_consistency")
        for line in found.lines():
            self.stdout.write(line)
        if found.clean:
            self.stdout.write(
                "consistent: counters equal the active allocations, no ghost, no card over capacity"
            )
            return
        if not options["repair"]:
            self.stdout.write(self._summary(found))
            raise SystemExit(1)
        repair = services.repair_consistency(actor="manage.py check_consistency --repair")
        for uuid in repair.counters_fixed:
            self.stdout.write(f"repaired card/{uuid}: counters set to its active allocations")
        for key, uuids in repair.ghosts_released.items():
            self.stdout.write(f"repaired pod/{key}: released {', '.join(uuids)}")
        for key in repair.requeued:
            self.stdout.write(f"repaired pod/{key}: back in the queue")
        for key in repair.left_alone:
            self.stdout.write(f"left pod/{key}: running with no card; release or resubmit it by hand")
        after = consistency.check()
        if after.clean:
            self.stdout.write("consistent after repair")
            return
        for line in after.lines():
            self.stdout.write(f"still: {line}")
        raise SystemExit(1)

    @staticmethod
    def _summary(found) -> str:
        counts = ", ".join(f"{kind} {count}" for kind, count in found.counts().items() if count)
        return f"drift found ({counts}); run with --repair to fix it"
