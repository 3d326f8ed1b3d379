"""Queue tree writes under real concurrency on PostgreSQL (docs/queues.md, "Writes to the
tree"): two requests that each pass alone, sent at once through the REST API. Two PATCHes
making each other parent used to store a cycle (each validated a tree without the other's
change); a DELETE racing a submission into the queue used to answer the submission 500 (the
pod pointed at a row deleted under it)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from scheduling.models import Pod, Queue

pytestmark = pytest.mark.django_db(transaction=True)

TRIES = 25


def at_once(*calls) -> list:
    """Run the calls in threads released together; their results, in order."""
    start = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(index, call):
        start.wait()
        try:
            results[index] = call()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def retried(call, tries: int = 3):
    """`call`'s answer, sent again after its `Retry-After` while it is a 503 `lock_timeout`
    (nothing written: another writer held a row past HAMI_DB_WEB_LOCK_TIMEOUT_MS, which a
    loaded machine can make a short transaction do), as the CLI and any client should."""
    for _ in range(tries - 1):
        answer = call()
        if answer.status_code != 503 or answer.json().get("code") != "lock_timeout":
            return answer
        time.sleep(float(answer["Retry-After"]))
    return call()


def ancestors(name: str) -> list[str]:
    """The queue's ancestors, nearest first, stopping at a repeat (a cycle)."""
    out, queue = [], Queue.objects.get(name=name).parent
    while queue is not None and queue.name not in out and queue.name != name:
        out.append(queue.name)
        queue = queue.parent
    if queue is not None:
        out.append(queue.name)  # the repeat: a cycle
    return out


def test_two_parent_changes_at_once_never_store_a_cycle(require_postgres, client_for):
    first, second = client_for("operator"), client_for("operator")
    first.post("/api/v1/queues/", {"name": "x"}, format="json")
    first.post("/api/v1/queues/", {"name": "y"}, format="json")
    for _ in range(TRIES):
        Queue.objects.filter(name__in=["x", "y"]).update(parent=None)
        answers = at_once(
            lambda: retried(lambda: first.patch("/api/v1/queues/x/", {"parent": "y"}, format="json")),
            lambda: retried(lambda: second.patch("/api/v1/queues/y/", {"parent": "x"}, format="json")),
        )
        codes = sorted(answer.status_code for answer in answers)
        assert codes == [200, 400], [answer.content for answer in answers]
        refused = next(answer for answer in answers if answer.status_code == 400)
        assert "its own ancestor" in refused.json()["parent"][0]
        assert "x" not in ancestors("x") and "y" not in ancestors("y")


def test_a_delete_racing_a_submission_into_the_queue_answers_409_naming_it_never_500(
    require_postgres, client_for
):
    deleter, submitter = client_for("operator"), client_for("operator")
    outcomes = set()
    for n in range(TRIES):
        name = f"q{n}"
        assert deleter.post("/api/v1/queues/", {"name": name}, format="json").status_code == 201
        pod = {
            "namespace": "default",
            "name": f"p{n}",
            "annotations": {"hami.io/queue": name},
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        }
        deleted, submitted = at_once(
            lambda name=name: retried(lambda: deleter.delete(f"/api/v1/queues/{name}/")),
            lambda pod=pod: retried(lambda: submitter.post("/api/v1/pods/", pod, format="json")),
        )
        assert deleted.status_code in (204, 400), deleted.content
        assert submitted.status_code in (201, 409), submitted.content
        row = Pod.objects.filter(name=f"p{n}").select_related("queue").first()
        if submitted.status_code == 409:
            assert submitted.json() == {"queue": [f"queue {name} was deleted while this pod was submitted"]}
            assert row is None and deleted.status_code == 204
        elif deleted.status_code == 400:  # the pod joined first: the queue holds it
            assert row.queue.name == name and "holds 1 pods" in deleted.json()["name"][0]
        else:  # the delete was over before the pod named the queue: stored, the cycle says QueueNotFound
            assert row.queue is None
        outcomes.add((deleted.status_code, submitted.status_code))
    print(f"outcomes over {TRIES} races: {sorted(outcomes)}")
