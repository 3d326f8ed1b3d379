"""List endpoints: the API root, strict query parameters, ordering, search, the slim node."""

from __future__ import annotations

import pytest

from scheduling.models import Pod
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod

pytestmark = pytest.mark.django_db

LISTS = [
    "/api/v1/nodes/",
    "/api/v1/cards/",
    "/api/v1/pods/",
    "/api/v1/pending/",
    "/api/v1/decisions/",
    "/api/v1/allocations/",
    "/api/v1/cycles/",
    "/api/v1/events/",
]


def test_the_api_root_names_every_list_and_the_schema(viewer, client_for):
    answer = viewer.get("/api/v1/")
    assert answer.status_code == 200
    links = answer.json()
    assert links["node"].endswith("/api/v1/nodes/") and links["pending"].endswith("/api/v1/pending/")
    assert links["schema"].endswith("/api/schema/")
    for url in links.values():
        if "/api/v1/" in url and "agents" not in url and "simulate" not in url:
            assert viewer.get(url).status_code == 200, url
    assert client_for(None).get("/api/v1/").status_code == 401


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize(
    ("query", "field", "words"),
    [
        ("limit=abc", "limit", "whole number"),
        ("limit=0", "limit", "at least 1"),
        ("offset=-5", "offset", "at least 0"),
        ("nmae=node1", "nmae", "unknown query parameter"),
    ],
)
def test_lists_answer_bad_parameters_with_a_400_naming_them(viewer, url, query, field, words):
    answer = viewer.get(f"{url}?{query}")
    assert answer.status_code == 400, (url, query, answer.content)
    assert words in " ".join(answer.json()[field])


def test_a_known_filter_and_the_page_parameters_still_pass(viewer, cluster):
    assert viewer.get("/api/v1/nodes/?name=node&limit=1&offset=1").json()["results"][0]["name"] == "node2"
    assert viewer.get("/api/v1/cards/?node=node1&limit=1000").status_code == 200


def test_nodes_order_and_search_and_refuse_an_unknown_ordering(viewer, cluster):
    names = [n["name"] for n in viewer.get("/api/v1/nodes/?ordering=-name").json()["results"]]
    assert names == ["node2", "node1"]
    assert [n["name"] for n in viewer.get("/api/v1/nodes/?search=de2").json()["results"]] == ["node2"]
    bad = viewer.get("/api/v1/nodes/?ordering=-memory")
    assert bad.status_code == 400
    assert (
        "unknown field -memory" in bad.json()["ordering"][0] and "last_heartbeat" in bad.json()["ordering"][0]
    )
    assert viewer.get("/api/v1/nodes/?ordering=").status_code == 400


def test_the_slim_node_leaves_the_cards_out_and_keeps_the_usage(viewer, operator, cluster):
    operator.post(
        "/api/v1/pods/",
        gpu_pod("p", mem=3000, cores=30, annotations={"nvidia.com/use-gputype": "A100"}),
        format="json",
    )
    run_cycle(trigger="test")
    assert Pod.objects.get(name="p").status == Pod.SCHEDULED
    full = {n["name"]: n for n in viewer.get("/api/v1/nodes/").json()["results"]}
    slim = {n["name"]: n for n in viewer.get("/api/v1/nodes/?cards=false").json()["results"]}
    assert set(slim) == set(full)
    for name, node in slim.items():
        assert "cards" not in node
        assert node["usage"] == full[name]["usage"]
        assert {key: value for key, value in full[name].items() if key != "cards"} == node
    assert slim["node2"]["usage"]["used"] == {"slots": 1, "memory": 3000, "cores": 30}
    assert "cards" not in viewer.get("/api/v1/nodes/node2/?cards=0").json()
    refused = viewer.get("/api/v1/nodes/?cards=some")
    assert refused.status_code == 400 and "cards" in refused.json()
