"""The HTTP side: one `Client` that sends the token, reads JSON and turns a non-2xx answer
into `ApiError` carrying the API's error body."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

#: Every (method, path template) the commands call, relative to the server root. The
#: schema test checks each against `GET /api/schema/`.
PATHS: frozenset[tuple[str, str]] = frozenset(
    {
        ("get", "/api/v1/nodes/"),
        ("get", "/api/v1/nodes/{name}/"),
        ("get", "/api/v1/cards/"),
        ("post", "/api/v1/cards/{uuid}/cordon/"),
        ("post", "/api/v1/cards/{uuid}/uncordon/"),
        ("get", "/api/v1/pods/"),
        ("delete", "/api/v1/pods/{namespace}/{name}/"),
        ("post", "/api/v1/pods/{namespace}/{name}/complete/"),
        ("get", "/api/v1/pods/{namespace}/{name}/decision/"),
        ("post", "/api/v1/pods/bulk/release/"),
        ("get", "/api/v1/pending/"),
        ("get", "/api/v1/queues/"),
        ("get", "/api/v1/podgroups/"),
        ("post", "/api/v1/whatif/"),
    }
)

TIMEOUT_SECONDS = 60


class ApiError(Exception):
    """A non-2xx answer (or no answer): the status and the decoded error body."""

    def __init__(self, status: int, body: Any, url: str):
        self.status = status
        self.body = body
        self.url = url
        super().__init__(f"HTTP {status} from {url}")


def quoted(*parts: str) -> str:
    """Path segments made safe for a URL (a pod name never holds '/', a namespace neither)."""
    return "/".join(urllib.parse.quote(part, safe="") for part in parts)


class Client:
    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/")
        self.token = token

    def request(self, method: str, path: str, *, params: dict | None = None, body: Any = None) -> Any:
        """The decoded JSON answer of `method path`; `path` is relative to the server root
        (`/api/v1/...`) or an absolute URL (a page's `next`)."""
        url = path if path.startswith(("http://", "https://")) else self.url + path
        if params:
            pairs = [(k, v) for k, v in params.items() if v is not None]
            if pairs:
                url += ("&" if "?" in url else "?") + urllib.parse.urlencode(pairs, doseq=True)
        data = None if body is None else json.dumps(body).encode("utf-8")
        asked = urllib.request.Request(url, data=data, method=method.upper())
        asked.add_header("Authorization", f"Token {self.token}")
        asked.add_header("Accept", "application/json")
        if data is not None:
            asked.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(asked, timeout=TIMEOUT_SECONDS) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, _decoded(exc.read()), url) from None
        except urllib.error.URLError as exc:
            raise ApiError(0, {"detail": f"cannot reach {self.url}: {exc.reason}"}, url) from None
        return _decoded(raw) if raw else None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def every(self, path: str, **params: Any) -> list:
        """All rows of a list, following its pages (`results` and `next`); a list answered
        unpaged is returned as it is."""
        rows: list = []
        page = self.get(path, **params)
        while True:
            if isinstance(page, list):
                return rows + page
            rows.extend(page.get("results", []))
            following = page.get("next")
            if not following:
                return rows
            page = self.get(following)


def _decoded(raw: bytes) -> Any:
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return {"detail": text.strip()[:500]}
