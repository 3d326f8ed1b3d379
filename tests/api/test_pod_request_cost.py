"""What one `POST pods/` and one `POST pods/<ns>/<name>/complete/` cost in queries: the
per-pod paths stay free of duplicate reads (the load test sends hundreds a second)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.models import Pod
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod

pytestmark = pytest.mark.django_db


def statements(queries: CaptureQueriesContext) -> list[str]:
    """The SQL sent, savepoints left out (the test's transaction turns each commit into one)."""
    return [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]


def test_a_submission_reads_the_pod_once_and_the_config_once(cluster, operator):
    with CaptureQueriesContext(connection) as queries:
        answer = operator.post("/api/v1/pods/", gpu_pod("p", mem=1000), format="json")
    assert answer.status_code == 201, answer.content
    sent = statements(queries)
    assert sum('FROM "scheduling_pod"' in sql for sql in sent) == 1  # the lock of the row, if any
    assert sum('FROM "scheduling_schedulerconfig"' in sql for sql in sent) == 1
    assert len(sent) <= 5, sent  # token, role, config, lock, insert


def test_a_complete_locks_the_pod_once_and_reads_no_released_allocation(cluster, operator):
    assert operator.post("/api/v1/pods/", gpu_pod("p", mem=1000), format="json").status_code == 201
    run_cycle(trigger="test")
    with CaptureQueriesContext(connection) as queries:
        answer = operator.post("/api/v1/pods/default/p/complete/")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["status"], body["node"], body["containers"][0]["devices"]) == ("succeeded", "node1", [])
    sent = statements(queries)
    assert sum(sql.startswith('SELECT "scheduling_pod"') for sql in sent) == 1, sent
    assert not any('FROM "scheduling_node"' in sql for sql in sent)  # read with the pod
    assert sum('FROM "scheduling_allocation"' in sql for sql in sent) == 1  # the release's own read
    assert Pod.objects.get(name="p").status == Pod.SUCCEEDED


def test_a_complete_answer_reads_no_eviction_or_nomination_list_the_pod_has_none_of(cluster, operator):
    """One count over the evictions (as victim and as preemptor) and one look for a
    nomination stand in for the three lists, which are read only when they have rows."""
    assert operator.post("/api/v1/pods/", gpu_pod("p", mem=1000), format="json").status_code == 201
    run_cycle(trigger="test")
    with CaptureQueriesContext(connection) as queries:
        answer = operator.post("/api/v1/pods/default/p/complete/")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["evictions"], body["preemptions"], body["nominations"]) == ([], [], [])
    sent = statements(queries)
    assert sum('FROM "scheduling_eviction"' in sql for sql in sent) == 1, sent
    assert sum('FROM "scheduling_nomination"' in sql for sql in sent) == 1, sent
    assert not any('FROM "scheduling_nomination" INNER JOIN' in sql for sql in sent), sent
