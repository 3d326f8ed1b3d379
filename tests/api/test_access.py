"""Every endpoint for every role: allowed, 401 without credentials, 403 with too low a role.

Roles rank viewer < operator < admin; a signed-in user without a role and an agent token
may do nothing here (agents may only report their own node, see test_agents).
"""

from __future__ import annotations

import pytest

from scheduling.models import Allocation, Cycle, Decision
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod

RANK = {"norole": 0, "agent:node1": 0, "viewer": 1, "operator": 2, "admin": 3}
WHO = ["norole", "agent:node1", "viewer", "operator", "admin"]

SCENARIO = {
    "nodes": [{"name": "n", "devices": [{"uuid": "G0", "memory": 1000}]}],
    "pods": [{"name": "p", "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}],
}

# (method, path, least role, body). {decision}, {allocation}, {cycle} are filled from the world.
ENDPOINTS = [
    ("get", "/api/v1/nodes/", "viewer", None),
    ("get", "/api/v1/nodes/node1/", "viewer", None),
    ("get", "/api/v1/cards/", "viewer", None),
    ("get", "/api/v1/cards/GPU-1-0/", "viewer", None),
    ("post", "/api/v1/cards/GPU-1-1/cordon/", "operator", None),
    ("post", "/api/v1/cards/GPU-1-1/uncordon/", "operator", None),
    ("get", "/api/v1/pods/", "viewer", None),
    ("get", "/api/v1/pods/?status=pending", "viewer", None),
    ("post", "/api/v1/pods/", "operator", gpu_pod("fresh", mem=1000)),
    ("get", "/api/v1/pods/default/placed/", "viewer", None),
    ("delete", "/api/v1/pods/default/placed/", "operator", None),
    ("post", "/api/v1/pods/default/placed/complete/", "operator", None),
    ("post", "/api/v1/pods/bulk/", "operator", {"pods": [gpu_pod("fresh-bulk", mem=1000)]}),
    (
        "post",
        "/api/v1/pods/bulk/release/",
        "operator",
        {"pods": [{"namespace": "default", "name": "placed"}], "status": "succeeded"},
    ),
    ("get", "/api/v1/pending/", "viewer", None),
    ("get", "/api/v1/decisions/?pod=default/placed", "viewer", None),
    ("get", "/api/v1/decisions/{decision}/", "viewer", None),
    ("get", "/api/v1/allocations/", "viewer", None),
    ("get", "/api/v1/allocations/{allocation}/", "viewer", None),
    ("get", "/api/v1/cycles/", "viewer", None),
    ("get", "/api/v1/cycles/{cycle}/", "viewer", None),
    ("post", "/api/v1/simulate/", "viewer", SCENARIO),
    ("get", "/api/v1/config/", "viewer", None),
    (
        "put",
        "/api/v1/config/",
        "admin",
        {
            "node_scheduler_policy": "spread",
            "gpu_scheduler_policy": "binpack",
            "resources": {"memory_percentage": 100, "cores": 0, "exclusive_cores": 100},
        },
    ),
    ("patch", "/api/v1/config/", "admin", {"gpu_scheduler_policy": "mutex,binpack"}),
]


@pytest.fixture
def world(cluster, operator):
    """The two-node cluster with one placed pod, so every detail URL exists."""
    answer = operator.post("/api/v1/pods/", gpu_pod("placed", mem=1000), format="json")
    assert answer.status_code == 201, answer.content
    report = run_cycle(trigger="test")
    assert [pod for pod, _, _ in report.placed] == ["default/placed"]
    return {
        "decision": Decision.objects.latest("id").pk,
        "allocation": Allocation.objects.filter(active=True).latest("id").pk,
        "cycle": Cycle.objects.latest("id").pk,
    }


def call(client, method, path, body, world):
    return getattr(client, method)(path.format(**world), body, format="json")


def endpoint_id(endpoint) -> str:
    return f"{endpoint[0].upper()} {endpoint[1]}"


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=endpoint_id)
@pytest.mark.parametrize("who", WHO)
def test_role_decides(world, client_for, endpoint, who):
    method, path, least, body = endpoint
    if who == "norole":
        from django.contrib.auth.models import User
        from rest_framework.authtoken.models import Token

        user = User.objects.create_user("nobody")
        client = client_for(None)
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    else:
        client = client_for(who)
    answer = call(client, method, path, body, world)
    if RANK[who] >= RANK[least]:
        assert answer.status_code < 400, (answer.status_code, answer.content)
    else:
        assert answer.status_code == 403, (answer.status_code, answer.content)


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=endpoint_id)
def test_no_credentials_is_401(world, client_for, endpoint):
    method, path, _, body = endpoint
    answer = call(client_for(None), method, path, body, world)
    assert answer.status_code == 401
    assert answer["WWW-Authenticate"] == "Token"


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=endpoint_id)
def test_bad_token_is_401(world, client_for, endpoint):
    method, path, _, body = endpoint
    client = client_for(None)
    client.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    assert call(client, method, path, body, world).status_code == 401


@pytest.mark.django_db
def test_refused_write_changes_nothing(world, viewer):
    before = Decision.objects.count(), Allocation.objects.filter(active=True).count()
    assert viewer.delete("/api/v1/pods/default/placed/").status_code == 403
    assert viewer.post("/api/v1/pods/", gpu_pod("sneaky"), format="json").status_code == 403
    assert (Decision.objects.count(), Allocation.objects.filter(active=True).count()) == before
    assert viewer.get("/api/v1/pods/default/sneaky/").status_code == 404
    assert viewer.get("/api/v1/pods/default/placed/").json()["status"] == "scheduled"


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/api/schema/"])
@pytest.mark.django_db
def test_open_without_credentials(client_for, path):
    assert client_for(None).get(path).status_code == 200


@pytest.mark.django_db
def test_browser_session_works_and_writes_need_the_csrf_token(cluster):
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    from scheduling.roles import role_group

    user = User.objects.create_user("olga", password="a-long-password-1")
    user.groups.add(role_group("operator"))
    browser = APIClient(enforce_csrf_checks=True)
    assert browser.login(username="olga", password="a-long-password-1")
    assert browser.get("/api/v1/nodes/").status_code == 200
    refused = browser.post("/api/v1/pods/", gpu_pod("p"), format="json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    secret = "s3cr3t" * 5 + "ab"  # the csrftoken cookie a page would set; the header repeats it
    browser.cookies["csrftoken"] = secret
    accepted = browser.post("/api/v1/pods/", gpu_pod("p"), format="json", HTTP_X_CSRFTOKEN=secret)
    assert accepted.status_code == 201, accepted.content
