"""hamiadmin_bind_failures_total: the kube binder counts the placements Kubernetes did not take.

The real `kubernetes` client speaks HTTP to the stand-in API server of tests/kube (no real
API server runs here); the binder is driven directly, as the kube agent's loop does.
"""

from __future__ import annotations

import pytest

from kube.api import api_for_host
from kube.binder import Binder, BindOutcome
from scheduling import services
from scheduling.models import Pod
from scheduling.pipeline import run_cycle
from tests.kube.apiserver import StandInApiServer
from tests.kube.conftest import pod_object

from .conftest import scrape, value

pytestmark = pytest.mark.django_db

FAILURES = "hamiadmin_bind_failures_total"


@pytest.fixture
def apiserver():
    server = StandInApiServer().start()
    yield server
    server.stop()


def placed(apiserver, name: str) -> Pod:
    created = apiserver.put("pods", pod_object(name, gpu=1, mem=1000))
    services.report_inventory("gpu-1", {}, {}, [{"uuid": "GPU-a-0", "index": 0, "memory": 15360}])
    containers = [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}]
    services.submit_pod("default", name, {}, containers, [], 0, created["metadata"]["uid"])
    assert run_cycle().placed
    return Pod.objects.select_related("node").get(name=name)


def test_a_refused_binding_is_counted_once(client, apiserver):
    row = placed(apiserver, "train")
    apiserver.fail("POST", r"/pods/train/binding$", 500)
    before = scrape(client)
    assert Binder(api_for_host(apiserver.url)).bind(row).outcome == BindOutcome.FAILED
    after = scrape(client)
    assert value(after, FAILURES, reason="refused") - value(before, FAILURES, reason="refused") == 1
    assert value(after, FAILURES, reason="bound_elsewhere") == value(
        before, FAILURES, reason="bound_elsewhere"
    )


def test_a_pod_bound_to_another_node_is_counted_as_bound_elsewhere(client, apiserver):
    row = placed(apiserver, "train")
    apiserver.update("pods", "default", "train", lambda pod: pod["spec"].update(nodeName="other-node"))
    before = scrape(client)
    assert Binder(api_for_host(apiserver.url)).bind(row).outcome == BindOutcome.FAILED
    after = scrape(client)
    assert (
        value(after, FAILURES, reason="bound_elsewhere") - value(before, FAILURES, reason="bound_elsewhere")
        == 1
    )


def test_a_successful_binding_counts_no_failure(client, apiserver):
    row = placed(apiserver, "train")
    before = scrape(client)
    assert Binder(api_for_host(apiserver.url)).bind(row).outcome == BindOutcome.BOUND
    after = scrape(client)
    for reason in ("refused", "bound_elsewhere"):
        assert value(after, FAILURES, reason=reason) == value(before, FAILURES, reason=reason)
