"""Rate limits across endpoints, beside the per-endpoint scopes the views name
(`agent-report`, `pod-submit`, `simulate`).

- `TokenWriteThrottle` (scope `token-writes`, HAMI_THROTTLE_TOKEN_WRITES): every write
  (POST, PUT, PATCH, DELETE) authenticated by an API token, counted per token user whatever
  the endpoint, so a leaked or runaway token cannot rewrite the cluster faster than that.
  Browsers (session writes, CSRF-checked) and reads are not counted.
- `LoginThrottle` (scope `login`, HAMI_THROTTLE_LOGIN): sign-in forms sent to the
  dashboard, per client address, right password or wrong. The failed-credentials throttle
  (hamiadmin/auth_failures.py) blocks an address after repeated failures; this one bounds
  how fast any address may try at all.

Both count in the "shared" cache (Redis with REDIS_URL), so N gunicorn workers together
allow the rate once, not N times; without Redis it is this process's memory. An answer over
the limit is 429 with Retry-After.
"""

from __future__ import annotations

import logging
import math
from typing import cast

from django.core.cache import BaseCache, caches
from django.core.cache.backends.redis import RedisCache
from django.utils.connection import ConnectionProxy
from redis.exceptions import RedisError
from rest_framework.authentication import TokenAuthentication
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import SimpleRateThrottle

log = logging.getLogger("hamiadmin.api")


class SharedRateThrottle(SimpleRateThrottle):
    """A sliding-window count that every process shares: one atomic increment (Redis INCR)
    of this window's counter per request, plus the previous window's counter weighted by how
    much of it still overlaps the last `duration` seconds. DRF's own throttles read a list,
    append and write it back, which loses counts when two processes do so at once.

    A refused request is not counted (as DRF's), and a cache that fails lets the request
    through: throttling is a brake, not a gate (as hamiadmin/auth_failures.py)."""

    #: The shared cache, looked up per use (a proxy that behaves as the cache it stands for).
    cache = cast(BaseCache, ConnectionProxy(caches, "shared"))
    #: Set from the rate by DRF's `__init__` (not declared in its stubs).
    num_requests: int
    duration: int

    def allow_request(self, request, view) -> bool:
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        self.now = self.timer()
        window, into = divmod(self.now, self.duration)
        current = f"{self.key}:{int(window)}"
        try:
            self.count, self.before = self.counted(current, f"{self.key}:{int(window) - 1}")
        except (OSError, RedisError, ValueError) as trouble:
            log.warning("rate limit %s not counted: the shared cache failed (%s)", self.scope, trouble)
            return True
        self.overlap = 1 - into / self.duration
        if self.before * self.overlap + self.count <= self.num_requests:
            return True
        try:
            self.cache.decr(current)
        except (OSError, RedisError, ValueError):
            pass
        return False

    def counted(self, current: str, previous: str) -> tuple[int, int]:
        """This window's count with this request added, and the previous window's count. On
        Redis one pipelined round trip (SET NX with the expiry, INCR, GET) where the cache API
        takes four (add, incr's EXISTS and INCRBY, get): it runs on every API write."""
        cache = caches["shared"] if isinstance(self.cache, ConnectionProxy) else self.cache
        timeout = 2 * self.duration + 1
        if not isinstance(cache, RedisCache):
            cache.add(current, 0, timeout=timeout)
            return cache.incr(current), int(cache.get(previous) or 0)
        key, before_key = cache.make_and_validate_key(current), cache.make_and_validate_key(previous)
        pipe = cache._cache.get_client(key, write=True).pipeline(transaction=False)
        pipe.set(key, 0, ex=timeout, nx=True)
        pipe.incr(key)
        pipe.get(before_key)
        _, count, before = pipe.execute()
        return int(count), int(before or 0)

    def wait(self) -> float | None:
        """Seconds until one more request fits: until this window ends when it alone is
        full, else until enough of the previous window has slid out."""
        into = (1 - self.overlap) * self.duration
        if self.count > self.num_requests or not self.before:
            return self.duration - into
        needed = 1 - (self.num_requests - self.count) / self.before
        return max(0.0, needed * self.duration - into)


class TokenWriteThrottle(SharedRateThrottle):
    scope = "token-writes"

    def get_cache_key(self, request, view):
        if request.method in SAFE_METHODS:
            return None
        if not isinstance(getattr(request, "successful_authenticator", None), TokenAuthentication):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


class LoginThrottle(SharedRateThrottle):
    scope = "login"

    def get_cache_key(self, request, view):
        if request.method != "POST":
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


def retry_after(throttle: SimpleRateThrottle) -> str:
    """The Retry-After header of a refusal: whole seconds, at least 1."""
    return str(max(1, math.ceil(throttle.wait() or 1)))
