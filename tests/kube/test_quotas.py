"""ResourceQuota objects on HAMi's resources become namespace quotas the cycle enforces: read
from every namespace, replaced as they change, gone with their object; a quantity that is not
a count is refused naming the field and never lifts the quota."""

from __future__ import annotations

import pytest

from kube.agent import KubeAgent
from kube.quotas import quota_limits, whole_count
from scheduling.models import Card, Event, NamespaceQuota, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, t4_register, wait_until


def quota(name: str, namespace: str, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def rows(namespace: str | None = None) -> set[tuple[str, str, str, int]]:
    found = NamespaceQuota.objects.all()
    if namespace is not None:
        found = found.filter(namespace=namespace)
    return set(found.values_list("namespace", "quota", "resource", "hard"))


def test_counts_are_read_as_the_api_server_writes_them():
    assert [whole_count(value) for value in ("4", "3k", "2M", "1e3", 7)] == [4, 3000, 2_000_000, 1000, 7]
    for value, why in (
        ("16Gi", "quantity of bytes"),
        ("500m", "whole number"),
        ("1.5", "whole number"),
        ("-1", "between 0"),
        (True, "a quantity"),
    ):
        with pytest.raises(ValueError, match=why):
            whole_count(value)


def test_hami_entries_are_kept_the_tighter_one_wins_and_a_bad_one_is_named():
    limits, refused = quota_limits(
        quota(
            "gpu",
            "ml",
            hard={
                "requests.nvidia.com/gpu": "4",
                "limits.nvidia.com/gpu": "3",
                "nvidia.com/gpucores": "200",
                "requests.nvidia.com/gpumem": "16Gi",
                "requests.cpu": "10",
            },
        )
    )
    assert limits == {"vgpus": 3, "gpucores": 200}
    assert list(refused) == ["spec.hard.requests.nvidia.com/gpumem"]


pytestmark_db = pytest.mark.django_db(transaction=True)


@pytestmark_db
def test_quotas_follow_their_objects_and_the_cycle_enforces_them(kube, apiserver):
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 2)))
    apiserver.put("resourcequotas", quota("gpu", "ml", hard={"requests.nvidia.com/gpumem": "4000"}))
    apiserver.put("resourcequotas", quota("cards", "other", hard={"nvidia.com/gpu": "2", "pods": "10"}))
    apiserver.put(
        "resourcequotas", quota("scoped", "ml", hard={"nvidia.com/gpu": "0"}, scopes=["BestEffort"])
    )
    with running(KubeAgent(kube, fast_options())):
        wait_until(
            lambda: rows() == {("ml", "gpu", "gpumem", 4000), ("other", "cards", "vgpus", 2)}, what="rows"
        )
        apiserver.put("pods", pod_object("big", gpu=2, mem=3000, namespace="ml"))
        wait_until(lambda: Pod.objects.filter(name="big").exists() and Card.objects.exists())
        assert not run_cycle().placed
        big = Pod.objects.get(name="big")
        assert big.status == Pod.PENDING
        assert "NamespaceQuotaExceeded" in big.reason
        assert "gpumem 0 + 6000 > hard 4000" in big.reason, "two cards of 3000 MiB count 6000"

        apiserver.update(
            "resourcequotas",
            "ml",
            "gpu",
            lambda q: q["spec"]["hard"].update({"requests.nvidia.com/gpumem": "8k"}),
        )
        wait_until(lambda: ("ml", "gpu", "gpumem", 8000) in rows(), what="the quota raised")
        # The raise wakes the backed-off pod once its transaction commits: retry until it has.
        wait_until(
            lambda: run_cycle().placed or Pod.objects.get(name="big").status != Pod.PENDING, what="placed"
        )
        assert Pod.objects.get(name="big").status == Pod.SCHEDULED

        apiserver.delete("resourcequotas", "other", "cards")
        wait_until(lambda: not rows("other"), what="the rows of a deleted quota gone")


@pytestmark_db
def test_an_unreadable_entry_is_refused_and_keeps_the_row_it_had(kube, apiserver):
    apiserver.put(
        "resourcequotas", quota("gpu", "ml", hard={"nvidia.com/gpumem": "4000", "nvidia.com/gpu": "2"})
    )
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: len(rows("ml")) == 2, what="rows")
        apiserver.update(
            "resourcequotas",
            "ml",
            "gpu",
            lambda q: q["spec"]["hard"].update({"nvidia.com/gpumem": "4Gi", "nvidia.com/gpu": "1"}),
        )
        wait_until(lambda: ("ml", "gpu", "vgpus", 1) in rows(), what="the readable entry applied")
        refused = wait_until(
            lambda: Event.objects.filter(kind=Event.OBJECT_REFUSED, subject="resourcequota/ml/gpu").first(),
            what="the refusal",
        )
    assert rows("ml") == {("ml", "gpu", "gpumem", 4000), ("ml", "gpu", "vgpus", 1)}, (
        "4Gi never lifts the quota"
    )
    assert refused.reason == "ResourceQuotaInvalid"
    assert refused.message.startswith("spec.hard.nvidia.com/gpumem: '4Gi' is a quantity of bytes")


@pytestmark_db
def test_rows_of_quotas_gone_while_the_agent_was_away_are_dropped(kube, apiserver):
    NamespaceQuota.objects.create(namespace="ml", quota="old", resource="vgpus", hard=1)
    apiserver.put("resourcequotas", quota("gpu", "ml", hard={"nvidia.com/gpu": "2"}))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: rows() == {("ml", "gpu", "vgpus", 2)}, what="the stale row dropped")


@pytestmark_db
def test_the_agent_keeps_its_hands_off_the_quotas_made_through_the_api(kube, apiserver):
    from scheduling import services

    services.create_namespace_quota("ml", "gpu", {"vgpus": 4}, by="ops")  # the name a ResourceQuota takes too
    services.create_namespace_quota("ml", "mine", {"gpumem": 8000}, by="ops")
    apiserver.put("resourcequotas", quota("gpu", "ml", hard={"nvidia.com/gpu": "2"}))
    with running(KubeAgent(kube, fast_options())):
        wait_until(
            lambda: NamespaceQuota.objects.filter(source=NamespaceQuota.KUBERNETES).exists(),
            what="the ResourceQuota read",
        )
        apiserver.delete("resourcequotas", "ml", "gpu")
        wait_until(
            lambda: not NamespaceQuota.objects.filter(source=NamespaceQuota.KUBERNETES).exists(),
            what="the ResourceQuota's rows dropped",
        )
    kept = set(NamespaceQuota.objects.values_list("quota", "source", "resource", "hard"))
    assert kept == {("gpu", "api", "vgpus", 4), ("mine", "api", "gpumem", 8000)}


def test_memory_counts_in_units_of_hamis_memory_factor_as_hami_multiplies_the_limit():
    """HAMi's `FitQuota` compares MiB held with the limit times `memoryFactor`: with a factor
    of 4, `limits.nvidia.com/gpumem: 1000` allows 4000 MiB, as a pod's `gpumem: 1000` asks 4000."""
    hard = {"limits.nvidia.com/gpumem": "1000", "limits.nvidia.com/gpucores": "50"}
    assert quota_limits(quota("gpu", "ml", hard=hard), memory_factor=4) == (
        {"gpumem": 4000, "gpucores": 50},
        {},
    )
    assert quota_limits(quota("gpu", "ml", hard=hard))[0]["gpumem"] == 1000
