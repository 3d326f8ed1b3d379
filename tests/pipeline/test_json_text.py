"""The commit writes JSON columns as text through `commit.json_text` (orjson, falling back to
`json.dumps`): whatever a payload holds, the text reads back as `json.dumps`' would (issue 29)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.models import Decision, Pod
from scheduling.pipeline.commit import insert_rows, json_text

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)  # past 64 bits: json.dumps writes them
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
KEYS = st.text() | st.integers(-5, 5)  # json.dumps writes integer keys as strings
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=VALUES)
def test_json_text_reads_back_as_json_dumps_writes(value):
    assert json.loads(json_text(value)) == json.loads(json.dumps(value))


def test_json_text_of_a_tuple_and_of_unicode():
    assert json.loads(json_text({"order": ("a", 1)})) == {"order": ["a", 1]}
    assert json.loads(json_text({"name": 'é "\\ \u2028'})) == {"name": 'é "\\ \u2028'}


@pytest.mark.django_db
def test_a_payload_written_by_the_commit_reads_back_whole():
    """Through `insert_rows` (COPY on PostgreSQL, executemany on SQLite) and the ORM back."""
    pod = Pod.objects.create(name="explained", containers=[])
    payload = {"node_order": [["n1", 0.1 + 0.2], ["n2", 6.326601]], "reasons": {"CardInsufficientMemory": 3}}
    payload["odd"] = {7: "integer key", "big": 2**70}
    insert_rows(Decision, [{"pod_id": pod.pk, "outcome": "pending", "payload": payload}])
    stored = Decision.objects.get(pod=pod).payload
    assert stored == json.loads(json.dumps(payload))


@pytest.mark.django_db
def test_update_rows_writes_every_kind_of_value_and_is_seen_by_query_capture():
    """`update_rows` (PostgreSQL: one UPDATE with its arrays bound on the server, in binary;
    SQLite: executemany) writes text with quotes, backslashes and unicode, JSON, nulls,
    integers, times and booleans as they are, and Django's query capture sees the statement."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from scheduling.pipeline.commit import update_rows

    pods = [Pod.objects.create(name=f"p{i}", containers=[]) for i in range(3)]
    now = timezone.now()
    rows = [
        {
            "id": pod.pk,
            "reason": ['it said "no" \\ here', "é\u2028{x,y}", ""][i],
            "extra_annotations": [{"a": [1, None]}, {}, {"n": 2**70}][i],
            "attempts": [0, 7, 2**31 - 1][i],
            "scheduled_at": [now, None, now][i],
            "parked": [True, False, True][i],
        }
        for i, pod in enumerate(pods)
    ]
    with CaptureQueriesContext(connection) as captured:
        update_rows(Pod, ["reason", "extra_annotations", "attempts", "scheduled_at", "parked"], rows)
    assert any("UPDATE" in query["sql"] for query in captured.captured_queries)
    for row in rows:
        pod = Pod.objects.get(pk=row["id"])
        assert pod.reason == row["reason"]
        assert pod.extra_annotations == row["extra_annotations"]
        assert (pod.attempts, pod.scheduled_at, pod.parked) == (
            row["attempts"],
            row["scheduled_at"],
            row["parked"],
        )
