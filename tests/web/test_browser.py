"""The dashboard in a real headless Chromium (Debian's `chromium`, driven by Playwright).

Skipped when Chromium or Playwright is missing, unless REQUIRE_SERVICES=1 (CI), which makes
that a failure. Screenshots of every page land in test-artifacts/screenshots/.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
from django.conf import settings

from scheduling import services
from scheduling.models import Card, Pod
from scheduling.templatetags.charts import amount
from tests.conftest import missing_service

from .conftest import PASSWORD, cycle, report_demo_cluster, report_walkthrough, submit, t4_mutex_waits

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(settings.BASE_DIR) / "test-artifacts" / "screenshots"
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        missing_service(f"Chromium not found at {CHROMIUM} (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_service("Playwright for Python is not installed")
    # Playwright's sync API keeps an event loop in this thread; the ORM calls the tests make
    # between page actions are still plain synchronous code.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser, live_server):
    """A fresh browser tab that records requests leaving the live server and page errors."""
    context = browser.new_context(viewport={"width": 1360, "height": 900}, base_url=live_server.url)
    tab = context.new_page()
    tab.outside_requests = []
    tab.page_errors = []
    own = urlparse(live_server.url).netloc
    tab.on(
        "request",
        lambda r: tab.outside_requests.append(r.url) if urlparse(r.url).netloc not in ("", own) else None,
    )
    tab.on("pageerror", lambda error: tab.page_errors.append(str(error)))
    yield tab
    context.close()
    assert tab.outside_requests == [], "the dashboard must not need the internet"
    assert tab.page_errors == []


def sign_in(tab, username="olga", password=PASSWORD, next_path="/"):
    tab.goto(next_path)
    assert "/accounts/login/" in tab.url
    tab.fill("#id_username", username)
    tab.fill("#id_password", password)
    tab.click("button[type=submit]")
    tab.wait_for_url(re.compile(re.escape(next_path) + r"$"))


def shot(tab, name: str) -> None:
    tab.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_login_then_the_cluster_page(page, viewer_user):
    report_demo_cluster()
    page.goto("/")
    assert "/accounts/login/" in page.url
    shot(page, "login")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "not-the-password")
    page.click("button[type=submit]")
    assert "did not match" in page.inner_text("main")
    sign_in(page)
    assert page.inner_text("h1") == "Cluster"
    assert page.locator("nav.topnav").inner_text().split()[:5] == [
        "hamiadmin",
        "Cluster",
        "Pending",
        "Pods",
        "Simulator",
    ]


def test_cluster_page_shows_the_demo_cards_with_their_usage(page, viewer_user):
    nodes = report_demo_cluster()
    for i in range(3):
        submit(f"infer-{i}", mem=3000, cores=25, annotations={"nvidia.com/use-gputype": "T4"})
    submit("trainer", gpu=2, mem=16000, cores=50, annotations={"nvidia.com/use-gputype": "A100"})
    assert len(cycle().placed) == 4
    sign_in(page)
    tiles = page.locator("[data-testid=card-tile]")
    assert tiles.count() == sum(len(node["devices"]) for node in nodes)
    for card in Card.objects.all():
        tile = page.locator(f"[data-testid=card-tile][data-uuid='{card.uuid}']")
        text = tile.inner_text()
        assert f"{card.used_slots}/{card.slots}" in text
        assert " ".join(amount(card.used_memory, card.memory, "MiB")) in text  # e.g. 15.6/40 GiB
        assert f"{card.used_cores}%" in text  # one card's cores: a percentage
        for allocation in card.allocations.filter(active=True).select_related("pod"):
            assert allocation.pod.key in text
    busy = Card.objects.filter(used_slots__gt=0).count()
    assert busy == 5  # three T4 tenants on three cards (spread), the trainer on two A100 cards
    shot(page, "cluster")
    page.select_option("select[name=type]", "NVIDIA-Tesla T4")
    page.wait_for_url(re.compile(r"type=NVIDIA-Tesla"))
    assert page.locator("[data-testid=card-tile]").count() == 4


def test_pending_page_shows_why_the_mutex_pod_waits(page, viewer_user):
    report_demo_cluster()
    t4_mutex_waits()
    sign_in(page, next_path="/pending/")
    row = page.locator("[data-testid=pending-row][data-pod='default/mutex-waits']")
    first = row.locator("[data-testid=decisive]")
    assert first.get_attribute("data-verdict") == "capacity"  # the decisive reason comes first
    assert "waits for capacity" in first.inner_text() and "t4-node" in first.inner_text()
    assert first.get_attribute("data-code") == "ExclusiveDeviceAllocateConflict"
    row.locator("[data-testid=reasons] > summary").click()  # the node reasons unfold
    assert "4 of 4 cards on t4-node already have tenants" in row.inner_text()
    shot(page, "pending")
    row.locator("a", has_text="default/mutex-waits").click()
    page.wait_for_url(re.compile(r"/pods/default/mutex-waits/$"))
    screen = page.locator("[data-testid=first-screen]")
    assert screen.is_visible() and screen.get_attribute("data-verdict") == "capacity"
    assert "tenants: default/t4-tenant-" in screen.inner_text()  # who must leave
    assert not page.locator("[data-testid=pod-decision]").is_visible()  # the details are folded
    page.locator("[data-testid=decision-details] > summary").click()
    assert "Why it waits" in page.inner_text("[data-testid=pod-decision]")
    shot(page, "pod-pending")


def test_pod_page_walks_through_mutex_then_binpack_then_index(page, viewer_user):
    report_walkthrough()
    sign_in(page, next_path="/pods/default/latency-tier/")
    removed = page.locator("[data-testid=removed-card]")
    assert [removed.nth(i).get_attribute("data-uuid") for i in range(removed.count())] == ["GPU-0", "GPU-1"]
    for i in range(removed.count()):
        assert removed.nth(i).get_attribute("data-stage") == "mutex"
        assert "has tenants and the chain has mutex" in removed.nth(i).inner_text()
    ranked = page.locator("[data-testid=ranked-card]")
    assert [ranked.nth(i).get_attribute("data-uuid") for i in range(ranked.count())] == ["GPU-2", "GPU-3"]
    chosen = page.locator("[data-testid=ranked-card].chosen")
    assert chosen.count() == 1 and chosen.get_attribute("data-uuid") == "GPU-2"
    assert "chosen" in chosen.inner_text()
    tie = page.locator("[data-testid=decided-by]")
    assert tie.count() == 1 and tie.get_attribute("data-key") == "index"
    assert "tied on binpack" in tie.inner_text() and "index 2 before 3" in tie.inner_text()
    chain = page.locator("[data-testid=chain]").inner_text()
    assert chain.index("mutex") < chain.index("binpack") < chain.index("index")
    assert "GPU-2,NVIDIA,1000,0:;" in page.inner_text("[data-testid=allocation]")
    assert page.locator("[data-testid=node-scores] svg g.highlight").get_attribute("data-label") == "t4-node"
    shot(page, "pod-walkthrough")


def test_a_pending_pod_turns_scheduled_without_a_reload(page, viewer_user):
    report_demo_cluster()
    submit("hog", mem=16384, annotations={"nvidia.com/use-gpuuuid": "GPU-v100-0"})
    cycle()
    submit("waiter", mem=8000, annotations={"nvidia.com/use-gpuuuid": "GPU-v100-0"})
    cycle()
    assert Pod.objects.get(name="waiter").status == Pod.PENDING
    sign_in(page, next_path="/pods/default/waiter/")
    assert page.inner_text("[data-testid=pod-status]") == "pending"
    page.evaluate("window.__sameDocument = true")

    services.release_pod(Pod.objects.get(name="hog"), Pod.SUCCEEDED)
    report = cycle("capacity freed")
    assert [placed[0] for placed in report.placed] == ["default/waiter"]

    page.wait_for_selector("[data-testid=pod-status]:text-is('scheduled')", timeout=WAIT_MS)
    assert page.evaluate("window.__sameDocument") is True, "the page reloaded instead of updating in place"
    assert "GPU-v100-0,NVIDIA,8000,0:;" in page.inner_text("[data-testid=pod-allocated]")
    shot(page, "pod-live-scheduled")


def test_node_cycles_and_simulator_pages(page, viewer_user):
    report_demo_cluster()
    for i in range(4):
        submit(f"batch-{i}", mem=2000 * (i + 1), cores=10, annotations={"nvidia.com/use-gputype": "T4"})
        cycle(f"batch {i}")
    sign_in(page, next_path="/nodes/t4-node/")
    assert page.locator("[data-testid=node-card]").count() == 4
    assert page.locator("[data-testid=pair-matrix] td.link-2").count() == 4  # two 50-score pairs, both ways
    shot(page, "node")
    page.click("nav >> text=Cycles")
    assert page.locator("[data-testid=cycle-charts] svg").count() == 2
    shot(page, "cycles")
    page.click("nav >> text=Simulator")
    page.click("text=chain-mutex-binpack-t4")
    first = page.locator("[data-testid=pod-decision]").first
    assert first.locator("[data-testid=ranked-card].chosen").get_attribute("data-uuid") == "GPU-2"
    shot(page, "simulator")


def test_typed_filter_focus_and_open_details_survive_a_live_update(page, viewer_user):
    report_demo_cluster()
    t4_mutex_waits()
    sign_in(page, next_path="/pending/")
    assert page.inner_text("[data-testid=pending-total]") == "1"
    page.click("[data-testid=pending-row][data-pod='default/mutex-waits'] summary")
    page.fill("[data-testid=pod-search]", "mutex-wa")
    page.evaluate("window.__sameDocument = true")

    submit("newcomer", gpu=16, mem=1000)  # a new pending row: the count and the table change

    page.wait_for_selector("[data-testid=pending-total]:text-is('2')", timeout=WAIT_MS)
    page.wait_for_selector("[data-testid=pending-row][data-pod='default/newcomer']", timeout=WAIT_MS)
    assert page.evaluate("window.__sameDocument") is True, "the page reloaded instead of updating in place"
    assert page.input_value("[data-testid=pod-search]") == "mutex-wa"
    assert page.evaluate("document.activeElement.dataset.testid") == "pod-search"
    details = page.locator("[data-testid=pending-row][data-pod='default/mutex-waits'] details")
    assert details.evaluate("element => element.open") is True
    shot(page, "pending-live-kept-state")
