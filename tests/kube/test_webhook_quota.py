"""Namespace quotas at admission, as HAMi's webhook checks them since v2.9 (`fitResourceQuota`):
what the namespace's placed pods hold plus what the pod asks must stay within each quota,
counted as the cycle counts it (a 2-card 4000 MiB ask is 8000 MiB, HAMi's `Memreq * Nums`);
a pod that would pass one is refused naming the quota and the resource (issue 31, item 5)."""

from __future__ import annotations

import pytest

from hamiadmin.hamiconfig import DEFAULT, HamiConfig, ResourceNames
from kube.webhook.quota import NamespaceQuotas, QuotaRow, read_namespace_quotas
from kube.webhook.review import validate
from scheduling import services
from scheduling.engine import ClusterConfig
from scheduling.pipeline import run_cycle
from tests.pipeline.conftest import card

from .test_hami_config import review_of
from .test_webhook import webhook as webhook  # noqa: F401 - the HTTPS server, reused here
from .test_webhook_parity import gpu, pod_with

GPU_QUOTA = NamespaceQuotas(
    "ml",
    (QuotaRow("gpu", "gpumem", 10000), QuotaRow("gpu", "gpucores", 100), QuotaRow("team", "gpumem", 12000)),
    {"vgpus": 2, "gpumem": 6000, "gpucores": 40},
)


def validated(pod: dict, quotas=GPU_QUOTA, hami: HamiConfig = DEFAULT):
    return validate(
        review_of(pod), ClusterConfig(), hami, "hami-scheduler", "all", quotas=lambda namespace: quotas
    )


def test_a_pod_within_every_quota_is_admitted():
    answer = validated(
        pod_with(gpu(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "60"}))
    )
    assert answer.allowed and answer.outcome == "allowed"


def test_memory_over_the_tighter_quota_is_refused_naming_it_and_the_resource():
    """6000 held + 2 cards x 2500 MiB = 11000: within `team` (12000), over `gpu` (10000)."""
    answer = validated(pod_with(gpu(**{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "2500"})))
    assert answer.allowed is False
    assert answer.refusal.field == "metadata.namespace"
    assert answer.refusal.message == (
        "exceeding resource quota: ResourceQuota ml/gpu caps nvidia.com/gpumem at 10000 MiB; "
        "the namespace's pods hold 6000 and this pod asks 5000"
    )


def test_cores_count_too_and_a_whole_card_asks_100():
    answer = validated(
        pod_with(gpu(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "61"}))
    )
    assert answer.refusal.message.startswith(
        "exceeding resource quota: ResourceQuota ml/gpu caps nvidia.com/gpucores at 100%"
    )
    assert validated(pod_with(gpu(**{"nvidia.com/gpu": "1"}))).allowed is False  # 40 + 100 > 100


def test_a_quota_of_zero_blocks_every_ask_and_an_api_quota_is_named_as_such():
    """HAMi reads an explicit 0 as a hard block (`LimitSet`), not as no limit."""
    blocked = NamespaceQuotas("ml", (QuotaRow("freeze", "gpumem", 0, source="api"),), None)
    refusal = validated(pod_with(gpu(**{"nvidia.com/gpumem": "1"})), blocked).refusal
    assert refusal.message.startswith(
        "exceeding resource quota: namespace quota ml/freeze caps nvidia.com/gpumem at 0 MiB"
    )


def test_the_refusal_names_the_resource_as_the_cluster_renamed_it():
    hami = HamiConfig(resources=ResourceNames(memory="hami.io/gpumem"))
    pod = pod_with({"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1", "hami.io/gpumem": "9000"}}})
    assert "caps hami.io/gpumem at 10000 MiB" in validated(pod, hami=hami).refusal.message


def test_a_namespace_without_quotas_and_a_quota_reader_that_fails():
    assert validated(pod_with(gpu()), NamespaceQuotas("ml")).allowed

    def down(namespace):
        raise ConnectionError("database away")

    answer = validate(
        review_of(pod_with(gpu())), ClusterConfig(), DEFAULT, "hami-scheduler", "all", quotas=down
    )
    assert answer.allowed and answer.warnings == ["namespace quotas not checked (ConnectionError)"]


@pytest.mark.django_db
def test_the_reader_counts_the_namespaces_active_allocations(settings):
    settings.REDIS_URL = ""
    services.report_inventory("node-a", {}, {}, [card("GPU-a0", 0, slots=4), card("GPU-a1", 1, slots=4)])
    services.store_namespace_quota("ml", "gpu", {"gpumem": 10000, "gpucores": 100})
    services.submit_pod(
        "ml",
        "a",
        {},
        [
            {
                "name": "m",
                "resources": {
                    "limits": {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 10}
                },
            }
        ],
        [],
        0,
    )
    services.submit_pod(
        "other",
        "b",
        {},
        [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}],
        [],
        0,
    )
    run_cycle()
    read = read_namespace_quotas("ml")
    assert read.used == {"vgpus": 2, "gpumem": 6000, "gpucores": 20}
    assert sorted((row.quota, row.resource, row.hard, row.source) for row in read.rows) == [
        ("gpu", "gpucores", 100, "kubernetes"),
        ("gpu", "gpumem", 10000, "kubernetes"),
    ]
    assert read_namespace_quotas("other") == NamespaceQuotas("other")  # no quota: no usage read


@pytest.mark.django_db(transaction=True)
def test_through_the_webhooks_https_endpoint(webhook):  # noqa: F811
    services.store_namespace_quota("ml", "gpu", {"gpumem": 3000})
    refused = webhook.review(
        "validate", pod_with(gpu(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}))
    )
    assert refused["allowed"] is False
    assert refused["status"]["details"]["causes"][0] == {
        "reason": "FieldValueInvalid",
        "field": "metadata.namespace",
        "message": "exceeding resource quota: ResourceQuota ml/gpu caps nvidia.com/gpumem at 3000 MiB; "
        "the namespace's pods hold 0 and this pod asks 4000",
    }
    assert webhook.review("validate", pod_with(gpu(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"})))[
        "allowed"
    ]
