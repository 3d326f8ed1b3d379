"""Mixed clusters: pods of device families hamiadmin does not schedule go to the HAMi scheduler
kept running for them (`HAMI_OTHER_FAMILIES_SCHEDULER`), and a pod asking NVIDIA beside one
of them is refused at admission naming both (issue 31, item 4; docs/migrating-from-hami.md).
The resource names are HAMi v2.10's defaults (charts/hami/values.yaml, device ConfigMap)."""

from __future__ import annotations

import pytest

from hamiadmin.hamiconfig import DEFAULT, HamiConfig, ResourceNames
from kube.webhook import families
from kube.webhook.mutate import Mutation, mutate
from kube.webhook.review import validate
from scheduling.engine import ClusterConfig

from .test_hami_config import review_of
from .test_webhook import apply_patch, decoded
from .test_webhook import webhook as webhook  # noqa: F401 - the HTTPS server, reused here
from .test_webhook_parity import cpu, gpu, pod_with

OURS = "hamiadmin"
OTHERS = "hami-scheduler"

#: One resource of each family HAMi v2.10 schedules beside NVIDIA, as its chart names them.
HAMI_FAMILIES = {
    "huawei.com/Ascend910C": "Ascend910C",
    "huawei.com/Ascend910C-memory": "Ascend910C",
    "hygon.com/dcunum": "Hygon",
    "cambricon.com/vmlu": "Cambricon",
    "iluvatar.ai/BI-V150-vgpu": "Iluvatar",
    "metax-tech.com/sgpu": "MetaX",
    "enflame.com/drs-gcu": "Enflame",
    "mthreads.com/vgpu": "Moore Threads",
    "kunlunxin.com/vxpu": "Kunlunxin",
    "amd.com/gpu": "AMD",
    "aws.amazon.com/neuroncore": "AWS Neuron",
    "vastaitech.com/va": "Vastai",
    "birentech.com/gpu": "Biren",
}


def setup(**changes) -> Mutation:
    return Mutation(**{"scheduler_name": OURS, "other_scheduler": OTHERS, **changes})


def mutated(pod: dict, **changes):
    return mutate(review_of(pod), ClusterConfig(), DEFAULT, setup(**changes))


def validated(pod: dict, other: str = OTHERS, mode: str = "all"):
    return validate(review_of(pod), ClusterConfig(), DEFAULT, (OURS,), mode, other)


def device(resource: str, name: str = "npu", count: str = "1") -> dict:
    return {"name": name, "image": "ascend:8", "resources": {"limits": {resource: count}}}


@pytest.mark.parametrize("resource", sorted(HAMI_FAMILIES))
def test_each_of_hamis_families_is_recognised_and_nvidia_is_ours(resource):
    assert families.family_of(resource, DEFAULT) == HAMI_FAMILIES[resource]
    assert families.family_of("nvidia.com/gpumem", DEFAULT) == families.NVIDIA
    assert families.family_of("cpu", DEFAULT) is None
    assert families.SCHEDULED == (families.NVIDIA, "Ascend")


def test_ascend_chips_the_engine_registers_are_scheduled_here_and_not_routed():
    """The engine's registry decides (`families.SCHEDULED`): 910B3 and 310P are hamiadmin's,
    the 910C super pod (not registered) is routed as its own family."""
    assert families.family_of("huawei.com/Ascend910B3", DEFAULT) == "Ascend"
    assert families.family_of("huawei.com/Ascend310P-memory", DEFAULT) == "Ascend"
    pod = pod_with(device("huawei.com/Ascend910B3"))
    assert (mutated(pod).patch or []) == [] or all(
        op.get("path") != "/spec/schedulerName" or op.get("value") != OTHERS
        for op in mutated(pod).patch or []
    )
    assert validated(pod_with(gpu(), device("huawei.com/Ascend910B3"))).allowed


@pytest.mark.parametrize("resource", sorted(HAMI_FAMILIES))
@pytest.mark.parametrize("named", [None, "default-scheduler", "hami-scheduler", OURS])
def test_a_pod_of_another_family_is_routed_to_the_scheduler_kept_for_it(resource, named):
    spec = {"schedulerName": named} if named else {}
    pod = pod_with(device(resource), **spec)
    answer = mutated(pod)
    patched = apply_patch(pod, answer.patch or [])
    assert patched["spec"]["schedulerName"] == OTHERS
    assert validated(patched).outcome == "skipped"  # HAMi's scheduler checks its own pods


def test_a_pod_of_another_scheduler_asking_ascend_is_not_touched():
    pod = pod_with(device("huawei.com/Ascend910B3"), schedulerName="volcano")
    assert mutated(pod).outcome == "skipped"
    assert validated(pod).outcome == "skipped"


def test_nvidia_beside_another_family_is_refused_naming_both():
    pod = pod_with(gpu(), device("hygon.com/dcunum"))
    answer = validated(pod)
    assert answer.allowed is False
    assert answer.refusal.field == "containers[1].resources.limits.hygon.com/dcunum"
    assert answer.refusal.message == (
        "pod asks nvidia.com/gpu (NVIDIA, scheduled by hamiadmin) and hygon.com/dcunum "
        "(Hygon, scheduled by hami-scheduler): no one scheduler places both families; "
        "split it into one pod per family"
    )
    assert mutated(pod).patch is None  # left as written for the refusal
    # in one container, and through requests, alike
    both = pod_with(
        {
            "name": "m",
            "resources": {"requests": {"hygon.com/dcunum": "1"}, "limits": {"nvidia.com/gpumem": "100"}},
        }
    )
    refusal = validated(both).refusal
    assert refusal.field == "containers[0].resources.requests.hygon.com/dcunum"
    assert "nvidia.com/gpumem (NVIDIA" in refusal.message and "hygon.com/dcunum (Hygon" in refusal.message


def test_a_renamed_nvidia_resource_is_still_ours():
    hami = HamiConfig(resources=ResourceNames(count="hami.io/gpu"))
    pod = pod_with(
        {"name": "m", "resources": {"limits": {"hami.io/gpu": "1"}}}, device("amd.com/gpu", name="side")
    )
    refusal = validate(review_of(pod), ClusterConfig(), hami, (OURS,), "all", OTHERS).refusal
    assert "hami.io/gpu (NVIDIA" in refusal.message and "amd.com/gpu (AMD" in refusal.message


@pytest.mark.parametrize(
    "other, mode, served",
    [("", "all", OURS), ("hami-scheduler", "off", OURS), ("hami-scheduler", "all", "hami-scheduler")],
)
def test_nothing_is_routed_without_a_scheduler_for_other_families(other, mode, served):
    """No name, mode `off`, or the name is hamiadmin's own (HAMi's default `hami-scheduler`
    served by hamiadmin): routing to ourselves would place what we cannot. Pods stay as before."""
    pod = pod_with(device("hygon.com/dcunum"))
    answer = mutate(
        review_of(pod),
        ClusterConfig(),
        DEFAULT,
        Mutation(scheduler_name=served, mode=mode, other_scheduler=other),
    )
    assert answer.patch is None
    mixed = pod_with(gpu(), device("hygon.com/dcunum"))
    assert validate(review_of(mixed), ClusterConfig(), DEFAULT, (served,), mode, other).allowed


def test_cards_are_still_hidden_from_a_routed_pod_when_overwrite_env_is_on():
    pod = pod_with(device("cambricon.com/vmlu"), cpu())
    patched = apply_patch(pod, mutated(pod, hide_gpus=True).patch)
    assert patched["spec"]["schedulerName"] == OTHERS
    env = [c["env"] for c in patched["spec"]["containers"]]
    assert env == [[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]] * 2


def test_through_the_webhooks_https_endpoint(webhook):  # noqa: F811
    """The test server serves `hamiadmin` and routes other families to HAMi's default name."""
    dcu = pod_with(device("hygon.com/dcunum"))
    answer = webhook.review("mutate", dcu)
    assert answer["allowed"] is True
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in decoded(answer)
    mixed = pod_with(gpu(), device("hygon.com/dcunum", name="dcu"))
    refused = webhook.review("validate", mixed)
    assert refused["allowed"] is False
    cause = refused["status"]["details"]["causes"][0]
    assert cause["field"] == "containers[1].resources.limits.hygon.com/dcunum"
    assert "nvidia.com/gpu (NVIDIA" in cause["message"] and "hygon.com/dcunum (Hygon" in cause["message"]
