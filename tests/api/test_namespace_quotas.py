"""`namespacequotas/` and a pod group's `max_evicted`: the API path's ResourceQuota and
PodDisruptionBudget. Operators write, viewers read; bad input names the field; a quota the
Kubernetes agent keeps is shown but answered 409 to writes, and the agent never touches the
API's quotas."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.models import Event, NamespaceQuota, PodGroup

pytestmark = pytest.mark.django_db

URL = "/api/v1/namespacequotas/"


def test_operators_write_namespace_quotas_viewers_only_read(viewer, operator):
    body = {"namespace": "ml", "name": "gpus", "hard": {"vgpus": 4, "gpumem": 16000}}
    assert viewer.post(URL, body, format="json").status_code == 403
    created = operator.post(URL, body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["hard"] == {"vgpus": 4, "gpumem": 16000, "gpucores": None}
    assert (created.json()["source"], created.json()["editable"]) == ("api", True)
    rows = set(NamespaceQuota.objects.values_list("namespace", "quota", "source", "resource", "hard"))
    assert rows == {("ml", "gpus", "api", "vgpus", 4), ("ml", "gpus", "api", "gpumem", 16000)}
    assert Event.objects.filter(subject="namespacequota/ml/gpus", reason="NamespaceQuotaCreate").exists()

    assert viewer.patch(f"{URL}ml/gpus/", {"hard": {"vgpus": 2}}, format="json").status_code == 403
    changed = operator.patch(f"{URL}ml/gpus/", {"hard": {"vgpus": 2, "gpumem": None}}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["hard"] == {"vgpus": 2, "gpumem": None, "gpucores": None}
    assert viewer.get(f"{URL}ml/gpus/").json()["hard"]["vgpus"] == 2
    assert [row["name"] for row in viewer.get(f"{URL}?namespace=ml").json()["results"]] == ["gpus"]
    assert viewer.get(f"{URL}?namespace=other").json()["count"] == 0

    assert viewer.delete(f"{URL}ml/gpus/").status_code == 403
    assert operator.delete(f"{URL}ml/gpus/").status_code == 204
    assert not NamespaceQuota.objects.exists()
    assert viewer.get(f"{URL}ml/gpus/").status_code == 404
    assert operator.delete(f"{URL}ml/gpus/").status_code == 404


def test_bad_namespace_quotas_are_refused_naming_the_field(operator):
    def refused(body) -> dict:
        answer = operator.post(URL, body, format="json")
        assert answer.status_code == 400, answer.content
        return answer.json()

    assert "namespace" in refused({"namespace": "Bad_NS", "name": "q", "hard": {"vgpus": 1}})
    assert "name" in refused({"namespace": "ml", "hard": {"vgpus": 1}})
    assert refused({"namespace": "ml", "name": "q", "hard": {"vgpus": -1}})["hard"]["vgpus"]
    assert refused({"namespace": "ml", "name": "q", "hard": {"cpu": 2}})["hard"]["cpu"]
    assert refused({"namespace": "ml", "name": "q", "hard": {"gpumem": "16Gi"}})["hard"]["gpumem"]
    assert "at least one" in refused({"namespace": "ml", "name": "q", "hard": {}})["hard"][0]
    assert (
        operator.post(URL, {"namespace": "ml", "name": "q", "hard": {"vgpus": 1}}, format="json").status_code
        == 201
    )
    assert "exists" in refused({"namespace": "ml", "name": "q", "hard": {"vgpus": 2}})["name"][0]
    last = operator.patch(f"{URL}ml/q/", {"hard": {"vgpus": None}}, format="json")
    assert last.status_code == 400 and "at least one" in last.json()["hard"][0]
    renamed = operator.patch(f"{URL}ml/q/", {"name": "other"}, format="json")
    assert renamed.status_code == 400 and "create only" in renamed.json()["name"][0]
    bad_filter = operator.get(f"{URL}?source=helm")
    assert bad_filter.status_code == 400 and "source" in bad_filter.json()
    assert operator.get(f"{URL}?namspace=ml").status_code == 400


def test_kubernetes_quotas_are_shown_read_only_and_writes_answer_409(viewer, operator):
    services.store_namespace_quota("ml", "rq", {"vgpus": 8})
    listed = viewer.get(URL).json()["results"]
    assert [(q["name"], q["source"], q["editable"]) for q in listed] == [("rq", "kubernetes", False)]
    for answer in (
        operator.patch(f"{URL}ml/rq/", {"hard": {"vgpus": 100}}, format="json"),
        operator.delete(f"{URL}ml/rq/"),
        operator.post(URL, {"namespace": "ml", "name": "rq", "hard": {"vgpus": 100}}, format="json"),
    ):
        assert answer.status_code == 409, answer.content
        assert "Kubernetes ResourceQuota" in answer.json()["name"][0]
    assert list(NamespaceQuota.objects.values_list("hard", flat=True)) == [8]


def test_the_kubernetes_sync_never_deletes_nor_changes_api_quotas(operator):
    assert (
        operator.post(
            URL, {"namespace": "ml", "name": "gpus", "hard": {"vgpus": 4}}, format="json"
        ).status_code
        == 201
    )
    services.store_namespace_quota("ml", "gpus", {"vgpus": 8})  # a ResourceQuota of the same name
    services.store_namespace_quota("ml", "gpus", {})  # ... deleted again
    assert services.forget_namespace_quotas(set()) == 0  # no ResourceQuota left at all
    assert list(NamespaceQuota.objects.values_list("source", "resource", "hard")) == [("api", "vgpus", 4)]


def test_a_job_takes_a_disruption_budget_from_0_and_null_clears_it(viewer, operator):
    created = operator.post("/api/v1/podgroups/", {"name": "train", "max_evicted": 1}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["max_evicted"] == 1
    assert (
        operator.patch("/api/v1/podgroups/default/train/", {"max_evicted": 0}, format="json").status_code
        == 200
    )
    assert PodGroup.objects.get(name="train").max_evicted == 0
    negative = operator.patch("/api/v1/podgroups/default/train/", {"max_evicted": -1}, format="json")
    assert negative.status_code == 400 and "max_evicted" in negative.json()
    text = operator.patch("/api/v1/podgroups/default/train/", {"max_evicted": "one"}, format="json")
    assert text.status_code == 400 and "max_evicted" in text.json()
    assert (
        viewer.patch("/api/v1/podgroups/default/train/", {"max_evicted": 5}, format="json").status_code == 403
    )
    cleared = operator.patch("/api/v1/podgroups/default/train/", {"max_evicted": None}, format="json")
    assert cleared.status_code == 200 and cleared.json()["max_evicted"] is None
