"""No answer repeats the extender token that a path carries (`/extender/key/<token>/...`,
kube-scheduler cannot send headers to an extender).

Log lines are redacted by `hamiadmin.logging.RedactPathSecrets`, and our own 404 page by the
`redact_path` filter. Django's development pages (`DEBUG=1`: the technical 404 page, the
500 traceback page) render the path, the URL resolver's remainder of it (`key/<token>/...`,
which no `/extender/key/` pattern matches) and the request's META themselves; so this
middleware scrubs the token, in every spelling a page may give it (as is, percent-encoded,
HTML-escaped, JSON-escaped), from the body of every error answer (4xx, 5xx) to such a path.
A right answer never holds the token, and is left as it is (a short token could be part of
its text).
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote, unquote

from django.utils.html import escape

from .logging import REDACTED

_TOKEN = re.compile(r"/extender/key/([^/]+)")


def path_tokens(request) -> set[str]:
    """The tokens in the request's path, decoded and as sent."""
    raw = [request.path, request.META.get("RAW_URI", ""), request.META.get("REQUEST_URI", "")]
    found = {token for text in raw for token in _TOKEN.findall(text)}
    return {spelling for token in found for spelling in (token, unquote(token))} - {""}


def spellings(token: str) -> set[str]:
    plain = {token, quote(token, safe=""), quote(token, safe="/:@!$&'()*+,;=~")}
    return plain | {escape(text) for text in plain} | {json.dumps(text)[1:-1] for text in plain}


def scrub(body: bytes, tokens: set[str]) -> bytes:
    """`body` with every spelling of every token replaced by [redacted], longest first."""
    text = body.decode("utf-8", errors="surrogateescape")
    for spelling in sorted({s for token in tokens for s in spellings(token)}, key=len, reverse=True):
        text = text.replace(spelling, REDACTED)
    return text.encode("utf-8", errors="surrogateescape")


class RedactPathSecretsInAnswers:
    """Outermost middleware: error answers to an `/extender/key/<token>/` path never show the
    token, whichever handler rendered them."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.status_code < 400
            or "/extender/key/" not in request.path
            or getattr(response, "streaming", False)
        ):
            return response
        tokens = path_tokens(request)
        if tokens:
            response.content = scrub(response.content, tokens)
            if response.has_header("Content-Length"):
                response["Content-Length"] = str(len(response.content))
        return response
