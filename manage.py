#!/usr/bin/env python
"""Django's command-line entry point for hamiadmin."""

import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hamiadmin.settings")
    if sys.argv[1:2] == ["simulate"]:  # a scenario file needs no Django: start in the engine's time
        from scheduling.engine.scenario_cli import main as simulate

        status = simulate(sys.argv[2:], batch_settings=server_preemption_options)
        if status is not None:
            sys.exit(status)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


def server_preemption_options() -> dict:
    """What a batch scenario reads of the server's settings; Django is set up for it then."""
    import django

    django.setup()
    from scheduling.pipeline.preemption import scenario_settings

    return scenario_settings()


if __name__ == "__main__":
    main()
