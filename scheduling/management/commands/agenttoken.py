"""`manage.py agenttoken NODE [--key KEY]`: the token an agent uses to report NODE; prints the key alone."""

from django.core.management.base import BaseCommand, CommandError

from scheduling.api.tokens import TokenRefused, issue_agent_token


class Command(BaseCommand):
    help = (
        "Create the agent user bound to NODE if needed and print its token key alone on stdout. "
        "--key sets that key (32-40 letters, digits, '-' or '_'), for keys provisioned from a Secret; "
        "--rotate replaces the key with a new one."
    )

    def add_arguments(self, parser):
        parser.add_argument("node")
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--key", default=None, help="use this key instead of generating one")
        group.add_argument("--rotate", action="store_true", help="replace the agent's key with a new one")

    def handle(self, *args, **options):
        try:
            key = issue_agent_token(options["node"], key=options["key"], rotate=options["rotate"])
        except TokenRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(key)
