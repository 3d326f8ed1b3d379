"""`apitoken` and `agenttoken`: keys alone on stdout, roles as groups, agents bound to a node."""

from __future__ import annotations

import io
import logging
import re

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from .conftest import report_body, t4

pytestmark = pytest.mark.django_db

KEY = re.compile(r"[0-9a-f]{40}")


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def client(key: str) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return c


def test_apitoken_prints_the_key_alone_and_the_role_works():
    out = run("apitoken", "alice", "--role", "operator")
    key = out.strip()
    assert KEY.fullmatch(key) and out == key + "\n"
    user = User.objects.get(username="alice")
    assert list(user.groups.values_list("name", flat=True)) == ["operator"] and not user.has_usable_password()
    assert (
        client(key)
        .post(
            "/api/v1/pods/",
            {"name": "p", "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},
            format="json",
        )
        .status_code
        == 201
    )


def test_apitoken_keeps_the_key_changes_the_role_and_rotates_on_request():
    first = run("apitoken", "bob", "--role", "viewer").strip()
    again = run("apitoken", "bob", "--role", "admin").strip()
    assert again == first
    assert list(User.objects.get(username="bob").groups.values_list("name", flat=True)) == ["admin"]
    rotated = run("apitoken", "bob", "--role", "admin", "--rotate").strip()
    assert rotated != first and KEY.fullmatch(rotated)
    assert client(first).get("/api/v1/config/").status_code == 401
    assert client(rotated).get("/api/v1/config/").status_code == 200


@pytest.mark.parametrize(
    "args, message",
    [
        (["agent:node1", "--role", "admin"], "reserved for agents"),
        (["", "--role", "admin"], "USERNAME"),
    ],
)
def test_apitoken_refuses(args, message):
    with pytest.raises(CommandError, match=message):
        run("apitoken", *args)
    assert not User.objects.exists()


def test_apitoken_refuses_an_unknown_role():
    with pytest.raises(CommandError):
        run("apitoken", "carol", "--role", "root")


def test_agenttoken_is_bound_to_its_node():
    key = run("agenttoken", "gpu-node-7").strip()
    assert KEY.fullmatch(key)
    user = User.objects.get(username="agent:gpu-node-7")
    assert list(user.groups.values_list("name", flat=True)) == ["agent"]
    agent = client(key)
    assert (
        agent.post("/api/v1/agents/report/", report_body("gpu-node-7", t4("G", 0)), format="json").status_code
        == 200
    )
    assert (
        agent.post("/api/v1/agents/report/", report_body("gpu-node-8", t4("H", 0)), format="json").status_code
        == 403
    )
    assert agent.get("/api/v1/nodes/").status_code == 403
    assert run("agenttoken", "gpu-node-7").strip() == key


def test_agenttoken_with_a_provisioned_key():
    key = "k" * 20 + "-_" + "0123456789abcdef"
    assert run("agenttoken", "node1", "--key", key).strip() == key
    assert (
        client(key)
        .post("/api/v1/agents/report/", report_body("node1", t4("G", 0)), format="json")
        .status_code
        == 200
    )
    assert run("agenttoken", "node1", "--key", key).strip() == key  # idempotent for a Secret re-applied


@pytest.mark.parametrize(
    "args, message",
    [
        (["node1", "--key", "short"], "32 to 40"),
        (["node1", "--key", "x" * 41], "32 to 40"),
        (["node1", "--key", "a" * 31 + " " + "b"], "32 to 40"),
        (["node1", "--key", "a" * 32 + ":"], "32 to 40"),
        (["Node_1"], "not a Kubernetes node name"),
        (["node-"], "not a Kubernetes node name"),
    ],
)
def test_agenttoken_refuses_bad_input(args, message):
    with pytest.raises(CommandError, match=message):
        run("agenttoken", *args)
    assert not User.objects.exists()


def test_agenttoken_refuses_a_key_of_someone_else():
    key = run("apitoken", "dave", "--role", "viewer").strip()
    with pytest.raises(CommandError, match="another user"):
        run("agenttoken", "node1", "--key", key)
    assert client(key).get("/api/v1/config/").status_code == 200


def test_keys_never_reach_the_logs(caplog):
    key = run("apitoken", "erin", "--role", "viewer").strip()
    agent_key = run("agenttoken", "node1").strip()
    with caplog.at_level(logging.DEBUG):
        client(key).get("/api/v1/config/")
        client(key).delete("/api/v1/pods/default/x/")  # 403, logged by django.request
        client(agent_key).get("/api/v1/nodes/")  # 403
        client("f" * 40).get("/api/v1/nodes/")  # 401
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "Forbidden" in logged or "Unauthorized" in logged  # the requests were logged...
    assert key not in logged and agent_key not in logged and "f" * 40 not in logged  # ...without keys
