"""Security boundaries as a table: every endpoint for every kind of caller, CSRF on the
dashboard and admin forms, login on every page, markup escaped wherever a pod, an
annotation or a node label is shown, and SQL metacharacters in every filter parameter.

Figures: cells checked and cells that answered otherwise than the table says (must be 0).
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import transaction
from django.test import Client
from rest_framework.test import APIClient

from scheduling import services
from scheduling.api.tokens import issue_agent_token, issue_role_token
from scheduling.models import Card
from scheduling.pipeline import consistency, run_cycle
from scheduling.roles import role_group
from tests.api.conftest import client_for, cluster, fresh_throttles, operator  # noqa: F401 (fixtures)
from tests.api.test_access import ENDPOINTS, RANK, call
from tests.api.test_access import world as world  # noqa: F401 (fixture)
from tests.conftest import clear_shared_cache

pytestmark = [pytest.mark.chaos, pytest.mark.django_db]

MARKUP = '<script>alert("x")</script><img src=x onerror=alert(1)>'
ESCAPED = "&lt;script&gt;"
CALLERS = ["anonymous", "revoked", "deactivated", "agent:node1", "viewer", "operator", "admin"]
PAGES = [
    "/",
    "/pending/",
    "/pods/default/placed/",
    "/nodes/node1/",
    "/simulator/",
    "/cycles/",
    "/events/",
    "/live/",
]
METACHARACTERS = [
    "' OR '1'='1",
    '"; DROP TABLE scheduling_pod; --',
    "%",
    "_",
    "\\",
    "%' --",
    "\x00",
    "é' UNION SELECT 1 --",
]
FILTERS = {
    "/api/v1/nodes/": ["name", "ready"],
    "/api/v1/cards/": ["node", "type", "health", "cordoned", "present"],
    "/api/v1/pods/": ["status", "namespace", "node", "origin"],
    "/api/v1/decisions/": ["pod", "outcome", "node", "cycle"],
    "/api/v1/allocations/": ["node", "card", "namespace", "pod"],
    "/api/v1/pending/": ["namespace", "name", "reason"],
    "/api/v1/cycles/": ["since"],
    "/api/v1/events/": ["kind", "subject", "since"],
    "/": ["q", "type", "ready"],
    "/pending/": ["namespace", "name", "reason"],
    "/events/": ["kind", "subject", "since"],
    "/cycles/": ["since"],
}


def caller(who: str) -> APIClient:
    api = APIClient(raise_request_exception=False)
    if who == "anonymous":
        return api
    if who == "revoked":
        old = issue_role_token("rotated-admin", "admin")
        issue_role_token("rotated-admin", "admin", rotate=True)
        key = old
    elif who == "deactivated":
        key = issue_role_token("gone-admin", "admin")
        User.objects.filter(username="gone-admin").update(is_active=False)
    elif who.startswith("agent:"):
        key = issue_agent_token(who.removeprefix("agent:"))
    else:
        key = issue_role_token(f"{who}-user", who)
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return api


def expected(who: str, least: str) -> str:
    if who in ("anonymous", "revoked", "deactivated"):
        return "401"
    return "allowed" if RANK.get(who, 0) >= RANK[least] else "403"


def outcome(status: int) -> str:
    return "allowed" if status < 400 else str(status)


def test_every_endpoint_for_every_caller(world, figures):  # noqa: F811
    cells, wrong = 0, []
    rows = [*ENDPOINTS, ("post", "/api/v1/agents/report/", "agent-own", None)]
    for method, path, least, body in rows:
        for who in CALLERS:
            cache.clear()
            clear_shared_cache()  # failed credentials are counted per address; each cell starts at 0
            with transaction.atomic():
                api = caller(who)
                if path == "/api/v1/agents/report/":
                    body = {"node": "node1", "devices": [{"uuid": "GPU-1-0", "index": 0, "memory": 15360}]}
                    want = {
                        "agent:node1": "allowed",
                        "anonymous": "401",
                        "revoked": "401",
                        "deactivated": "401",
                    }
                    want_here = want.get(who, "403")
                else:
                    want_here = expected(who, least)
                got = outcome(call(api, method, path, body, world).status_code)
                transaction.set_rollback(True)
            cells += 1
            if got != want_here:
                wrong.append(f"{who} {method.upper()} {path}: {got}, table says {want_here}")
    # an agent acting on another node: its report for node2 and a card of node2
    cache.clear()
    clear_shared_cache()
    agent = caller("agent:node1")
    node2 = {"node": "node2", "devices": [{"uuid": "GPU-2-0", "index": 0, "memory": 15360}]}
    for got, want_here, what in (
        (agent.post("/api/v1/agents/report/", node2, format="json").status_code, 403, "report for node2"),
        (agent.post("/api/v1/cards/GPU-2-0/cordon/").status_code, 403, "cordon a card of node2"),
        (
            agent.post(
                "/api/v1/agents/report/",
                {"node": "node1", "devices": [{"uuid": "GPU-2-0", "index": 5, "memory": 15360}]},
                format="json",
            ).status_code,
            200,
            "claim node2's card in its own report (taken without the card)",
        ),
    ):
        cells += 1
        if got != want_here:
            wrong.append(f"agent:node1 {what}: {got}, table says {want_here}")
    figures["cells"] = cells
    figures["callers"] = len(CALLERS)
    figures["endpoints"] = len(rows)
    figures["mismatches"] = len(wrong)
    assert wrong == [], "\n".join(wrong)
    figures.require("mismatches", 0)
    assert Card.objects.get(uuid="GPU-2-0").node.name == "node2"


@pytest.fixture
def signed_in(world):  # noqa: F811
    user = User.objects.create_user("vera", password="a-long-password-1")
    user.groups.add(role_group("admin"))
    user.is_staff = user.is_superuser = True
    user.save()
    browser = Client(enforce_csrf_checks=True, raise_request_exception=False)
    assert browser.login(username="vera", password="a-long-password-1")
    return browser


def test_every_page_requires_login_and_every_form_its_csrf_token(signed_in, figures):
    anonymous = Client(raise_request_exception=False)
    not_signed_in = {page: anonymous.get(page) for page in PAGES}
    redirected = [
        page
        for page, answer in not_signed_in.items()
        if answer.status_code == 302 and "login" in answer["Location"]
    ]
    forms = {
        "simulator": signed_in.post("/simulator/", {"scenario": "nodes: []\npods: []\n"}),
        "admin action": signed_in.post(
            "/admin/scheduling/pod/", {"action": "delete_selected", "_selected_action": ["1"]}
        ),
        "admin change": signed_in.post("/admin/scheduling/node/1/change/", {"name": "x"}),
        "logout": signed_in.post("/accounts/logout/"),
        "login": Client(enforce_csrf_checks=True).post(
            "/accounts/login/", {"username": "vera", "password": "a-long-password-1"}
        ),
        "admin login": Client(enforce_csrf_checks=True).post(
            "/admin/login/", {"username": "vera", "password": "a-long-password-1"}
        ),
    }
    refused = [name for name, answer in forms.items() if answer.status_code == 403]
    figures["pages"] = len(PAGES)
    figures["pages_requiring_login"] = len(redirected)
    figures["forms"] = len(forms)
    figures["forms_refused_without_csrf"] = len(refused)
    figures.require("pages_requiring_login", len(PAGES))
    figures.require("forms_refused_without_csrf", len(forms))


def test_markup_is_escaped_on_every_page_that_shows_it(signed_in, figures):
    services.report_inventory(
        "node1",
        {"zone": MARKUP},
        {"note": MARKUP},
        [{"uuid": "GPU-1-0", "index": 0, "memory": 15360, "type": MARKUP}],
    )
    services.submit_pod(
        "default",
        "markup",
        {"hami.io/gpu-scheduler-policy": MARKUP, "nvidia.com/use-gputype": MARKUP},
        [{"name": MARKUP[:60], "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        validate=False,
    )
    run_cycle()
    pages = [*PAGES, "/pods/default/markup/", "/admin/scheduling/pod/", "/admin/scheduling/node/"]
    raw, shown = [], 0
    for page in pages:
        answer = signed_in.get(page)
        assert answer.status_code == 200, (page, answer.status_code)
        text = answer.content.decode()
        if "<script>alert(" in text or "onerror=alert" in text.replace("&quot;", ""):
            if "<img src=x onerror=alert(1)>" in text or "<script>alert(" in text:
                raw.append(page)
        shown += ESCAPED in text
    figures["pages"] = len(pages)
    figures["pages_showing_the_markup_escaped"] = shown
    figures["pages_with_raw_markup"] = len(raw)
    assert raw == [], raw
    figures.require("pages_with_raw_markup", 0)
    figures.at_least("pages_showing_the_markup_escaped", 2)


def test_sql_metacharacters_in_every_filter_are_400_or_empty(signed_in, figures):
    api = caller("admin")
    tried, server_errors, leaked = 0, [], []
    for path, params in FILTERS.items():
        client = api if path.startswith("/api/") else signed_in
        for param in params:
            for value in METACHARACTERS:
                cache.clear()
                answer = client.get(path, {param: value})
                tried += 1
                if answer.status_code >= 500:
                    server_errors.append(f"{path}?{param}={value!r}: {answer.status_code}")
                elif answer.status_code == 200 and path.startswith("/api/"):
                    body = answer.json()
                    rows = body.get("results", body) if isinstance(body, dict) else body
                    if rows:
                        leaked.append(f"{path}?{param}={value!r}: {len(rows)} rows")
                elif answer.status_code not in (200, 400, 404):  # 404: the pod a filter names is unknown
                    server_errors.append(f"{path}?{param}={value!r}: {answer.status_code}")
    figures["requests_tried"] = tried
    figures["server_errors_5xx"] = len(server_errors)
    figures["non_empty_answers"] = len(leaked)
    assert server_errors == [], server_errors[:10]
    assert leaked == [], leaked[:10]
    figures.require("server_errors_5xx", 0)
    assert consistency.check().clean
