"""Bounded waits on row locks for the web tier (issue 29).

A request that needs a row a scheduling commit (or any other writer) holds waits at most
HAMI_DB_WEB_LOCK_TIMEOUT_MS (500 ms) on PostgreSQL's `lock_timeout`, set on each web
connection once, then answers 503 with `Retry-After: 1` naming what it waited on: a stalled
commit costs its own pods a retry, never a web thread for the commit's whole length (a
release does not wait for the cards a commit holds at all: `scheduling.pipeline.settle`). Other
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
        if self.milliseconds <= 0 or connection.vendor != "postgresql":
            return self.get_response(request)
        done = False

        def limit_first(execute, sql, params, many, context):
            # at the request's first query, not before: a request that reads nothing (the
            # schema, a static file) opens no connection for it
            nonlocal done
            if not done:
                done = True
                self._limit(context["connection"])
            return execute(sql, params, many, context)

        with connection.execute_wrapper(limit_first):
            return self.get_response(request)

    def _limit(self, wrapper) -> None:
        """Set this web connection's `lock_timeout` once per database session. Inside a
        transaction a SET would be undone with it, so there it is set for that transaction
        alone (`SET LOCAL`) and again by the next request. Best effort: a failure here is
        left to the request's own query to meet and report."""
        raw = wrapper.connection
        try:
            if raw in _limited:
                return
        except TypeError:  # a driver object that takes no weak references: set it every time
            pass
        local = wrapper.in_atomic_block
        try:
            with raw.cursor() as cursor:
                cursor.execute(f"SET {'LOCAL ' if local else ''}lock_timeout = {int(self.milliseconds)}")
        except Exception:  # noqa: BLE001 - the request's own query says what is wrong
            return
        if not local:
            try:
                _limited.add(raw)
            except TypeError:
                pass

    def process_exception(self, request, exception):
        if not lock_wait_ran_out(exception):
            return None
        answer = JsonResponse(
            {
                "detail": (
                    f"A row this request writes was held by another writer (a scheduling commit or another request)"
                    f" for more than {self.milliseconds} ms (HAMI_DB_WEB_LOCK_TIMEOUT_MS); nothing"
                    " was written. Try again."
                ),
                "code": "lock_timeout",
            },
            status=503,
        )
        answer["Retry-After"] = "1"
        return answer
