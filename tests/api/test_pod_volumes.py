"""`POST pods/` takes a pod's `volumes` and what they are judged against (SPEC 10
`VolumeBinding`), and refuses a malformed value naming the field."""

from __future__ import annotations

import pytest

from scheduling.models import Pod

from .conftest import gpu_pod

pytestmark = pytest.mark.django_db

STORAGE = {
    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
    "persistentVolumeClaims": [
        {"name": "data", "storageClassName": "local", "accessModes": ["ReadWriteOnce"]}
    ],
    "persistentVolumes": [{"name": "pv", "storageClassName": "local", "capacity": {"storage": "10Gi"}}],
    "storageClasses": [
        {
            "name": "local",
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        }
    ],
}


def test_volumes_and_their_storage_are_kept(operator):
    answer = operator.post("/api/v1/pods/", {**gpu_pod("p", mem=1000), **STORAGE}, format="json")
    assert answer.status_code == 201, answer.content
    assert Pod.objects.get().scheduling == STORAGE


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (
            {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": ""}}]},
            "volumes[0].persistentVolumeClaim.claimName",
        ),
        (
            {"persistentVolumes": [{"name": "pv", "accessModes": ["Sometimes"]}]},
            "persistentVolumes[0].accessModes[0]",
        ),
        ({"storageClasses": [{"name": "s"}]}, "storageClasses[0].provisioner"),
    ],
)
def test_a_malformed_volume_field_is_refused_naming_it(operator, extra, field):
    answer = operator.post("/api/v1/pods/", {**gpu_pod("p", mem=1000), **STORAGE, **extra}, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json(), answer.json()
    assert not Pod.objects.exists()
