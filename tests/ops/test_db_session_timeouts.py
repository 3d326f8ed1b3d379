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


def test_a_statement_a_session_runs_again_is_prepared_on_the_server(require_postgres):
    """HAMI_DB_PREPARE_AFTER (default 2): values bound by the server, and a statement of fixed
    shape run that often in one session kept prepared there, so it is parsed and planned once
    (the per-pod requests and the cycle's statements; issue 29)."""
    from scheduling.models import SchedulerConfig

    def prepared() -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            return [row[0] for row in cursor.fetchall()]

    for _ in range(3):
        SchedulerConfig.in_force()
    assert any("scheduling_schedulerconfig" in sql for sql in prepared())


def test_preparing_is_off_with_zero():
    import subprocess
    import sys

    from django.conf import settings

    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'hamiadmin.settings'); django.setup();"
        "from django.conf import settings; o = settings.DATABASES['default'].get('OPTIONS', {});"
        "print(o.get('server_side_binding'), o.get('prepare_threshold'))"
    )
    env = {"DATABASE_URL": "postgres://u@127.0.0.1:5432/x", "PATH": "/usr/bin:/bin"}
    base = str(settings.BASE_DIR)
    off = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "HAMI_DB_PREPARE_AFTER": "0"},
        cwd=base,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    on = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=base, capture_output=True, text=True, check=True
    ).stdout.split()
    assert (off, on) == (["None", "None"], ["True", "2"])
