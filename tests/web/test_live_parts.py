"""Live refresh by parts: a poll gets only the blocks and rows that changed, as JSON."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from scheduling.web.live import blocks, children
from scheduling.web.queries import fingerprint

from .conftest import cycle, submit
from .test_scale_pages import report_nodes

pytestmark = pytest.mark.django_db


def test_a_page_is_cut_into_its_blocks_and_rows():
    page = (
        '<html><body><nav>x</nav><main id="live" data-live="/live/">\n'
        "<header><h1>T</h1><br><img src=x /></header>\n"
        '<section><div class="heatmap" data-live-rows="cards"><a href="/n1/"><i></i></a>'
        '<a href="/n2/"><i title="a &gt; b"></i></a></div><p>after</p></section>\n'
        "<!-- a comment <div> --><script>if (a < b) { x = '<div>'; }</script>"
        "<table><tbody data-live-rows><tr><td>1</td></tr><tr><td>2</td></tr></tbody></table>\n"
        "</main></body></html>"
    )
    found = blocks(page)
    assert [block.html[:8] for block in found] == ["<header>", "<section", "<script>", "<table><"]
    assert found[1].rows == [['<a href="/n1/"><i></i></a>', '<a href="/n2/"><i title="a &gt; b"></i></a>']]
    assert (
        found[1].shell == '<section><div class="heatmap" data-live-rows="cards"></div><p>after</p></section>'
    )
    assert found[3].rows == [["<tr><td>1</td></tr>", "<tr><td>2</td></tr>"]]
    assert children("<p>a</p> text <input name=x><hr/>") == [(0, 8), (14, 28), (28, 33)]


def poll(client, since: str = "", tab: str = "t1", **params) -> dict:
    headers = {"HTTP_X_LIVE": "1", "HTTP_X_LIVE_TAB": tab}
    if since:
        headers["HTTP_X_LIVE_SINCE"] = since
    answer = client.get(reverse("home"), params, **headers)
    assert answer.status_code == 200 and answer["Content-Type"] == "application/json"
    assert "X-Live" in answer["Vary"]
    return answer.json()


def test_a_poll_after_one_placement_sends_the_rows_that_moved_not_the_page(viewer_client):
    report_nodes()
    page = viewer_client.get(reverse("home")).content.decode()
    first = poll(viewer_client)  # the tab's first poll: every block, once
    assert all(part is not None and "html" in part for part in first["blocks"])
    assert first["version"] == fingerprint()
    unchanged = poll(viewer_client, since=first["version"])
    assert unchanged["blocks"] == [None] * len(first["blocks"])

    submit("big", mem=16000, annotations={"nvidia.com/use-gpuuuid": "GPU-007-1"})
    assert len(cycle().placed) == 1
    moved = poll(viewer_client, since=first["version"])
    assert moved["version"] != first["version"]
    heatmap = next(
        part for part in moved["blocks"] if part and "rows" in part and "hm-node" in json.dumps(part)
    )
    assert [row[2].split('data-node="')[1].split('"')[0] for row in heatmap["rows"]] == ["n007"]
    table = [part for part in moved["blocks"] if part and "rows" in part and "node-row" in json.dumps(part)]
    assert len(table) == 1 and [row[1] for row in table[0]["rows"]] == [7]  # n007's row, on page one
    assert len(json.dumps(moved)) < len(page) / 4

    other_tab = poll(viewer_client, since=first["version"], tab="t2")  # never sent anything
    assert all(part is not None and "html" in part for part in other_tab["blocks"])
