"""With DEBUG=1 Django renders its own error pages (the technical 404 page, the traceback
page); they show the path, the resolver's remainder of it and the request's META, so an
extender token in the path reached the page. No error answer to such a path holds the
token, in any spelling, whoever rendered it."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from django.test import Client
from django.utils.html import escape

from hamiadmin.path_secrets import scrub

TOKEN = "extender-secret-9b1e77d0"
ODD = "s3cr~t'é<&>"


def spellings(token: str) -> list[str]:
    return [token, quote(token, safe=""), escape(token), json.dumps(token)[1:-1]]


@pytest.fixture
def debug_extender(settings):
    settings.DEBUG = True
    settings.HAMIADMIN = {**settings.HAMIADMIN, "EXTENDER_TOKEN": TOKEN}


@pytest.mark.django_db
def test_the_technical_404_page_does_not_show_the_extender_token(debug_extender):
    answer = Client().post(f"/extender/key/{TOKEN}/nowhere", "{}", content_type="application/json")
    page = answer.content.decode()
    assert answer.status_code == 404
    assert "Using the URLconf defined in" in page, "not Django's technical 404 page"
    assert TOKEN not in page
    assert "key/[redacted]/nowhere" in page, "the path is still shown, redacted"
    if answer.has_header("Content-Length"):
        assert int(answer["Content-Length"]) == len(answer.content)


@pytest.mark.django_db
def test_the_debug_traceback_page_does_not_show_the_extender_token(debug_extender, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("the extender's filter failed")

    monkeypatch.setattr("kube.views.authorized", explode)  # before the view's own JSON errors
    pod = json.dumps({"pod": {"metadata": {"name": "p", "namespace": "default"}}, "nodenames": ["n"]})
    answer = Client(raise_request_exception=False).post(
        f"/extender/key/{TOKEN}/filter", pod, content_type="application/json"
    )
    page = answer.content.decode()
    assert answer.status_code == 500
    assert "the extender&#x27;s filter failed" in page, "not Django's traceback page"
    assert TOKEN not in page


@pytest.mark.django_db
def test_a_token_with_characters_that_pages_escape_is_scrubbed_in_every_spelling(settings):
    settings.DEBUG = True
    answer = Client().get(f"/extender/key/{quote(ODD, safe='')}/nowhere")
    page = answer.content.decode()
    assert answer.status_code == 404
    assert [s for s in spellings(ODD) if s in page] == []


def test_scrub_replaces_every_spelling():
    body = " | ".join(spellings(ODD)).encode()
    assert scrub(body, {ODD}).decode() == " | ".join(["[redacted]"] * 4)
