"""Clients per role, agents per node, and a small reported cluster, all through the real API."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from scheduling.api.tokens import issue_agent_token, issue_role_token

ROLES = ("viewer", "operator", "admin")


@pytest.fixture(autouse=True)
def fresh_throttles():
    """Throttle counters live in the local-memory cache; each test starts from zero."""
    cache.clear()
    yield
    cache.clear()


def token_client(key: str | None) -> APIClient:
    client = APIClient()
    if key is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def client_for(db):
    """`client_for("operator")`, `client_for("agent:node1")`, or `client_for(None)` (anonymous)."""

    def make(who: str | None) -> APIClient:
        if who is None:
            return token_client(None)
        if who.startswith("agent:"):
            return token_client(issue_agent_token(who.removeprefix("agent:")))
        return token_client(issue_role_token(f"{who}-user", who))

    return make


@pytest.fixture
def viewer(client_for):
    return client_for("viewer")


@pytest.fixture
def operator(client_for):
    return client_for("operator")


@pytest.fixture
def admin(client_for):
    return client_for("admin")


def t4(uuid: str, index: int, **fields) -> dict:
    """A reported card (SPEC 9 form without `used`)."""
    return {"uuid": uuid, "index": index, "type": "NVIDIA-Tesla T4", "memory": 15360, **fields}


def report_body(node: str, *cards: dict, labels=None, annotations=None) -> dict:
    return {"node": node, "labels": labels or {}, "annotations": annotations or {}, "devices": list(cards)}


TWO_NODES = {
    "node1": [t4("GPU-1-0", 0), t4("GPU-1-1", 1)],
    "node2": [t4("GPU-2-0", 0), t4("GPU-2-1", 1), t4("GPU-2-2", 2, type="NVIDIA-A100", memory=40960)],
}


@pytest.fixture
def cluster(client_for):
    """node1 (2 x T4) and node2 (2 x T4 + 1 A100), reported by their agents."""
    for name, cards in TWO_NODES.items():
        answer = client_for(f"agent:{name}").post(
            "/api/v1/agents/report/", report_body(name, *cards), format="json"
        )
        assert answer.status_code == 200, answer.content
    return TWO_NODES


def gpu_pod(name: str, namespace: str = "default", *, gpu=1, mem=None, cores=None, annotations=None, **extra):
    limits = {"nvidia.com/gpu": gpu}
    if mem is not None:
        limits["nvidia.com/gpumem"] = mem
    if cores is not None:
        limits["nvidia.com/gpucores"] = cores
    return {
        "name": name,
        "namespace": namespace,
        "annotations": annotations or {},
        "containers": [{"name": "main", "resources": {"limits": limits}}],
        **extra,
    }
