"""Live refresh by parts: a page polled by `live.js` answers with only what changed.

A live page's content is the element children of `<main id="live">` (its *blocks*). Inside a
block, an element marked `data-live-rows` holds *rows* (its element children: the heatmap's
nodes, a table body's rows). When `live.js` sees the version move it asks the page again with
`X-Live: 1` and the version it holds (`X-Live-Since`); the page is rendered as usual, cut into
blocks and rows, each hashed, and compared with the hashes kept (in the cache, for a few
minutes) when the same URL was last sent at that version to the same tab (`X-Live-Tab`) and role. The
answer is JSON: per block `null` (unchanged), `{"rows": [[container, row, html], ...]}` (only
rows changed; the block's other markup and its row counts did not) or `{"html": ...}` (the
block anew). A version the cache does not know gets every block: the first change after a
page load costs one full answer, the next ones only what moved.

The page's first load does no cutting and costs nothing extra.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from django.core.cache import cache
from django.http import JsonResponse

#: How long the hashes of a sent page are kept: a tab polls every 2 s, a hidden one not at all.
KEEP_SECONDS = 300
VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
)
#: A tag or a comment. Attribute values never hold a raw `>`: Django escapes it (`&gt;`).
TAG = re.compile(r"<!--.*?-->|<(/?)([a-zA-Z][a-zA-Z0-9-]*)([^>]*)>", re.S)
MAIN = re.compile(r'<main id="live"[^>]*>')
ROWS_MARK = re.compile(r"\sdata-live-rows(?:=|\s|>|/)")


@dataclass
class Block:
    html: str
    #: Per `data-live-rows` container, its rows' HTML; `shell` is the block without them.
    rows: list[list[str]] = field(default_factory=list)
    shell: str = ""

    def hashes(self) -> dict:
        return {
            "h": _hash(self.html),
            "s": _hash(self.shell),
            "r": [[_hash(row) for row in rows] for rows in self.rows],
        }


#: A form's CSRF token is masked anew on every render; any of them stays valid, so it is no change.
CSRF = re.compile(r'(name="csrfmiddlewaretoken" value=")[^"]*"')


def _hash(text: str) -> str:
    return hashlib.blake2b(CSRF.sub(r'\1"', text).encode(), digest_size=8).hexdigest()


def children(html: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of each top-level element of `html[start:end]`; text between them is skipped.
    Void elements and `<x/>` are whole; `<script>`/`<style>` bodies are not read as tags."""
    end = len(html) if end is None else end
    spans: list[tuple[int, int]] = []
    depth, opened = 0, -1
    position = start
    while True:
        found = TAG.search(html, position, end)
        if found is None:
            break
        position = found.end()
        closing, name = found.group(1), (found.group(2) or "").lower()
        if not name:
            continue  # a comment
        if closing:
            depth -= 1
            if depth == 0:
                spans.append((opened, found.end()))
            continue
        self_closed = name in VOID or found.group(3).rstrip().endswith("/")
        if name in ("script", "style") and not self_closed:
            close = html.find(f"</{name}", position, end)
            if close < 0:
                break
            tail = html.find(">", close, end)
            position = (tail + 1) if tail >= 0 else end
            if depth == 0:
                spans.append((found.start(), position))
            continue
        if self_closed:
            if depth == 0:
                spans.append((found.start(), found.end()))
            continue
        if depth == 0:
            opened = found.start()
        depth += 1
    return spans


def blocks(page: str) -> list[Block] | None:
    """The page's blocks, with their rows cut out; None when it has no live `<main>`."""
    opening = MAIN.search(page)
    closing = page.rfind("</main>")
    if opening is None or closing < opening.end():
        return None
    found = []
    for start, end in children(page, opening.end(), closing):
        html = page[start:end]
        block = Block(html)
        shell, last = [], 0
        for container in _row_containers(html):
            inner_start, inner_end = container
            block.rows.append([html[a:b] for a, b in children(html, inner_start, inner_end)])
            shell.append(html[last:inner_start])
            last = inner_end
        shell.append(html[last:])
        block.shell = "".join(shell)
        found.append(block)
    return found


def _row_containers(html: str) -> list[tuple[int, int]]:
    """(start, end) of the inner HTML of each `data-live-rows` element in a block (not nested)."""
    spans: list[tuple[int, int]] = []
    position = 0
    while True:
        mark = html.find("data-live-rows", position)
        if mark < 0:
            return spans
        found = TAG.search(html, html.rfind("<", 0, mark))
        if found is None:
            return spans
        position = found.end()
        if found.group(1) or not found.group(2) or not ROWS_MARK.search(found.group(0)):
            continue
        name = found.group(2).lower()
        depth, scan = 1, position
        for tag in TAG.finditer(html, position):
            if (tag.group(2) or "").lower() != name:
                continue
            if tag.group(1):
                depth -= 1
                if depth == 0:
                    spans.append((position, tag.start()))
                    scan = tag.end()
                    break
            elif not tag.group(3).rstrip().endswith("/"):
                depth += 1
        position = scan


def _key(request, role: str, version: str) -> str:
    """Per URL, role, tab (`X-Live-Tab`, so two tabs never compare with each other's
    answers) and version."""
    tab = re.sub(r"[^a-z0-9]", "", request.headers.get("X-Live-Tab", ""))[:16]
    return f"live:{_hash(request.get_full_path())}:{role}:{tab}:{version}"


def wants_parts(request) -> bool:
    return request.headers.get("X-Live") == "1"


def parts_response(request, page: str, version: str, role: str) -> JsonResponse:
    """The JSON answer to a live poll: what changed since the version the tab holds. `role`
    keeps apart pages that differ by who asks (an operator sees action buttons)."""
    found = blocks(page)
    if found is None:
        return JsonResponse({"version": version, "blocks": None})
    hashes = [block.hashes() for block in found]
    since = request.headers.get("X-Live-Since", "")
    before = cache.get(_key(request, role, since)) if since else None
    if before is not None and len(before) != len(found):
        before = None
    answer: list[dict | None] = []
    for position, (block, now) in enumerate(zip(found, hashes, strict=True)):
        then = before[position] if before is not None else None
        if then is not None and then["h"] == now["h"]:
            answer.append(None)
        elif (
            then is not None
            and then["s"] == now["s"]
            and [len(rows) for rows in then["r"]] == [len(rows) for rows in now["r"]]
        ):
            answer.append(
                {
                    "rows": [
                        [c, r, block.rows[c][r]]
                        for c, rows in enumerate(now["r"])
                        for r, row_hash in enumerate(rows)
                        if then["r"][c][r] != row_hash
                    ]
                }
            )
        else:
            answer.append({"html": block.html})
    cache.set(_key(request, role, version), hashes, KEEP_SECONDS)
    return JsonResponse({"version": version, "blocks": answer})
