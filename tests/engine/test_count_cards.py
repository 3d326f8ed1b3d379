"""`fit.count_cards`, the written-out loop a changed node is re-checked with (issue 29), gives
what `check_card` gives card by card: the same number of fitting cards and the same reason
counts, for any usage, health, cordon, family, filter, type, UUID and MIG instance."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine.annotations import parse_policy
from scheduling.engine.fit import check_card, count_cards
from scheduling.engine.model import Card, ClusterConfig
from scheduling.engine.requests import ContainerAsk
from scheduling.engine.scenario import parse_scenario

from .builders import node, scenario
from .test_mig import mig_card

POLICIES = [
    {},
    {"hami.io/gpu-scheduler-policy": "mutex,binpack"},
    {"hami.io/gpu-scheduler-policy": "numa,spread"},
    {"nvidia.com/use-gputype": "A100"},
    {"nvidia.com/nouse-gpuuuid": "G1"},
    {"nvidia.com/vgpu-mode": "mig"},
]


def mig_cards() -> list[Card]:
    """Cards cut into instances: one free, one with a slice held (no room for 20,000 MiB
    then: check 10a), one with every instance held."""
    part = mig_card("GPU-part", instances=[("1g.5gb", 0, 1)])
    full = mig_card("GPU-full", instances=[("7g.40gb", 0, 8)])
    cluster, _, _ = parse_scenario(scenario([node("m", mig_card("GPU-free"), part, full)], []))
    return list(cluster.nodes[0].cards)


cards = st.builds(
    Card,
    uuid=st.sampled_from(["G0", "G1"]),
    index=st.just(0),
    memory=st.sampled_from([0, 1000, 15360, 40960]),
    type=st.sampled_from(["NVIDIA-Tesla T4", "NVIDIA-A100"]),
    slots=st.integers(0, 3),
    cores=st.sampled_from([0, 50, 100]),
    health=st.booleans(),
    cordoned=st.booleans(),
    used_slots=st.integers(0, 3),
    used_memory=st.sampled_from([0, 500, 15000]),
    used_cores=st.sampled_from([0, 30, 100]),
    family=st.sampled_from(["nvidia", "nvidia", "ascend"]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(cards, max_size=6),
    st.booleans(),
    st.sampled_from(POLICIES),
    st.sampled_from([0, 1000, 3000, 20000]),
    st.sampled_from([0, 20, 100]),
)
def test_count_cards_agrees_with_check_card(some, with_mig, annotations, memory, cores):
    policy = parse_policy(annotations, ClusterConfig())
    ask = ContainerAsk("main", 1, memory, 0, cores)
    every = some + (mig_cards() if with_mig else [])
    expected: dict[str, int] = {}
    fitting = []
    for card in every:
        failed = check_card(card, ask, memory, policy, (card.used_slots, card.used_memory, card.used_cores))
        if failed is None:
            fitting.append(card)
        else:
            expected[failed[0]] = expected.get(failed[0], 0) + 1
    assert count_cards(every, ask, memory, policy) == (len(fitting), expected)
    kept: list = []
    assert count_cards(every, ask, memory, policy, kept) == (len(fitting), expected)
    assert [id(card) for card in kept] == [id(card) for card in fitting]  # the cards that fit, in order
