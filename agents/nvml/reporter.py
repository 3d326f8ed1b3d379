"""Delivering reports to the hamiadmin API, and the loop that keeps the node's view fresh.

Only the standard library (``urllib.request``) is used so the agent image stays
small. While the API is unreachable or answers 5xx/429 the loop backs off
exponentially with jitter (so a fleet of agents does not hammer a recovering
API in step); a 4xx means the report or the token is wrong, which retrying
will not fix, so it is logged with the API's answer and retried at the normal
interval.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agents.nvml.inventory import InventoryError

log = logging.getLogger("hamiadmin.agent.reporter")

REPORT_PATH = "/api/v1/agents/report/"
MAX_LOGGED_BODY = 2000

HINTS = {
    400: "the API found the report malformed",
    401: "check the token (--token, --token-file or HAMIADMIN_AGENT_TOKEN)",
    403: "the token may not be allowed to report this node",
    404: "check --api: it should be the hamiadmin base URL",
}


class TokenError(RuntimeError):
    """The agent has no usable API token right now."""


def report_url(api: str) -> str:
    """``{api}/api/v1/agents/report/`` for a base URL given with or without a trailing slash."""
    base = api.strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"--api: expected an http:// or https:// URL, got {api!r}")
    return base + REPORT_PATH


def token_source(token: str | None = None, token_file: str | Path | None = None) -> Callable[[], str]:
    """Where the token comes from; a file is re-read on every report so a rotated secret is picked up."""
    if token_file is not None:
        path = Path(token_file)

        def from_file() -> str:
            try:
                value = path.read_text(encoding="utf-8").strip()
            except OSError as error:
                raise TokenError(f"cannot read token file {path}: {error.strerror or error}") from error
            if not value:
                raise TokenError(f"token file {path} is empty")
            return value

        return from_file
    value = (token or "").strip()
    if not value:
        raise TokenError("no API token: give --token, --token-file or HAMIADMIN_AGENT_TOKEN")
    return lambda: value


@dataclass(frozen=True)
class Delivery:
    """What became of one report: the HTTP status (None if no answer) and what was said."""

    status: int | None
    retry_soon: bool
    detail: str
    refused: tuple[str, ...] = ()  # the server's words for each card it refused to take from us

    @property
    def accepted(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect would turn the POST into a GET and lose the report; surface it instead."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class ApiReporter:
    """POSTs report bodies to the API with ``Authorization: Token KEY``."""

    def __init__(self, api: str, token: Callable[[], str], timeout: float = 10.0):
        self.url = report_url(api)
        self.token = token
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_NoRedirect)

    def send(self, body: dict) -> Delivery:
        try:
            token = self.token()
        except TokenError as error:
            return Delivery(None, True, str(error))
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode("utf-8"),
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "Authorization": f"Token {token}",
                "User-Agent": "hamiadmin-nvml-agent",
            },
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                raw = response.read()
                return Delivery(response.status, False, _excerpt(raw), _refused(raw))
        except urllib.error.HTTPError as error:
            text = _excerpt(error.read())
            if 300 <= error.code < 400:
                text = (
                    f"redirected to {error.headers.get('Location')!r}; give that URL's base as --api. {text}"
                )
            return Delivery(error.code, error.code >= 500 or error.code == 429, text)
        except urllib.error.URLError as error:
            return Delivery(None, True, f"cannot reach {self.url}: {error.reason}")
        except (OSError, http.client.HTTPException) as error:
            return Delivery(None, True, f"cannot reach {self.url}: {error}")


def _refused(raw: bytes) -> tuple[str, ...]:
    """The `refused` messages of an accepted report's answer (cards of another node)."""
    try:
        answer = json.loads(raw)
    except ValueError:
        return ()
    refused = answer.get("refused") if isinstance(answer, dict) else None
    if not isinstance(refused, list):
        return ()
    return tuple(str(item.get("message", item)) if isinstance(item, dict) else str(item) for item in refused)


def _excerpt(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    return text if len(text) <= MAX_LOGGED_BODY else text[:MAX_LOGGED_BODY] + "..."


@dataclass
class Backoff:
    """Delay before retry number ``failures``: doubling from ``base`` up to ``cap``, with jitter.

    The delay lies between half and all of the doubled ceiling ("equal jitter"),
    so retries spread out but never collapse to zero.
    """

    base: float = 1.0
    cap: float = 60.0
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, failures: int) -> float:
        ceiling = min(self.cap, self.base * 2.0 ** min(max(failures - 1, 0), 62))
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)


def report_forever(
    produce: Callable[[], dict],
    reporter: ApiReporter,
    *,
    interval: float,
    sleep: Callable[[float], object],
    stopped: Callable[[], bool],
    backoff: Backoff | None = None,
) -> None:
    """Report every ``interval`` seconds until ``stopped()``; back off while the API is down.

    A fresh report is produced for every attempt, so a retry never sends stale cards.
    """
    backoff = backoff or Backoff()
    failures = 0
    while not stopped():
        delay = interval
        try:
            body = produce()
        except InventoryError as error:
            failures += 1
            delay = backoff.delay(failures)
            log.error("cannot read the cards (retry in %.1fs): %s", delay, error)
        else:
            delivery = reporter.send(body)
            if delivery.accepted:
                for message in delivery.refused:
                    log.warning("the API refused one card of this report: %s", message)
                if failures:
                    log.info("report accepted again after %d failed attempt(s)", failures)
                failures = 0
            elif delivery.retry_soon:
                failures += 1
                delay = backoff.delay(failures)
                status = f"HTTP {delivery.status}" if delivery.status else "no answer"
                log.warning("API unavailable (%s, retry in %.1fs): %s", status, delay, delivery.detail)
            else:
                failures = 0
                hint = HINTS.get(delivery.status, "")
                log.error(
                    "API rejected the report with HTTP %s%s: %s",
                    delivery.status,
                    f" ({hint})" if hint else "",
                    delivery.detail or "(empty body)",
                )
        if stopped():
            return
        sleep(delay)
