"""Bad input through the real API (Django's test client, the whole middleware and DRF
stack): property-based bodies for the agent report, pod submissions with every
annotation, and simulation scenarios; bodies over the size limits.

Nasty values: huge strings, unicode, control characters, NUL, NaN / Infinity, negative
and huge numbers, deep nesting, wrong types. The figures: requests tried, 5xx (must be 0),
refusals that do not name the field at fault (must be 0). Afterwards the consistency check
finds no corrupted row.
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from scheduling.api.tokens import issue_agent_token, issue_role_token
from scheduling.pipeline import consistency, run_cycle

from .conftest import SIZES

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

#: The admission webhook is fuzzed where this tree has one (it is being built alongside).
WEBHOOK = importlib.util.find_spec("kube.webhook") is not None

ANNOTATIONS = [
    "hami.io/gpu-scheduler-policy",
    "hami.io/node-scheduler-policy",
    "hami.io/device-scoring-weights",
    "nvidia.com/use-gputype",
    "nvidia.com/nouse-gputype",
    "nvidia.com/use-gpuuuid",
    "nvidia.com/nouse-gpuuuid",
    "nvidia.com/numa-bind",
    "nvidia.com/vgpu-mode",
    "hami.io/vgpu-devices-allocated",
    "hami.io/vgpu-devices-to-allocate",
    "hami.io/vgpu-node",
    "hami.io/bind-phase",
    "hami.io/device-cordon",
    "hami.io/preemptible",
    "hami.io/group-name",
    "hami.io/group-min-member",
    "hami.io/group-schedule-timeout-seconds",
    "hami.io/queue",
]
LIMITS = ["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"]

NASTY_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=31), max_size=10),
    st.sampled_from(
        ["", " ", "\x00", "NaN", "Infinity", "-1", "1e309", "0x10", "9" * 40, "<script>x</script>"]
    ),
    st.sampled_from(["'; DROP TABLE scheduling_pod; --", "%s%s%n", "\u202e\ufeff", "mutex,binpack,spread"]),
    st.builds(lambda n: "x" * n, st.sampled_from([255, 256, 1000, 70000])),
)
NASTY_NUMBER = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**31, 2**31 - 1, 2**63, True, False]),
)
LEAF = st.one_of(NASTY_TEXT, NASTY_NUMBER, st.none())
NASTY = st.recursive(
    LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def deep(levels: int) -> str:
    """A placeholder for `levels` nested lists, spliced into the raw body by `Tally.send`
    (Python's own encoder would give up before the server is asked)."""
    return f"@@deep{levels}@@"


def splice_deep(raw: str, cap: int | None = None) -> str:
    for levels in (50, 200, 2000):
        nested = min(levels, cap) if cap else levels
        raw = raw.replace(f'"@@deep{levels}@@"', "[" * nested + "1" + "]" * nested)
    return raw


VALUE = st.one_of(LEAF, NASTY, st.builds(deep, st.sampled_from([50, 200, 2000])))


class Tally:
    """Requests tried, by status class; 5xx and refusals naming no field are kept."""

    def __init__(self):
        self.statuses: Counter = Counter()
        self.server_errors: list[str] = []
        self.unnamed: list[str] = []

    @property
    def tried(self) -> int:
        return sum(self.statuses.values())

    def send(self, client: APIClient, path: str, body, deep_cap: int | None = None) -> int:
        cache.clear()  # the throttles: every example reaches the parser, none is answered 429
        raw = splice_deep(
            json.dumps(body, allow_nan=True), deep_cap
        )  # NaN, Infinity as a careless client writes them
        answer = client.post(path, raw, content_type="application/json")
        self.last = answer
        self.statuses[answer.status_code] += 1
        if answer.status_code >= 500:
            self.server_errors.append(f"{path} {answer.status_code}: {raw[:300]}")
        elif answer.status_code == 400:
            refusal = answer.json()
            named = isinstance(refusal, dict) and any(
                key not in ("detail", "non_field_errors") for key in refusal
            )
            if not named and not _parse_error(refusal):
                self.unnamed.append(f"{path}: {raw[:200]} -> {str(refusal)[:200]}")
        return answer.status_code


def _parse_error(refusal) -> bool:
    """A body that is not JSON at all has no field to name."""
    return isinstance(refusal, dict) and "parse error" in str(refusal.get("detail", "")).lower()


def client(token: str) -> APIClient:
    api = APIClient(raise_request_exception=False)
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return api


FUZZ = settings(
    max_examples=SIZES["fuzz_examples"],
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


def device():
    return st.fixed_dictionaries(
        {"uuid": st.one_of(st.text(max_size=20), VALUE), "index": st.one_of(st.integers(0, 16), VALUE)},
        optional={
            "memory": VALUE,
            "type": VALUE,
            "numa": VALUE,
            "slots": VALUE,
            "cores": VALUE,
            "health": VALUE,
            "mode": VALUE,
            "links": VALUE,
        },
    )


SENSIBLE_DEVICE = st.fixed_dictionaries(
    {
        "uuid": st.from_regex(r"\AGPU-fz-[0-9]{1,2}\Z"),
        "index": st.integers(0, 7),
        "memory": st.integers(1, 81920),
    },
    optional={
        "type": st.sampled_from(["NVIDIA-Tesla T4", "NVIDIA-A100"]),
        "numa": st.integers(0, 1),
        "cores": st.just(100),
    },
)
DEVICE_FIELDS = st.sampled_from(
    ["uuid", "index", "memory", "type", "numa", "slots", "cores", "health", "mode", "links"]
)


def report_mutated(devices: list, where: str, field: str, value) -> dict:
    """A sensible report of node fuzz-node with one field, or one device's field, made nasty."""
    body: dict = {
        "node": "fuzz-node",
        "labels": {"zone": "a"},
        "annotations": {},
        "devices": [dict(d) for d in devices],
    }
    if where == "device" and body["devices"]:
        body["devices"][0][field] = value
    elif where != "device":
        body[where] = value
    return body


REPORT = st.one_of(
    st.builds(
        report_mutated,
        st.lists(SENSIBLE_DEVICE, max_size=3, unique_by=lambda d: d["uuid"]),
        st.sampled_from(["device", "device", "node", "labels", "annotations", "devices"]),
        DEVICE_FIELDS,
        VALUE,
    ),
    st.fixed_dictionaries(
        {"node": st.one_of(st.just("fuzz-node"), VALUE)},
        optional={
            "labels": st.one_of(st.dictionaries(NASTY_TEXT, LEAF, max_size=3), VALUE),
            "annotations": st.one_of(st.dictionaries(st.sampled_from(ANNOTATIONS), VALUE, max_size=3), VALUE),
            "devices": st.one_of(st.lists(device(), max_size=4), VALUE),
        },
    ),
)

#: Mostly sensible values with a nasty one here and there, so that accepted pods reach the engine.
QUANTITY = st.one_of(st.integers(0, 40000), st.sampled_from(["1", "2", "1000", "50", "100"]), VALUE)
ANNOTATION_VALUE = st.one_of(
    st.sampled_from(
        ["binpack", "spread", "mutex,binpack", "topology-aware", "true", "false", "FALSE", "NVIDIA-Tesla T4"]
    ),
    st.sampled_from(
        [
            "GPU-F-0,GPU-F-1",
            "T4;A100",
            "binpack:2,spread:1",
            "mem=1,core=2",
            "hami-core",
            "mig",
            "2",
            "-1",
            "team-a",
        ]
    ),
    NASTY_TEXT,
)

CONTAINER = st.fixed_dictionaries(
    {"name": st.one_of(st.just("main"), NASTY_TEXT)},
    optional={
        "resources": st.one_of(
            st.fixed_dictionaries({"limits": st.dictionaries(st.sampled_from(LIMITS), QUANTITY, max_size=4)}),
            st.fixed_dictionaries(
                {"requests": st.dictionaries(st.sampled_from(LIMITS), QUANTITY, max_size=4)}
            ),
            VALUE,
        )
    },
)

SENSIBLE_LIMITS = st.fixed_dictionaries(
    {"nvidia.com/gpu": st.integers(1, 2)},
    optional={"nvidia.com/gpumem": st.integers(100, 8000), "nvidia.com/gpucores": st.integers(0, 100)},
)
SENSIBLE_POD = st.fixed_dictionaries(
    {
        "name": st.from_regex(r"\Afz[a-z0-9]{1,12}\Z"),
        "namespace": st.just("fuzz"),
        "containers": st.lists(
            st.fixed_dictionaries(
                {"name": st.just("main"), "resources": st.fixed_dictionaries({"limits": SENSIBLE_LIMITS})}
            ),
            min_size=1,
            max_size=2,
        ),
    },
    optional={
        "annotations": st.dictionaries(st.sampled_from(ANNOTATIONS), ANNOTATION_VALUE, max_size=3),
        "priority": st.integers(-10, 10),
    },
)


def mutated(pod: dict, field: str, value) -> dict:
    """`pod` with one field (or one container's resources) made nasty."""
    pod = dict(pod)
    if field == "resources":
        pod["containers"] = [{**pod["containers"][0], "resources": value}, *pod["containers"][1:]]
    else:
        pod[field] = value
    return pod


NASTY_FIELD = st.sampled_from(
    ["name", "namespace", "containers", "resources", "annotations", "initContainers", "priority", "uid"]
)
POD = st.one_of(
    SENSIBLE_POD,
    st.builds(mutated, SENSIBLE_POD, NASTY_FIELD, VALUE),
    st.builds(
        mutated,
        SENSIBLE_POD,
        st.just("resources"),
        st.fixed_dictionaries({"limits": st.dictionaries(st.sampled_from(LIMITS), QUANTITY, max_size=4)}),
    ),
    st.builds(
        mutated,
        SENSIBLE_POD,
        st.just("annotations"),
        st.dictionaries(
            st.sampled_from(ANNOTATIONS), st.one_of(ANNOTATION_VALUE, VALUE), min_size=1, max_size=5
        ),
    ),
)

SCENARIO = st.fixed_dictionaries(
    {
        "nodes": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "name": st.one_of(st.just("n1"), NASTY_TEXT),
                        "devices": st.one_of(st.lists(device(), max_size=3), VALUE),
                    },
                    optional={"annotations": VALUE, "labels": VALUE},
                ),
                max_size=3,
            ),
            VALUE,
        ),
        "pods": st.one_of(st.lists(POD, max_size=3), VALUE),
    },
    optional={"config": VALUE, "top": VALUE},
)


@pytest.fixture
def tally():
    return Tally()


def record(figures, tally: Tally, target: str) -> None:
    found = consistency.check()
    figures["target"] = target
    figures["requests_tried"] = tally.tried
    figures["statuses"] = dict(sorted(tally.statuses.items()))
    figures["server_errors_5xx"] = len(tally.server_errors)
    figures["refusals_naming_no_field"] = len(tally.unnamed)
    figures["corrupted_rows"] = sum(found.counts().values())
    figures.at_least("requests_tried", SIZES["fuzz_examples"])
    assert tally.server_errors == [], tally.server_errors[:5]
    assert tally.unnamed == [], tally.unnamed[:5]
    figures.require("server_errors_5xx", 0)
    figures.require("corrupted_rows", 0)


def test_fuzzed_agent_reports(figures, tally):
    agent = client(issue_agent_token("fuzz-node"))

    @FUZZ
    @given(body=REPORT)
    def report(body):
        tally.send(agent, "/api/v1/agents/report/", body)

    report()
    run_cycle()
    record(figures, tally, "agent report")


def test_fuzzed_pod_submissions_with_every_annotation(figures, tally):
    agent = client(issue_agent_token("fuzz-node"))
    devices = [
        {"uuid": f"GPU-F-{i}", "index": i, "memory": 16000, "type": "NVIDIA-Tesla T4"} for i in range(4)
    ]
    assert tally.send(agent, "/api/v1/agents/report/", {"node": "fuzz-node", "devices": devices}) == 200
    operator = client(issue_role_token("fuzz-operator", "operator"))

    @FUZZ
    @given(body=POD)
    def submit(body):
        tally.send(operator, "/api/v1/pods/", body)

    submit()
    for _ in range(3):
        run_cycle()  # the accepted ones are decided: the engine meets what the API let in
    record(figures, tally, "pod submission")


def test_fuzzed_scenarios(figures, tally):
    viewer = client(issue_role_token("fuzz-viewer", "viewer"))

    @FUZZ
    @given(body=SCENARIO)
    def simulate(body):
        tally.send(viewer, "/api/v1/simulate/", body)

    simulate()
    record(figures, tally, "simulate scenario")


def test_bodies_over_the_size_limits_are_refused_with_413(figures, tally):
    agent = client(issue_agent_token("fuzz-node"))
    operator = client(issue_role_token("fuzz-operator", "operator"))
    viewer = client(issue_role_token("fuzz-viewer", "viewer"))
    big = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 2_621_440
    huge = "x" * (max(big, django_settings.HAMIADMIN["SIMULATE_MAX_BODY_BYTES"]) + 10)
    codes = [
        tally.send(agent, "/api/v1/agents/report/", {"node": "fuzz-node", "labels": {"a": huge}}),
        tally.send(
            operator, "/api/v1/pods/", {"name": "big", "namespace": "fuzz", "annotations": {"a": huge}}
        ),
        tally.send(viewer, "/api/v1/simulate/", {"nodes": [], "pods": [], "pad": huge}),
    ]
    figures["requests_tried"] = tally.tried
    figures["answers"] = codes
    assert codes == [413, 413, 413], codes
    figures.require("requests_tried", 3)


def admission_review(pod: dict, where: str, value) -> dict:
    """An AdmissionReview v1 for the pod (as Kubernetes writes it), one place made nasty."""
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod["name"], "namespace": "fuzz", "annotations": pod.get("annotations", {})},
        "spec": {"schedulerName": "hami-scheduler", "containers": pod["containers"]},
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b4b5b0e-7c1e-4b8a-9d0b-000000000016",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "fuzz",
            "name": pod["name"],
            "object": obj,
        },
    }
    target = {
        "review": review,
        "request": review["request"],
        "object": obj,
        "metadata": obj["metadata"],
        "spec": obj["spec"],
        "container": obj["spec"]["containers"][0],
    }
    if where == "none":
        return review
    holder, _, key = where.partition(".")
    target[holder][key] = value
    return review


ADMISSION = st.builds(
    admission_review,
    SENSIBLE_POD,
    st.sampled_from(
        ["none", "review.request", "request.object", "request.operation", "request.kind", "request.uid"]
        + ["object.spec", "object.metadata", "metadata.annotations", "metadata.name", "spec.containers"]
        + ["spec.initContainers", "spec.schedulerName", "container.resources", "container.name"]
    ),
    VALUE,
)


@pytest.mark.skipif(not WEBHOOK, reason="no admission webhook in this tree (kube/webhook)")
def test_fuzzed_admission_reviews(figures, tally, settings):
    settings.ROOT_URLCONF = "kube.webhook.urls"
    anybody = APIClient(raise_request_exception=False)
    masked: list[str] = []

    @FUZZ
    @given(body=ADMISSION, webhook=st.sampled_from(["validate", "mutate"]))
    def review(body, webhook):
        status = tally.send(anybody, f"/webhook/{webhook}", body)
        if status == 200:
            answer = tally.last.json()
            warnings = (answer.get("response") or {}).get("warnings") or []
            if any("webhook failed" in warning for warning in warnings):
                masked.append(f"{webhook}: {json.dumps(body)[:300]} -> {warnings}")

    review()
    figures["crashes_answered_as_allowed"] = len(masked)
    record(figures, tally, "admission review")
    assert masked == [], masked[:5]
    figures.require("crashes_answered_as_allowed", 0)


@pytest.mark.skipif(not WEBHOOK, reason="no admission webhook in this tree (kube/webhook)")
@pytest.mark.parametrize("webhook", ["validate", "mutate"])
def test_admission_review_nested_2000_deep_is_a_400_not_a_500(settings, webhook):
    settings.ROOT_URLCONF = "kube.webhook.urls"
    review = admission_review(
        {"name": "deep", "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
        "metadata.annotations",
        {"x": deep(2000)},
    )
    raw = splice_deep(json.dumps(review))
    answer = APIClient(raise_request_exception=False).post(
        f"/webhook/{webhook}", raw, content_type="application/json"
    )
    assert answer.status_code == 400, answer.status_code
