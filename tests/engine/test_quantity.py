"""Kubernetes quantities in canonical amounts, rounded up as Kubernetes does, and the pod's
effective request (SPEC 10)."""

from __future__ import annotations

import pytest

from scheduling.engine.errors import PodInvalid
from scheduling.engine.quantity import amount, effective_request, quantity


@pytest.mark.parametrize(
    ("resource", "written", "canonical"),
    [
        ("cpu", "4", 4000),
        ("cpu", "500m", 500),
        ("cpu", "0.1m", 1),  # rounded up to a whole millicore
        ("cpu", 1.5, 1500),
        ("memory", "16Gi", 16 * 2**30),
        ("memory", "1e3", 1000),
        ("memory", "3k", 3000),
        ("memory", "1500m", 2),  # 1.5 bytes, rounded up
        ("pods", "110", 110),
        ("huawei.com/Ascend910", 8, 8),
    ],
)
def test_amounts_are_whole_canonical_units(resource, written, canonical):
    assert amount(resource, written, "f") == canonical


@pytest.mark.parametrize("written", ["4 cores", "-1", "1Zi", None, True, [], "1e999999999"])
def test_what_is_not_a_non_negative_quantity_is_refused_naming_the_field(written):
    with pytest.raises(PodInvalid) as refused:
        amount("cpu", written, "containers[0].resources.requests.cpu")
    assert refused.value.field == "containers[0].resources.requests.cpu"


def test_the_kube_readers_form_keeps_what_is_not_a_whole_64_bit_number():
    assert quantity("3k") == 3000 and quantity("1Ki") == 1024 and quantity("1000m") == 1
    assert quantity("1500m") == "1500m" and quantity("8Ei") == "8Ei"


def test_requests_default_to_limits_and_gpu_resources_are_left_to_the_cards():
    containers = [{"resources": {"limits": {"cpu": "2", "nvidia.com/gpu": 1}, "requests": {"memory": "1Gi"}}}]
    assert effective_request(containers) == {"cpu": 2000, "memory": 2**30}


def test_init_containers_count_as_their_largest_with_the_sidecars_started_before():
    apps = [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
    inits = [
        {"resources": {"requests": {"cpu": "3"}}},  # alone: 3 cpu
        {"restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        {"resources": {"requests": {"cpu": "3", "memory": "3Gi"}}},  # with the sidecar: 3.5 cpu, 4Gi
    ]
    assert effective_request(apps, inits) == {"cpu": 3500, "memory": 4 * 2**30}
    assert effective_request(apps, inits[1:2]) == {"cpu": 1500, "memory": 2 * 2**30}
