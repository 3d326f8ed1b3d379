"""Every object the watcher reads either enters or is refused out loud: an `object_refused`
Event naming the field, a Warning on the object in Kubernetes, and the loop goes on.

The readers (`pods.submission`, `nodes.inventory`) are fuzzed with anything JSON can carry
and more (NUL, lone surrogates, 1e999, wrong types, missing fields): they return arguments
the write paths store, or raise their documented refusal naming the field, nothing else.
The database-backed fuzz runs on PostgreSQL when DATABASE_URL points there (CI), where a
NUL in an annotation used to fail `submit_pod` with DataError on every resync.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kube import nodes, pods
from kube.agent import KubeAgent
from kube.sync import NodeSync, PodSync
from scheduling import services
from scheduling.engine import PodInvalid, ScenarioError
from scheduling.engine.requests import RESOURCES
from scheduling.models import Card, Event, Node, Pod
from scheduling.storable import why_unstorable

from .conftest import fast_options, node_object, pod_object, running, t4_register, wait_until

FUZZ = settings(max_examples=300, deadline=None)
FUZZ_DB = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- what Kubernetes could send, and what it never would -------------------------------------

characters = st.one_of(st.characters(), st.sampled_from(["\x00", "\ud800", "é", "𝔘", "\n", ":", ","]))
texts = st.text(characters, max_size=12)
numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e999, -1e999, 1e300, 2**31, 2**63]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
anything = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
quantities = st.one_of(
    st.sampled_from(
        ["1", "3k", "2Ki", "1000m", "1500m", "1e3", "1e999999999", "1e" + "9" * 5000, "9" * 30, "lots"]
    ),
    numbers,
    texts,
    anything,
)
sections = st.dictionaries(st.sampled_from((*RESOURCES, "cpu")), quantities, max_size=4)
resources = st.one_of(
    st.fixed_dictionaries({}, optional={"limits": sections | anything, "requests": sections}), anything
)
ports = st.one_of(
    st.lists(
        st.fixed_dictionaries(
            {"hostPort": st.one_of(st.integers(0, 70000), anything)},
            optional={"containerPort": numbers, "protocol": texts | anything, "hostIP": texts},
        ),
        max_size=2,
    ),
    anything,
)
containers = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={"name": texts | anything, "resources": resources, "ports": ports, "restartPolicy": texts},
    ),
    anything,
)
annotation_keys = st.one_of(
    texts,
    st.sampled_from(
        [
            "hami.io/gpu-scheduler-policy",
            "hami.io/bind-phase",
            "kubectl.kubernetes.io/last-applied-configuration",
        ]
    ),
)
pod_metadata = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.just("fuzzed"), texts, anything),
        "namespace": st.one_of(st.just("ml"), texts, anything),
        "uid": st.one_of(st.just("uid-1"), texts, st.text(max_size=80), anything),
        "annotations": st.one_of(st.dictionaries(annotation_keys, texts | anything, max_size=4), anything),
        "labels": st.one_of(st.dictionaries(annotation_keys, texts | anything, max_size=3), anything),
    },
)
pod_spec = st.fixed_dictionaries(
    {"schedulerName": st.sampled_from(["hami-scheduler", "hami-scheduler", "default-scheduler"])},
    optional={
        "containers": st.one_of(st.lists(containers, max_size=3), anything),
        "initContainers": st.one_of(st.lists(containers, max_size=2), anything),
        "priority": st.one_of(st.integers(min_value=-(2**33), max_value=2**33), anything),
        "nodeName": st.one_of(st.just("gpu-1"), texts),
        "nodeSelector": st.one_of(st.dictionaries(texts, texts, max_size=2), anything),
        "affinity": anything,
        "tolerations": anything,
        "topologySpreadConstraints": anything,
        "schedulingGates": st.one_of(st.lists(st.fixed_dictionaries({"name": texts}), max_size=2), anything),
    },
)
pod_objects = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "metadata": pod_metadata | anything,
            "spec": pod_spec | anything,
            "status": st.fixed_dictionaries({"phase": texts | anything}),
        },
    ),
    anything,
)

register_fields = st.one_of(
    numbers.map(str), texts, st.sampled_from(["10", "15360", "100", "0", "true", "T4"])
)
register_entries = st.lists(register_fields, min_size=6, max_size=10).map(",".join)
registers = st.one_of(
    st.lists(register_entries, max_size=3).map(lambda entries: ":".join(entries) + ":"),
    st.just(t4_register("GPU-f", 2)),
    texts,
    anything,
)
scores = st.one_of(
    st.dictionaries(
        st.sampled_from(["GPU-f-0", "GPU-f-1", "GPU-x"]),
        st.dictionaries(st.sampled_from(["GPU-f-0", "GPU-f-1"]), numbers | anything, max_size=2),
        max_size=2,
    ).map(json.dumps),
    st.sampled_from(
        ['{"GPU-f-0": {"GPU-f-1": 1e999}}', '{"GPU-f-0": {"GPU-f-1": NaN}}', "[" * 5000, "{not json"]
    ),
    texts,
    anything,
)
node_annotations = st.fixed_dictionaries(
    {}, optional={nodes.REGISTER: registers, nodes.SCORES: scores, "hami.io/device-cordon": texts | anything}
)
node_objects = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "metadata": st.fixed_dictionaries(
                {},
                optional={
                    "name": st.one_of(
                        st.just("fuzz-node"), texts, st.text(min_size=254, max_size=260), anything
                    ),
                    "labels": st.one_of(st.dictionaries(texts, texts | anything, max_size=3), anything),
                    "annotations": st.one_of(node_annotations, anything),
                },
            )
            | anything,
            "status": anything,
        },
    ),
    anything,
)


def assert_storable(value, where: str = "") -> None:
    """What PostgreSQL's text and jsonb take: no NUL, valid Unicode, finite numbers."""
    if isinstance(value, str):
        assert why_unstorable(value) is None, where
    elif isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str), where
            assert_storable(key, where)
            assert_storable(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            assert_storable(item, f"{where}[{i}]")
    elif isinstance(value, float):
        assert math.isfinite(value), where
    elif isinstance(value, int) and not isinstance(value, bool):
        assert abs(value) <= 2**63 - 1, where
    else:
        assert value is None or isinstance(value, bool), where


def named_in(field: str, text: str) -> bool:
    return bool(field) and field in text


# -- the readers, fuzzed -------------------------------------------------------------------------


@FUZZ
@given(pod_objects)
def test_a_pod_reads_as_storable_arguments_or_is_refused_naming_the_field(pod):
    try:
        arguments = pods.submission(pod)
    except PodInvalid as refused:
        assert named_in(refused.field, str(refused))
        return
    assert set(arguments) == {
        "namespace",
        "name",
        "annotations",
        "labels",
        "containers",
        "init_containers",
        "priority",
        "uid",
        "scheduling",
    }
    assert set(arguments["scheduling"]) <= set(pods.SCHEDULING_SPEC_FIELDS)
    assert_storable(arguments)
    json.dumps(arguments, allow_nan=False)
    assert 0 < len(arguments["namespace"]) <= 63 and 0 < len(arguments["name"]) <= 253
    assert isinstance(arguments["uid"], str) and len(arguments["uid"]) <= 64
    assert isinstance(arguments["priority"], int) and abs(arguments["priority"]) <= 2**31 - 1
    assert all(isinstance(value, str) for value in arguments["annotations"].values())
    assert all(isinstance(value, str) for value in arguments["labels"].values())
    assert arguments["containers"] and all(isinstance(c["name"], str) for c in arguments["containers"])
    assert not set(arguments["annotations"]) & set(pods.IGNORED_ANNOTATIONS)


@FUZZ
@given(node_objects)
def test_a_node_reads_as_storable_cards_or_is_refused_naming_the_field(node):
    try:
        found = nodes.inventory(node)
    except nodes.InventoryInvalid as refused:
        assert named_in(refused.where, str(refused))
        return
    if found is None:
        return
    assert isinstance(found.name, str) and found.name.strip() and len(found.name) <= 253
    assert_storable([found.name, found.labels, found.annotations, found.devices])
    for device in found.devices:
        for key in ("index", "slots", "memory", "cores", "numa"):
            assert abs(device[key]) <= 2**31 - 1, key
        assert all(0 < score <= 2**31 - 1 for score in device["links"].values())


def test_a_nul_in_an_annotation_value_refuses_the_pod_naming_the_annotation():
    pod = pod_object("p", annotations={"example.com/note": "a\x00b", "hami.io/vgpu-node": "\x00 ignored"})
    with pytest.raises(PodInvalid) as refused:
        pods.submission(pod)
    assert refused.value.field == "annotations.example.com/note"
    assert "NUL" in refused.value.message


def test_a_pair_score_of_1e999_refuses_the_node_naming_the_pair():
    node = node_object(
        "n", t4_register("GPU-a", 2), **{"hami.io/node-nvidia-score": '{"GPU-a-0": {"GPU-a-1": 1e999}}'}
    )
    with pytest.raises(nodes.InventoryInvalid) as refused:
        nodes.inventory(node)
    assert refused.value.where == "hami.io/node-nvidia-score.GPU-a-0.GPU-a-1"
    assert "finite" in refused.value.message


def test_huge_quantities_stay_as_written_for_the_engine_to_refuse():
    assert pods.quantity("1e999999999") == "1e999999999"
    assert pods.quantity("9" * 30) == "9" * 30
    assert pods.quantity("7Ei") == 7 * 2**60
    assert pods.quantity("8Ei") == "8Ei", "one past the largest 64-bit integer"


# -- through the write paths, on the test database (PostgreSQL in CI) ---------------------------


@pytest.fixture
def pod_sync(db):
    return PodSync(None, "hami-scheduler")


@pytest.fixture
def node_sync(db):
    return NodeSync()


@FUZZ_DB
@given(pod=pod_objects)
def test_any_pod_the_watcher_reads_is_stored_or_recorded_refused(pod_sync, pod):
    """`apply` never raises: the pod's row is written, or an `object_refused` Event names why."""
    try:
        arguments = pods.submission(pod)
    except PodInvalid:
        arguments = None
    before = (
        Event.objects.filter(kind=Event.OBJECT_REFUSED, subject=pods.subject_of(pod))
        .values_list("count", flat=True)
        .first()
        or 0
    )
    pod_sync.apply(pod)
    queued = (
        not pods.final_status(pod) and not pods.node_of(pod) and pods.scheduler_of(pod) == "hami-scheduler"
    )
    if not queued:
        return
    if arguments is None:
        refused = Event.objects.get(kind=Event.OBJECT_REFUSED, subject=pods.subject_of(pod))
        assert refused.count == before + 1 and refused.reason == "PodInvalid"
    else:
        row = Pod.objects.get(namespace=arguments["namespace"], name=arguments["name"])
        assert row.annotations == arguments["annotations"]


@FUZZ_DB
@given(node=node_objects)
@example(node={"metadata": {"name": [None]}})  # raised in the DRA node lookup (a list as a name)
def test_any_node_the_watcher_reads_is_reported_or_recorded_refused(node_sync, node):
    """`apply` never raises: the node's cards are reported, or it is refused (not ready, with an
    Event), or it is not a HAMi node at all."""
    node_sync.apply(node)
    try:
        found = nodes.inventory(node)
    except nodes.InventoryInvalid:
        assert Event.objects.filter(kind=Event.OBJECT_REFUSED, subject=nodes.subject_of(node)).exists()
        return
    if found is None or not nodes.is_ready(node):
        return
    rows = Node.objects.filter(name__in={found.name, found.name.strip()})
    assert rows.exists()
    refused = Event.objects.filter(kind=Event.OBJECT_REFUSED, subject=nodes.subject_of(node)).exists()
    assert any(row.ready for row in rows) or (refused and all(row.not_ready_reason for row in rows))


def test_report_inventory_refuses_huge_numbers_naming_the_field(db):
    """1e300 is a whole float: a ScenarioError naming the card's field, not an overflow."""
    for memory in (1e300, float("inf"), 10**20):
        with pytest.raises(ScenarioError) as refused:
            services.report_inventory("n", {}, {}, [{"uuid": "GPU-a", "memory": memory}])
        assert refused.value.where == "devices[0].memory"


# -- end to end: the real client, the stand-in API server, the agent's loop ------------------------


def refusal(subject: str) -> Event | None:
    return Event.objects.filter(kind=Event.OBJECT_REFUSED, subject=subject).first()


@pytest.mark.django_db(transaction=True)
def test_a_pod_with_a_nul_annotation_is_refused_out_loud_and_the_others_are_queued(kube, apiserver):
    """On PostgreSQL this pod used to raise DataError on every resync, silently never queued."""
    apiserver.put("pods", pod_object("nul", annotations={"example.com/note": "before\x00after"}))
    apiserver.put("pods", pod_object("fine", gpu=1))
    with running(KubeAgent(kube, fast_options())):
        wait_until(lambda: refusal("pod/default/nul"), what="the refusal recorded")
        wait_until(lambda: Pod.objects.filter(name="fine").exists(), what="the other pod queued")
        warnings = wait_until(
            lambda: [e for e in apiserver.all("events") if e["involvedObject"]["name"] == "nul"],
            what="a Warning on the pod",
        )
        wait_until(lambda: refusal("pod/default/nul").count >= 2, what="still refused at the next resync")
    event = refusal("pod/default/nul")
    assert (event.reason, event.actor, event.severity) == ("PodInvalid", "kube-agent", Event.WARNING)
    assert "annotations.example.com/note" in event.message and "NUL" in event.message
    assert not Pod.objects.filter(name="nul").exists()
    (warning,) = warnings
    assert (warning["type"], warning["reason"]) == ("Warning", "PodInvalid")
    assert "annotations.example.com/note" in warning["message"]


@pytest.mark.django_db(transaction=True)
def test_a_node_with_a_pair_score_of_1e999_is_refused_and_the_loop_goes_on(kube, apiserver):
    """The score used to raise OverflowError: the node never appeared, not even as not ready."""
    apiserver.put(
        "nodes",
        node_object(
            "huge",
            t4_register("GPU-h", 2),
            **{"hami.io/node-nvidia-score": '{"GPU-h-0": {"GPU-h-1": 1e999}}'},
        ),
    )
    apiserver.put("nodes", node_object("good", t4_register("GPU-g", 1)))
    with running(KubeAgent(kube, fast_options())):
        wait_until(
            lambda: refusal("node/huge") and Card.objects.filter(uuid="GPU-g-0").exists(), what="both nodes"
        )
        wait_until(
            lambda: [e for e in apiserver.all("events") if e["involvedObject"]["name"] == "huge"],
            what="a Warning on the node",
        )
    huge = Node.objects.get(name="huge")
    assert not huge.ready and "hami.io/node-nvidia-score.GPU-h-0.GPU-h-1" in huge.not_ready_reason
    event = refusal("node/huge")
    assert event.reason == "InventoryInvalid" and "hami.io/node-nvidia-score.GPU-h-0.GPU-h-1" in event.message
    (warning,) = [e for e in apiserver.all("events") if e["involvedObject"]["name"] == "huge"]
    assert warning["involvedObject"]["kind"] == "Node" and warning["metadata"]["namespace"] == "default"
    assert Node.objects.get(name="good").ready
