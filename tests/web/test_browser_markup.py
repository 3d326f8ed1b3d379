"""Markup in pod names, annotations and card types never runs in a browser (node labels
refuse it at the door: they follow Kubernetes' label syntax, `test_a_label_of_markup_is_refused`).

The server-rendered HTML is checked in tests/chaos/test_security.py; this drives a real
headless Chromium (the fixtures of test_browser) over every page that shows such values,
including a live update (live.js parses the fetched page and swaps blocks in, the path
where an unescaped value would turn into a live element), and fails if a script ran: the
payloads set `window.__pwned` or open a dialog.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.contrib.auth.models import User

from scheduling import services
from scheduling.engine.errors import ScenarioError
from scheduling.roles import ADMIN, role_group

from .conftest import PASSWORD, cycle
from .test_browser import WAIT_MS, browser, page, shot, sign_in  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

IMG = "<img src=x onerror=window.__pwned=1>"
SCRIPT = "<script>window.__pwned=2</script>"
SVG = "<svg onload=alert(3)>"
MARKUP = IMG + SCRIPT + SVG


def submit_markup(name: str, gpu: int = 1) -> None:
    services.submit_pod(
        "default",
        name,
        {"hami.io/gpu-scheduler-policy": MARKUP, "nvidia.com/use-gputype": MARKUP, "note": MARKUP},
        [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpu}}}],
        validate=False,
    )


def test_a_label_of_markup_is_refused():
    with pytest.raises(ScenarioError) as refused:
        services.report_inventory("node1", {"zone": MARKUP}, {}, [{"uuid": "GPU-1-0", "memory": 15360}])
    assert refused.value.where == "labels.zone"


@pytest.fixture
def markup_everywhere():
    """A node whose annotation and card type are markup; a placed pod and a pending one whose
    names and annotations are markup."""
    services.report_inventory(
        "node1",
        {"zone": "a"},
        {"note": MARKUP},
        [
            {"uuid": "GPU-1-0", "index": 0, "memory": 15360, "type": MARKUP},
            {"uuid": "GPU-1-1", "index": 1, "memory": 15360},
        ],
    )
    services.submit_pod(
        "default",
        IMG,
        {"note": MARKUP},
        [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        validate=False,
    )
    submit_markup(SVG + "waits", gpu=8)
    cycle("markup")
    admin = User.objects.create_user("ada", password=PASSWORD, is_staff=True, is_superuser=True)
    admin.groups.add(role_group(ADMIN))


def test_markup_never_runs_on_any_page_that_shows_it(page, markup_everywhere):  # noqa: F811
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    sign_in(page, username="ada")
    pages = [
        "/",
        "/pending/",
        "/pods/",
        f"/pods/default/{quote(IMG, safe='')}/",
        f"/pods/default/{quote(SVG + 'waits', safe='')}/",
        "/nodes/node1/",
        "/events/",
        "/cycles/",
        "/admin/scheduling/pod/",
        "/admin/scheduling/node/",
        "/admin/scheduling/card/",
    ]
    ran, shown = [], 0
    for path in pages:
        answer = page.goto(path)
        assert answer.status == 200, (path, answer.status)
        page.wait_for_load_state("load")
        if page.evaluate("window.__pwned") is not None:
            ran.append(path)
        shown += IMG in page.inner_text("body")  # shown as text, which is what escaping means
    # A live update: the pending page swaps in the block that now lists a new markup pod.
    page.goto("/pending/")
    page.evaluate("window.__sameDocument = true")
    submit_markup("<svg onload=alert(4)>late", gpu=8)  # a name holds no "/", so no </script>
    cycle("late markup")
    page.wait_for_function(
        "() => document.querySelector('#live').innerText.includes('late')", timeout=WAIT_MS
    )
    assert page.evaluate("window.__sameDocument") is True, "the page reloaded instead of updating"
    if page.evaluate("window.__pwned") is not None:
        ran.append("/pending/ (live update)")
    shot(page, "markup-escaped")
    assert ran == [], f"a script ran on {ran}"
    assert dialogs == [], f"a dialog opened: {dialogs}"
    assert shown >= 5, f"the markup was shown as text on only {shown} pages"
