"""What-if for a whole job (issue 32, `engine.batch.whatif`): `POST whatif/` with a `job`
decides its pods as one gang, as the next cycle would (queue, priority, all or nothing,
preemption over the running tenants), says whether it starts now and whom it would evict,
and writes nothing."""

from __future__ import annotations

from scheduling.pipeline import run_cycle

from .conftest import gpu_pod
from .test_whatif import row_counts


def whatif(client, pods: list[dict], **job):
    return client.post("/api/v1/whatif/", {"pods": pods, "job": job}, format="json")


def test_a_job_that_fits_starts_and_nothing_is_written(cluster, viewer):
    before = row_counts()
    answer = whatif(viewer, [gpu_pod(f"w{k}", mem=8000) for k in range(2)], name="train", min_member=2)
    assert answer.status_code == 200, answer.content
    job = answer.json()["job"]
    assert (job["name"], job["queue"], job["placed"], job["starts"], job["verdict"]) == (
        "default/train",
        "default",
        2,
        True,
        None,
    )
    assert [pod["payload"]["status"] for pod in answer.json()["pods"]] == ["scheduled", "scheduled"]
    assert row_counts() == before


def test_a_job_too_big_for_the_cluster_is_a_gang_that_does_not_start(cluster, viewer):
    pods = [gpu_pod(f"w{k}", mem=15000) for k in range(8)]  # 5 cards: at most 6 of these fit
    job = whatif(viewer, pods, name="wide").json()["job"]
    assert (job["min_member"], job["starts"], job["evictions"]) == (8, False, [])
    assert job["verdict"].startswith("GangUnschedulable: gang default/wide: ")
    smaller = whatif(viewer, pods, name="wide", min_member=4).json()["job"]
    assert smaller["starts"] and smaller["placed"] >= 4


def test_a_high_priority_job_on_a_full_cluster_says_whom_it_would_evict(cluster, operator, viewer):
    for k in range(6):  # every T4 and the A100 filled by priority-0 tenants
        assert operator.post("/api/v1/pods/", gpu_pod(f"low{k}", mem=15000), format="json").status_code == 201
    run_cycle(trigger="test")
    before = row_counts()
    job = whatif(
        viewer, [gpu_pod(f"hi{k}", mem=15000) for k in range(2)], name="urgent", priority=1000
    ).json()["job"]
    assert job["starts"] is False and job["starts_after_evictions"] is True
    assert len(job["evictions"]) == 2
    assert {e["kind"] for e in job["evictions"]} == {"preempt"}
    assert all(
        e["pod"].startswith("default/low") and e["by"].startswith("default/hi") for e in job["evictions"]
    )
    assert job["verdict"].startswith("Preempting: ")
    same = whatif(viewer, [gpu_pod(f"eq{k}", mem=15000) for k in range(2)], name="equal").json()["job"]
    assert same["evictions"] == [] and same["starts"] is False  # equal priority evicts nobody
    assert row_counts() == before


def test_an_unknown_queue_and_bad_job_fields_are_said(cluster, viewer):
    job = whatif(viewer, [gpu_pod("w", mem=1000)], queue="nowhere").json()["job"]
    assert (
        job["verdict"]
        == "QueueNotFound: pod group default/whatif names queue 'nowhere', which does not exist"
    )
    bad = whatif(viewer, [gpu_pod("w", mem=1000)], priority="high", min_member=0, colour="red")
    assert bad.status_code == 400
    assert {"job.priority", "job.min_member", "job.colour"} <= set(bad.json()), bad.json()


def test_a_job_with_parts_starts_only_when_each_part_reaches_its_minimum(cluster, viewer):
    """A master that fits nowhere and four workers that fit: min_member 4 alone would start
    on the workers; with subgroups {master: 1, worker: 3} the job does not start, and says
    which part is short. A bad part minimum is named."""
    task = "volcano.sh/task-spec"
    pods = [gpu_pod("master", mem=100000, annotations={task: "master"})]
    pods += [gpu_pod(f"w{k}", mem=1000, annotations={task: "worker"}) for k in range(4)]
    loose = whatif(viewer, pods, name="pt", min_member=4).json()["job"]
    assert loose["starts"] is True
    job = whatif(viewer, pods, name="pt", min_member=4, subgroups={"master": 1, "worker": 3}).json()["job"]
    assert (job["starts"], job["placed"], job["subgroups"]) == (False, 0, {"master": 1, "worker": 3})
    assert job["verdict"].startswith(
        "GangUnschedulable: gang default/pt: subgroup master: 0/1 placeable; 3/4"
    )
    bad = whatif(viewer, pods, subgroups={"worker": -1})
    assert bad.status_code == 400 and "job.subgroups.worker" in bad.json(), bad.json()
