"""`queues/` and `podgroups/`: the tree with usage in vGPU units, jobs with their members' last
decisions and batch verdicts, operator writes refused naming the field, strict filters."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.models import Decision, PodGroup, Queue
from tests.services.test_batch_services import place

pytestmark = pytest.mark.django_db


@pytest.fixture
def tree():
    services.create_queue("org", limit_gpumem=100000)
    services.create_queue("team", parent="org", guarantee_gpumem=8000, quota_gpumem=20000)
    team = Queue.objects.get(name="team")
    place("two-cards", team, (4000, 30), (4000, 30))
    return team


def test_the_queue_list_is_the_tree_with_usage_against_the_figures(viewer, tree):
    answer = viewer.get("/api/v1/queues/")
    assert answer.status_code == 200, answer.content
    rows = {row["name"]: row for row in answer.json()["results"]}
    assert [row["name"] for row in answer.json()["results"]] == ["default", "org", "team"]
    team, org = rows["team"], rows["org"]
    assert (team["parent"], team["depth"], team["leaf"], org["children"]) == ("org", 1, True, ["team"])
    assert team["used"] == {"vgpus": 2, "gpumem": 8000, "gpucores": 60}
    assert (team["guarantee"]["gpumem"], team["quota"]["gpumem"], team["limit"]["gpumem"]) == (
        8000,
        20000,
        None,
    )
    assert org["used"]["gpumem"] == 8000 and org["limit"]["gpumem"] == 100000
    assert team["pods"] == {"pending": 0, "running": 1} and team["jobs"] == {"pending": 0, "running": 0}
    assert viewer.get("/api/v1/queues/team/").json()["used"]["gpumem"] == 8000
    assert viewer.get("/api/v1/queues/nowhere/").status_code == 404


def test_queue_filters_are_shared_and_unknown_parameters_refused(viewer, tree):
    leaves = [row["name"] for row in viewer.get("/api/v1/queues/?leaf=true").json()["results"]]
    assert leaves == ["default", "team"]
    assert [row["name"] for row in viewer.get("/api/v1/queues/?parent=org").json()["results"]] == ["team"]
    bad = viewer.get("/api/v1/queues/?parnet=org")
    assert bad.status_code == 400 and "unknown query parameter" in bad.json()["parnet"][0]
    assert viewer.get("/api/v1/podgroups/?phse=running").status_code == 400
    assert viewer.get("/api/v1/podgroups/?phase=sleeping").status_code == 400


def test_operators_write_queues_viewers_do_not(viewer, operator, tree):
    body = {"name": "research", "parent": "org", "weight": 2, "limit": {"gpumem": 40960}}
    assert viewer.post("/api/v1/queues/", body, format="json").status_code == 403
    created = operator.post("/api/v1/queues/", body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["limit"] == {"vgpus": None, "gpumem": 40960, "gpucores": None}
    changed = operator.patch("/api/v1/queues/research/", {"quota": {"gpumem": 20480}}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["quota"]["gpumem"] == 20480 and changed.json()["limit"]["gpumem"] == 40960
    refused = operator.patch("/api/v1/queues/research/", {"guarantee": {"gpumem": 30000}}, format="json")
    assert refused.status_code == 400 and "over the quota" in refused.json()["guarantee_gpumem"][0]
    assert operator.patch("/api/v1/queues/research/", {"weight": 0}, format="json").status_code == 400
    assert operator.delete("/api/v1/queues/default/").status_code == 400
    assert operator.delete("/api/v1/queues/org/").status_code == 400
    assert operator.delete("/api/v1/queues/research/").status_code == 204
    assert viewer.delete("/api/v1/queues/team/").status_code == 403


def test_a_job_lists_its_members_with_their_last_decision_and_batch_verdict(viewer, operator, tree):
    created = operator.post(
        "/api/v1/podgroups/",
        {
            "namespace": "default",
            "name": "train",
            "min_member": 2,
            "queue": "team",
            "min_resources": {"vgpus": 2},
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    group = PodGroup.objects.get(name="train")
    worker = place("worker-0", tree, group=group)
    verdict = {"reason": "GangUnschedulable", "message": "1/2 members placeable", "would_fit_on": "n1"}
    Decision.objects.create(
        pod=worker, outcome=Decision.PENDING, reason="GangUnschedulable", payload={"batch": verdict}
    )
    group.set_phase(PodGroup.INQUEUE, "GangUnschedulable", "1/2 members placeable")
    group.save()
    job = viewer.get("/api/v1/podgroups/default/train/").json()
    assert (job["min_member"], job["queue"], job["phase"], job["min_resources"]["vgpus"]) == (
        2,
        "team",
        "inqueue",
        2,
    )
    assert job["reason"] == "1/2 members placeable" and job["conditions"][-1]["reason"] == "GangUnschedulable"
    (member,) = job["members"]
    assert (member["pod"], member["status"], member["node"]) == ("default/worker-0", "pending", None)
    assert member["decision"]["batch"]["reason"] == "GangUnschedulable"
    listed = viewer.get("/api/v1/podgroups/?queue=team&phase=inqueue").json()["results"]
    assert [row["name"] for row in listed] == ["train"] and listed[0]["members"][0][
        "pod"
    ] == "default/worker-0"
    assert viewer.get("/api/v1/podgroups/?queue=default").json()["count"] == 0
    assert viewer.get("/api/v1/queues/team/").json()["jobs"] == {"pending": 1, "running": 0}


def test_job_writes_name_the_field_and_need_an_operator(viewer, operator, tree):
    assert viewer.post("/api/v1/podgroups/", {"name": "j"}, format="json").status_code == 403
    no_queue = operator.post("/api/v1/podgroups/", {"name": "j", "queue": "ghost"}, format="json")
    assert no_queue.status_code == 400 and "no queue named ghost" in no_queue.json()["queue"][0]
    parent = operator.post("/api/v1/podgroups/", {"name": "j", "queue": "org"}, format="json")
    assert parent.status_code == 400 and "only leaf queues" in parent.json()["queue"][0]
    zero = operator.post("/api/v1/podgroups/", {"name": "j", "min_member": 0}, format="json")
    assert zero.status_code == 400 and "min_member" in zero.json()
    assert operator.post("/api/v1/podgroups/", {"name": "j"}, format="json").status_code == 201
    assert operator.post("/api/v1/podgroups/", {"name": "j"}, format="json").status_code == 400
    changed = operator.patch(
        "/api/v1/podgroups/default/j/", {"min_member": 3, "queue": "team"}, format="json"
    )
    assert changed.status_code == 200 and (changed.json()["min_member"], changed.json()["queue"]) == (
        3,
        "team",
    )
    assert (
        operator.patch("/api/v1/podgroups/default/nope/", {"min_member": 3}, format="json").status_code == 404
    )


def test_the_scrape_gives_per_queue_usage_and_pending_jobs(client, tree):
    services.create_pod_group("default", "waits", queue="team")
    text = client.get("/metrics").content.decode()
    assert 'hamiadmin_queue_used{queue="team",resource="gpumem"} 8000.0' in text
    assert 'hamiadmin_queue_used{queue="org",resource="vgpus"} 2.0' in text
    assert 'hamiadmin_queue_limit{queue="org",resource="gpumem"} 100000.0' in text
    assert 'hamiadmin_queue_pending_jobs{queue="team"} 1.0' in text
    assert "hamiadmin_gang_wait_seconds_bucket" in text


def test_queues_show_their_fair_share_beside_usage(viewer):
    """Two queues of weight 1 and 3, both with pods waiting, on 20 vGPU slots: 5 and 15."""
    services.report_inventory(
        "node1", {}, {}, [{"uuid": f"GPU-{i}", "index": i, "memory": 8000, "slots": 10} for i in range(2)]
    )
    services.create_queue("a", weight=1)
    services.create_queue("b", weight=3)
    for queue in ("a", "b"):
        services.submit_pod(
            "default",
            f"wait-{queue}",
            {"hami.io/queue": queue},
            [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        )
    rows = {row["name"]: row for row in viewer.get("/api/v1/queues/").json()["results"]}
    assert (rows["a"]["fair_share"]["vgpus"], rows["b"]["fair_share"]["vgpus"]) == (5.0, 15.0)
    assert rows["default"]["fair_share"]["vgpus"] == 0.0  # nothing waits there


def test_a_queue_lends_its_guarantee_on_request_and_its_quota_sets_its_fair_share(viewer, operator):
    """`lend_guarantee` is written and read back (default false); the quota is the deserved
    share the fair share gives first (docs/queues.md, "Fair share")."""
    services.report_inventory(
        "node1", {}, {}, [{"uuid": f"GPU-{i}", "index": i, "memory": 16000, "slots": 1} for i in range(4)]
    )
    body = {"name": "big", "quota": {"gpumem": 48000}, "guarantee": {"gpumem": 16000}}
    created = operator.post("/api/v1/queues/", body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["lend_guarantee"] is False
    small = operator.post("/api/v1/queues/", {"name": "small", "quota": {"gpumem": 16000}}, format="json")
    assert small.status_code == 201, small.content
    lent = operator.patch("/api/v1/queues/big/", {"lend_guarantee": True}, format="json")
    assert lent.status_code == 200 and lent.json()["lend_guarantee"] is True
    assert Queue.objects.get(name="big").lend_guarantee is True
    bad = operator.patch("/api/v1/queues/big/", {"lend_guarantee": "sometimes"}, format="json")
    assert bad.status_code == 400 and "lend_guarantee" in bad.json()
    for queue in ("big", "small"):
        services.submit_pod(
            "default",
            f"wait-{queue}",
            {"hami.io/queue": queue},
            [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 16000}}}],
        )
    rows = {row["name"]: row for row in viewer.get("/api/v1/queues/").json()["results"]}
    assert (rows["big"]["fair_share"]["gpumem"], rows["small"]["fair_share"]["gpumem"]) == (48000.0, 16000.0)
