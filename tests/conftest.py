"""Shared fixtures. Service-backed tests skip when a service is missing, unless
REQUIRE_SERVICES=1 (as in CI), which turns the skip into a failure."""

import os
import socket
import threading
from contextlib import contextmanager
from urllib.parse import urlparse

import pytest
from django.conf import settings

REQUIRE_SERVICES = os.environ.get("REQUIRE_SERVICES") == "1"


def missing_service(message: str):
    if REQUIRE_SERVICES:
        pytest.fail(f"REQUIRE_SERVICES=1 but {message}")
    pytest.skip(message)


def _reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=1
        ):
            return True
    except OSError:
        return False


@pytest.fixture
def redis_url():
    """A reachable Redis URL (REDIS_URL), or skip/fail."""
    url = os.environ.get("REDIS_URL", "")
    if not url:
        missing_service("REDIS_URL is not set")
    if not _reachable(url, 6379):
        missing_service(f"Redis at {url} is not reachable")
    return url


@pytest.fixture
def require_postgres():
    """Skip/fail unless the test database is PostgreSQL."""
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        missing_service("DATABASE_URL does not point at PostgreSQL")


def clear_shared_cache() -> None:
    """Empty the "shared" cache (failed-credential counters, queued simulations and their rate):
    this process's memory, or only the Django cache's own keys in Redis (never the broker's)."""
    from django.core.cache import caches
    from django.core.cache.backends.redis import RedisCache

    shared = caches["shared"]
    if not isinstance(shared, RedisCache):
        shared.clear()
        return
    client = shared._cache.get_client(write=True)
    keys = list(client.scan_iter(shared.make_key("*")))
    if keys:
        client.delete(*keys)


@pytest.fixture(autouse=True)
def fresh_shared_cache():
    """Every test starts with no failed credentials counted against 127.0.0.1 (the test
    client's address) and no queued simulations; skipped when Redis is configured but down."""
    from redis.exceptions import RedisError

    try:
        clear_shared_cache()
    except (OSError, RedisError):
        pass
    yield


@pytest.fixture(autouse=True)
def no_standing_snapshot():
    """Every test's first cycle reads the cluster whole and looks at the capacity version: a
    snapshot kept from another test's database (rolled back, its ids reused on SQLite) is not
    this test's cluster, nor is the version it woke pods for."""
    from scheduling.pipeline.standing import STANDING
    from scheduling.pipeline.wake import SEEN

    STANDING.clear()
    SEEN.version = None  # another test's database had its own capacity versions
    yield


#: Tables a flush between transactional tests leaves as they are: what Django's post-migrate
#: handlers (content types, permissions) would write back at once, the same for every test.
KEPT_BY_FLUSH = frozenset({"django_content_type", "auth_permission"})


@pytest.fixture(scope="session", autouse=True)
def quick_flush_on_postgres():
    """On PostgreSQL, a transactional test's teardown empties the tables with `DELETE` under
    deferred constraints instead of `TRUNCATE`, keeps content types and permissions, and so
    skips the post-migrate signal that would only write them back: ~0.3 s of teardown a test
    (TRUNCATE takes every table's exclusive lock and new files; the signal ~30 queries) for
    the ~380 tests that flush. Sequences are not reset either way."""
    from django.core.management.commands import flush
    from django.db.backends.postgresql.operations import DatabaseOperations

    original_sql_flush = DatabaseOperations.sql_flush
    original_signal = flush.emit_post_migrate_signal
    kept = {"tables": False}  # whether the last flush left content types and permissions

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        kept["tables"] = not (reset_sequences or allow_cascade or not tables)
        if not kept["tables"]:
            return original_sql_flush(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        emptied = [table for table in tables if table not in KEPT_BY_FLUSH]
        return ["SET CONSTRAINTS ALL DEFERRED"] + [f"DELETE FROM {self.quote_name(t)}" for t in emptied]

    def emit_post_migrate_signal(verbosity, interactive, db, **kwargs):
        if not kept["tables"]:  # TRUNCATEd (or not PostgreSQL): written back as Django does
            original_signal(verbosity, interactive, db, **kwargs)

    DatabaseOperations.sql_flush = sql_flush
    flush.emit_post_migrate_signal = emit_post_migrate_signal
    yield
    DatabaseOperations.sql_flush = original_sql_flush
    flush.emit_post_migrate_signal = original_signal


@contextmanager
def held_elsewhere(take, seconds: float = 30.0, what: str = "the rows"):
    """`take()` run in a transaction of another connection (a writer on a thread of its own),
    which stays open from the block's start until its end, or `seconds` at most: the rows
    `take` locked or wrote are held so long."""
    from django.db import connection, transaction

    held, done = threading.Event(), threading.Event()

    def hold():
        try:
            with transaction.atomic():
                take()
                held.set()
                done.wait(seconds)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10), f"{what} not held"
        yield
    finally:
        done.set()
        holder.join(10)


def pod_row_held(name: str, seconds: float = 30.0):
    """The pod's row held `FOR UPDATE` by another connection from the block's start until its
    end, or `seconds` at most (`held_elsewhere`)."""
    from scheduling.models import Pod

    return held_elsewhere(
        lambda: Pod.objects.select_for_update().get(name=name), seconds, f"the row of pod {name}"
    )
