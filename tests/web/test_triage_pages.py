"""The Pending page flags every pod that can never fit, with the deciding fact first, and
counts pods by verdict and by the reason that decides them; the pod page answers in its first
screen (verdict, fact, what would make it fit) with the details collapsed. Real cycles.

The cluster: `t4-node` with two 15,360 MiB T4s, `a100-node` with one 81,920 MiB A100."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from scheduling import services
from scheduling.models import Pod

from .conftest import cycle, submit

pytestmark = pytest.mark.django_db

T4 = "NVIDIA-Tesla-T4"


def report_cluster() -> None:
    services.report_inventory(
        "t4-node", devices=[{"uuid": f"T4-{i}", "index": i, "type": T4, "memory": 15360} for i in range(2)]
    )
    services.report_inventory(
        "a100-node", devices=[{"uuid": "A100-0", "index": 0, "type": "NVIDIA-A100", "memory": 81920}]
    )


def waiting_world() -> None:
    """Two T4 pods asking more than a T4 holds (never: the A100 would hold them, but they
    refuse it), a tenant filling T4-0 and T4-1 halfway, and a T4 pod that fits once it leaves."""
    report_cluster()
    submit("tenant", gpu=2, mem=10000, annotations={"nvidia.com/use-gputype": "T4"})
    cycle()
    for name in ("big-a", "big-b"):
        submit(name, gpu=1, mem=60000, annotations={"nvidia.com/use-gputype": "T4"})
    submit("later", gpu=1, mem=8000, annotations={"nvidia.com/use-gputype": "T4"})
    cycle()
    services.requeue_pod(Pod.objects.get(name="later"))
    cycle()  # a second, identical attempt


def rows_of(html: str) -> dict[str, str]:
    """Each pending row's HTML, by pod name."""
    found = {}
    for name, row in re.findall(
        r'data-testid="pending-row" data-pod="default/([^"]+)">(.*?)</tr>', html, re.S
    ):
        found[name] = row
    return found


def first_line(row: str) -> tuple[str, str, str]:
    """(verdict, code, words) of a row's first line."""
    verdict, code, words = re.search(
        r'data-testid="decisive" data-verdict="([^"]+)" data-code="([^"]+)".*?<span class="words">([^<]+)</span>',
        row,
        re.S,
    ).groups()
    return verdict, code, words


def test_every_never_fitting_pod_is_flagged_with_the_deciding_fact_first(viewer_client):
    waiting_world()
    html = viewer_client.get(reverse("pending")).content.decode()
    rows = rows_of(html)
    assert set(rows) == {"big-a", "big-b", "later"}
    for name in ("big-a", "big-b"):
        assert first_line(rows[name]) == (
            "never",
            "CardInsufficientMemory",
            f"60,000 MiB &gt; the largest {T4} (15,360 MiB)",
        )
        assert rows[name].index('data-testid="decisive"') < rows[name].index('data-testid="reasons"')
    verdict, code, words = first_line(rows["later"])
    assert (verdict, code) == ("capacity", "CardInsufficientMemory")
    assert words.startswith("closest node t4-node needs 2,640 MiB freed on T4-")


def test_the_facets_count_pods_by_verdict_and_by_the_deciding_reason(viewer_client):
    waiting_world()
    html = viewer_client.get(reverse("pending")).content.decode()
    verdicts = dict(re.findall(r'data-testid="verdict-facet" data-verdict="([^"]+)">[^<]+<b>(\d+)</b>', html))
    assert verdicts == {"never": "2", "capacity": "1"}
    reasons = dict(
        re.findall(r'data-testid="facet" data-code="([^"]+)"><code>[^<]+</code> <b>(\d+)</b>', html)
    )
    assert reasons == {"CardInsufficientMemory": "3"}  # none under CardTypeMismatch: they chose T4
    never = viewer_client.get(reverse("pending"), {"verdict": "never"}).content.decode()
    assert set(rows_of(never)) == {"big-a", "big-b"}
    wrong = viewer_client.get(reverse("pending"), {"verdict": "sometimes"}).content.decode()
    assert "verdict: &#x27;sometimes&#x27; is not one of" in wrong


def test_the_pod_page_answers_in_its_first_screen_and_folds_the_rest(viewer_client):
    waiting_world()
    pod = Pod.objects.get(name="later")
    html = viewer_client.get(reverse("pod", args=["default", "later"])).content.decode()
    screen = html[
        html.index('data-testid="first-screen"') : html.index(
            "</section>", html.index('data-testid="first-screen"')
        )
    ]
    assert 'data-verdict="capacity"' in screen
    actions = re.findall(r'data-testid="fit-action">([^<]+)</li>', screen)
    assert actions and actions[0].startswith("free 2,640 MiB on T4-")
    assert "(tenants: default/tenant 10,000 MiB)" in actions[0]  # who holds it
    assert "a100-node" not in " ".join(actions)  # excluded by its own ask: never a hint
    excluded = re.search(r'data-testid="excluded-by-ask">(.*?)</p>', screen, re.S).group(1)
    assert "a100-node" in excluded  # grouped as excluded by its own ask
    assert html.index('data-testid="first-screen"') < html.index('data-testid="decision-details"')
    assert re.search(r'<details class="panel" data-testid="decision-details">', html)  # collapsed
    assert pod.attempts == 2
    assert re.findall(r'data-testid="attempt" data-count="(\d+)"', html) == ["2"]  # identical: one row


def test_a_never_fitting_pod_page_says_so_first_and_offers_no_node(viewer_client):
    waiting_world()
    html = viewer_client.get(reverse("pod", args=["default", "big-a"])).content.decode()
    assert re.search(r'data-testid="verdict">never fits here<', html)
    fact = re.search(r'data-testid="deciding-fact">([^<]+)<', html).group(1)
    assert fact == f"60,000 MiB &gt; the largest {T4} (15,360 MiB)"
    actions = re.findall(r'data-testid="fit-action">([^<]+)</li>', html)
    assert actions[0] == "ask at most 15,360 MiB (nvidia.com/gpumem)"
