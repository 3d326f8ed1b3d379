"""The webhook's views in process: what happens when its dependencies fail. A database that
does not answer falls back to the settings' defaults; a bug answers allowed with a warning
(the scheduler still checks the pod), never a 500; nothing is ever written."""

from __future__ import annotations

import base64
import json

import pytest
from django.db import DatabaseError

from kube.webhook import views
from scheduling.models import Event, Pod, SchedulerConfig

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def webhook_urls(settings):
    settings.ROOT_URLCONF = "kube.webhook.urls"


def review(pod: dict) -> str:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE",
                "namespace": "ml",
                "object": pod,
            },
        }
    )


def whole_card_pod() -> dict:
    return {
        "metadata": {"name": "train"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def post(client, path: str, body: str):
    return client.post(path, body, content_type="application/json")


def test_the_cluster_defaults_in_force_shape_the_patch(client):
    SchedulerConfig.objects.create(exclusive_cores=80)
    answer = post(client, "/webhook/mutate", review(whole_card_pod())).json()["response"]
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert {
        "op": "add",
        "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores",
        "value": "80",
    } in patch


def test_a_database_that_does_not_answer_falls_back_to_the_settings(client, monkeypatch):
    def down():
        raise DatabaseError("connection refused")

    monkeypatch.setattr(SchedulerConfig, "current", staticmethod(down))
    answer = post(client, "/webhook/validate", review(whole_card_pod()))
    assert answer.status_code == 200 and answer.json()["response"]["allowed"] is True


def test_a_failure_inside_is_answered_allowed_with_a_warning(client, monkeypatch):
    def broken(*args):
        raise KeyError("surprise")

    monkeypatch.setattr(views, "cluster_config", broken)
    answer = post(client, "/webhook/mutate", review(whole_card_pod()))
    assert answer.status_code == 200
    response = answer.json()["response"]
    assert response["allowed"] is True
    assert response["warnings"] == ["hamiadmin's mutate webhook failed (KeyError); not checked"]


def test_the_webhook_writes_nothing(client):
    before = (Pod.objects.count(), Event.objects.count(), SchedulerConfig.objects.count())
    for path in ("/webhook/validate", "/webhook/mutate"):
        post(client, path, review(whole_card_pod()))
        post(client, path, review({"metadata": {"name": "x", "annotations": {"nvidia.com/numa-bind": "?"}}}))
        post(client, path, "{broken")
    assert (Pod.objects.count(), Event.objects.count(), SchedulerConfig.objects.count()) == before


def test_bad_namespace_defaults_are_reported_and_left_out(caplog):
    views._namespace_policies.cache_clear()
    policies = views._namespace_policies(
        json.dumps({"a": {"hami.io/gpu-scheduler-policy": "binpack", "metadata.name": "x"}, "b": "spread"})
    )
    assert policies == {"a": {"hami.io/gpu-scheduler-policy": "binpack"}}
    problems = [r.getMessage() for r in caplog.records if "HAMI_WEBHOOK_NAMESPACE_POLICIES" in r.getMessage()]
    assert problems == [
        "HAMI_WEBHOOK_NAMESPACE_POLICIES: a: metadata.name is not a policy annotation; left out",
        "HAMI_WEBHOOK_NAMESPACE_POLICIES: b: must be an object of annotations; left out",
    ]
    assert views._namespace_policies("not json") == {}
