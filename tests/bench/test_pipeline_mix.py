"""bench.pipeline's realistic mix (issue 29): the shapes the engine really reads, not a
handful of one-card asks, so the pods/s it reports is not the optimistic figure."""

from __future__ import annotations

from bench.pipeline import MIXES, REALISTIC_SHAPES
from scheduling.engine import ClusterConfig, PodSpec
from scheduling.engine.pod import parse_pod


def _parsed(marks: dict, limits: dict):
    spec = PodSpec(
        name="p", annotations=marks, containers=[{"name": "main", "resources": {"limits": limits}}]
    )
    return parse_pod(spec, ClusterConfig())


def test_every_realistic_shape_is_read_as_meant():
    for marks, limits in REALISTIC_SHAPES:
        parsed = _parsed(marks, limits)
        ask = parsed.apps[0]
        assert ask is not None and ask.count == limits["nvidia.com/gpu"]
        assert not parsed.policy.ignored, (marks, parsed.policy.ignored)
        if "hami.io/gpu-scheduler-policy" in marks:
            assert parsed.policy.chain == tuple(marks["hami.io/gpu-scheduler-policy"].split(","))
        if "nvidia.com/gpumem-percentage" in limits:
            assert ask.memory is None and ask.memory_percentage == limits["nvidia.com/gpumem-percentage"]


def test_the_realistic_mix_covers_what_issue_29_asks():
    shapes = [_parsed(marks, limits) for marks, limits in REALISTIC_SHAPES]
    assert len({repr(shape) for shape in REALISTIC_SHAPES}) == len(REALISTIC_SHAPES) >= 20
    assert {shape.apps[0].count for shape in shapes} >= {1, 2, 4, 8}
    assert any(shape.apps[0].memory_percentage and shape.apps[0].memory is None for shape in shapes)
    assert any(shape.apps[0].memory for shape in shapes)
    chains = {name for shape in shapes for name in shape.policy.chain}
    assert {"binpack", "spread", "topology-aware", "numa"} <= chains
    assert any(shape.policy.numa_bind for shape in shapes)
    assert set(MIXES) == {"realistic", "simple"} and len(MIXES["simple"]) == 5
