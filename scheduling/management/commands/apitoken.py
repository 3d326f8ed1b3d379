"""`manage.py apitoken USERNAME --role ROLE`: a token for a person or tool; prints the key alone."""

from django.core.management.base import BaseCommand, CommandError

from scheduling.api.tokens import TokenRefused, issue_role_token
from scheduling.roles import ROLES


class Command(BaseCommand):
    help = (
        "Create USERNAME if needed, give it the role (viewer, operator, admin) and print its API "
        "token key alone on stdout. The existing key is kept unless --rotate."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=ROLES)
        parser.add_argument("--rotate", action="store_true", help="replace the user's key with a new one")

    def handle(self, *args, **options):
        try:
            key = issue_role_token(options["username"], options["role"], rotate=options["rotate"])
        except TokenRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(key)
