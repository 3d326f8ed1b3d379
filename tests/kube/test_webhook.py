"""The admission webhook through its real HTTPS endpoint: a gunicorn started as the web pod's
`webhook` container starts it (the Django app, `HAMIADMIN_URLCONF=kube.webhook.urls`, TLS
with a certificate made by `kube.webhook.certs` and trusted by the client as the API server
trusts its `caBundle`), sent AdmissionReview v1 bodies shaped as in the Kubernetes API
reference, reading the test database.

Every invalid form of SPEC 2, 3 and 5 is refused with the field and message the engine gives;
what the engine ignores is allowed with an admission warning; a valid pod's JSON Patch is
decoded, applied, and the result checked (and validated again); pods asking no GPU only get
the cards hidden, pods of other schedulers are not touched; malformed bodies get a clear answer, never a 500.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from kube.webhook.certs import self_signed
from scheduling.engine.chain import chain_names

REPO = Path(__file__).resolve().parents[2]
SCHEDULER = "hamiadmin"
RUNTIME_CLASS = "nvidia"
NAMESPACE_POLICIES = {
    "team-a": {"hami.io/gpu-scheduler-policy": "binpack", "nvidia.com/vgpu-mode": "hami-core"},
    # An operator's mistake: the bad default is left out (and logged), the good one applies.
    "team-b": {"nvidia.com/numa-bind": "yes", "hami.io/node-scheduler-policy": "spread"},
}
MAX_BODY = 256 * 1024
#: The chain names the warning lists: the registry's, so a new policy needs no edit here.
KNOWN = ", ".join(chain_names())

pytestmark = pytest.mark.slow


# -- the server ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def database_url() -> str:
    """The test database, for the server process: the same rows the tests write."""
    conf = connection.settings_dict
    if conf["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{conf['NAME']}"
    credentials = quote(conf["USER"] or "", safe="")
    if conf["PASSWORD"]:
        credentials += ":" + quote(conf["PASSWORD"], safe="")
    host = conf["HOST"] or "127.0.0.1"
    return f"postgres://{credentials}@{host}:{conf['PORT'] or 5432}/{conf['NAME']}"


class Webhook:
    def __init__(self, url: str, cafile: Path):
        self.url = url
        self.context = ssl.create_default_context(cafile=str(cafile))

    def post(self, path: str, body, method: str = "POST") -> tuple[int, dict]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data if method == "POST" else None,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())

    def get_text(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=30, context=self.context) as answer:
            return answer.read().decode()

    def review(self, verb: str, pod: dict, **request) -> dict:
        """POST an AdmissionReview about `pod` to /webhook/<verb>; the `response` (HTTP 200)."""
        status, body = self.post(f"/webhook/{verb}", admission_review(pod, **request))
        assert status == 200, body
        assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
        return body["response"]


@pytest.fixture(scope="module")
def webhook(django_db_setup, django_db_blocker, tmp_path_factory):
    folder = tmp_path_factory.mktemp("webhook-tls")
    cert, key = self_signed(["localhost", "127.0.0.1"], days=1)
    (folder / "tls.crt").write_bytes(cert)
    (folder / "tls.key").write_bytes(key)
    with django_db_blocker.unblock():
        url = database_url()
    port = free_port()
    env = {
        key: value for key, value in os.environ.items() if key not in ("DJANGO_SETTINGS_MODULE", "LOG_FORMAT")
    }
    env.update(
        PYTHONPATH=str(REPO),
        HAMIADMIN_VAR_DIR=str(folder),
        HOME=str(folder),
        DATABASE_URL=url,
        HAMIADMIN_URLCONF="kube.webhook.urls",
        HAMI_SCHEDULER_NAME=SCHEDULER,
        HAMI_WEBHOOK_RUNTIME_CLASS=RUNTIME_CLASS,
        HAMI_WEBHOOK_HIDE_GPUS="true",  # HAMi's overwriteEnv: off by default, on here
        HAMI_WEBHOOK_NAMESPACE_POLICIES=json.dumps(NAMESPACE_POLICIES),
        HAMI_WEBHOOK_MAX_BODY_BYTES=str(MAX_BODY),
        WEB_CONCURRENCY="1",
    )
    env.pop("HAMI_CONFIG", None)
    env.pop("HAMI_CONFIG_FILE", None)
    gunicorn = Path(sys.executable).with_name("gunicorn")
    argv = [
        str(gunicorn),
        "hamiadmin.wsgi:application",
        "--config",
        "python:hamiadmin.gunicorn_conf",
        "--bind",
        f"127.0.0.1:{port}",
        "--certfile",
        str(folder / "tls.crt"),
        "--keyfile",
        str(folder / "tls.key"),
    ]
    process = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    server = Webhook(f"https://localhost:{port}", folder / "tls.crt")
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()[1][-3000:]
            try:
                server.get_text("/healthz")
                break
            except (OSError, ValueError):
                assert time.monotonic() < deadline, "the webhook did not answer /healthz over TLS within 60 s"
                time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


# -- AdmissionReview v1, as the Kubernetes API reference shows it ---------------------------


def admission_review(pod: dict | None, operation: str = "CREATE", namespace: str = "ml", uid=None) -> dict:
    name = (pod or {}).get("metadata", {}).get("name", "")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": name,
            "namespace": namespace,
            "operation": operation,
            "userInfo": {
                "username": "admin",
                "uid": "014fbff9a07c",
                "groups": ["system:authenticated", "my-admin-group"],
                "extra": {"some-key": ["some-value1", "some-value2"]},
            },
            "object": pod,
            "oldObject": None,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            "dryRun": False,
        },
    }


def gpu_pod(
    name: str = "train",
    limits: dict | None = None,
    annotations: dict | None = None,
    scheduler: str | None = None,
    namespace: str = "ml",
    extra_containers: list | None = None,
    init: list | None = None,
) -> dict:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"} if limits is None else limits
    spec: dict = {
        "containers": [
            {
                "name": "main",
                "image": "cuda:12",
                "resources": {"limits": {"cpu": "1", **limits}},
            },
            *(extra_containers or []),
        ],
    }
    if init is not None:
        spec["initContainers"] = init
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    metadata: dict = {"name": name, "namespace": namespace}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def apply_patch(document, patch: list[dict]):
    """RFC 6902 add / replace / remove on a copy of `document`."""
    document = copy.deepcopy(document)
    for op in patch:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        *parents, last = parts
        target = document
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if op["op"] == "add":
            if isinstance(target, list):
                target.insert(len(target) if last == "-" else int(last), op["value"])
            else:
                target[last] = op["value"]
        elif op["op"] == "replace":
            if isinstance(target, list):
                target[int(last)] = op["value"]
            else:
                assert last in target, op
                target[last] = op["value"]
        elif op["op"] == "remove":
            del target[int(last) if isinstance(target, list) else last]
        else:
            raise AssertionError(f"unexpected op {op}")
    return document


def decoded(response: dict) -> list[dict]:
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


# -- validating: every invalid form refused with the engine's field and message -------------

WEIGHTS = "hami.io/device-scoring-weights"
INVALID_ANNOTATIONS = [
    (WEIGHTS, "", f"{WEIGHTS} is empty; expected slot=A,core=B,memory=C"),
    (WEIGHTS, "slot=1,core,memory=1", f"{WEIGHTS}: 'core' is not key=value"),
    (WEIGHTS, "slot=1,core=1,memory=1,gpu=1", f"{WEIGHTS}: unknown key 'gpu'; keys are slot, core, memory"),
    (WEIGHTS, "slot=1,slot=2,core=1,memory=1", f"{WEIGHTS}: key 'slot' given twice"),
    (WEIGHTS, "slot=-1,core=1,memory=1", f"{WEIGHTS}: slot='-1' is not a non-negative integer"),
    (WEIGHTS, "slot=1.5,core=1,memory=1", f"{WEIGHTS}: slot='1.5' is not a non-negative integer"),
    (WEIGHTS, "slot=1,core=1", f"{WEIGHTS}: missing memory"),
    (WEIGHTS, "slot=0,core=0,memory=0", f"{WEIGHTS}: at least one weight must be above 0"),
    (
        "nvidia.com/use-gpuuuid",
        "GPU-a GPU-b",
        "nvidia.com/use-gpuuuid: 'GPU-a GPU-b' is not a card UUID; separate entries with commas",
    ),
    (
        "nvidia.com/nouse-gpuuuid",
        "GPU-a,GPU-b\tGPU-c",
        "nvidia.com/nouse-gpuuuid: 'GPU-b\\tGPU-c' is not a card UUID; separate entries with commas",
    ),
    (
        "nvidia.com/use-gputype",
        "T4\nA100",
        "nvidia.com/use-gputype: 'T4\\nA100' is not a card type; separate entries with commas",
    ),
    (
        "nvidia.com/nouse-gputype",
        "A100,\x07V100",
        "nvidia.com/nouse-gputype: '\\x07V100' is not a card type; separate entries with commas",
    ),
    ("nvidia.com/numa-bind", "yes", "nvidia.com/numa-bind: 'yes' is not true or false"),
    (
        "nvidia.com/vgpu-mode",
        "hami core",
        "nvidia.com/vgpu-mode: 'hami core' is not a card mode; separate entries with commas",
    ),
]


@pytest.mark.parametrize(
    "annotation, value, message", INVALID_ANNOTATIONS, ids=[f"{a}={v!r}" for a, v, _ in INVALID_ANNOTATIONS]
)
def test_an_invalid_annotation_is_refused_with_the_engines_field_and_message(
    webhook, annotation, value, message
):
    response = webhook.review("validate", gpu_pod(annotations={annotation: value}))
    assert response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert response["allowed"] is False
    status = response["status"]
    assert status["message"] == f"annotations.{annotation}: {message}"
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": f"annotations.{annotation}", "message": message}
    ]
    assert "patch" not in response


LIMITS = "containers[0].resources.limits"
INVALID_RESOURCES = [
    # `nvidia.com/gpu: 0` is no GPU asked, as in HAMi (test_webhook_parity.py).
    (
        {"nvidia.com/gpu": "1.5"},
        f"{LIMITS}.nvidia.com/gpu",
        "container 'main': must be a positive integer, got '1.5'",
    ),
    (
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16Gi"},
        f"{LIMITS}.nvidia.com/gpumem",
        "container 'main': must be a non-negative integer (MiB), got '16Gi': a plain number, without a unit",
    ),
    (
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "500M"},
        f"{LIMITS}.nvidia.com/gpumem",
        "container 'main': must be a non-negative integer (MiB), got '500M': a plain number, without a unit",
    ),
    (
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "-1"},
        f"{LIMITS}.nvidia.com/gpumem",
        "container 'main': must be a non-negative integer (MiB), got -1",
    ),
    (
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "101"},
        f"{LIMITS}.nvidia.com/gpumem-percentage",
        "container 'main': must be a percentage from 0 to 100, got 101",
    ),
    (
        {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "-5"},
        f"{LIMITS}.nvidia.com/gpucores",
        "container 'main': must be a non-negative integer (percent of the card), got -5",
    ),
    (
        {"nvidia.com/gpu": "lots"},
        f"{LIMITS}.nvidia.com/gpu",
        "container 'main': must be a positive integer, got 'lots'",
    ),
]


@pytest.mark.parametrize(
    "limits, field, message",
    INVALID_RESOURCES,
    ids=[json.dumps(limits) for limits, _, _ in INVALID_RESOURCES],
)
def test_an_invalid_resource_quantity_is_refused_naming_the_field(webhook, limits, field, message):
    response = webhook.review("validate", gpu_pod(limits=limits))
    assert response["allowed"] is False
    assert response["status"]["message"] == f"{field}: {message}"
    assert response["status"]["details"]["causes"][0]["field"] == field


def test_a_refused_pod_is_refused_as_the_scheduler_would_refuse_it(webhook):
    """The same pod through the Kubernetes reader and the engine: the same text, in the same
    words as the decision the scheduler would park it with."""
    from kube import pods as pod_objects
    from scheduling.engine import ClusterConfig, PodInvalid, PodSpec
    from scheduling.engine.pod import parse_pod

    pod = gpu_pod(limits={"nvidia.com/gpu": "2", "nvidia.com/gpumem": "8Gi"}, annotations={WEIGHTS: "slot=1"})
    submitted = pod_objects.submission(pod)
    with pytest.raises(PodInvalid) as engine:
        parse_pod(
            PodSpec(
                name="train",
                annotations=submitted["annotations"],
                containers=submitted["containers"],
                init_containers=submitted["init_containers"],
            ),
            ClusterConfig(),
        )
    assert webhook.review("validate", pod)["status"]["message"] == str(engine.value)


def test_an_init_container_is_checked_as_the_engine_checks_it(webhook):
    init = [{"name": "fetch", "image": "busybox", "resources": {"limits": {"nvidia.com/gpucores": "x"}}}]
    response = webhook.review("validate", gpu_pod(init=init))
    assert response["status"]["message"] == (
        "initContainers[0].resources.limits.nvidia.com/gpucores: container 'fetch': "
        "must be a non-negative integer (percent of the card), got 'x'"
    )


# -- validating: what the engine ignores is allowed, with a warning --------------------------


def test_unknown_chain_names_and_node_policy_are_allowed_with_warnings(webhook):
    annotations = {
        "hami.io/gpu-scheduler-policy": "binpack, Fastest ,numa",
        "hami.io/node-scheduler-policy": "densest",
    }
    response = webhook.review("validate", gpu_pod(annotations=annotations))
    assert response["allowed"] is True
    assert "status" not in response
    assert response["warnings"] == [
        f"annotations.hami.io/gpu-scheduler-policy: unknown policy 'fastest' ignored (known: {KNOWN})",
        "annotations.hami.io/node-scheduler-policy: unknown node policy 'densest' ignored; using binpack",
    ]


def test_cores_above_100_are_allowed_with_the_decisions_warning(webhook):
    response = webhook.review(
        "validate", gpu_pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"})
    )
    assert response["allowed"] is True
    assert response["warnings"] == [
        f"{LIMITS}.nvidia.com/gpucores: container 'main': 150 is above 100, taken as 100"
    ]


def test_a_valid_pod_is_allowed_without_warnings(webhook):
    response = webhook.review("validate", gpu_pod(annotations={WEIGHTS: "slot=1,core=2,memory=3"}))
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


# -- mutating: the patch, applied ----------------------------------------------------------


def test_a_valid_pod_is_patched_as_hamis_webhook_would(webhook):
    sidecar = {"name": "log", "image": "fluentbit", "env": [{"name": "LEVEL", "value": "info"}]}
    init = [
        {"name": "warmup", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        {"name": "fetch", "image": "busybox"},
    ]
    pod = gpu_pod(
        limits={"nvidia.com/gpumem": "3000"},  # no count: the default count is written
        namespace="team-a",
        annotations={"hami.io/node-scheduler-policy": "spread"},
        extra_containers=[sidecar],
        init=init,
    )
    response = webhook.review("mutate", pod, namespace="team-a")
    assert response["allowed"] is True
    patched = apply_patch(pod, decoded(response))

    spec = patched["spec"]
    assert spec["schedulerName"] == SCHEDULER
    assert spec["runtimeClassName"] == RUNTIME_CLASS
    main, log = spec["containers"]
    warmup, fetch = spec["initContainers"]
    assert main["resources"]["limits"] == {"cpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpu": "1"}
    # Whole card asked (no memory named): the cluster's exclusive cores, as the engine assumes.
    assert warmup["resources"]["limits"] == {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}
    assert log["env"] == [
        {"name": "LEVEL", "value": "info"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
    ]
    assert fetch["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    assert "env" not in main and "env" not in warmup
    # The namespace's defaults, where the pod says nothing itself.
    assert patched["metadata"]["annotations"] == {
        "hami.io/node-scheduler-policy": "spread",
        "hami.io/gpu-scheduler-policy": "binpack",
        "nvidia.com/vgpu-mode": "hami-core",
    }
    # Nothing else changed, and the patched pod passes the validating webhook.
    assert patched["metadata"]["name"] == pod["metadata"]["name"]
    assert webhook.review("validate", patched, namespace="team-a") == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
    }


def test_a_pod_naming_hami_scheduler_is_taken_over_and_one_naming_hamiadmin_kept(webhook):
    for named in ("hami-scheduler", "default-scheduler", None):
        patch = decoded(webhook.review("mutate", gpu_pod(scheduler=named)))
        assert {"op": "add", "path": "/spec/schedulerName", "value": SCHEDULER} in patch
    ours = webhook.review("mutate", gpu_pod(scheduler=SCHEDULER))
    assert all(op["path"] != "/spec/schedulerName" for op in decoded(ours))


def test_an_existing_nvidia_visible_devices_is_replaced_not_duplicated(webhook):
    sidecar = {"name": "log", "image": "x", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    pod = gpu_pod(extra_containers=[sidecar])
    patched = apply_patch(pod, decoded(webhook.review("mutate", pod)))
    assert patched["spec"]["containers"][1]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]


def test_an_invalid_pod_is_not_patched_but_left_to_the_validating_webhook(webhook):
    response = webhook.review("mutate", gpu_pod(annotations={"nvidia.com/numa-bind": "maybe"}))
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


def test_a_namespace_default_that_is_invalid_is_left_out_and_the_rest_applies(webhook):
    pod = gpu_pod(namespace="team-b")
    patched = apply_patch(pod, decoded(webhook.review("mutate", pod, namespace="team-b")))
    assert patched["metadata"]["annotations"] == {"hami.io/node-scheduler-policy": "spread"}
    assert patched["spec"]["schedulerName"] == SCHEDULER


def test_the_pods_own_annotation_wins_over_the_namespace_default(webhook):
    pod = gpu_pod(namespace="team-a", annotations={"nvidia.com/vgpu-mode": "mig"})
    patched = apply_patch(pod, decoded(webhook.review("mutate", pod, namespace="team-a")))
    assert patched["metadata"]["annotations"] == {
        "nvidia.com/vgpu-mode": "mig",  # the pod's own value stays
        "hami.io/gpu-scheduler-policy": "binpack",
    }


# -- untouched: no GPU, another scheduler, not a create -------------------------------------


def cpu_pod() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "ml", "annotations": {WEIGHTS: "nonsense"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {"limits": {"cpu": "1"}}}]},
    }


def test_a_pod_asking_no_gpu_is_not_checked_and_only_has_the_cards_hidden(webhook):
    """overwriteEnv (on here) hides the cards from CPU-only pods too, as HAMi's does."""
    response = webhook.review("validate", cpu_pod())
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}
    patched = apply_patch(cpu_pod(), decoded(webhook.review("mutate", cpu_pod())))
    assert patched["spec"]["containers"][0]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    assert patched["metadata"] == cpu_pod()["metadata"] and "schedulerName" not in patched["spec"]


@pytest.mark.parametrize("verb", ["mutate", "validate"])
def test_a_pod_of_another_scheduler_is_untouched(webhook, verb):
    pod = gpu_pod(scheduler="volcano", annotations={WEIGHTS: "nonsense"})
    assert webhook.review(verb, pod) == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


@pytest.mark.parametrize("verb", ["mutate", "validate"])
def test_an_update_is_untouched(webhook, verb):
    pod = gpu_pod(annotations={WEIGHTS: "nonsense"})
    assert webhook.review(verb, pod, operation="UPDATE")["allowed"] is True


def test_a_pod_with_only_generate_name_and_the_namespace_in_the_request_is_read(webhook):
    pod = gpu_pod(annotations={WEIGHTS: "slot=9"})
    del pod["metadata"]["name"], pod["metadata"]["namespace"]
    pod["metadata"]["generateName"] = "train-"
    response = webhook.review("validate", pod)
    assert response["status"]["message"] == f"annotations.{WEIGHTS}: {WEIGHTS}: missing core, memory"


def test_a_v1beta1_review_is_answered_in_v1beta1(webhook):
    body = admission_review(gpu_pod())
    body["apiVersion"] = "admission.k8s.io/v1beta1"
    status, answer = webhook.post("/webhook/validate", body)
    assert status == 200 and answer["apiVersion"] == "admission.k8s.io/v1beta1"
    assert answer["response"]["allowed"] is True


# -- malformed bodies: a clear answer, never a 500 -------------------------------------------


@pytest.mark.parametrize("verb", ["mutate", "validate"])
@pytest.mark.parametrize(
    "body, message",
    [
        (b"{not json", "not an AdmissionReview: the body is not JSON"),
        (b"", "not an AdmissionReview: the body is not JSON"),
        (b"[1, 2]", "not an AdmissionReview: the body must be a JSON object: an AdmissionReview"),
        (
            json.dumps({"apiVersion": "v1", "kind": "Pod"}).encode(),
            "not an AdmissionReview: kind must be AdmissionReview, got 'Pod'",
        ),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview"}).encode(),
            "not an AdmissionReview: apiVersion must be one of admission.k8s.io/v1, admission.k8s.io/v1beta1",
        ),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            "not an AdmissionReview: request is required: an object",
        ),
        (
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}
            ).encode(),
            "not an AdmissionReview: request.uid is required: a non-empty string",
        ),
        (b"[" * 5000 + b"]" * 5000, "not an AdmissionReview: the body nests too deeply to be a pod"),
    ],
    ids=["not-json", "empty", "a-list", "a-pod", "v2", "no-request", "no-uid", "too-deep"],
)
def test_a_body_that_is_not_an_admission_review_gets_400_saying_why(webhook, verb, body, message):
    status, answer = webhook.post(f"/webhook/{verb}", body)
    assert status == 400
    assert answer["error"].startswith(message), answer


@pytest.mark.parametrize("verb", ["mutate", "validate"])
def test_a_review_whose_object_is_not_a_pod_is_refused_in_the_review(webhook, verb):
    body = admission_review(None)
    body["request"]["object"] = "a pod"
    status, answer = webhook.post(f"/webhook/{verb}", body)
    assert status == 200
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"] == "request.object: must be a Pod object"


@pytest.mark.parametrize(
    "pod, field",
    [
        ({"metadata": {"name": "p"}, "spec": {"containers": "main"}}, None),
        (
            {"metadata": {"name": "p"}, "spec": {"containers": [{"name": 5, "resources": {"limits": {}}}]}},
            None,
        ),
        (
            {
                "metadata": {"name": "p", "annotations": ["x"]},
                "spec": {"containers": [gpu_pod()["spec"]["containers"][0]]},
            },
            "annotations",
        ),
    ],
    ids=["containers-not-a-list", "name-not-a-string", "annotations-not-an-object"],
)
def test_a_pod_of_the_wrong_shape_is_answered_not_crashed_on(webhook, pod, field):
    response = webhook.review("validate", pod)
    if field is not None:
        assert response["allowed"] is False and response["status"]["details"]["causes"][0]["field"] == field
    else:
        assert response["allowed"] is True  # no GPU ask can be read in it: not ours


def test_a_get_is_405_and_a_body_over_the_limit_413(webhook):
    status, answer = webhook.post("/webhook/validate", b"", method="GET")
    assert status == 405 and "POST an AdmissionReview" in answer["error"]
    status, answer = webhook.post("/webhook/mutate", b" " * (MAX_BODY + 1))
    assert status == 413 and str(MAX_BODY) in answer["error"]


def test_admissions_are_counted_by_webhook_and_outcome(webhook):
    webhook.review("validate", gpu_pod(annotations={WEIGHTS: ""}))
    webhook.review("mutate", gpu_pod())
    webhook.post("/webhook/validate", b"nope")
    text = webhook.get_text("/metrics")

    def count(webhook_name: str, outcome: str) -> float:
        line = f'hamiadmin_webhook_admissions_total{{outcome="{outcome}",webhook="{webhook_name}"}}'
        [value] = [row.split()[-1] for row in text.splitlines() if row.startswith(line)]
        return float(value)

    assert count("validate", "denied") >= 1
    assert count("mutate", "patched") >= 1
    assert count("validate", "malformed") >= 1


def test_only_the_webhook_is_served_on_the_tls_port(webhook):
    """The dashboard and the API stay on the web container's own port."""
    for path in ("/api/v1/pods/", "/admin/", "/"):
        request = urllib.request.Request(webhook.url + path)
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(request, timeout=30, context=webhook.context)
        assert missing.value.code == 404
