"""The audit's world in Chromium, scaled down: many synthetic nodes (the `demo --nodes` kinds),
pods that can never fit among pods that wait for capacity. Every never-fitting pod is flagged
"never fits here" on the Pending page, its deciding fact the first line of its row.

HAMIADMIN_BROWSER_NODES=1000 runs it at the audit's full 1,000 nodes (slow: minutes)."""

from __future__ import annotations

import os
import re

import pytest

from scheduling import services
from scheduling.management.commands.demo import synthetic_nodes

from .conftest import cycle, submit
from .test_browser import WAIT_MS, browser, page, shot, sign_in  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NODES = int(os.environ.get("HAMIADMIN_BROWSER_NODES", "120"))
T4 = "NVIDIA-Tesla T4"
#: (name prefix, how many, the ask, what the deciding fact must say)
NEVER = [
    (
        "huge-t4",
        8,
        {"gpu": 1, "mem": 60000, "annotations": {"nvidia.com/use-gputype": "T4"}},
        f"60,000 MiB > the largest {T4} (15,360 MiB)",
    ),
    ("sixteen", 8, {"gpu": 16}, "16"),
    ("big-mem", 8, {"gpu": 1, "mem": 100000}, "100,000 MiB"),
]


def load_world() -> int:
    for node in synthetic_nodes(NODES):
        services.report_inventory(node["name"], node["labels"], None, node["devices"])
    submit("tenant", mem=1000, annotations={"nvidia.com/use-gpuuuid": "GPU-syn-0001-0"})
    cycle("tenant")
    policy = {"nvidia.com/use-gpuuuid": "GPU-syn-0001-0", "hami.io/gpu-scheduler-policy": "mutex"}
    submit("waits-for-tenant", mem=1000, annotations=policy)
    never = 0
    for prefix, count, ask, _ in NEVER:
        for i in range(count):
            submit(f"{prefix}-{i}", **ask)
            never += 1
    cycle("audit")
    return never


def test_every_never_fitting_pod_is_flagged_with_its_deciding_fact_first(page, viewer_user):  # noqa: F811
    never = load_world()
    sign_in(page, next_path="/pending/")
    facet = page.locator("[data-testid=verdict-facet][data-verdict=never]")
    assert facet.locator("b").inner_text() == str(never)
    waiter = page.locator(
        '[data-testid=pending-row][data-pod="default/waits-for-tenant"] [data-testid=decisive]'
    )
    assert waiter.get_attribute("data-verdict") == "capacity"  # it fits once the tenant leaves

    facet.click()
    page.wait_for_url(re.compile(r"verdict=never"), timeout=WAIT_MS)
    rows = page.locator("[data-testid=pending-row]")
    assert rows.count() == never
    facts = {prefix: fact for prefix, _, _, fact in NEVER}
    for row in rows.all():
        pod = row.get_attribute("data-pod").split("/", 1)[1]
        why = row.locator("td.why")
        first_line = why.inner_text().strip().splitlines()[0]
        assert first_line.startswith("never fits here "), (pod, first_line)
        assert facts[pod.rsplit("-", 1)[0]] in first_line, (pod, first_line)
        decisive = row.locator("[data-testid=decisive]")
        assert decisive.get_attribute("data-verdict") == "never" and decisive.is_visible()
    shot(page, "pending-never-at-scale")
