"""HAMi's scheduler configuration keys (hamiadmin/hamiconfig.py): read from a mounted file or the
environment in any of HAMi's shapes, what does not read reported and never fatal; renamed
resources and the memory factor in the Kubernetes reader and the webhook; and the card mode
(`nvidia.com/vgpu-mode`) against a HAMi JSON register through the stand-in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hamiadmin.hamiconfig import DEFAULT, HamiConfig, ResourceNames, current, load, parse
from kube import pods as pod_objects
from kube.agent import KubeAgent
from kube.webhook.mutate import Mutation, mutate
from kube.webhook.review import read_review, validate
from scheduling.engine import ClusterConfig
from scheduling.engine.errors import PodInvalid
from scheduling.models import Card, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, wait_until
from .test_hami_wire import JSON_REGISTER

REPO = Path(__file__).resolve().parents[2]
RENAMED = {
    "resourceCountName": "hami.io/gpu",
    "resourceMemoryName": "hami.io/gpumem",
    "resourceMemoryPercentageName": "hami.io/gpumem-percentage",
    "resourceCoreName": "hami.io/gpucores",
}

# -- reading the keys -----------------------------------------------------------------------


def test_the_device_configmap_shape_is_read():
    """HAMi's `device-config.yaml`: an `nvidia:` section beside other vendors'."""
    config = load(
        {
            "HAMI_CONFIG": """
nvidia:
  resourceCountName: hami.io/gpu
  resourceMemoryName: hami.io/gpumem
  resourceMemoryPercentageName: hami.io/gpumem-percentage
  resourceCoreName: hami.io/gpucores
  overwriteEnv: false
  defaultMemory: 2048
  defaultCores: 10
  defaultGPUNum: 2
  memoryFactor: 4
cambricon:
  resourceCountName: cambricon.com/vmlu
"""
        }
    )
    assert config.resources == ResourceNames(
        "hami.io/gpu", "hami.io/gpumem", "hami.io/gpumem-percentage", "hami.io/gpucores"
    )
    assert (config.default_memory, config.default_cores, config.default_gpu_num, config.memory_factor) == (
        2048,
        10,
        2,
        4,
    )
    assert config.overwrite_env is False
    assert config.problems == ("cambricon: not read by hamiadmin; ignored",)


def test_helm_values_shape_and_flat_keys_are_read():
    config = parse(
        {
            "scheduler": {
                "defaultSchedulerPolicy": {
                    "nodeSchedulerPolicy": "Spread",
                    "gpuSchedulerPolicy": "binpack,numa",
                }
            },
            "resourceName": "hami.io/gpu",
            "defaultMem": "1024",
        }
    )
    assert (config.node_scheduler_policy, config.gpu_scheduler_policy) == ("spread", "binpack,numa")
    assert config.resources.count == "hami.io/gpu" and config.resources.memory == "nvidia.com/gpumem"
    assert config.default_memory == 1024
    assert config.problems == ()


@pytest.mark.parametrize(
    "raw, problem",
    [
        (
            {"nodeSchedulerPolicy": "densest"},
            "nodeSchedulerPolicy: 'densest' is not binpack or spread; ignored",
        ),
        ({"memoryFactor": 0}, "memoryFactor: must be an integer from 1 to 1048576, got 0; ignored"),
        ({"defaultCores": 150}, "defaultCores: must be an integer from 0 to 100, got 150; ignored"),
        ({"defaultGPUNum": "two"}, "defaultGPUNum: must be an integer from 0 to 65536, got 'two'; ignored"),
        (
            {"resourceCountName": "gpu"},
            "resourceCountName: 'gpu' is not a resource name such as hami.io/gpu; ignored",
        ),
        ({"overwriteEnv": "sometimes"}, "overwriteEnv: must be true or false, got 'sometimes'; ignored"),
        ({"deviceSplitCount": 10}, "deviceSplitCount: not read by hamiadmin; ignored"),
        (
            {"resourceCountName": "hami.io/x", "resourceCoreName": "hami.io/x"},
            "resource names must differ, got ['hami.io/x', 'hami.io/x', 'nvidia.com/gpumem', "
            "'nvidia.com/gpumem-percentage']; the defaults are used",
        ),
    ],
)
def test_what_does_not_read_is_reported_and_left_out(raw, problem):
    config = parse(raw)
    assert config.problems == (problem,)
    assert config.resources == DEFAULT.resources and config.memory_factor == 1
    assert config.node_scheduler_policy is None


def test_the_environment_wins_over_the_file_key_by_key_and_a_broken_source_is_not_fatal(tmp_path):
    mounted = tmp_path / "device-config.yaml"
    mounted.write_text("nvidia:\n  defaultCores: 5\n  memoryFactor: 2\n")
    config = load({"HAMI_CONFIG_FILE": str(mounted), "HAMI_CONFIG": '{"memoryFactor": 8}'})
    assert (config.default_cores, config.memory_factor) == (5, 8)
    assert config.sources == (str(mounted), "HAMI_CONFIG")
    missing = load({"HAMI_CONFIG_FILE": str(tmp_path / "nope.yaml")})
    assert missing.problems[0].startswith(f"HAMI_CONFIG_FILE={tmp_path / 'nope.yaml'}: cannot be read")
    broken = load({"HAMI_CONFIG": "nvidia: [unclosed"})
    assert broken.problems[0].startswith("HAMI_CONFIG: not YAML or JSON")
    assert load({"HAMI_CONFIG": "- a list"}).problems == (
        "HAMI_CONFIG: must be a mapping of HAMi's keys; nothing read from it",
    )
    assert load({}) is DEFAULT


def test_settings_take_hamis_policies_and_report_the_rest_once(tmp_path):
    probe = (
        "import django, logging; django.setup(); from django.conf import settings; "
        "from hamiadmin.hamiconfig import current; current(); current(); "
        "print(settings.HAMIADMIN['NODE_SCHEDULER_POLICY'], settings.HAMIADMIN['GPU_SCHEDULER_POLICY'], "
        "settings.HAMIADMIN['WEBHOOK_HIDE_GPUS'])"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "hamiadmin.settings",
        "HAMIADMIN_VAR_DIR": str(tmp_path),
        "HAMI_NODE_SCHEDULER_POLICY": "binpack",
        "HAMI_CONFIG": json.dumps(
            {
                "nodeSchedulerPolicy": "spread",
                "gpuSchedulerPolicy": "mutex,binpack",
                "overwriteEnv": False,
                "libCudaLogLevel": 1,
            }
        ),
    }
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["spread", "mutex,binpack", "False"]
    reported = [line for line in out.stderr.splitlines() if "libCudaLogLevel" in line]
    assert len(reported) == 1 and "not read by hamiadmin; ignored" in reported[0]


# -- the Kubernetes reader ------------------------------------------------------------------

RENAMED_CONFIG = parse({**RENAMED, "memoryFactor": 4})


def renamed_pod(limits: dict) -> dict:
    return {
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def test_renamed_resources_are_read_under_the_spec_names_and_memory_times_the_factor():
    pod = renamed_pod(
        {"hami.io/gpu": "2", "hami.io/gpumem": "1k", "hami.io/gpucores": "30", "nvidia.com/gpu": "8"}
    )
    [container] = pod_objects.submission(pod, RENAMED_CONFIG)["containers"]
    assert container["resources"] == {
        "limits": {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 30}
    }
    assert pod_objects.asks_gpu(pod, RENAMED_CONFIG)
    # Under the renamed setup, the stock names are somebody else's resources.
    assert not pod_objects.asks_gpu(renamed_pod({"nvidia.com/gpu": "1"}), RENAMED_CONFIG)
    assert pod_objects.asks_gpu(renamed_pod({"nvidia.com/gpu": "1"}), DEFAULT)


def test_a_renamed_resource_that_cannot_be_stored_is_refused_under_its_own_name():
    with pytest.raises(PodInvalid) as refused:
        pod_objects.submission(renamed_pod({"hami.io/gpumem": {"not": "a quantity"}}), RENAMED_CONFIG)
    assert refused.value.field == "containers[0].resources.limits.hami.io/gpumem"


def test_current_follows_the_settings(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "HAMI_CONFIG": RENAMED_CONFIG}
    assert current() is RENAMED_CONFIG
    settings.HAMIADMIN = {**settings.HAMIADMIN, "HAMI_CONFIG": None}
    assert current() is DEFAULT


# -- the webhook under renamed resources (in process: review in, answer out) ----------------


def review_of(pod: dict) -> object:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "ml",
            "name": "train",
            "object": pod,
        },
    }
    return read_review(json.dumps(body).encode())


def test_the_webhook_names_a_renamed_resource_as_the_pod_writes_it():
    answer = validate(
        review_of(renamed_pod({"hami.io/gpu": "1", "hami.io/gpumem": "16Gi"})),
        ClusterConfig(),
        RENAMED_CONFIG,
        "hami-scheduler",
        "all",
    )
    assert answer.allowed is False
    assert answer.refusal.field == "containers[0].resources.limits.hami.io/gpumem"
    assert "got '16Gi': a plain number, without a unit" in answer.refusal.message


def test_the_webhook_fills_the_renamed_count_and_hamis_defaults():
    hami = parse({**RENAMED, "defaultGPUNum": 2, "defaultMem": 2048, "defaultCores": 25, "memoryFactor": 1})
    answer = mutate(
        review_of(renamed_pod({"hami.io/gpumem-percentage": "50"})), ClusterConfig(), hami, Mutation()
    )
    limits_ops = [op for op in answer.patch if "/resources/limits/" in op["path"]]
    assert limits_ops == [
        {"op": "add", "path": "/spec/containers/0/resources/limits/hami.io~1gpu", "value": "2"},
        {"op": "add", "path": "/spec/containers/0/resources/limits/hami.io~1gpucores", "value": "25"},
    ]
    # No memory named at all: the whole card (100 cores, as the engine assumes), then defaultMem.
    whole = mutate(review_of(renamed_pod({"hami.io/gpu": "1"})), ClusterConfig(), hami, Mutation())
    assert [op for op in whole.patch if "/resources/limits/" in op["path"]] == [
        {"op": "add", "path": "/spec/containers/0/resources/limits/hami.io~1gpucores", "value": "100"},
        {"op": "add", "path": "/spec/containers/0/resources/limits/hami.io~1gpumem", "value": "2048"},
    ]


def test_scheduler_name_off_leaves_the_pods_to_name_it():
    pod = renamed_pod({"nvidia.com/gpu": "1"})
    assert mutate(review_of(pod), ClusterConfig(), DEFAULT, Mutation(mode="off")).outcome == "skipped"
    pod["spec"]["schedulerName"] = "hami-scheduler"
    answer = mutate(review_of(pod), ClusterConfig(), DEFAULT, Mutation(mode="off"))
    assert answer.outcome == "patched"
    assert all(op["path"] != "/spec/schedulerName" for op in answer.patch)


# -- through the stand-in: renamed resources, and the card mode ------------------------------

in_db = pytest.mark.django_db(transaction=True)


def pod_row(name: str) -> Pod | None:
    return Pod.objects.filter(namespace="default", name=name).first()


@in_db
def test_a_renamed_resource_pod_schedules_through_the_stand_in(kube, apiserver, settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "HAMI_CONFIG": RENAMED_CONFIG}
    apiserver.put("nodes", node_object("hami-1", JSON_REGISTER))
    pod = pod_object("train", gpu=None)
    pod["spec"]["containers"][0]["resources"]["limits"].update({"hami.io/gpu": "1", "hami.io/gpumem": "500"})
    apiserver.put("pods", pod)
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: pod_row("train") and Card.objects.count() == 2, what="the pod and the cards")
        (placed,) = run_cycle().placed
        assert placed[2] == "GPU-j0,NVIDIA,2000,0:;"  # 500 units of 4 MiB
        wait_until(lambda: pod_row("train").status == Pod.RUNNING, what="bound")


@in_db
def test_a_pod_asking_a_mode_no_card_runs_in_waits_with_card_mode_mismatch(kube, apiserver):
    apiserver.put("nodes", node_object("hami-1", JSON_REGISTER))  # both cards hami-core
    apiserver.put(
        "pods", pod_object("mig-only", gpu=1, mem=1000, annotations={"nvidia.com/vgpu-mode": "mig"})
    )
    apiserver.put(
        "pods", pod_object("core", gpu=1, mem=1000, annotations={"nvidia.com/vgpu-mode": "HAMI-core"})
    )
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: pod_row("mig-only") and pod_row("core") and Card.objects.count() == 2)
        report = run_cycle()
        assert [key for key, _, _ in report.placed] == ["default/core"]
        waiting = pod_row("mig-only")
        assert waiting.status == Pod.PENDING
        assert "0/1 nodes are available: 1 CardModeMismatch" in waiting.reason  # SPEC 10 counts nodes


def test_a_hami_config_is_a_frozen_value():
    with pytest.raises(AttributeError):
        HamiConfig().memory_factor = 2  # type: ignore[misc]
