"""Migrations carry existing rows over: 0002 moves the not-ready reason out of the node's
annotations and marks pods that have a uid as Kubernetes pods."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("scheduling", "0001_initial")]
AFTER = [("scheduling", "0002_origin_bound_at_not_ready_reason")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_0002_moves_the_reason_to_its_field_and_guesses_origins():
    apps = migrate(BEFORE)
    try:
        Node, Pod = apps.get_model("scheduling", "Node"), apps.get_model("scheduling", "Pod")
        Node.objects.create(
            name="broken",
            ready=False,
            annotations={
                "hamiadmin.io/not-ready-reason": "malformed register",
                "hami.io/device-cordon": "GPU-1",
            },
        )
        Node.objects.create(name="fine", annotations={"hami.io/device-cordon": "GPU-2"})
        Pod.objects.create(name="watched", uid="1234", containers=[])
        Pod.objects.create(name="posted", containers=[])
        apps = migrate(AFTER)
        Node, Pod = apps.get_model("scheduling", "Node"), apps.get_model("scheduling", "Pod")
        broken, fine = Node.objects.get(name="broken"), Node.objects.get(name="fine")
        assert (broken.not_ready_reason, broken.annotations) == (
            "malformed register",
            {"hami.io/device-cordon": "GPU-1"},
        )
        assert (fine.not_ready_reason, fine.annotations) == ("", {"hami.io/device-cordon": "GPU-2"})
        assert dict(Pod.objects.values_list("name", "origin")) == {"watched": "kubernetes", "posted": "api"}
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_0025_compresses_decision_payloads_with_lz4_and_they_read_back_whole():
    """Issue 29: new decision payloads are compressed with lz4 on PostgreSQL (a server without
    lz4 keeps pglz); a payload large enough to be compressed reads back as it was written."""
    from scheduling.models import Decision, Pod

    if connection.vendor != "postgresql":
        pytest.skip("column compression is PostgreSQL's (SQLite stores the text)")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
        lz4 = cursor.fetchone()[0]
        cursor.execute(
            "SELECT attcompression FROM pg_attribute"
            " WHERE attrelid = 'scheduling_decision'::regclass AND attname = 'payload'"
        )
        assert cursor.fetchone()[0] == ("l" if lz4 else "")
    pod = Pod.objects.create(name="explained", containers=[])
    payload = {"node_order": [[f"node-{i:05d}", i / 7] for i in range(400)], "reasons": {"x": 1}}
    decision = Decision.objects.create(pod=pod, outcome="pending", payload=payload)
    assert Decision.objects.get(pk=decision.pk).payload == payload
    if lz4:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_column_compression(payload) FROM scheduling_decision WHERE id = %s", [decision.pk]
            )
            assert cursor.fetchone()[0] == "lz4"
