"""The webhook where HAMi's (v2.10, pkg/scheduler/webhook.go and nvidia/device.go) decides
otherwise than a plain reading of SPEC 2 would: each case is one HAMi admits or refuses, and
hamiadmin now answers the same (docs/migrating-from-hami.md lists what still differs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hamiadmin.hamiconfig import DEFAULT
from kube import pods as pod_objects
from kube.webhook.mutate import Mutation, mutate
from kube.webhook.review import validate
from scheduling.engine import ClusterConfig

from .test_hami_config import review_of
from .test_webhook import apply_patch

REPO = Path(__file__).resolve().parents[2]
HIDE = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}


def pod_with(*containers: dict, labels: dict | None = None, **spec) -> dict:
    metadata: dict = {"name": "train", "namespace": "ml"}
    if labels is not None:
        metadata["labels"] = labels
    return {"metadata": metadata, "spec": {"containers": list(containers), **spec}}


def gpu(name: str = "main", **limits) -> dict:
    return {"name": name, "image": "cuda:12", "resources": {"limits": limits or {"nvidia.com/gpu": "1"}}}


def cpu(name: str = "side", **extra) -> dict:
    return {"name": name, "image": "busybox", **extra}


def validated(pod: dict):
    return validate(review_of(pod), ClusterConfig(), DEFAULT, "hami-scheduler", "all")


def mutated(pod: dict, **setup):
    return mutate(review_of(pod), ClusterConfig(), DEFAULT, Mutation(**setup))


def test_a_gpu_pod_with_a_privileged_container_is_refused_naming_it():
    """HAMi: `container debug is privileged`: it would see every card and escape its limits."""
    pod = pod_with(gpu(), cpu("debug", securityContext={"privileged": True}))
    answer = validated(pod)
    assert answer.allowed is False
    assert answer.refusal.field == "containers[1].securityContext.privileged"
    assert answer.refusal.message.startswith("container 'debug' is privileged")
    assert mutated(pod).patch is None
    # Privileged without a GPU is none of the webhook's business, as in HAMi.
    assert validated(pod_with(cpu("debug", securityContext={"privileged": True}))).allowed


def test_a_count_of_zero_asks_no_gpu_and_is_admitted():
    """HAMi gives `nvidia.com/gpu: 0` no device; the mutating webhook removes the container's
    GPU resources so that the scheduler, reading the stored pod, sees no ask either."""
    alone = pod_with(gpu(**{"nvidia.com/gpu": "0", "nvidia.com/gpumem": "1000"}))
    assert validated(alone).allowed
    patched = apply_patch(alone, mutated(alone, hide_gpus=True).patch)
    assert not pod_objects.asks_gpu(patched, DEFAULT)
    assert "env" not in patched["spec"]["containers"][0]  # a GPU container to HAMi: not hidden
    assert "schedulerName" not in patched["spec"]

    beside = pod_with(gpu(), gpu("tool", **{"nvidia.com/gpu": 0}))
    assert validated(beside).allowed
    patched = apply_patch(beside, mutated(beside, hide_gpus=True).patch)
    assert patched["spec"]["containers"][1] == {
        "name": "tool",
        "image": "cuda:12",
        "resources": {"limits": {}},
    }
    assert patched["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert validated(patched).allowed


def test_overwrite_env_hides_the_cards_from_a_cpu_only_pod_too():
    pod = pod_with(cpu("web"), cpu("log", env=[{"name": "LEVEL", "value": "info"}]))
    patched = apply_patch(pod, mutated(pod, hide_gpus=True).patch)
    assert [c["env"][-1] for c in patched["spec"]["containers"]] == [HIDE, HIDE]
    assert "schedulerName" not in patched["spec"]  # a CPU-only pod keeps its scheduler
    assert mutated(pod).outcome == "skipped"  # overwriteEnv off: untouched


def test_a_gpu_pod_that_already_names_a_node_is_refused():
    answer = validated(pod_with(gpu(), nodeName="gpu-node-1"))
    assert answer.allowed is False
    assert answer.refusal.field == "nodeName"
    assert answer.refusal.message.startswith("pod has node assigned ('gpu-node-1')")
    assert validated(pod_with(cpu(), nodeName="gpu-node-1")).allowed


def test_a_percentage_of_zero_books_no_cores():
    """HAMi writes 100 cores only for `gpumem-percentage: 100` or no memory named at all."""
    answer = mutated(pod_with(gpu(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"})))
    assert not any(op["path"].endswith("gpucores") for op in answer.patch or [])
    whole = mutated(pod_with(gpu(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"})))
    assert {
        "op": "add",
        "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores",
        "value": "100",
    } in (whole.patch)


def test_cards_are_hidden_only_when_asked_as_in_hamis_chart(tmp_path):
    assert Mutation().hide_gpus is False
    probe = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.HAMIADMIN['WEBHOOK_HIDE_GPUS'])"
    )
    base = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "hamiadmin.settings",
        "HAMIADMIN_VAR_DIR": str(tmp_path),
    }

    def hide_gpus(**env) -> str:
        out = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=REPO,
            env={**base, **env},
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    assert hide_gpus() == "False"
    assert hide_gpus(HAMI_CONFIG=json.dumps({"overwriteEnv": True})) == "True"


def test_a_pod_labelled_hami_webhook_ignore_is_left_alone():
    labels = {"hami.io/webhook": "ignore"}
    refused_otherwise = pod_with(gpu(), cpu("debug", securityContext={"privileged": True}), labels=labels)
    assert validated(refused_otherwise).outcome == "skipped"
    assert mutated(pod_with(gpu(), cpu(), labels=labels), hide_gpus=True).outcome == "skipped"
    assert validated(pod_with(gpu(), nodeName="n1", labels={"hami.io/webhook": "enabled"})).allowed is False
