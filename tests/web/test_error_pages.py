"""Outside DEBUG, a missing page and a server error are hamiadmin's own pages, never Django's."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from django.views.defaults import server_error

pytestmark = pytest.mark.django_db


def test_a_missing_page_is_our_own_404(viewer_client, settings):
    settings.DEBUG = False
    answer = viewer_client.get("/nodes/no-such-node/")
    assert answer.status_code == 404
    html = answer.content.decode()
    assert 'data-testid="not-found"' in html and "/nodes/no-such-node/" in html
    assert "Page not found" not in html and "Django" not in html
    assert "Cluster</a>" in html  # the dashboard's navigation, since the viewer is signed in


def test_a_server_error_is_our_own_500(settings):
    settings.DEBUG = False
    answer = server_error(RequestFactory().get("/"))
    assert answer.status_code == 500
    html = answer.content.decode()
    assert 'data-testid="server-error"' in html and "Server Error (500)" not in html
