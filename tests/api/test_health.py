"""Probes without credentials, and the production settings passing `check --deploy`."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def test_healthz_answers_without_credentials(client):
    answer = client.get("/healthz")
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}


def test_readyz_checks_the_database_and_the_embedded_broker(client, settings, tmp_path):
    settings.REDIS_URL = ""
    folder = tmp_path / "broker" / "queue"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(folder), "data_folder_out": str(folder)}
    answer = client.get("/readyz")
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"status": "ok", "checks": {"database": "ok", "broker": "ok"}}


def test_readyz_is_503_when_the_broker_folder_cannot_be_written(client, settings, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    settings.REDIS_URL = ""
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(blocker / "queue")}
    answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["checks"]["database"] == "ok"
    assert answer.json()["checks"]["broker"].startswith("broker folder not writable")


def test_readyz_is_503_when_redis_does_not_answer(client, settings):
    with __import__("socket").socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    answer = client.get("/readyz")
    assert answer.status_code == 503 and answer.json()["checks"]["broker"].startswith("redis unreachable")


def test_readyz_pings_redis(client, settings, redis_url):
    settings.REDIS_URL = redis_url
    assert client.get("/readyz").json() == {"status": "ok", "checks": {"database": "ok", "broker": "ok"}}


def test_readyz_is_503_when_the_database_is_down(client, monkeypatch):
    from django.db import connection

    def refuse(*args, **kwargs):
        raise connection.Database.OperationalError("connection refused")

    monkeypatch.setattr(connection, "cursor", refuse)
    answer = client.get("/readyz")
    assert (
        answer.status_code == 503
        and answer.json()["checks"]["database"] == "database unreachable: OperationalError"
    )


@pytest.mark.slow
def test_production_settings_pass_check_deploy(tmp_path):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DEBUG", "DJANGO_SETTINGS_MODULE", "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS"}
    }
    env.update(
        HAMIADMIN_ENV="production",
        SECRET_KEY=secrets.token_urlsafe(60),
        ALLOWED_HOSTS="hamiadmin.example",
        HAMIADMIN_VAR_DIR=str(tmp_path),
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.slow
def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "SECRET_KEY"}
    env.update(HAMIADMIN_ENV="production", ALLOWED_HOSTS="x", HAMIADMIN_VAR_DIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0 and "SECRET_KEY" in result.stderr
