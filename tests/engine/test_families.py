"""Device families as a seam: NVIDIA is the first family, a second is one class plus `register`."""

from __future__ import annotations

import pytest

from scheduling.engine import encoding, requests
from scheduling.engine.annotations import VGPU_MODE
from scheduling.engine.errors import ScenarioError
from scheduling.engine.families import FAMILIES, NVIDIA, Family, ResourceNames, by_resource, family, register


class Sample(Family):
    """A family as a second module would write it (names made up: nothing reads them)."""

    name = "sample"
    vendor = "Sample"
    resources = ResourceNames(
        "sample.com/npu", "sample.com/npu-mem", "sample.com/npu-mem-pct", "sample.com/npu-core"
    )
    register = "hami.io/node-sample-register"
    to_allocate = "hami.io/sample-devices-to-allocate"
    allocated = "hami.io/sample-devices-allocated"
    node_lock = "hami.io/sample.lock"


@pytest.fixture
def sample():
    found = register(Sample())
    yield found
    del FAMILIES[found.name]


def test_nvidia_is_registered_first_and_names_what_hami_names():
    assert next(iter(FAMILIES.values())) is NVIDIA and family("nvidia") is NVIDIA
    assert NVIDIA.vendor == encoding.VENDOR == "NVIDIA"
    assert (
        NVIDIA.resources.all()
        == requests.RESOURCES
        == (
            "nvidia.com/gpu",
            "nvidia.com/gpumem",
            "nvidia.com/gpumem-percentage",
            "nvidia.com/gpucores",
        )
    )
    assert (NVIDIA.register, NVIDIA.scores) == ("hami.io/node-nvidia-register", "hami.io/node-nvidia-score")
    assert (NVIDIA.to_allocate, NVIDIA.allocated) == (encoding.TO_ALLOCATE, encoding.ALLOCATED)
    assert NVIDIA.node_lock == "hami.io/mutex.lock" and VGPU_MODE == NVIDIA.mode_annotation


def test_nvidia_allocation_string_is_unchanged():
    grants = [[("GPU-0", 1000, 30), ("GPU-1", 1000, 30)], []]
    assert (
        NVIDIA.encode_allocation(grants)
        == encoding.encode_allocation(grants)
        == "GPU-0,NVIDIA,1000,30:GPU-1,NVIDIA,1000,30:;;"
    )
    assert NVIDIA.decode_allocation("GPU-0,NVIDIA,1000,30:GPU-1,NVIDIA,1000,30:;;") == grants


def test_a_registered_family_brings_its_own_names_and_vendor(sample):
    assert family("sample") is sample and by_resource("sample.com/npu-mem") is sample
    assert by_resource("nvidia.com/gpucores") is NVIDIA and by_resource("cpu") is None
    assert sample.encode_allocation([[("NPU-0", 4096, 25)]]) == "NPU-0,Sample,4096,25:;"
    assert sample.decode_allocation("NPU-0,Sample,4096,25:;") == [[("NPU-0", 4096, 25)]]
    with pytest.raises(ScenarioError) as bad:
        sample.decode_allocation("NPU-0,Sample,4096:;")
    assert bad.value.where == "hami.io/sample-devices-allocated[0]"
    with pytest.raises(ScenarioError) as bad_register:
        sample.decode_register('[{"id":"NPU-0","devmem":"lots"}]')
    assert bad_register.value.where == "hami.io/node-sample-register[0].devmem"
    assert (
        sample.extra_annotations([]) == {}
        and sample.partition(sample.decode_register('[{"id":"N"}]')[0]) is None
    )


def test_a_family_registers_once_and_an_unknown_one_is_named(sample):
    with pytest.raises(ValueError, match="registered already"):
        register(Sample())
    with pytest.raises(KeyError, match="known: nvidia, .*sample"):
        family("ascend")
