"""Probes for Kubernetes: `/healthz` says the process answers, `/readyz` that it can do its job.

Both are open (probes carry no token) and say nothing secret: only which dependency
is down. Ready means the database answers a query and the broker is reachable: Redis
answers PING when REDIS_URL is set, else the embedded filesystem broker's folders are
writable.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.conf import settings
from django.db import connection
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

PROBE_TIMEOUT_SECONDS = 2.0


def database_problem() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "not ready", never a 500
        return f"database unreachable: {type(exc).__name__}"
    return None


def broker_problem() -> str | None:
    redis_url = getattr(settings, "REDIS_URL", "")
    if redis_url:
        import redis

        try:
            client = redis.Redis.from_url(
                redis_url, socket_timeout=PROBE_TIMEOUT_SECONDS, socket_connect_timeout=PROBE_TIMEOUT_SECONDS
            )
            try:
                client.ping()
            finally:
                client.close()
        except Exception as exc:
            return f"redis unreachable: {type(exc).__name__}"
        return None
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {})
    folders = {
        folder
        for folder in (options.get("data_folder_in"), options.get("data_folder_out"))
        if folder is not None
    }
    for folder in sorted(folders):
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".readyz-"):
                pass
        except OSError as exc:
            return f"broker folder not writable: {exc.strerror or type(exc).__name__}"
    return None


_probe_body = inline_serializer(
    "Probe",
    {
        "status": serializers.ChoiceField(choices=["ok", "unavailable"]),
        "checks": serializers.DictField(child=serializers.CharField(), required=False),
    },
)


class Probe(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes: list = []


class Healthz(Probe):
    """The process is up and serving requests."""

    @extend_schema(operation_id="healthz", tags=["health"], responses={200: _probe_body}, auth=[])
    def get(self, request):
        return Response({"status": "ok"})


class Readyz(Probe):
    """The database and the broker are reachable; 503 names the one that is not."""

    @extend_schema(
        operation_id="readyz", tags=["health"], responses={200: _probe_body, 503: _probe_body}, auth=[]
    )
    def get(self, request):
        checks = {"database": database_problem() or "ok", "broker": broker_problem() or "ok"}
        ready = all(value == "ok" for value in checks.values())
        return Response(
            {"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503
        )
