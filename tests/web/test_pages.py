"""Dashboard pages through Django's test client, on data made by services and real cycles."""

from __future__ import annotations

import re

import pytest
from django.db.models import Sum
from django.urls import reverse

from scheduling import services
from scheduling.models import Allocation, Card, Cycle, Decision, Pod

from .conftest import (
    WALKTHROUGH,
    cycle,
    report_demo_cluster,
    report_walkthrough,
    submit,
    t4_mutex_waits,
)

pytestmark = pytest.mark.django_db

PAGES = [
    ("home", ()),
    ("pending", ()),
    ("pod", ("default", "latency-tier")),
    ("node", ("t4-node",)),
    ("simulator", ()),
    ("cycles", ()),
    ("live", ()),
]


def tiles(html: str) -> dict[str, dict[str, int]]:
    """Each card tile's uuid and the usage it shows."""
    found = {}
    for match in re.finditer(
        r'data-testid="card-tile" data-uuid="([^"]+)" data-used-slots="(\d+)" data-used-memory="(\d+)" '
        r'data-used-cores="(\d+)"',
        html,
    ):
        uuid, slots, memory, cores = match.groups()
        found[uuid] = {"slots": int(slots), "memory": int(memory), "cores": int(cores)}
    return found


@pytest.mark.parametrize(("name", "args"), PAGES)
def test_anonymous_is_sent_to_login(client, name, args):
    report_walkthrough()
    url = reverse(name, args=args)
    answer = client.get(url)
    assert answer.status_code == 302
    assert answer["Location"] == f"{reverse('login')}?next={url}"


@pytest.mark.parametrize(("name", "args"), PAGES)
def test_signed_in_viewer_sees_every_page(viewer_client, name, args):
    report_walkthrough()
    answer = viewer_client.get(reverse(name, args=args))
    assert answer.status_code == 200
    if name != "live":
        assert b"Log out" in answer.content


def test_a_user_without_role_is_refused(client, django_user_model):
    user = django_user_model.objects.create_user("norole", password="x-long-password-1")
    client.force_login(user)
    answer = client.get(reverse("home"))
    assert answer.status_code == 403
    assert b"viewer" in answer.content


def test_login_page_signs_in_and_logout_signs_out(client, viewer_user):
    from .conftest import PASSWORD

    page = client.get(reverse("login"))
    assert page.status_code == 200 and b'name="username"' in page.content
    answer = client.post(reverse("login"), {"username": "olga", "password": PASSWORD, "next": "/pending/"})
    assert answer.status_code == 302 and answer["Location"] == "/pending/"
    assert client.get("/pending/").status_code == 200
    bad = client.post(reverse("login"), {"username": "olga", "password": "wrong"})
    assert b"did not match" in bad.content
    client.post(reverse("logout"))
    assert client.get("/pending/").status_code == 302


def test_cluster_page_shows_every_demo_card_with_its_usage(viewer_client):
    nodes = report_demo_cluster()
    for i in range(3):
        submit(f"t4-{i}", mem=3000, cores=25, annotations={"nvidia.com/use-gputype": "T4"})
    submit("a100-pair", gpu=2, mem=16000, cores=50, annotations={"nvidia.com/use-gputype": "A100"})
    report = cycle()
    assert len(report.placed) == 4

    html = viewer_client.get(reverse("home")).content.decode()
    shown = tiles(html)
    expected_uuids = {card["uuid"] for node in nodes for card in node["devices"]}
    assert set(shown) == expected_uuids
    for uuid, usage in shown.items():
        held = Allocation.objects.filter(card__uuid=uuid, active=True).aggregate(
            slots=Sum(1), memory=Sum("memory"), cores=Sum("cores")
        )
        assert usage["slots"] == Allocation.objects.filter(card__uuid=uuid, active=True).count()
        assert usage["memory"] == (held["memory"] or 0)
        assert usage["cores"] == (held["cores"] or 0)
    assert sum(u["memory"] for u in shown.values()) == 3 * 3000 + 2 * 16000
    for node in nodes:
        assert f'data-node="{node["name"]}"' in html
    assert "default/a100-pair" in html  # tenants are listed on their cards


def test_cluster_filters_by_gpu_type_and_node(viewer_client):
    report_demo_cluster()
    t4_only = tiles(viewer_client.get(reverse("home"), {"type": "NVIDIA-Tesla T4"}).content.decode())
    assert t4_only and set(t4_only) == set(
        Card.objects.filter(type="NVIDIA-Tesla T4").values_list("uuid", flat=True)
    )
    one_node = tiles(viewer_client.get(reverse("home"), {"node": "v100-node"}).content.decode())
    assert set(one_node) == set(Card.objects.filter(node__name="v100-node").values_list("uuid", flat=True))


def test_cordoned_and_unhealthy_cards_wear_badges(viewer_client):
    report_demo_cluster()
    services.cordon_card("GPU-t4-1", True)
    html = viewer_client.get(reverse("home")).content.decode()
    tile = html[html.index('data-uuid="GPU-t4-1"') :]
    tile = tile[: tile.index("</article>")]
    assert 'data-testid="cordoned"' in tile
    other = html[html.index('data-uuid="GPU-t4-2"') :]
    assert 'data-testid="cordoned"' not in other[: other.index("</article>")]


def test_pending_page_explains_a_mutex_wait_in_words_and_code(viewer_client):
    report_demo_cluster()
    t4_mutex_waits()
    assert Pod.objects.get(name="mutex-waits").status == Pod.PENDING
    html = viewer_client.get(reverse("pending")).content.decode()
    row = html[html.index('data-pod="default/mutex-waits"') :]
    row = row[: row.index("</tr>")]
    assert "4 of 4 cards on t4-node already have tenants" in row
    assert "ExclusiveDeviceAllocateConflict" in row
    assert reverse("pod", args=["default", "mutex-waits"]) in row


def test_pending_page_lists_oldest_first(viewer_client):
    report_demo_cluster()
    for name in ("first-16", "second-16", "third-16"):
        submit(name, gpu=16, mem=1000)
    cycle()
    html = viewer_client.get(reverse("pending")).content.decode()
    order = re.findall(r'data-testid="pending-row" data-pod="default/([^"]+)"', html)
    assert order == ["first-16", "second-16", "third-16"]
    assert "has fewer cards (4) than a container asks for" in html


def test_pod_page_draws_the_walkthrough_path(viewer_client):
    report_walkthrough()
    pod = Pod.objects.get(name="latency-tier")
    assert pod.status == Pod.SCHEDULED and pod.allocated == "GPU-2,NVIDIA,1000,0:;"
    html = viewer_client.get(reverse("pod", args=["default", "latency-tier"])).content.decode()

    removed = re.findall(r'data-testid="removed-card" data-uuid="([^"]+)" data-stage="([^"]+)"', html)
    assert removed == [("GPU-0", "mutex"), ("GPU-1", "mutex")]
    ranked = re.findall(
        r'data-testid="ranked-card" data-uuid="([^"]+)" data-chosen="(\w+)" data-decided-by="([^"]*)"', html
    )
    assert ranked == [("GPU-2", "true", ""), ("GPU-3", "false", "index")]
    assert "tied on binpack 1.651; index 2 before 3" in html
    assert 'data-role="filter"' in html and ">mutex<" in html
    assert "GPU-2,NVIDIA,1000,0:;" in html
    assert 'data-label="t4-node"' in html  # the node-score bar chart


def test_pod_page_shows_the_attempt_history_and_an_older_path(viewer_client):
    report_demo_cluster()
    submit("grows", gpu=16, mem=1000)
    cycle()
    first = Decision.objects.get(pod__name="grows")
    services.submit_pod(
        "default", "grows", {}, [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
    )
    cycle()
    url = reverse("pod", args=["default", "grows"])
    html = viewer_client.get(url).content.decode()
    assert html.count('class="badge status-pending"') >= 1 and 'data-testid="attempts"' in html
    assert 'data-testid="decision-status">' not in html  # heading is off on the pod page
    assert "scheduled on" in html
    older = viewer_client.get(url, {"decision": first.pk}).content.decode()
    assert "Why it waits" in older and "NodeInsufficientDevice" in older


def facts(html: str) -> dict[str, str]:
    """The pod page's header facts by data-testid, tags stripped."""
    return {
        key: re.sub(r"<[^>]+>", "", value).strip()
        for key, value in re.findall(r'<dd data-testid="pod-(\w+)"[^>]*>(.*?)</dd>', html)
    }


def test_pod_page_shows_who_submitted_the_pod_and_when_it_was_bound(viewer_client):
    report_demo_cluster()
    submit("by-client", mem=1000)
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}
    services.submit_pod(
        "default",
        "watched",
        {},
        [{"name": "main", "resources": {"limits": limits}}],
        uid="u-1",
        origin=Pod.KUBERNETES,
    )
    cycle()
    watched = Pod.objects.select_related("node").get(name="watched")
    services.mark_bound(watched, watched.node.name)

    by_client = facts(viewer_client.get(reverse("pod", args=["default", "by-client"])).content.decode())
    assert by_client["origin"] == "REST API" and "bound" not in by_client
    shown = facts(viewer_client.get(reverse("pod", args=["default", "watched"])).content.decode())
    assert shown["origin"] == "Kubernetes watcher"
    assert shown["bound"].endswith(" ago")


def test_node_page_lists_tenants_per_card_and_the_pair_matrix(viewer_client):
    report_demo_cluster()
    submit("t4-a", mem=3000, cores=25, annotations={"nvidia.com/use-gpuuuid": "GPU-t4-2"})
    cycle()
    html = viewer_client.get(reverse("node", args=["t4-node"])).content.decode()
    row = html[html.index('data-testid="node-card" data-uuid="GPU-t4-2"') :]
    row = row[: row.index("</tr>")]
    assert "default/t4-a" in row and "3000 MiB, 25%" in row
    matrix = html[html.index('data-testid="pair-matrix"') :]
    matrix = matrix[: matrix.index("</table>")]
    cells = re.findall(r'<td class="link-\d" title="(\d+)">', matrix)
    # deploy/demo/gpu-t4.yaml: 0-1 and 2-3 share a switch (50), pairs across sockets 10.
    assert cells == ["50", "10", "10", "50", "10", "10", "10", "10", "50", "10", "10", "50"]


def test_cycles_page_charts_placed_pods_and_durations(viewer_client):
    report_demo_cluster()
    for i in range(3):
        submit(f"p{i}", mem=1000)
        cycle(f"round {i}")
    html = viewer_client.get(reverse("cycles")).content.decode()
    assert html.count("<svg") == 2
    assert html.count("<rect") >= 2 * Cycle.objects.count()
    assert "round 2" in html


def test_simulator_renders_the_walkthrough_with_the_pod_component(viewer_client):
    answer = viewer_client.post(reverse("simulator"), {"scenario": WALKTHROUGH.read_text()})
    assert answer.status_code == 200
    html = answer.content.decode()
    assert html.count('data-testid="pod-decision"') == 2
    first = html[
        html.index('data-pod="default/latency-tier"') : html.index('data-pod="default/plain-binpack"')
    ]
    assert re.findall(r'data-testid="removed-card" data-uuid="([^"]+)"', first) == ["GPU-0", "GPU-1"]
    assert 'data-uuid="GPU-2" data-chosen="true"' in first
    second = html[html.index('data-pod="default/plain-binpack"') :]
    assert 'data-uuid="GPU-0" data-chosen="true"' in second


def test_simulator_takes_an_uploaded_yaml_file(viewer_client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    text = (
        "nodes:\n- name: n1\n  devices:\n  - {uuid: A, memory: 8000}\n  - {uuid: B, memory: 8000}\n"
        "pods:\n- name: p\n  containers:\n  - name: c\n    resources: {limits: {nvidia.com/gpu: 2}}\n"
    )
    upload = SimpleUploadedFile("s.yaml", text.encode(), content_type="application/yaml")
    html = viewer_client.post(
        reverse("simulator"), {"scenario": "", "scenario_file": upload}
    ).content.decode()
    assert "A,NVIDIA,8000,100:B,NVIDIA,8000,100:;" in html


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"nodes": [{"devices": []}], "pods": []}', "nodes[0].name: required"),
        ('{"nodes": [], "pods": [', "not valid JSON"),
        ("", "paste a scenario"),
    ],
)
def test_simulator_says_where_a_scenario_is_bad(viewer_client, text, message):
    answer = viewer_client.post(reverse("simulator"), {"scenario": text})
    assert answer.status_code == 400
    assert message in answer.content.decode()


def test_simulator_names_every_misspelt_key_instead_of_asking_for_no_gpu(viewer_client):
    text = (
        '{"nodes": [{"name": "n1", "devices": [{"uuid": "A", "memory": 8000}]}],'
        ' "pods": [{"name": "p", "tpye": "T4", "annotatons": {},'
        ' "containers": [{"resources": {"limits": {"nvidia.com/gpumemory": 3000}}}]}]}'
    )
    answer = viewer_client.post(reverse("simulator"), {"scenario": text})
    assert answer.status_code == 400
    html = answer.content.decode()
    problems = re.findall(r"<li><code>([^<]+)</code></li>", html)
    assert [problem.split(":")[0] for problem in problems] == [
        "pods[0].tpye",
        "pods[0].annotatons",
        "pods[0].containers[0].resources.limits.nvidia.com/gpumemory",
    ]
    assert "did you mean nvidia.com/gpumem?" in problems[2]
    assert "asks for no GPU" not in html


def test_simulator_page_refuses_more_work_than_a_request_may_do(viewer_client, settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "SIMULATE_SYNC_MAX_WORK": 5}
    text = (
        '{"nodes": [{"name": "n1", "devices": [{"uuid": "A", "memory": 8000}, {"uuid": "B", "memory": 8000}]}],'
        ' "pods": [{"name": "p", "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},'
        ' {"name": "q", "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}]}'
    )
    answer = viewer_client.post(reverse("simulator"), {"scenario": text})
    assert answer.status_code == 400
    html = answer.content.decode()
    assert "2 pods x (1 nodes + 2 cards) = 6 work units" in html and "HAMI_SIMULATE_SYNC_MAX_WORK" in html
    assert 'data-testid="simulator-result"' not in html
    settings.HAMIADMIN = {**settings.HAMIADMIN, "SIMULATE_SYNC_MAX_WORK": 6}
    assert viewer_client.post(reverse("simulator"), {"scenario": text}).status_code == 200


def test_simulator_page_counts_topology_combinations_and_stops_a_run_at_its_seconds(viewer_client, settings):
    """The issue's scenario (968 units by pods x (nodes + cards) alone, minutes of topology-aware
    combinations) is refused at once, and a run the estimate lets through still stops."""
    import json
    import time

    from tests.engine.test_budget import topology_scenario

    text = json.dumps(topology_scenario(1, 120, 8, 16))
    started = time.monotonic()
    html = viewer_client.post(reverse("simulator"), {"scenario": text}).content.decode()
    assert "card-choice steps (topology-aware combinations)" in html and "HAMI_SIMULATE_SYNC_MAX_WORK" in html
    settings.HAMIADMIN = {
        **settings.HAMIADMIN,
        "SIMULATE_SYNC_MAX_WORK": 10**12,
        "SIMULATE_SYNC_SECONDS": 0.3,
    }
    answer = viewer_client.post(reverse("simulator"), {"scenario": text})
    assert "stopped after 0.3 s (HAMI_SIMULATE_SYNC_SECONDS)" in answer.content.decode()
    assert 'data-testid="simulator-result"' not in answer.content.decode()
    assert time.monotonic() - started < 5


def test_simulator_example_link_loads_and_runs_an_example(viewer_client):
    html = viewer_client.get(reverse("simulator"), {"example": "story2-node-spread"}).content.decode()
    assert 'data-testid="simulator-result"' in html and "node2" in html
    refused = viewer_client.get(reverse("simulator"), {"example": "../../hamiadmin/settings"})
    assert refused.status_code == 400 and "no example named" in refused.content.decode()


@pytest.mark.parametrize(
    "name", ["k8s-selector-taint-cordon-cpu", "k8s-spread-anti-affinity", "k8s-gated", "k8s-running-hami"]
)
def test_the_kubernetes_examples_are_offered_and_run(viewer_client, name):
    page = viewer_client.get(reverse("simulator")).content.decode()
    assert f"example={name}" in page
    answer = viewer_client.get(reverse("simulator"), {"example": name})
    assert answer.status_code == 200 and 'data-testid="simulator-result"' in answer.content.decode()


def test_live_token_moves_when_a_pod_is_placed_and_not_otherwise(viewer_client):
    report_demo_cluster()
    first = viewer_client.get(reverse("live")).json()["version"]
    assert viewer_client.get(reverse("live")).json()["version"] == first
    report_demo_cluster()  # a heartbeat with nothing new
    assert viewer_client.get(reverse("live")).json()["version"] == first
    submit("moves", mem=1000)
    submitted = viewer_client.get(reverse("live")).json()["version"]
    assert submitted != first
    cycle()
    assert viewer_client.get(reverse("live")).json()["version"] != submitted


def test_pages_carry_the_version_they_were_drawn_at(viewer_client):
    report_walkthrough()
    version = viewer_client.get(reverse("live")).json()["version"]
    html = viewer_client.get(reverse("pending")).content.decode()
    assert f'data-version="{version}"' in html


def test_node_page_says_why_a_node_is_not_ready(viewer_client):
    report_demo_cluster()
    url = reverse("node", args=["t4-node"])
    assert 'data-testid="not-ready-reason"' not in viewer_client.get(url).content.decode()
    services.mark_node_not_ready("t4-node", "malformed hami.io/node-nvidia-register[1]: memory")
    html = viewer_client.get(url).content.decode()
    assert 'data-testid="not-ready-reason">malformed hami.io/node-nvidia-register[1]: memory<' in html
    assert "malformed hami.io/node-nvidia-register[1]" in viewer_client.get(reverse("home")).content.decode()


def test_dra_cards_sit_beside_device_plugin_cards_marked_as_such(viewer_client):
    report_demo_cluster()
    device = {"uuid": "GPU-dra-0", "index": 0, "type": "NVIDIA A100", "slots": 1024, "memory": 40960}
    device.update(cores=100, numa=0, health=True, mode="dra")
    mark = {"driver": "hami-core-gpu.project-hami.io", "pool": "dra-node", "device": "hami-gpu-0"}
    services.report_inventory("dra-node", devices=[device], dra={"GPU-dra-0": mark})
    html = viewer_client.get(reverse("home")).content.decode()
    tile = html[html.index('data-uuid="GPU-dra-0"') :]
    assert '<span class="badge">dra</span>' in tile[: tile.index("</article>")]
    other = html[html.index('data-uuid="GPU-t4-1"') :]
    assert '<span class="badge">dra</span>' not in other[: other.index("</article>")]
    assert Card.objects.get(uuid="GPU-dra-0").dra["device"] == "hami-gpu-0"
