"""`manage.py simulate FILE`: run a scenario (SPEC 9) through the engine; no database, no broker."""

import json
import sys

from django.core.management.base import BaseCommand

from scheduling.engine.errors import ScenarioError
from scheduling.engine.scenario import load_scenario_file
from scheduling.engine.scheduler import Scheduler


class Command(BaseCommand):
    help = (
        "Schedule the pods of a scenario file (JSON, or YAML by extension) and print the decisions as JSON."
    )
    requires_system_checks = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument(
            "--top", type=int, default=None, help="keep the K best node scores and K failed nodes per pod"
        )
        parser.add_argument("--indent", type=int, default=2)

    def handle(self, *args, **options):
        try:
            cluster, config, pods = load_scenario_file(options["file"])
        except ScenarioError as exc:
            sys.stderr.write(f"simulate: {options['file']}: {exc}\n")
            sys.exit(2)
        scheduler = Scheduler(cluster, config)
        top = options["top"]
        if top is not None and top < 0:
            sys.stderr.write(f"simulate: --top must be 0 or more, got {top}\n")
            sys.exit(2)
        indent = options["indent"] or None
        out = {"pods": [scheduler.schedule(pod).as_dict(top=top) for pod in pods]}
        sys.stdout.write(json.dumps(out, indent=indent) + "\n")
