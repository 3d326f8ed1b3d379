"""Security boundaries as a table: every endpoint for every kind of caller, CSRF on the
dashboard and admin forms, login on every page, markup escaped wherever a pod, an
annotation or a node label is shown, and SQL metacharacters in every filter parameter.

Figures: cells checked and cells that answered otherwise than the table says (must be 0).
"""

from __future__ import annotations

import io
import json
import logging
import os
import secrets as secrets_module
import subprocess
import sys

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import transaction
from django.test import Client
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from hamiadmin.logging import JsonFormatter, RedactPathSecrets
from scheduling import services
from scheduling.api.tokens import issue_agent_token, issue_role_token
from scheduling.models import Card
from scheduling.pipeline import consistency, run_cycle
from scheduling.roles import role_group
from tests.api.conftest import client_for, cluster, fresh_throttles, operator  # noqa: F401 (fixtures)
from tests.api.test_access import ENDPOINTS, RANK, call, gpu_pod
from tests.api.test_access import world as world  # noqa: F401 (fixture)
from tests.conftest import clear_shared_cache

from .conftest import REPO

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
        {"zone": "a"},  # a label of markup is refused at the door (Kubernetes label syntax)
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


#: Token-authenticated writes, one per kind of write path (the `token-writes` limit counts
#: them together, per token user, whatever the endpoint).
TOKEN_WRITES = [
    ("post", "/api/v1/cards/GPU-1-1/cordon/", None),
    ("post", "/api/v1/cards/GPU-1-1/uncordon/", None),
    ("post", "/api/v1/pods/", gpu_pod("limited", mem=1000)),
    ("delete", "/api/v1/pods/default/limited/", None),
]


def test_token_writes_and_sign_ins_are_rate_limited(world, signed_in, monkeypatch, figures):  # noqa: F811
    """Over `token-writes` a token's next write is 429 with Retry-After, while its reads,
    another token's writes and a browser's session go on; over `login`, the next sign-in
    form from that address is 429 even with the right password."""
    clear_shared_cache()
    rates = dict(SimpleRateThrottle.THROTTLE_RATES, **{"token-writes": "4/min", "login": "3/min"})
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", rates)
    cache.clear()
    operator_api = caller("operator")
    written = [
        call(operator_api, method, path, body, world).status_code for method, path, body in TOKEN_WRITES
    ]
    refused = operator_api.post("/api/v1/cards/GPU-1-1/cordon/")
    figures["token_write_statuses"] = written
    figures["token_writes_allowed"] = sum(status < 400 for status in written)
    figures["write_over_the_limit"] = refused.status_code
    figures.require("token_writes_allowed", len(TOKEN_WRITES))
    figures.require("write_over_the_limit", 429)
    assert int(refused["Retry-After"]) > 0
    others = {
        "the same token reads": operator_api.get("/api/v1/pods/").status_code,
        "another token writes": caller("admin").post("/api/v1/cards/GPU-1-1/cordon/").status_code,
        "a browser session writes": session_api().post("/api/v1/cards/GPU-1-1/uncordon/").status_code,
    }
    figures["others_refused"] = sum(status == 429 for status in others.values())
    figures.require("others_refused", 0)
    assert all(status < 400 for status in others.values()), others

    sign_ins = [
        Client().post("/accounts/login/", {"username": "vera", "password": password}).status_code
        for password in ("wrong", "a-long-password-1", "wrong")
    ]
    blocked = Client().post("/accounts/login/", {"username": "vera", "password": "a-long-password-1"})
    figures["sign_ins_before_the_limit"] = sign_ins
    figures["sign_in_over_the_limit"] = blocked.status_code
    assert sign_ins == [200, 302, 200], sign_ins  # wrong (the form again), right (redirect), wrong
    figures.require("sign_in_over_the_limit", 429)
    assert int(blocked["Retry-After"]) > 0
    assert Client().get("/accounts/login/").status_code == 200, "the page itself is not limited"


def session_api() -> APIClient:
    """vera (the signed-in admin of `signed_in`) through the API with her session, no token."""
    api = APIClient()
    api.force_login(User.objects.get(username="vera"))
    return api


def test_the_rate_limits_come_from_the_environment():
    """HAMI_THROTTLE_TOKEN_WRITES and HAMI_THROTTLE_LOGIN set the rates, as every other
    deployment value (hamiadmin/settings.py)."""
    env = dict(os.environ, HAMI_THROTTLE_TOKEN_WRITES="7/s", HAMI_THROTTLE_LOGIN="5/hour")
    env.pop("DJANGO_SETTINGS_MODULE", None)
    shown = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SHOW_RATES],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout.strip().splitlines()[-1]) == ["7/s", "5/hour"]


SHOW_RATES = (
    "import json; from django.conf import settings; "
    "r = settings.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']; "
    "print(json.dumps([r['token-writes'], r['login']]))"
)

API_KEY_SENT_WRONG = "0123456789abcdef0123456789abcdef01234567"
EXTENDER_TOKEN = "extender-secret-4f9c1d2e"
EXTENDER_WRONG = "extender-guess-77aa31"
METRICS_TOKEN = "metrics-secret-9e8d7c6b"


def console_handlers() -> list[logging.Handler]:
    """The handlers of hamiadmin's LOGGING (they carry the path redaction), wherever attached."""
    found = []
    for name in ("", "django", "django.server"):
        for handler in logging.getLogger(name).handlers:
            if any(isinstance(f, RedactPathSecrets) for f in handler.filters) and handler not in found:
                found.append(handler)
    return found


def test_tokens_never_reach_a_log_line_or_an_error_page(world, settings, monkeypatch, figures):  # noqa: F811
    """Requests carrying every kind of credential (API token, extender token in the path and
    in the header, metrics token; right, wrong, and on requests that fail with 400, 401, 404,
    429 and 500), with every logger at DEBUG and both line formats: no token appears in what
    the configured handlers write, nor in any answer's body."""
    settings.HAMIADMIN = {
        **settings.HAMIADMIN,
        "EXTENDER_TOKEN": EXTENDER_TOKEN,
        "METRICS_TOKEN": METRICS_TOKEN,
        "AUTH_FAILURE_LIMIT": 3,
    }
    api_key = issue_role_token("logged-operator", "operator")
    secrets = [api_key, API_KEY_SENT_WRONG, EXTENDER_TOKEN, EXTENDER_WRONG, METRICS_TOKEN]
    handlers = console_handlers()
    assert handlers, "no handler of the LOGGING settings found"
    written = io.StringIO()
    twins = []
    for handler in handlers:
        monkeypatch.setattr(handler, "stream", written)
        twin = logging.StreamHandler(written)  # the same records as JSON lines
        twin.setFormatter(JsonFormatter())
        twin.addFilter(RedactPathSecrets())
        twins.append(twin)
    loggers = [logging.getLogger(name) for name in ("", "django", "django.request", "django.server")]
    for logger in loggers:
        monkeypatch.setattr(logger, "level", logging.DEBUG)
        if logger.handlers:
            logger.addHandler(twins[0])
    monkeypatch.setattr("kube.views.filter_pod", explode)
    cache.clear()
    clear_shared_cache()
    web = Client(raise_request_exception=False)
    token, wrong = f"Token {api_key}", f"Token {API_KEY_SENT_WRONG}"
    keyed, guessed = f"/extender/key/{EXTENDER_TOKEN}", f"/extender/key/{EXTENDER_WRONG}"
    pod = json.dumps({"pod": {"metadata": {"name": "p", "namespace": "default"}}, "nodenames": ["node1"]})
    answers = []
    try:
        answers += [
            web.get("/api/v1/nodes/", HTTP_AUTHORIZATION=token),
            web.post("/api/v1/pods/", "{", content_type="application/json", HTTP_AUTHORIZATION=token),
            web.get("/api/v1/pods/default/nobody/", HTTP_AUTHORIZATION=token),
            web.get("/api/v1/nope/", HTTP_AUTHORIZATION=token),
            web.post(f"{keyed}/filter", pod, content_type="application/json"),  # 500: filter_pod raises
            web.post(f"{keyed}/bind", "{}", content_type="application/json"),  # 400
            web.get(f"{keyed}/filter"),  # 405
            web.post(f"{keyed}/nowhere", "{}", content_type="application/json"),  # 404
            web.post(
                "/extender/filter", "{}", content_type="application/json", HTTP_AUTHORIZATION="Bearer x"
            ),
            web.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}"),
        ]
        for _ in range(4):  # 401s, then 429 for the address
            answers += [
                web.get("/api/v1/nodes/", HTTP_AUTHORIZATION=wrong),
                web.post(f"{guessed}/filter", pod, content_type="application/json"),
            ]
    finally:
        for logger in loggers:
            if twins[0] in logger.handlers:
                logger.removeHandler(twins[0])
    lines = [line for line in written.getvalue().splitlines() if line.strip()]
    codes = sorted({answer.status_code for answer in answers})
    figures["requests"] = len(answers)
    figures["statuses"] = codes
    figures["log_lines"] = len(lines)
    figures["lines_with_the_path_redacted"] = sum("/extender/key/[redacted]" in line for line in lines)
    figures["lines_with_a_token"] = sum(any(secret in line for secret in secrets) for line in lines)
    figures["answers_with_a_token"] = sum(
        any(secret in answer.content.decode(errors="replace") for secret in secrets) for answer in answers
    )
    pages = [
        f"{answer.status_code} {answer.request['PATH_INFO']}"
        for answer in answers
        if any(secret in answer.content.decode(errors="replace") for secret in secrets)
    ]
    assert pages == [], f"a token in the answer of {pages}"
    for status in (200, 400, 401, 404, 405, 429, 500):
        assert status in codes, f"no request answered {status}: {codes}"
    leaked = [line for line in lines if any(secret in line for secret in secrets)]
    assert leaked == [], leaked[:5]
    figures.require("lines_with_a_token", 0)
    figures.require("answers_with_a_token", 0)
    figures.at_least("lines_with_the_path_redacted", 1)  # the paths were logged, and redacted


def explode(*args, **kwargs):
    raise RuntimeError("the extender's filter failed")


def test_check_deploy_is_clean_under_production_settings(tmp_path, figures):
    """`manage.py check --deploy --fail-level WARNING` with the environment a production
    deployment sets (docs/deploy.md): DEBUG off, a long random secret, HTTPS settings from
    the environment."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SECURE_", "SESSION_", "CSRF_"))
        and key not in ("DEBUG", "DJANGO_SETTINGS_MODULE")
    }
    env.update(
        HAMIADMIN_ENV="production",
        SECRET_KEY=secrets_module.token_urlsafe(60),
        ALLOWED_HOSTS="hamiadmin.example",
        CSRF_TRUSTED_ORIGINS="https://hamiadmin.example",
        HAMIADMIN_VAR_DIR=str(tmp_path),
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    figures["check_deploy_exit"] = done.returncode
    figures["issues"] = 0 if "no issues" in done.stdout else (done.stdout + done.stderr).count("security.W")
    assert done.returncode == 0 and "no issues" in done.stdout, done.stdout + done.stderr
    figures.require("issues", 0)
