"""A PostgreSQL session left idle inside a transaction (a worker stopped mid-commit, a full
pipe) is ended by the server after `HAMI_DB_IDLE_IN_TRANSACTION_SECONDS`, so the locks it
holds come free (issue 29)."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_session_carries_the_idle_in_transaction_timeout(require_postgres):
    with connection.cursor() as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        assert cursor.fetchone()[0] == "1min"
