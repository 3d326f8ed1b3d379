"""Bounded waits on row locks for the web tier (issue 29).

A request that needs a row a scheduling commit (or any other writer) holds waits at most
HAMI_DB_WEB_LOCK_TIMEOUT_MS (500 ms) on PostgreSQL's `lock_timeout`, set on each web
connection once, then answers 503 with `Retry-After: 1` naming what it waited on: a stalled
commit costs its own pods a retry, never a web thread for the commit's whole length. Other
sessions (workers, the Kubernetes agent) keep the longer session default
(HAMI_DB_LOCK_TIMEOUT_MS, settings) and the commit its own (`pipeline.commit`).
"""

from __future__ import annotations

import weakref

from django.conf import settings
from django.db import connection
from django.http import JsonResponse

from scheduling.dbretry import lock_wait_ran_out

_limited: weakref.WeakSet = weakref.WeakSet()


class BoundedLockWaits:
    def __init__(self, get_response):
        self.get_response = get_response
        self.milliseconds = int(getattr(settings, "DB_WEB_LOCK_TIMEOUT_MS", 0) or 0)

    def __call__(self, request):
        if self.milliseconds > 0 and connection.vendor == "postgresql":
            # at the request's first query, not before: a request that reads nothing (the
            # schema, a static file) opens no connection for it
            with connection.execute_wrapper(self._limit_first):
                return self.get_response(request)
        return self.get_response(request)

    def _limit_first(self, execute, sql, params, many, context):
        """Set this web connection's `lock_timeout` once per database session. Inside a
        transaction a SET would be undone with it, so there it is set for that transaction
        alone (`SET LOCAL`) until a query outside one sets it for good."""
        wrapper = context["connection"]
        raw = wrapper.connection
        try:
            done = raw in _limited
        except TypeError:  # a driver object that takes no weak references: set it every time
            done = False
        if not done:
            scope = "LOCAL " if wrapper.in_atomic_block else ""
            with raw.cursor() as cursor:
                cursor.execute(f"SET {scope}lock_timeout = {int(self.milliseconds)}")
            if not scope:
                try:
                    _limited.add(raw)
                except TypeError:
                    pass
        return execute(sql, params, many, context)

    def process_exception(self, request, exception):
        if not lock_wait_ran_out(exception):
            return None
        answer = JsonResponse(
            {
                "detail": (
                    f"A row this request writes was held by another writer (a scheduling commit)"
                    f" for more than {self.milliseconds} ms (HAMI_DB_WEB_LOCK_TIMEOUT_MS); nothing"
                    " was written. Try again."
                ),
                "code": "lock_timeout",
            },
            status=503,
        )
        answer["Retry-After"] = "1"
        return answer
