"""What an API token stands for is kept per process for HAMI_TOKEN_CACHE_SECONDS
(scheduling/api/authentication.py): a second request reads neither the token nor the
user's groups, and a token revoked or a role changed in this process applies at once."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token

from scheduling.api.tokens import issue_role_token

from .conftest import token_client

pytestmark = pytest.mark.django_db


def reads_of_the_token(client, path: str = "/api/v1/nodes/") -> tuple[int, int]:
    """(status, how many statements read the token or the user's groups) of one request."""
    with CaptureQueriesContext(connection) as queries:
        status = client.get(path).status_code
    sent = [q["sql"] for q in queries.captured_queries]
    return status, sum('FROM "authtoken_token"' in sql or 'FROM "auth_group"' in sql for sql in sent)


def test_a_token_is_read_once_and_then_kept(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "TOKEN_CACHE_SECONDS": 60}
    client = token_client(issue_role_token("alice", "viewer"))
    assert reads_of_the_token(client) == (200, 2)  # the token with its user, then the groups
    assert reads_of_the_token(client) == (200, 0)


def test_without_the_cache_every_request_reads_the_token(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "TOKEN_CACHE_SECONDS": 0}
    client = token_client(issue_role_token("alice", "viewer"))
    assert reads_of_the_token(client) == (200, 2)
    assert reads_of_the_token(client) == (200, 2)


def test_a_revoked_token_is_refused_at_once(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "TOKEN_CACHE_SECONDS": 60}
    key = issue_role_token("alice", "viewer")
    client = token_client(key)
    assert client.get("/api/v1/nodes/").status_code == 200
    Token.objects.filter(key=key).delete()
    assert client.get("/api/v1/nodes/").status_code == 401


def test_a_lowered_role_applies_at_once(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "TOKEN_CACHE_SECONDS": 60}
    client = token_client(issue_role_token("alice", "operator"))
    body = {"name": "p", "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    assert client.post("/api/v1/pods/", body, format="json").status_code == 201
    issue_role_token("alice", "viewer")  # the groups change: this process forgets the token
    answer = client.post("/api/v1/pods/", {**body, "name": "q"}, format="json")
    assert answer.status_code == 403, answer.content
    assert "your role is viewer" in answer.json()["detail"]


def test_a_deactivated_user_is_refused_at_once(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "TOKEN_CACHE_SECONDS": 60}
    client = token_client(issue_role_token("alice", "viewer"))
    assert client.get("/api/v1/nodes/").status_code == 200
    user = Token.objects.get(user__username="alice").user
    user.is_active = False
    user.save(update_fields=["is_active"])
    assert client.get("/api/v1/nodes/").status_code == 401
