"""Failed credentials, counted per client address and per credential: they block further
failures, never a right credential (issue 29: behind an Ingress every client shares one
address, and one client's typos must not lock out the others, nor an agent's reports).

- An **attempt** is a sign-in form sent (`POST` to the dashboard's or the admin's login page),
  or a request that presents a credential: an `Authorization` header (API token, extender or
  metrics bearer token) or an extender key in the path (`/extender/key/<token>/...`).
  Probes, anonymous pages and signed-in browsers are never attempts, so never throttled.
- A **failure** is a sign-in form refused (Django's `user_login_failed`), or a 401 answer to
  an attempt (a bad API token, extender token or metrics token).
- After AUTH_FAILURE_LIMIT failures of **one credential from one address** (the same token,
  or sign-ins as the same user name) within AUTH_FAILURE_WINDOW_SECONDS, that credential's
  further attempts from that address are answered 429 with Retry-After until the window
  (which starts at its first failure) ends: a sign-in as that user from there waits even
  with the right password (a password is short enough to guess). A token (API, extender,
  metrics) is looked up in the counters only once it failed (issue 29: no round trip for a
  right one), so a key that became right meanwhile goes on.
- After AUTH_FAILURE_LIMIT failures of **any credentials from one address**, every further
  failure from it is answered 429 with Retry-After instead of 401; a token that is right
  still passes (tokens are 32-40 random characters: guessing one is hopeless, so a right
  one is the owner's), and a sign-in as another user is still judged (the `login` rate
  limit bounds how fast an address may try names at all).

The client is REMOTE_ADDR: the settings trust no proxy header. Behind a proxy that does not
keep the client address, every client shares the proxy's (docs/deploy.md). A credential is
kept only as a digest. The counters live in the "shared" cache (Redis with REDIS_URL, so
every process counts together; this process's memory otherwise). A cache that fails lets the
request through: throttling is a brake, not a gate.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time

from django.conf import settings
from django.core.cache import caches
from django.http import JsonResponse
from django.urls import reverse

from scheduling.ops import metrics

log = logging.getLogger("hamiadmin.auth")

_PREFIX = "auth-failures:"
_cache_trouble_logged = float("-inf")  # monotonic time starts near 0 on a fresh machine


def _limits() -> tuple[int, int]:
    options = settings.HAMIADMIN
    return int(options.get("AUTH_FAILURE_LIMIT", 10)), max(
        1, int(options.get("AUTH_FAILURE_WINDOW_SECONDS", 300))
    )


def client_of(request) -> str:
    return request.META.get("REMOTE_ADDR") or "unknown"


def attempt_kind(request) -> str | None:
    """What credential the request presents, as a metrics label; None when it presents none."""
    path = request.path_info
    if request.method == "POST" and path in (reverse("login"), reverse("admin:login")):
        return "admin" if path == reverse("admin:login") else "login"
    if path.startswith("/extender/"):
        return (
            "extender" if path.startswith("/extender/key/") or "HTTP_AUTHORIZATION" in request.META else None
        )
    if not request.META.get("HTTP_AUTHORIZATION"):
        return None
    return "metrics" if path == "/metrics" else "api"


def _keys(scope: str) -> tuple[str, str]:
    return f"{_PREFIX}{scope}", f"{_PREFIX}{scope}:until"


def credential_of(request, kind: str) -> str:
    """A digest of the credential the attempt presents: the user name of a sign-in form, the
    `Authorization` header, or the extender key in the path."""
    if kind in ("login", "admin"):
        text = "user:" + str(request.POST.get("username", "")).strip().lower()
    elif kind == "extender" and request.path_info.startswith("/extender/key/"):
        text = "key:" + request.path_info.split("/", 4)[3]
    else:
        text = "header:" + request.META.get("HTTP_AUTHORIZATION", "")
    return hashlib.sha256(text.encode(errors="replace")).hexdigest()[:32]


def pair(client: str, credential: str) -> str:
    """The counter scope of one credential from one address."""
    return f"{client}|{credential}"


def _cache_failed(exc: Exception) -> None:
    global _cache_trouble_logged
    if time.monotonic() - _cache_trouble_logged > 60:
        _cache_trouble_logged = time.monotonic()
        log.warning("failed-credential counters unavailable, not throttling: %s", type(exc).__name__)


def retry_after(scope: str) -> int:
    """Seconds until `scope` (an address, or `pair(address, credential)`) is out of its
    block; 0 when it is not blocked."""
    return retry_afters(scope)[0]


def retry_afters(*scopes: str) -> list[int]:
    """`retry_after` of each scope, read in one round trip."""
    limit, _ = _limits()
    if limit <= 0:
        return [0] * len(scopes)
    keys = [_keys(scope) for scope in scopes]
    try:
        found = caches["shared"].get_many([key for pair_of_keys in keys for key in pair_of_keys])
    except Exception as exc:  # noqa: BLE001 - fail open, see the module docstring
        _cache_failed(exc)
        return [0] * len(scopes)
    return [
        0
        if int(found.get(count_key) or 0) < limit
        else max(1, math.ceil(float(found.get(until_key) or 0) - time.time()))
        for count_key, until_key in keys
    ]


def record_failure(client: str, kind: str, credential: str = "") -> int:
    """Count one failed credential of `client` (and of that credential from it); the failures
    of the address in its window so far."""
    metrics.auth_failed(kind)
    if credential:
        _count(pair(client, credential), kind, quiet=True)
    return _count(client, kind)


def _count(scope: str, kind: str, quiet: bool = False) -> int:
    limit, window = _limits()
    if limit <= 0:
        return 0
    client = scope
    count_key, until_key = _keys(scope)
    cache = caches["shared"]
    try:
        cache.add(until_key, time.time() + window, window)
        cache.add(count_key, 0, window)
        try:
            count = cache.incr(count_key)
        except ValueError:  # the window ended between add and incr
            cache.set(count_key, 1, window)
            count = 1
    except Exception as exc:  # noqa: BLE001
        _cache_failed(exc)
        return 0
    if count == limit and not quiet:
        log.warning(
            "%d failed credentials from %s within %d s: its further failures are 429 until the window ends",
            count,
            client,
            window,
            extra={"client": client, "kind": kind, "failures": count},
        )
    return count


def signed_in_failed(sender, credentials=None, request=None, **kwargs) -> None:
    """`user_login_failed`: a sign-in form (dashboard or admin) was refused."""
    if request is not None:
        kind = attempt_kind(request) or "login"
        record_failure(client_of(request), kind, credential_of(request, kind))


class FailedCredentialsThrottle:
    """Middleware: refuses a credential that failed too often from this address, turns the
    failures of an address that failed too often into 429s, and counts the 401s."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        kind = attempt_kind(request)
        if kind is None:
            return self.get_response(request)
        client = client_of(request)
        credential = credential_of(request, kind)
        if kind in SIGN_INS:  # a password: its block holds even when it is right
            wait = retry_after(pair(client, credential))
            if wait:
                return _refused(kind, wait)
        response = self.get_response(request)
        if response.status_code == 401:
            # A token is looked at only once it failed (a right one costs no round trip):
            # one that failed too often from here waits, uncounted; else the address decides.
            blocked, wait = retry_afters(pair(client, credential), client)
            if blocked and kind not in SIGN_INS:
                return _refused(kind, blocked)
            record_failure(client, kind, credential)
            if wait:
                return _refused(kind, wait)
        return response


#: The attempts that present a password (`attempt_kind`): checked before they are judged.
SIGN_INS = ("login", "admin")


def _refused(kind: str, wait: int) -> JsonResponse:
    metrics.auth_throttled(kind)
    answer = JsonResponse(
        {"detail": f"Too many failed credentials from this address; try again in {wait} s."},
        status=429,
    )
    answer["Retry-After"] = str(wait)
    return answer
