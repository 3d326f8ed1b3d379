"""The OpenAPI schema documents every endpoint, the docs need no internet, and no generated
request (schemathesis, property-based, as admin) makes the API answer 500."""

from __future__ import annotations

import inspect
import io

import pytest
import schemathesis
import yaml
from django.core.management import call_command
from hypothesis import HealthCheck, settings

from scheduling.api.tokens import issue_agent_token, issue_role_token
from scheduling.api.views import RoleView
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod, report_body, t4

EXAMPLES_PER_OPERATION = 30


def schema_document() -> dict:
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    return yaml.safe_load(out.getvalue())


ENDPOINTS = {
    "/api/v1/": {"get"},
    "/api/v1/agents/report/": {"post"},
    "/api/v1/nodes/": {"get"},
    "/api/v1/nodes/{name}/": {"get"},
    "/api/v1/cards/": {"get"},
    "/api/v1/cards/{uuid}/": {"get"},
    "/api/v1/cards/{uuid}/cordon/": {"post"},
    "/api/v1/cards/{uuid}/uncordon/": {"post"},
    "/api/v1/cards/{uuid}/reassign/": {"post"},
    "/api/v1/pods/": {"get", "post"},
    "/api/v1/pods/bulk/": {"post"},
    "/api/v1/pods/bulk/release/": {"post"},
    "/api/v1/pods/{namespace}/{name}/": {"get", "delete"},
    "/api/v1/pods/{namespace}/{name}/complete/": {"post"},
    "/api/v1/pods/{namespace}/{name}/decision/": {"get"},
    "/api/v1/pending/": {"get"},
    "/api/v1/events/": {"get"},
    "/api/v1/decisions/": {"get"},
    "/api/v1/decisions/{id}/": {"get"},
    "/api/v1/allocations/": {"get"},
    "/api/v1/allocations/{id}/": {"get"},
    "/api/v1/cycles/": {"get"},
    "/api/v1/cycles/{id}/": {"get"},
    "/api/v1/evictions/": {"get"},
    "/api/v1/evictions/{id}/": {"get"},
    "/api/v1/simulate/": {"post"},
    "/api/v1/simulate/{job}/": {"get"},
    "/api/v1/whatif/": {"post"},
    "/api/v1/capacity/": {"get"},
    "/api/v1/history/samples/": {"get"},
    "/api/v1/config/": {"get", "put", "patch"},
    "/api/v1/queues/": {"get", "post"},
    "/api/v1/queues/{name}/": {"get", "patch", "delete"},
    "/api/v1/podgroups/": {"get", "post"},
    "/api/v1/podgroups/{namespace}/{name}/": {"get", "patch"},
    "/api/v1/namespacequotas/": {"get", "post"},
    "/api/v1/namespacequotas/{namespace}/{name}/": {"get", "patch", "delete"},
    "/healthz": {"get"},
    "/readyz": {"get"},
}


def test_schema_is_valid_and_documents_every_endpoint():
    document = schema_document()
    assert document["openapi"].startswith("3.")
    documented = {
        path: set(methods) - {"parameters"}
        for path, methods in document["paths"].items()
        if path.startswith("/api/v1/") or path in ("/healthz", "/readyz")
    }
    assert documented == ENDPOINTS
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            assert operation.get("description") or operation.get("summary") or path.endswith("/"), (
                path,
                method,
            )
            assert any(code.startswith("2") for code in operation["responses"]), (path, method)
    pods = document["paths"]["/api/v1/pods/"]["post"]
    assert "PodSubmitRequest" in str(pods["requestBody"]) and "201" in pods["responses"]
    assert {"tokenAuth", "cookieAuth"} <= set(document["components"]["securitySchemes"])


def test_every_operation_is_described_by_its_own_view():
    """Not empty, and not a base class's docstring (the role mixin's) standing in for the view's."""
    inherited = inspect.cleandoc(RoleView.__doc__)
    for path, methods in schema_document()["paths"].items():
        for method, operation in methods.items():
            if method == "parameters":
                continue
            description = (operation.get("description") or "").strip()
            assert description and description != inherited, (path, method)


@pytest.mark.django_db
def test_docs_pages_load_their_assets_locally(client):
    for path in ("/api/docs/", "/api/redoc/"):
        page = client.get(path).content.decode()
        assert "drf_spectacular_sidecar" in page, path
        assert "cdn.jsdelivr.net" not in page and "unpkg.com" not in page, path


@pytest.fixture
def admin_key(db):
    """A cluster with a placed pod, a pending pod and a cycle, and an admin's key."""
    for name, cards in {"node1": [t4("GPU-1-0", 0), t4("GPU-1-1", 1)], "node2": [t4("GPU-2-0", 0)]}.items():
        from rest_framework.test import APIClient

        agent = APIClient()
        agent.credentials(HTTP_AUTHORIZATION=f"Token {issue_agent_token(name)}")
        assert (
            agent.post("/api/v1/agents/report/", report_body(name, *cards), format="json").status_code == 200
        )
    key = issue_role_token("schemathesis", "admin")
    from scheduling import services

    services.submit_pod("default", "placed", {}, gpu_pod("placed", mem=1000)["containers"], [], 0)
    services.submit_pod("default", "waiting", {}, gpu_pod("waiting", gpu=8)["containers"], [], 0)
    run_cycle(trigger="test")
    return key


@pytest.fixture
def real_connections():
    """Requests through the WSGI app must not close the test's database connection (it holds
    the test transaction); Django's own test client suspends the same signal handlers."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def load_schema():
    """The schema the real WSGI app serves (schema generation reads no database)."""
    from hamiadmin.wsgi import application

    return schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


# Loaded at collection: schemathesis' lazy fixture loader does not support pytest 9 yet.
api_schema = load_schema()


@pytest.mark.slow
@api_schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_generated_request_is_a_server_error(case, admin_key, real_connections):
    case.call_and_validate(
        headers={"Authorization": f"Token {admin_key}"},
        checks=[schemathesis.checks.not_a_server_error],
    )
