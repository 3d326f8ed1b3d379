"""Failed credentials are counted per client address and per credential (hamiadmin/
auth_failures.py): after the limit, the credential that failed gets 429 with Retry-After from
that address, and the address's further failures too; a right token from the same address,
other addresses, probes and signed-in pages go on."""

from __future__ import annotations

import json
import logging
import time

import pytest
from django.contrib.auth.models import User
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from scheduling.api.tokens import issue_role_token

from .conftest import report_body, t4

pytestmark = pytest.mark.django_db

ATTACKER, NEIGHBOUR = "203.0.113.7", "203.0.113.8"


@pytest.fixture
def limit(settings):
    """Three failures per address within a minute."""
    settings.HAMIADMIN = {**settings.HAMIADMIN, "AUTH_FAILURE_LIMIT": 3, "AUTH_FAILURE_WINDOW_SECONDS": 60}
    return 3


def from_address(address: str, token: str | None = None) -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    if token is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def counted(kind: str) -> tuple[float, float]:
    """(failures, throttled) for `kind`, as a scrape of /metrics reads them."""
    text = APIClient().get("/metrics").content.decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("hamiadmin_auth_failures_total", "hamiadmin_auth_throttled_total"):
                if sample.labels.get("kind") == kind:
                    found[sample.name] = sample.value
    return found["hamiadmin_auth_failures_total"], found["hamiadmin_auth_throttled_total"]


def test_bad_api_tokens_are_throttled_and_a_right_token_from_the_same_address_goes_on(limit, caplog):
    good = issue_role_token("alice", "viewer")
    failures, throttled = counted("api")
    bad = from_address(ATTACKER, "0" * 40)
    with caplog.at_level(logging.WARNING, logger="hamiadmin.auth"):
        assert [bad.get("/api/v1/nodes/").status_code for _ in range(limit)] == [401] * limit
    refused = bad.get("/api/v1/nodes/")
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    assert "try again in" in refused.json()["detail"]
    assert from_address(ATTACKER, good).get("/api/v1/nodes/").status_code == 200, "a right token goes on"
    assert from_address(ATTACKER, "2" * 40).get("/api/v1/nodes/").status_code == 429, "another failure waits"
    assert from_address(NEIGHBOUR, good).get("/api/v1/nodes/").status_code == 200
    assert from_address(NEIGHBOUR, "1" * 40).get("/api/v1/nodes/").status_code == 401
    assert counted("api") == (failures + limit + 2, throttled + 2)
    [warning] = [r for r in caplog.records if r.name == "hamiadmin.auth"]
    assert warning.levelno == logging.WARNING and ATTACKER in warning.getMessage()
    assert "429" in warning.getMessage()


def test_an_agent_keeps_reporting_while_another_client_on_its_address_fails_a_hundred_times(limit):
    """Behind an Ingress every client shares one address: a neighbour's bad tokens must not
    lock the node's agent out (a node whose agent is locked out turns not ready)."""
    from scheduling.api.tokens import issue_agent_token

    agent = from_address(ATTACKER, issue_agent_token("node-a"))
    viewer = from_address(ATTACKER, issue_role_token("victor", "viewer"))
    report = report_body("node-a", t4("GPU-a-0", 0))
    statuses = []
    for attempt in range(100):
        statuses.append(from_address(ATTACKER, f"{attempt:040d}").get("/api/v1/nodes/").status_code)
        if attempt % 10 == 0:
            answer = agent.post("/api/v1/agents/report/", report, format="json")
            assert answer.status_code == 200, (attempt, answer.status_code, answer.content[:200])
            assert viewer.get("/api/v1/nodes/").status_code == 200
    assert statuses[:limit] == [401] * limit
    assert set(statuses[limit:]) == {429}


def test_a_throttled_address_still_reaches_probes_and_pages_that_take_no_credential(limit):
    bad = from_address(ATTACKER, "0" * 40)
    for _ in range(limit):
        bad.get("/api/v1/nodes/")
    assert bad.get("/api/v1/nodes/").status_code == 429
    anonymous = from_address(ATTACKER)
    assert anonymous.get("/healthz").status_code == 200
    assert anonymous.get("/api/v1/nodes/").status_code == 401  # no credential: not an attempt


def test_the_block_ends_with_the_window(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "AUTH_FAILURE_LIMIT": 2, "AUTH_FAILURE_WINDOW_SECONDS": 1}
    bad = from_address(ATTACKER, "0" * 40)
    assert [bad.get("/api/v1/nodes/").status_code for _ in range(3)] == [401, 401, 429]
    time.sleep(1.2)
    assert bad.get("/api/v1/nodes/").status_code == 401


def sign_in(path: str, address: str, username: str, password: str):
    return APIClient(REMOTE_ADDR=address).post(path, {"username": username, "password": password})


@pytest.mark.parametrize("path, kind", [("/accounts/login/", "login"), ("/admin/login/", "admin")])
def test_wrong_passwords_on_the_sign_in_forms_are_throttled_and_others_still_sign_in(limit, path, kind):
    User.objects.create_user("carol", password="right-horse-battery", is_staff=True)
    failures, throttled = counted(kind)
    wrong = [sign_in(path, ATTACKER, "carol", f"guess-{i}") for i in range(limit)]
    assert [answer.status_code for answer in wrong] == [200] * limit  # the form again, with its error
    blocked = sign_in(path, ATTACKER, "carol", "right-horse-battery")
    assert blocked.status_code == 429 and int(blocked["Retry-After"]) > 0
    assert sign_in(path, NEIGHBOUR, "carol", "right-horse-battery").status_code == 302  # signed in
    # another user on the attacker's address is judged as usual
    User.objects.create_user("dave", password="other-horse-battery", is_staff=True)
    assert sign_in(path, ATTACKER, "dave", "other-horse-battery").status_code == 302
    assert counted(kind) == (failures + limit, throttled + 1)


def test_bad_extender_tokens_are_throttled(limit, settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "EXTENDER_TOKEN": "s3cret-extender"}
    failures, throttled = counted("extender")
    body = json.dumps({"Pod": {"metadata": {"name": "p"}}})
    attacker = APIClient(REMOTE_ADDR=ATTACKER)
    answers = [
        attacker.post(f"/extender/key/guess-{i}/filter", body, content_type="application/json")
        for i in range(limit - 1)
    ]
    answers.append(
        attacker.post(
            "/extender/filter", body, content_type="application/json", HTTP_AUTHORIZATION="Bearer guess"
        )
    )
    assert [answer.status_code for answer in answers] == [401] * limit
    right = "/extender/key/s3cret-extender/filter"
    # the right key passes the token check from the attacker's address too (then 400: the body)
    assert attacker.post(right, body, content_type="application/json").status_code == 400
    again = "/extender/key/guess-0/filter"
    assert attacker.post(again, body, content_type="application/json").status_code == 429
    # The neighbour's call passes the token check (then fails on the body it sent: 400).
    assert (
        APIClient(REMOTE_ADDR=NEIGHBOUR).post(right, body, content_type="application/json").status_code == 400
    )
    assert counted("extender") == (failures + limit + 1, throttled + 1)


def test_bad_metrics_tokens_are_throttled(limit, settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "METRICS_TOKEN": "s3cret-metrics"}
    scraper = APIClient(REMOTE_ADDR=ATTACKER)
    codes = [
        scraper.get("/metrics", HTTP_AUTHORIZATION=f"Bearer guess-{i}").status_code for i in range(limit + 1)
    ]
    assert codes == [401] * limit + [429]
    assert scraper.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-metrics").status_code == 200
    neighbour = APIClient(REMOTE_ADDR=NEIGHBOUR)
    assert neighbour.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-metrics").status_code == 200
