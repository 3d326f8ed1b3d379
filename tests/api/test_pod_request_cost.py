"""What one `POST pods/` and one `POST pods/<ns>/<name>/complete/` cost in queries: the
per-pod paths stay free of duplicate reads (the load test sends hundreds a second)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.api import serializers as s
from scheduling.models import Decision, Eviction, Pod
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
    # the release's own: one UPDATE that returns what it released, no read before it
    assert sum('"scheduling_allocation"' in sql for sql in sent) == 1, sent
    assert any(sql.startswith('UPDATE "scheduling_allocation"') and "RETURNING" in sql for sql in sent)
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
    # read with the latest decision, in its statement
    (read,) = [sql for sql in sent if 'FROM "scheduling_decision"' in sql]
    assert 'FROM "scheduling_eviction"' in read and 'FROM "scheduling_nomination"' in read


def test_a_completed_pod_without_a_decision_is_answered_as_the_serializer_answers(cluster, operator):
    """No decision row (retention took it, or the writer has not written it yet): its flags
    are read alone, and the answer is still the serializer's."""
    assert operator.post("/api/v1/pods/", gpu_pod("p", mem=1000), format="json").status_code == 201
    run_cycle(trigger="test")
    Decision.objects.filter(pod__name="p").delete()
    answer = operator.post("/api/v1/pods/default/p/complete/")
    assert answer.status_code == 200, answer.content
    assert answer.json()["decision"] is None
    pod = Pod.objects.select_related("node").get(name="p")
    by_serializer = s.PodDetailSerializer(pod, context={"released": True}).data
    assert json.loads(answer.content) == json.loads(rendered(by_serializer))


def rendered(data) -> str:
    """An answer as the client reads it: JSON text, keys in the order written."""
    return json.dumps(data, cls=DjangoJSONEncoder)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"uid": "u-1", "priority": 7, "labels": {"team": "a"}},
        {"annotations": {"hami.io/gpu-scheduler-policy": "spread,no-such-chain"}},  # a warning
        {"schedulingGates": [{"name": "wait-for-quota"}]},  # gated: a reason and a verdict
        {"initContainers": [{"name": "init", "resources": {}}]},
    ],
)
def test_a_new_pods_answer_is_what_the_serializer_writes_for_its_row(cluster, operator, extra):
    """The hand-built answer of `POST pods/` for a new row (`new_pod_answer`) is the
    serializer's answer of the same row read back: the same keys, order and values."""
    body = {**gpu_pod("p", mem=1000), **extra}
    if "annotations" in extra:
        body["annotations"] = extra["annotations"]
    answer = operator.post("/api/v1/pods/", body, format="json")
    assert answer.status_code == 201, answer.content
    pod = Pod.objects.get(name="p")
    warnings = answer.json()["warnings"]
    assert ("gpu" in str(warnings)) == ("annotations" in extra)
    by_serializer = s.PodSubmittedSerializer(pod, context={"warnings": warnings, "new_row": True}).data
    assert json.loads(answer.content) == json.loads(rendered(by_serializer))
    assert list(answer.json()) == list(by_serializer)  # the keys in the serializer's order


def test_a_completed_pods_answer_and_its_decision_are_what_the_serializers_write(cluster, operator):
    assert operator.post("/api/v1/pods/", gpu_pod("p", mem=1000), format="json").status_code == 201
    run_cycle(trigger="test")
    answer = operator.post("/api/v1/pods/default/p/complete/")
    assert answer.status_code == 200, answer.content
    pod = Pod.objects.select_related("node").get(name="p")
    assert answer.json()["decision"]["outcome"] == "scheduled"
    by_serializer = s.PodDetailSerializer(pod, context={"released": True}).data
    assert json.loads(answer.content) == json.loads(rendered(by_serializer))
    assert list(answer.json()) == list(by_serializer)
    assert list(answer.json()["decision"]) == list(by_serializer["decision"])


def test_a_pending_decision_renders_as_the_serializer_renders_it(cluster, operator):
    """A decision that names failed nodes, reasons and an error renders by hand as
    `DecisionSerializer` renders it."""
    assert operator.post("/api/v1/pods/", gpu_pod("big", mem=100_000), format="json").status_code == 201
    run_cycle(trigger="test")
    decision = Decision.objects.select_related("pod").get(pod__name="big")
    assert decision.outcome != "scheduled" and decision.payload.get("failed_nodes")
    by_hand = s.decision_answer(decision, decision.pod.key)
    assert rendered(by_hand) == rendered(s.DecisionSerializer(decision).data)


def test_a_completed_pod_in_an_eviction_is_answered_with_its_evictions(cluster, operator):
    """A pod that was a preemptor keeps its `preemptions` in the answer (the serializer's path)."""
    assert operator.post("/api/v1/pods/", gpu_pod("victim", mem=1000), format="json").status_code == 201
    assert operator.post("/api/v1/pods/", gpu_pod("p", mem=1000), format="json").status_code == 201
    run_cycle(trigger="test")
    victim, preemptor = Pod.objects.get(name="victim"), Pod.objects.get(name="p")
    Eviction.objects.create(victim=victim, preemptor=preemptor, state=Eviction.DONE)
    answer = operator.post("/api/v1/pods/default/p/complete/")
    assert answer.status_code == 200, answer.content
    assert [row["victim"] for row in answer.json()["preemptions"]] == ["default/victim"]


def test_submit_bodies_validated_side_by_side_keep_their_own_fields_and_errors():
    """`PodSubmitSerializer` builds its fields once per class: each body still gets fields of
    its own, bound to it, and threads validating at once see only their own errors."""
    good = gpu_pod("fine", mem=1000)
    bad = {**gpu_pod("Not_A_Name", mem=1000), "priority": "high"}
    first, second = s.PodSubmitSerializer(data=good), s.PodSubmitSerializer(data=bad)
    assert first.fields["name"] is not second.fields["name"]
    assert first.fields["name"].parent is first and second.fields["name"].parent is second
    assert first.is_valid(), first.errors
    assert not second.is_valid() and {"name", "priority"} <= set(second.errors)
    assert first.validated_data["name"] == "fine"

    def validate(n: int) -> list:
        found = []
        for round_ in range(50):
            body = good if (n + round_) % 2 else bad
            serializer = s.PodSubmitSerializer(
                data={**body, "name": body["name"] if body is bad else f"p{n}-{round_}"}
            )
            found.append((serializer.is_valid(), sorted(serializer.errors), body is good))
        return found

    with ThreadPoolExecutor(8) as pool:
        for results in pool.map(validate, range(8)):
            for valid, errors, was_good in results:
                assert valid is was_good and (errors == [] if was_good else "name" in errors)
