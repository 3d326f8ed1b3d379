"""The lock order lives in one place (`scheduling.pipeline.rowlocks`): no other module takes a
row lock, each helper locks as documented (the clause, the rows of which table, primary-key
order), and on PostgreSQL the write paths that lock several kinds of rows take them by rising
step (pods, the node, cards) in the statements they send."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduling import services
from scheduling.models import (
    BoundPod,
    CapacityVersion,
    Card,
    Eviction,
    NamespaceQuota,
    Node,
    Pod,
    PodGroup,
    Queue,
)
from scheduling.pipeline import rowlocks, run_cycle
from tests.pipeline.conftest import card, limits

REPO = Path(__file__).resolve().parents[2]


def test_no_row_lock_is_taken_outside_the_helpers():
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for root in ("scheduling", "kube", "agents", "hamiadmin")
        for path in sorted((REPO / root).rglob("*.py"))
        if "migrations" not in path.parts and path != REPO / "scheduling/pipeline/rowlocks.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "select_for_update(" in line  # a lock taken; `statements` reads a built query's flag
    ]
    assert found == []


@pytest.mark.parametrize(
    "helper, model, kwargs, no_key, of, by_pk",
    [
        (rowlocks.lock_pods, Pod, {}, True, (), True),
        (rowlocks.lock_pods, Pod, {"of_self": True}, True, ("self",), True),
        (rowlocks.lock_node, Node, {}, True, (), False),
        (rowlocks.lock_cards, Card, {}, True, (), True),
        (rowlocks.lock_cards, Card, {"of_self": True}, True, ("self",), True),
        (rowlocks.lock_evictions, Eviction, {}, False, ("self",), False),
        (rowlocks.lock_queues, Queue, {}, True, (), True),
        (rowlocks.lock_pod_group, PodGroup, {}, True, (), False),
        (rowlocks.lock_pod_groups, PodGroup, {}, True, (), True),
        (rowlocks.lock_namespace_quotas, NamespaceQuota, {}, True, (), False),
        (rowlocks.lock_bound_pods, BoundPod, {}, True, (), True),
    ],
)
def test_each_helper_locks_as_documented(helper, model, kwargs, no_key, of, by_pk):
    query = helper(model.objects.all(), **kwargs).query
    assert query.select_for_update
    assert query.select_for_no_key_update is no_key
    assert query.select_for_update_of == of
    assert tuple(query.order_by) == (("pk",) if by_pk else ())


def test_every_helper_belongs_to_a_step_or_is_alone():
    stepped = {model for step in rowlocks.LOCK_ORDER for model in step}
    assert stepped.isdisjoint(rowlocks.LOCKED_ALONE)
    everything = {BoundPod, CapacityVersion, Pod, Node, Card, Eviction, Queue, PodGroup, NamespaceQuota}
    assert stepped | set(rowlocks.LOCKED_ALONE) == everything


STEP = {model._meta.db_table: step for step, models in enumerate(rowlocks.LOCK_ORDER) for model in models}
LOCKING = re.compile(
    r'^SELECT .*? FROM "?(?P<table>\w+)"?.* FOR (?P<clause>NO KEY UPDATE|UPDATE|SHARE)\b', re.S
)


def locks_taken(queries) -> list[tuple[str, str, bool]]:
    """(table, lock clause, ordered by its primary key) of every locking statement, in order."""
    taken = []
    for query in queries:
        found = LOCKING.match(query["sql"])
        if found:
            table = found["table"]
            by_pk = re.search(rf'ORDER BY ("{table}"\."id"|1) ASC', query["sql"])  # 1: the pk selected first
            taken.append((table, found["clause"], by_pk is not None))
    return taken


def tables(taken) -> list[str]:
    return [table for table, _, _ in taken]


def rising(taken) -> bool:
    steps = [STEP[table] for table in tables(taken)]
    return steps == sorted(steps)


def service_locks(call, *args, **kwargs) -> list[tuple[str, str, bool]]:
    """The locks one service call takes in its own transaction: run inside an outer one, so the
    wake it registers on commit (its own transaction, pods again) is not counted with them."""
    with transaction.atomic(), CaptureQueriesContext(connection) as report:
        call(*args, **kwargs)
    return locks_taken(report.captured_queries)


@pytest.mark.django_db(transaction=True)
def test_the_write_paths_lock_by_rising_step_on_postgresql(settings):
    if connection.vendor != "postgresql":
        pytest.skip("the lock clauses are PostgreSQL's (SQLite holds the whole database)")
    settings.REDIS_URL = ""
    pod, node, cards, queue, quota = (
        model._meta.db_table for model in (Pod, Node, Card, Queue, NamespaceQuota)
    )

    taken = service_locks(services.report_inventory, "n1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    assert tables(taken) == [node, cards] and rising(taken)
    assert taken == [(node, "NO KEY UPDATE", False), (cards, "NO KEY UPDATE", True)]

    Queue.default()  # made by a migration, flushed by this test's database
    services.submit_pod("default", "p1", {}, [{"name": "main", "resources": limits(gpu=1, mem=1000)}])
    with CaptureQueriesContext(connection) as cycle:
        run_cycle(trigger="test")
    taken = locks_taken(cycle.captured_queries)
    # the capacity version is read unlocked: a release's bump never waits on a commit
    assert tables(taken) == [pod, queue, quota, cards] and rising(taken)
    assert [clause for _, clause, _ in taken] == ["NO KEY UPDATE"] * 4
    assert [by_pk for table, _, by_pk in taken if table in (pod, queue, cards)] == [True] * 3

    taken = service_locks(services.release_pod, Pod.objects.get(name="p1"), Pod.SUCCEEDED)
    assert tables(taken) == [pod, cards] and rising(taken)

    services.report_inventory("n2", {}, {}, [])
    taken = service_locks(services.reassign_card, "GPU-1", "n2", by="ops")
    assert tables(taken) == [node, cards] and rising(taken)


@pytest.mark.django_db(transaction=True)
def test_a_gangs_commit_and_release_lock_its_group_last_on_postgresql(settings):
    if connection.vendor != "postgresql":
        pytest.skip("the lock clauses are PostgreSQL's (SQLite holds the whole database)")
    settings.REDIS_URL = ""
    pod, cards, group = (model._meta.db_table for model in (Pod, Card, PodGroup))
    Queue.default()
    services.report_inventory("n1", {}, {}, [card("GPU-0", 0), card("GPU-1", 1)])
    gang = {"hami.io/group-name": "g", "hami.io/group-min-member": "2"}
    for name in ("m1", "m2"):
        services.submit_pod("default", name, gang, [{"name": "main", "resources": limits(gpu=1, mem=1000)}])
    with CaptureQueriesContext(connection) as cycle:
        run_cycle(trigger="test")
    taken = locks_taken(cycle.captured_queries)
    assert tables(taken)[-1] == group and rising(taken), taken
    assert taken[-1] == (group, "NO KEY UPDATE", True)
    taken = service_locks(services.release_pod, Pod.objects.get(name="m1"), Pod.SUCCEEDED)
    assert tables(taken) == [pod, cards, group] and rising(taken)
