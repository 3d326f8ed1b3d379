"""SPEC 2 + 3: a pod read as a whole (`parse_pod`): what makes it invalid, what decides its
node verdicts (its shape), and the policy shown for a pod whose annotations do not read."""

import pytest

from scheduling.engine.errors import NO_GPU, PodInvalid
from scheduling.engine.model import ClusterConfig, PodSpec
from scheduling.engine.pod import describe_policy, parse_pod

from .builders import GPU_POLICY, NODE_POLICY, NUMA_BIND, WEIGHTS, ask, container

CONFIG = ClusterConfig()
ONE_GIB = ask(gpu=1, mem=1000)
CPU_ONLY = {"name": "side", "resources": {"limits": {"cpu": "1"}}}


def parsed(annotations=None, containers=None, inits=None):
    spec = PodSpec(
        name="p",
        annotations=annotations or {},
        containers=containers if containers is not None else [container("main", ONE_GIB)],
        init_containers=inits or [],
    )
    return parse_pod(spec, CONFIG)


def test_a_pod_without_containers_is_invalid():
    with pytest.raises(PodInvalid) as raised:
        parsed(containers=[])
    assert (raised.value.field, raised.value.code) == ("containers", None)


def test_a_pod_asking_no_gpu_is_invalid_with_the_no_gpu_code():
    with pytest.raises(PodInvalid) as raised:
        parsed(containers=[CPU_ONLY])
    assert (raised.value.field, raised.value.code) == ("containers", NO_GPU)
    assert "asks for no GPU" in str(raised.value)


def test_a_bad_resource_value_has_no_code():
    with pytest.raises(PodInvalid) as raised:
        parsed(containers=[container("main", ask(gpu=0))])
    assert raised.value.code is None


def test_a_gpu_init_container_alone_makes_the_pod_valid():
    pod = parsed(containers=[CPU_ONLY], inits=[container("init", ONE_GIB)])
    assert (len(pod.inits), pod.apps, pod.app_names) == (1, (None,), ("side",))


def test_app_containers_keep_their_names_and_order():
    pod = parsed(containers=[container("a", ONE_GIB), CPU_ONLY, container("c", ask(gpu=2))])
    assert pod.app_names == ("a", "side", "c")
    assert [a and a.count for a in pod.apps] == [1, None, 2]


def test_container_names_do_not_change_the_shape():
    named = parsed(containers=[container("one", ONE_GIB)])
    renamed = parsed(containers=[container("two", ONE_GIB)])
    assert named.shape == renamed.shape and named.fit_shape == renamed.fit_shape


@pytest.mark.parametrize(
    "other",
    [
        {GPU_POLICY: "binpack"},
        {GPU_POLICY: "topology-aware"},
        {WEIGHTS: "slot=1,core=2,memory=3"},
    ],
)
def test_what_only_ranks_or_chooses_cards_stays_out_of_the_fit_shape(other):
    plain, ranked = parsed(), parsed(other)
    assert plain.shape != ranked.shape
    assert plain.fit_shape == ranked.fit_shape


@pytest.mark.parametrize(
    "other", [{GPU_POLICY: "mutex"}, {NUMA_BIND: "true"}, {"nvidia.com/use-gputype": "T4"}]
)
def test_what_changes_fit_is_in_the_fit_shape(other):
    assert parsed().fit_shape != parsed(other).fit_shape


def test_an_invalid_pods_policy_shows_what_reads():
    policy = describe_policy({GPU_POLICY: "Mutex,fastest", NODE_POLICY: "roundrobin", WEIGHTS: ""}, CONFIG)
    assert policy == {
        "node": "binpack",
        "gpu": ["mutex"],
        "filters": ["mutex"],
        "sort_keys": ["spread"],
        "ignored": ["fastest"],
        "weights": None,
        "node_ignored": "roundrobin",
        "numa_bind": False,
    }


def test_an_invalid_pods_policy_without_annotations_is_the_cluster_default():
    policy = describe_policy(
        None, ClusterConfig(node_scheduler_policy="spread", gpu_scheduler_policy="binpack")
    )
    assert (policy["node"], policy["gpu"], policy["sort_keys"], policy["node_ignored"]) == (
        "spread",
        ["binpack"],
        ["binpack"],
        None,
    )


def test_cores_taken_as_100_share_the_shape_of_100_and_keep_their_warning():
    """The warning is not part of what decides a verdict: the clamped ask is cached as 100."""
    clamped = parsed(containers=[container("main", ask(gpu=1, mem=1000, cores=150))])
    whole = parsed(containers=[container("main", ask(gpu=1, mem=1000, cores=100))])
    assert clamped.shape == whole.shape and clamped.fit_shape == whole.fit_shape
    assert clamped.shape != parsed(containers=[container("main", ask(gpu=1, mem=1000, cores=99))]).shape
    assert clamped.warnings() == {
        "containers[0].resources.limits.nvidia.com/gpucores": [
            "container 'main': 150 is above 100, taken as 100"
        ]
    }
    assert whole.warnings() == {}


def test_a_percentage_of_zero_has_the_shape_of_no_percentage_and_default_cores():
    """Memory as if not given, but not an ask for whole cards: the default cores, 0 (HAMi)."""
    zero = parsed(containers=[container("main", ask(gpu=1, pct=0))])
    assert zero.shape == parsed(containers=[container("main", ask(gpu=1, cores=0))]).shape
    assert zero.shape != parsed(containers=[container("main", ask(gpu=1))]).shape
    assert zero.shape != parsed(containers=[container("main", ask(gpu=1, pct=50))]).shape


def test_init_containers_keep_their_places_but_only_gpu_ones_shape_the_pod():
    """An init container without GPU still writes `;` in `allocated`, so it keeps its place,
    but it decides nothing on a node."""
    with_cpu_init = parsed(inits=[CPU_ONLY, container("warm", ONE_GIB)])
    assert [a and a.count for a in with_cpu_init.inits] == [None, 1]
    assert with_cpu_init.init_names == ("side", "warm")
    assert [a.name for a in with_cpu_init.gpu_inits] == ["warm"]
    assert with_cpu_init.shape == parsed(inits=[container("warm", ONE_GIB)]).shape
    assert with_cpu_init.shape != parsed().shape


def test_policy_warnings_come_first_then_the_containers():
    pod = parsed(
        {GPU_POLICY: "binpack,fastest"},
        containers=[container("main", ask(gpu=1, cores=101))],
    )
    assert list(pod.warnings()) == [
        f"annotations.{GPU_POLICY}",
        "containers[0].resources.limits.nvidia.com/gpucores",
    ]
