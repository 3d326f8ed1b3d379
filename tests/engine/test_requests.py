"""SPEC 2: what a container asks for, the defaults, invalid values, init containers."""

import pytest

from .builders import (
    GPU,
    GPUCORES,
    GPUMEM,
    GPUMEM_PERCENTAGE,
    ask,
    card,
    card_row,
    container,
    failure,
    node,
    picked,
    pod,
    run,
    run_one,
)

FOUR_CARDS = node("n1", *(card(f"G{i}", 16000) for i in range(4)))


def grants(out: dict, container: int = 0) -> list[tuple[str, int, int]]:
    return [(d["uuid"], d["memory"], d["cores"]) for d in out["containers"][container]["devices"]]


def scheduled(one_container: dict, nodes=None) -> dict:
    out = run_one(nodes or [FOUR_CARDS], pod("p", containers=[one_container]))
    assert out["status"] == "scheduled", out
    return out


# -- limits, then requests, resource by resource ---------------------------------------------


def test_limits_win_and_requests_fill_the_resources_limits_do_not_name():
    out = scheduled(container("main", limits=ask(gpu=1), requests=ask(gpu=2, mem=3000, cores=30)))
    assert grants(out) == [("G0", 3000, 30)]


def test_requests_alone_are_read():
    out = scheduled(container("main", requests=ask(gpu=2, mem=2000)))
    assert [(m, c) for _, m, c in grants(out)] == [(2000, 0), (2000, 0)]


# -- defaults -----------------------------------------------------------------------------------


def test_gpu_alone_takes_the_whole_card_exclusively():
    out = scheduled(container("main", ask(gpu=1)))
    assert grants(out) == [("G0", 16000, 100)]


def test_memory_without_cores_shares_the_card():
    assert grants(scheduled(container("main", ask(gpu=1, mem=1000)))) == [("G0", 1000, 0)]


def test_percentage_below_100_shares_the_card():
    assert grants(scheduled(container("main", ask(gpu=1, pct=25)))) == [("G0", 4000, 0)]


def test_percentage_100_without_cores_is_exclusive():
    assert grants(scheduled(container("main", ask(gpu=1, pct=100)))) == [("G0", 16000, 100)]


def test_explicit_cores_override_the_exclusive_default():
    assert grants(scheduled(container("main", ask(gpu=1, cores=30)))) == [("G0", 16000, 30)]


@pytest.mark.parametrize(
    "limits, expected",
    [
        (ask(mem=1000), (1000, 0)),
        (ask(pct=50), (8000, 0)),
        (ask(cores=40), (16000, 40)),
    ],
    ids=["gpumem", "gpumem-percentage", "gpucores"],
)
def test_a_gpu_resource_without_a_count_asks_one_vgpu(limits, expected):
    assert [(m, c) for _, m, c in grants(scheduled(container("main", limits)))] == [expected]


def test_cluster_config_changes_the_defaults():
    """SPEC 2: the defaults are configurable."""
    out = run(
        [FOUR_CARDS],
        [pod("p", None, ask(gpu=1, mem=1000))],
        resources={"memory_percentage": 50, "cores": 10, "exclusive_cores": 100},
    )[0]
    assert grants(out) == [("G0", 1000, 10)]


# -- string quantities and large asks -----------------------------------------------------------


def test_string_quantities_are_numbers():
    out = scheduled(container("main", {GPU: "2", GPUMEM: "1000", GPUCORES: "10"}))
    assert [(m, c) for _, m, c in grants(out)] == [(1000, 10), (1000, 10)]


def test_sixteen_cards_is_valid_but_pending():
    out = run_one([FOUR_CARDS], pod("p", None, ask(gpu=16, mem=1000)))
    assert out["status"] == "pending"
    assert out["error"] is None
    assert failure(out, "n1") == "4/4 NodeInsufficientDevice"
    assert out["reasons"] == {"NodeInsufficientDevice": 4}


# -- two forms HAMi accepts ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "limits, expected",
    [
        (ask(gpu=1, pct=0), ("G0", 16000, 0)),
        (ask(gpu=1, pct=0, mem=1000), ("G0", 1000, 0)),
        (ask(gpu=1, pct=0, cores=30), ("G0", 16000, 30)),
        (ask(pct=0), ("G0", 16000, 0)),
    ],
    ids=["alone", "beside-gpumem", "beside-gpucores", "without-a-count"],
)
def test_a_percentage_of_zero_is_the_memory_left_out_and_books_no_cores(limits, expected):
    """SPEC 2: `gpumem-percentage: 0` is memory not given, so the memory default applies (the
    whole card's MiB), but it is not an ask for whole cards: the default cores, 0, as HAMi
    books it; it still names a GPU resource, so the container asks one vGPU."""
    out = scheduled(container("main", limits))
    assert grants(out) == [expected]
    assert out["warnings"] == []


def test_cores_above_100_are_taken_as_100_with_a_warning_naming_container_and_value():
    out = scheduled(container("trainer", ask(gpu=1, mem=1000, cores=150)))
    assert grants(out) == [("G0", 1000, 100)]
    assert out["warnings"] == [
        "containers[0].resources.limits.nvidia.com/gpucores: container 'trainer': 150 is above 100, taken as 100"
    ]


def test_cores_above_100_are_exclusive_like_100():
    """Taken as 100, the ask wants the whole card: a card with a tenant is refused for it."""
    busy = node("n1", card("G0", 16000, used=(1, 1000, 0)), card("G1", 16000))
    out = run_one([busy], pod("p", None, ask(gpu=1, mem=1000, cores=250)))
    assert picked(out) == ["G1"]
    assert card_row(out, "G0")["reason"] == "ExclusiveDeviceAllocateConflict"


def test_every_warning_is_kept_in_container_order_app_containers_first():
    out = run_one(
        [FOUR_CARDS],
        pod(
            "p",
            init=[container("warm", {GPU: 1, GPUMEM: 100, GPUCORES: "101"})],
            containers=[container("a", requests=ask(gpu=1, mem=100, cores=300)), container("b", ask(gpu=1))],
        ),
    )
    assert out["status"] == "scheduled"
    assert out["warnings"] == [
        "containers[0].resources.requests.nvidia.com/gpucores: container 'a': 300 is above 100, taken as 100",
        "initContainers[0].resources.limits.nvidia.com/gpucores: container 'warm': 101 is above 100, taken as 100",
    ]


def test_a_pending_pod_keeps_its_warnings():
    out = run_one([FOUR_CARDS], pod("p", None, ask(gpu=5, cores=120)))
    assert out["status"] == "pending"
    assert out["warnings"] == [
        "containers[0].resources.limits.nvidia.com/gpucores: container 'main': 120 is above 100, taken as 100"
    ]


def test_memory_with_a_unit_is_refused_saying_so():
    """`16Gi` read as MiB would be 17179869184 MiB and wait forever: refused naming the field."""
    out = run_one([FOUR_CARDS], pod("p", None, {GPU: 1, GPUMEM: "16Gi"}))
    assert out["status"] == "rejected"
    assert out["error"] == (
        "containers[0].resources.limits.nvidia.com/gpumem: container 'main': must be a non-negative "
        "integer (MiB), got '16Gi': a plain number, without a unit"
    )


# -- invalid values ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "resource, value",
    [
        (GPU, 0),
        (GPU, -1),
        (GPU, 1.5),
        (GPU, "two"),
        (GPU, True),
        (GPUMEM, -1),
        (GPUMEM, "lots"),
        (GPUMEM, 10.5),
        (GPUMEM, "16Gi"),
        (GPUMEM, "500M"),
        (GPUMEM_PERCENTAGE, -1),
        (GPUMEM_PERCENTAGE, 101),
        (GPUMEM_PERCENTAGE, "50%"),
        (GPUCORES, -1),
        (GPUCORES, 1.5),
        (GPUCORES, "half"),
    ],
)
@pytest.mark.parametrize("section", ["limits", "requests"])
def test_invalid_value_rejects_the_pod_naming_container_and_resource(section, resource, value):
    resources = {GPU: 1, resource: value} if resource != GPU else {resource: value}
    bad = {"name": "trainer", "resources": {section: resources}}
    out = run_one([FOUR_CARDS], pod("p", containers=[container("sidecar"), bad]))
    assert out["status"] == "rejected"
    assert (out["node"], out["containers"], out["allocated"]) == (None, [], None)
    assert "trainer" in out["error"]
    assert resource in out["error"]


@pytest.mark.parametrize("resource, value", [(GPU, "²"), (GPUMEM, "①"), (GPUCORES, "³")])
def test_non_decimal_digit_strings_are_refused_not_a_crash(resource, value):
    """SPEC 2 + project rule: malformed input is refused naming container and resource, never crashes."""
    bad = container("trainer", {GPU: 1, resource: value} if resource != GPU else {GPU: value})
    outs = run([FOUR_CARDS], [pod("bad", containers=[bad]), pod("next", None, ask(gpu=1, mem=1000))])
    assert outs[0]["status"] == "rejected"
    assert "trainer" in outs[0]["error"] and resource in outs[0]["error"]
    assert outs[1]["status"] == "scheduled"


def test_boundary_values_are_valid():
    out = scheduled(container("main", {GPU: 1, GPUMEM_PERCENTAGE: 1, GPUCORES: 0}))
    assert grants(out) == [("G0", 160, 0)]
    out = scheduled(container("main", {GPU: 1, GPUMEM: 0, GPUCORES: 100}))
    assert grants(out) == [("G0", 0, 100)]


def test_pod_asking_no_gpu_is_rejected():
    cpu_only = {"name": "web", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
    out = run_one([FOUR_CARDS], pod("p", containers=[cpu_only, container("log")]))
    assert out["status"] == "rejected"
    assert "asks for no GPU" in out["error"]


def test_rejected_pod_takes_nothing_and_the_next_pod_still_runs():
    pods = [
        pod("bad", None, ask(gpu=1, cores=-1)),
        pod("good", None, ask(gpu=1)),
    ]
    bad, good = run([node("n1", card("G0"))], pods)
    assert bad["status"] == "rejected"
    assert good["status"] == "scheduled"
    assert picked(good) == ["G0"]


# -- init containers ---------------------------------------------------------------------------


ONE_CARD = node("n1", card("G0", 8000))


def test_init_container_gives_its_card_back_before_the_app_containers():
    """Init 6000 MiB then app 6000 MiB on an 8000 MiB card: they never hold it together."""
    out = run_one(
        [ONE_CARD], pod("p", init=[container("setup", ask(gpu=1, mem=6000))], limits=ask(gpu=1, mem=6000))
    )
    assert out["status"] == "scheduled"
    assert [c["name"] for c in out["containers"]] == ["main"]
    assert out["allocated"] == "G0,NVIDIA,6000,0:;G0,NVIDIA,6000,0:;"


def test_init_containers_fit_one_at_a_time():
    inits = [container("a", ask(gpu=1, mem=6000)), container("b", ask(gpu=1, mem=6000))]
    out = run_one([ONE_CARD], pod("p", init=inits, limits=ask(gpu=1, mem=1000)))
    assert out["status"] == "scheduled"


def test_init_container_fits_against_usage_before_this_pod():
    busy = node("n1", card("G0", 8000, used=(1, 4000, 0)))
    out = run_one(
        [busy], pod("p", init=[container("setup", ask(gpu=1, mem=6000))], limits=ask(gpu=1, mem=1000))
    )
    assert out["status"] == "pending"
    assert failure(out, "n1") == "1/1 CardInsufficientMemory"


def test_failing_init_container_gives_the_node_its_text():
    """The app container fits; the init container asks two cards of a one-card node."""
    out = run_one(
        [ONE_CARD], pod("p", init=[container("setup", ask(gpu=2, mem=100))], limits=ask(gpu=1, mem=100))
    )
    assert out["status"] == "pending"
    assert failure(out, "n1") == "1/1 NodeInsufficientDevice"


def test_init_containers_do_not_count_in_the_node_score():
    big_init = [container("setup", ask(gpu=2, mem=7000, cores=50))]
    nodes = [node("n1", card("G0", 8000), card("G1", 8000))]
    with_init = run_one(nodes, pod("p", init=big_init, limits=ask(gpu=1, mem=1000)))
    without = run_one(nodes, pod("p", None, ask(gpu=1, mem=1000)))
    assert with_init["node_scores"] == pytest.approx(without["node_scores"], abs=1e-3)


def test_init_container_usage_is_not_kept_for_later_pods():
    pods = [
        pod("first", init=[container("setup", ask(gpu=1, mem=7000))], limits=ask(gpu=1, mem=1000)),
        pod("second", None, ask(gpu=1, mem=7000)),
    ]
    first, second = run([ONE_CARD], pods)
    assert first["status"] == second["status"] == "scheduled"


def test_invalid_init_container_rejects_the_pod():
    out = run_one([ONE_CARD], pod("p", init=[container("setup", ask(gpu=1, cores=-1))], limits=ask(gpu=1)))
    assert out["status"] == "rejected"
    assert "setup" in out["error"]
    assert GPUCORES in out["error"]
