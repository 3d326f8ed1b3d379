"""Log formatters: one JSON object per line in production, readable lines in development.

Both carry the fields a caller passes with `extra={...}` (the decision lines of
scheduling.pipeline.observe), so a log pipeline can filter by pod, node or outcome.
Fields whose name looks like a credential are never written.

No Django here: the agents' command lines call `configure` too, and the NVML agent
imports no Django.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from datetime import UTC, datetime
from typing import Literal

#: Attributes every LogRecord has; anything else on a record came in through `extra`.
#: `request` (Django's request logger) is left out too: its text is already the message.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "request",
}
_SECRET = re.compile(
    r"token|secret|password|passwd|authorization|api[_-]?key|cookie|credential", re.IGNORECASE
)
REDACTED = "[redacted]"


def extra_fields(record: logging.LogRecord) -> dict:
    """The `extra` fields of a record, credentials redacted."""
    return {
        key: REDACTED if _SECRET.search(key) else value
        for key, value in vars(record).items()
        if key not in _STANDARD and not key.startswith("_")
    }


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", ...extra, "exception"}` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        entry.setdefault("process", record.process)
        return json.dumps(entry, default=str, ensure_ascii=False)


class ReadableFormatter(logging.Formatter):
    """`time LEVEL logger message key=value ...` for a terminal."""

    def __init__(
        self,
        fmt: str | None = None,
        datefmt: str | None = None,
        style: Literal["%", "{", "$"] = "%",
        **kwargs,
    ):
        super().__init__(fmt or "%(asctime)s %(levelname)s %(name)s %(message)s", datefmt, style, **kwargs)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = extra_fields(record)
        if not fields:
            return text
        pairs = " ".join(f"{key}={_short(value)}" for key, value in fields.items())
        head, newline, rest = text.partition("\n")  # keep a traceback below the fields
        return f"{head} [{pairs}]{newline}{rest}"


def _short(value) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value) or "-"
    if isinstance(value, dict):
        return ",".join(f"{key}:{item}" for key, item in value.items()) or "-"
    return "-" if value is None or value == "" else str(value)


#: Secrets that can travel in a URL path (kube-scheduler cannot send headers to an extender).
_PATH_SECRET = re.compile(r"(/extender/key/)[^/\s\"']+")


def redact_path_secrets(text: str) -> str:
    """`text` with the token of any `/extender/key/<token>` replaced by [redacted]."""
    return _PATH_SECRET.sub(r"\1" + REDACTED, text) if "/extender/key/" in text else text


class RedactPathSecrets(logging.Filter):
    """Rewrites `/extender/key/<token>/` in a record's text, e.g. Django's "Not Found: ..."
    warnings and the development server's access lines, so the token never reaches a log."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "/extender/key/" in message:
            record.msg, record.args = redact_path_secrets(message), ()
        return True


FORMATS = ("plain", "json")


def format_from_env(environ=None) -> str:
    """LOG_FORMAT, else `json` when HAMIADMIN_ENV=production, else `plain`: the rule of
    hamiadmin/settings.py, for processes that run without Django settings."""
    environ = os.environ if environ is None else environ
    production = environ.get("HAMIADMIN_ENV", "development").strip().lower() == "production"
    return environ.get("LOG_FORMAT", "json" if production else "plain").strip().lower()


def configure(
    level: str | int = "INFO",
    fmt: str | None = None,
    *,
    logger: logging.Logger | None = None,
    plain: str | None = None,
) -> logging.Handler:
    """Sends `logger`'s records (the root's by default) to stderr as JSON lines or readable
    lines, path secrets redacted, replacing the handlers it had; returns the new handler.

    `fmt` defaults to `format_from_env()`; like the settings, anything but `json` is plain,
    with a warning naming LOG_FORMAT when it is neither. `plain` is the readable line's
    format string."""
    fmt = format_from_env() if fmt is None else fmt.strip().lower()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else ReadableFormatter(plain))
    handler.addFilter(RedactPathSecrets())
    target = logging.getLogger() if logger is None else logger
    for old in target.handlers[:]:
        target.removeHandler(old)
    target.addHandler(handler)
    target.setLevel(level)
    if fmt not in FORMATS:
        target.warning("LOG_FORMAT: expected one of %s, got %r; using plain", ", ".join(FORMATS), fmt)
    return handler
