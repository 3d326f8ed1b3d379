"""The HTTP side: one `Client` that sends the token, reads JSON and turns a non-2xx answer
into `ApiError` carrying the API's error body."""

from __future__ import annotations

import json
import time
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

#: A 429 (rate limit) or 503 (a row held past the server's lock bound, a busy simulation
#: queue) that carries `Retry-After` wrote nothing: sent again after that wait, at most this
#: many more times, as client-go does for the Kubernetes API.
RETRIES = 3
#: The longest `Retry-After` honoured; a longer one is answered to the user at once.
MAX_WAIT_SECONDS = 10.0


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
        for attempt in range(RETRIES + 1):
            try:
                with urllib.request.urlopen(asked, timeout=TIMEOUT_SECONDS) as answer:
                    raw = answer.read()
            except urllib.error.HTTPError as exc:
                body = _decoded(exc.read())
                wait = _retry_after(exc)
                if wait is None or attempt == RETRIES:
                    raise ApiError(exc.code, body, url) from None
                time.sleep(wait)
                continue
            except urllib.error.URLError as exc:
                raise ApiError(0, {"detail": f"cannot reach {self.url}: {exc.reason}"}, url) from None
            return _decoded(raw) if raw else None
        raise AssertionError("unreachable")

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


def _retry_after(error: urllib.error.HTTPError) -> float | None:
    """Seconds to wait before sending a refused request again, or None when it is not to be
    sent again: only a 429 or 503 naming a `Retry-After` of whole seconds up to
    MAX_WAIT_SECONDS."""
    if error.code not in (429, 503):
        return None
    try:
        seconds = float(error.headers.get("Retry-After", ""))
    except (TypeError, ValueError):
        return None
    if not 0 <= seconds <= MAX_WAIT_SECONDS:
        return None
    return seconds


def _decoded(raw: bytes) -> Any:
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return {"detail": text.strip()[:500]}
