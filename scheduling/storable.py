"""What the database can store of the text it is sent. Pure (no Django import).

Kubernetes accepts any JSON string as an annotation value, NUL (`\\u0000`) included.
PostgreSQL's text and jsonb cannot hold NUL, and no UTF-8 text holds a lone surrogate, so
such a value would fail the write on every resync. The Kubernetes readers
(`kube.pods.submission`, `kube.nodes.inventory`) refuse it instead, naming the
field (docs/kubernetes.md, *Refused objects*); events quote such text escaped.
"""

from __future__ import annotations


def why_unstorable(text: str) -> str | None:
    """Why the database cannot store `text`, or None when it can."""
    if "\x00" in text:
        return "contains a NUL character (\\0), which the database cannot store"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate), which the database cannot store"
    return None


def escaped(text) -> str:
    """`text` as it can be stored: NUL written `\\0`, lone surrogates as backslash escapes."""
    return str(text).replace("\x00", "\\0").encode("utf-8", "backslashreplace").decode("utf-8")


def printable(text, limit: int = 400) -> str:
    """`text` escaped, cut to `limit` characters. For subjects and messages that quote what
    was refused."""
    text = escaped(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
