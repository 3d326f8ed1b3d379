"""API tokens, looked up once per token and process for a few seconds (issue 29).

DRF's `TokenAuthentication` reads the token and its user on every request, and the role
check (`scheduling.roles.role_of`) reads the user's groups after it: two queries of the
six a pod submission made. `CachedTokenAuthentication` keeps what a key stood for (the
user, its role already read) in this process's memory for HAMI_TOKEN_CACHE_SECONDS (5 s;
0: no cache). Each request gets its own copy of the user.

A token deleted or rotated, a user deactivated or given other groups clears this process's
entries at once (model signals); other processes (gunicorn's other workers) see the change
within HAMI_TOKEN_CACHE_SECONDS. A key that fails is never kept: every wrong key is read,
and counted by the failed-credentials throttle (hamiadmin/auth_failures.py), as before.
"""

from __future__ import annotations

import copy
import threading
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models.signals import m2m_changed, post_delete, post_save
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from scheduling.roles import role_of

_known: dict[str, tuple[float, object, Token]] = {}
_guard = threading.Lock()
#: Entries kept at most; past it the table starts again empty (a flood of distinct right
#: keys is not a thing a cluster has).
MAX_KEPT = 10_000


def token_cache_seconds() -> float:
    return float(settings.HAMIADMIN.get("TOKEN_CACHE_SECONDS", 0) or 0)


def forget_tokens(**_signal) -> None:
    """Every entry of this process dropped: a token, user or group membership changed."""
    with _guard:
        _known.clear()


class CachedTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <key>`, as DRF's, with the key's user (and role) kept for
    HAMI_TOKEN_CACHE_SECONDS per process."""

    def authenticate_credentials(self, key):
        seconds = token_cache_seconds()
        if seconds <= 0:
            return super().authenticate_credentials(key)
        now = time.monotonic()
        found = _known.get(key)
        if found is not None and found[0] > now:
            return copy.copy(found[1]), found[2]  # a shallow copy: a request's own attributes stay its own
        user, token = super().authenticate_credentials(key)
        role_of(user)  # read once here, kept with the user (`_hami_role`)
        with _guard:
            if len(_known) >= MAX_KEPT:
                _known.clear()
            _known[key] = (now + seconds, user, token)
        return copy.copy(user), token


post_save.connect(forget_tokens, sender=Token, dispatch_uid="hami-token-saved")
post_delete.connect(forget_tokens, sender=Token, dispatch_uid="hami-token-deleted")
post_save.connect(forget_tokens, sender=get_user_model(), dispatch_uid="hami-user-saved")
post_delete.connect(forget_tokens, sender=get_user_model(), dispatch_uid="hami-user-deleted")
m2m_changed.connect(
    forget_tokens, sender=get_user_model().groups.through, dispatch_uid="hami-user-groups-changed"
)
