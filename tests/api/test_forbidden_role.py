"""A 403 names the role needed and the one held, so the operator knows which group to ask for;
an agent token is told it may only report its own node."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from .conftest import gpu_pod, report_body, t4, token_client

pytestmark = pytest.mark.django_db


def detail(answer) -> str:
    assert answer.status_code == 403, (answer.status_code, answer.content)
    return answer.json()["detail"]


def test_a_viewer_writing_is_told_the_operator_role_is_needed(viewer):
    said = detail(viewer.post("/api/v1/pods/", gpu_pod("sneaky"), format="json"))
    assert said == "this needs the operator role; your role is viewer"


def test_an_operator_changing_the_config_is_told_admin_is_needed(operator):
    said = detail(operator.patch("/api/v1/config/", {"gpu_scheduler_policy": "binpack"}, format="json"))
    assert said == "this needs the admin role; your role is operator"


def test_an_account_without_a_role_is_told_which_group_to_join(client_for):
    user = User.objects.create_user("nobody")
    said = detail(token_client(Token.objects.create(user=user).key).get("/api/v1/nodes/"))
    assert said.startswith("this needs the viewer role; your account has no role")
    assert "viewer group" in said


@pytest.mark.parametrize("method, path", [("get", "/api/v1/nodes/"), ("post", "/api/v1/pods/")])
def test_an_agent_token_is_told_it_may_only_report(client_for, method, path):
    agent = client_for("agent:node1")
    said = detail(getattr(agent, method)(path, gpu_pod("p") if method == "post" else None, format="json"))
    assert "an agent token may only report its own node" in said
    assert "/api/v1/agents/report/" in said


def test_a_role_token_reporting_inventory_is_told_only_agents_report(operator):
    said = detail(operator.post("/api/v1/agents/report/", report_body("node1", t4("G", 0)), format="json"))
    assert said == "only an agent token may report inventory; this token has the operator role"


def test_the_refusal_for_a_read_names_the_read_role(client_for):
    """Reads need only viewer: an agent reading is told viewer, not operator."""
    said = detail(client_for("agent:node1").get("/api/v1/pods/"))
    assert said.startswith("this needs the viewer role;")
