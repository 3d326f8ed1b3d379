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

Both count in this process's memory (the "default" cache), as DRF's scoped throttles do; an
answer over the limit is 429 with Retry-After.
"""

from __future__ import annotations

import math

from rest_framework.authentication import TokenAuthentication
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import SimpleRateThrottle


class TokenWriteThrottle(SimpleRateThrottle):
    scope = "token-writes"

    def get_cache_key(self, request, view):
        if request.method in SAFE_METHODS:
            return None
        if not isinstance(getattr(request, "successful_authenticator", None), TokenAuthentication):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


class LoginThrottle(SimpleRateThrottle):
    scope = "login"

    def get_cache_key(self, request, view):
        if request.method != "POST":
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


def retry_after(throttle: SimpleRateThrottle) -> str:
    """The Retry-After header of a refusal: whole seconds, at least 1."""
    return str(max(1, math.ceil(throttle.wait() or 1)))
