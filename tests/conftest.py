"""Shared fixtures. Service-backed tests skip when a service is missing, unless
REQUIRE_SERVICES=1 (as in CI), which turns the skip into a failure."""

import os
import socket
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
