"""Reading the cluster (nodes, cards, allocations) and cordoning cards."""

from __future__ import annotations

import pytest

from scheduling.models import Pod
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod

pytestmark = pytest.mark.django_db
#: Wakes run after the commit that freed capacity, so these tests need real commits.
AFTER_COMMIT = pytest.mark.django_db(transaction=True)


def results(answer) -> list[dict]:
    assert answer.status_code == 200, answer.content
    return answer.json()["results"]


def test_nodes_list_their_cards_and_usage(cluster, operator, viewer):
    operator.post(
        "/api/v1/pods/",
        gpu_pod("p", mem=3000, cores=30, annotations={"nvidia.com/use-gputype": "A100"}),
        format="json",
    )
    run_cycle(trigger="test")
    nodes = results(viewer.get("/api/v1/nodes/"))
    assert [n["name"] for n in nodes] == ["node1", "node2"]
    node2 = viewer.get("/api/v1/nodes/node2/").json()
    assert node2["usage"] == {
        "cards": 3,
        "used": {"slots": 1, "memory": 3000, "cores": 30},
        "total": {"slots": 30, "memory": 15360 * 2 + 40960, "cores": 300},
    }
    a100 = next(card for card in node2["cards"] if card["uuid"] == "GPU-2-2")
    assert a100["used"] == {"slots": 1, "memory": 3000, "cores": 30}
    assert a100["free"] == {"slots": 9, "memory": 40960 - 3000, "cores": 70}
    assert a100["tenants"] == [{"pod": "default/p", "container": "main", "memory": 3000, "cores": 30}]
    assert viewer.get("/api/v1/nodes/node9/").status_code == 404


@pytest.mark.parametrize(
    "query, uuids",
    [
        ("node=node1", ["GPU-1-0", "GPU-1-1"]),
        ("type=a100", ["GPU-2-2"]),
        ("node=node2&type=t4", ["GPU-2-0", "GPU-2-1"]),
        ("health=false", ["GPU-1-1"]),
        ("cordoned=true", ["GPU-2-0"]),
        ("node=node9", []),
    ],
)
def test_cards_filter(cluster, client_for, operator, viewer, query, uuids):
    from .conftest import report_body, t4

    sick = report_body("node1", t4("GPU-1-0", 0), t4("GPU-1-1", 1, health=False))
    assert client_for("agent:node1").post("/api/v1/agents/report/", sick, format="json").status_code == 200
    assert operator.post("/api/v1/cards/GPU-2-0/cordon/").status_code == 200
    assert [c["uuid"] for c in results(viewer.get(f"/api/v1/cards/?{query}"))] == uuids


@pytest.mark.parametrize(
    "query, field",
    [
        ("cards/?health=maybe", "health"),
        ("nodes/?ready=1", "ready"),
        ("cycles/?since=yesterday", "since"),
        ("cycles/?since=0001-01-01T00:00:00%2B10:00", "since"),
        ("decisions/?cycle=abc", "cycle"),
        ("decisions/?outcome=lucky", "outcome"),
        ("pods/?status=sleeping", "status"),
        ("pods/?origin=scheduler", "origin"),
    ],
)
def test_bad_filter_values_are_400_naming_the_filter(viewer, query, field):
    answer = viewer.get(f"/api/v1/{query}")
    assert answer.status_code == 400 and field in answer.json()


@AFTER_COMMIT
def test_cordon_keeps_new_pods_off_and_tenants_on(cluster, operator):
    operator.post(
        "/api/v1/pods/",
        gpu_pod("tenant", mem=1000, annotations={"nvidia.com/use-gpuuuid": "GPU-1-0"}),
        format="json",
    )
    run_cycle(trigger="test")
    answer = operator.post("/api/v1/cards/GPU-1-0/cordon/")
    assert answer.status_code == 200 and answer.json()["cordoned"] is True
    assert answer.json()["tenants"] == [
        {"pod": "default/tenant", "container": "main", "memory": 1000, "cores": 0}
    ]
    operator.post(
        "/api/v1/pods/",
        gpu_pod("newcomer", mem=1000, annotations={"nvidia.com/use-gpuuuid": "GPU-1-0"}),
        format="json",
    )
    run_cycle(trigger="test")
    newcomer = operator.get("/api/v1/pods/default/newcomer/").json()
    assert newcomer["status"] == "pending" and "CardCordoned" in newcomer["decision"]["failed_nodes"]["node1"]
    assert Pod.objects.get(name="tenant").status == "scheduled"
    assert operator.post("/api/v1/cards/GPU-1-0/uncordon/").json()["cordoned"] is False
    run_cycle(trigger="test")
    assert Pod.objects.get(name="newcomer").status == "scheduled"


def test_cordon_unknown_card_is_404(operator):
    assert operator.post("/api/v1/cards/GPU-nope/cordon/").status_code == 404


def test_allocations_filter_by_node_card_and_namespace(cluster, operator, viewer):
    operator.post(
        "/api/v1/pods/",
        gpu_pod("a", "team-a", mem=1000, annotations={"nvidia.com/use-gpuuuid": "GPU-1-0"}),
        format="json",
    )
    operator.post(
        "/api/v1/pods/",
        gpu_pod(
            "b",
            "team-b",
            gpu=2,
            mem=1000,
            annotations={"nvidia.com/use-gputype": "T4", "hami.io/node-scheduler-policy": "spread"},
        ),
        format="json",
    )
    run_cycle(trigger="test")
    everything = results(viewer.get("/api/v1/allocations/"))
    assert sorted((a["pod"], a["card"]) for a in everything) == [
        ("team-a/a", "GPU-1-0"),
        ("team-b/b", "GPU-2-0"),
        ("team-b/b", "GPU-2-1"),
    ]
    assert {a["pod"] for a in results(viewer.get("/api/v1/allocations/?node=node2"))} == {"team-b/b"}
    assert [a["pod"] for a in results(viewer.get("/api/v1/allocations/?card=GPU-1-0"))] == ["team-a/a"]
    assert len(results(viewer.get("/api/v1/allocations/?namespace=team-b"))) == 2
    assert len(results(viewer.get("/api/v1/allocations/?pod=team-b/b"))) == 2
    operator.delete("/api/v1/pods/team-b/b/")
    assert [a["pod"] for a in results(viewer.get("/api/v1/allocations/"))] == ["team-a/a"]


def test_a_node_that_is_not_ready_says_why(cluster, viewer):
    from scheduling import services

    assert viewer.get("/api/v1/nodes/node1/").json()["not_ready_reason"] is None
    services.mark_node_not_ready("node1", "Kubernetes reports the node NotReady")
    body = viewer.get("/api/v1/nodes/node1/").json()
    assert (body["ready"], body["not_ready_reason"]) == (False, "Kubernetes reports the node NotReady")
    assert "hamiadmin.io/not-ready-reason" not in body["annotations"]
