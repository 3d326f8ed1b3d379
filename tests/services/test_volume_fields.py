"""A pod's `volumes` and their storage through the services (SPEC 10 `VolumeBinding`): stored
as given, judged by the cycle, malformed values refused naming the field."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.models import Pod
from scheduling.pipeline import run_cycle
from scheduling.services.fields import FieldProblems

pytestmark = pytest.mark.django_db

CONTAINERS = [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}]
VOLUMES = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]


def on(host: str) -> dict:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}
    return {"required": {"nodeSelectorTerms": [term]}}


def node(name: str) -> None:
    device = {"uuid": f"{name}-0", "index": 0, "memory": 15360}
    services.report_inventory(name, {"kubernetes.io/hostname": name}, {}, [device])


def test_a_pod_with_a_claim_is_placed_where_its_volume_is():
    node("gpu-a")
    node("gpu-b")
    scheduling = {
        "volumes": VOLUMES,
        "persistentVolumeClaims": [{"name": "data", "volumeName": "pv-b"}],
        "persistentVolumes": [{"name": "pv-b", "nodeAffinity": on("gpu-b")}],
        "storageClasses": [],
    }
    services.submit_pod("default", "reader", {}, CONTAINERS, scheduling=scheduling)
    assert [node for _, node, _ in run_cycle().placed] == ["gpu-b"]
    assert Pod.objects.get(name="reader").scheduling == scheduling


def test_a_pod_whose_claim_is_missing_waits_naming_it():
    node("gpu-a")
    services.submit_pod(
        "default", "orphan", {}, CONTAINERS, scheduling={"volumes": VOLUMES, "persistentVolumeClaims": []}
    )
    assert run_cycle().placed == []
    assert 'persistentvolumeclaim "data" not found' in Pod.objects.get(name="orphan").reason


@pytest.mark.parametrize(
    ("scheduling", "field"),
    [
        (
            {"volumes": [{"name": "data", "persistentVolumeClaim": {}}]},
            "volumes[0].persistentVolumeClaim.claimName",
        ),
        (
            {"volumes": VOLUMES, "persistentVolumes": [{"name": "pv", "capacity": {"storage": "big"}}]},
            "persistentVolumes[0].capacity.storage",
        ),
        (
            {
                "volumes": VOLUMES,
                "storageClasses": [{"name": "s", "provisioner": "p", "volumeBindingMode": "Later"}],
            },
            "storageClasses[0].volumeBindingMode",
        ),
    ],
)
def test_malformed_volumes_and_storage_are_refused_naming_the_field(scheduling, field):
    with pytest.raises(FieldProblems) as refused:
        services.submit_pod("default", "bad", {}, CONTAINERS, scheduling=scheduling)
    assert refused.value.field == field
