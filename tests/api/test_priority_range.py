"""Priorities through the REST API (docs/api.md, "Priorities"): above 1,000,000,000, Kubernetes'
highest user-definable priority, is the system range (system-cluster-critical is
2,000,000,000); an operator token used to set any 32-bit priority there (it evicted other
namespaces' pods and was itself never evicted). Only an admin may; Kubernetes pods keep their
PriorityClass value, since the kube agent does not go through the API."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.models import Pod, PodGroup

from .conftest import gpu_pod

pytestmark = pytest.mark.django_db

REFUSED = (
    "at most 1,000,000,000 (Kubernetes' highest user-definable priority); the system range above "
    "it needs the admin role"
)


def test_an_operator_may_not_give_a_pod_a_system_priority_an_admin_may(operator, admin):
    answer = operator.post("/api/v1/pods/", gpu_pod("critical", priority=2_000_000_000), format="json")
    assert answer.status_code == 400 and answer.json() == {"priority": [REFUSED]}
    assert not Pod.objects.filter(name="critical").exists()
    top = operator.post("/api/v1/pods/", gpu_pod("high", priority=1_000_000_000), format="json")
    assert top.status_code == 201, top.content  # the highest a user-defined PriorityClass may have
    answer = admin.post("/api/v1/pods/", gpu_pod("critical", priority=2_000_000_000), format="json")
    assert answer.status_code == 201 and Pod.objects.get(name="critical").priority == 2_000_000_000


def test_a_bulk_item_with_a_system_priority_is_refused_alone(operator):
    pods = [gpu_pod("ok"), gpu_pod("critical", priority=2_147_483_647)]
    body = operator.post("/api/v1/pods/bulk/", {"pods": pods}, format="json").json()
    assert [(r["outcome"], r["error"]) for r in body["pods"]] == [
        ("created", None),
        ("refused", {"field": "priority", "message": REFUSED}),
    ]


def test_a_job_priority_in_the_system_range_needs_an_admin(operator, admin):
    answer = operator.post(
        "/api/v1/podgroups/", {"namespace": "ml", "name": "train", "priority": 1_500_000_000}, format="json"
    )
    assert answer.status_code == 400 and answer.json() == {"priority": [REFUSED]}
    assert (
        operator.post("/api/v1/podgroups/", {"namespace": "ml", "name": "train"}, format="json").status_code
        == 201
    )
    answer = operator.patch("/api/v1/podgroups/ml/train/", {"priority": 1_500_000_000}, format="json")
    assert answer.status_code == 400 and PodGroup.objects.get(name="train").priority == 0
    assert (
        admin.patch("/api/v1/podgroups/ml/train/", {"priority": 1_500_000_000}, format="json").status_code
        == 200
    )


def test_kubernetes_pods_keep_their_priority_class_value():
    """The kube agent's path (`submit_pod` with `origin` kubernetes) is not capped."""
    pod = services.submit_pod(
        "kube-system",
        "coredns",
        {},
        [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        priority=2_000_000_000,
        validate=False,
        origin=Pod.KUBERNETES,
    )
    assert pod.priority == 2_000_000_000
