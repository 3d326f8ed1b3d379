"""`GET pending/?verdict=` and `GET pods/?verdict=`: waiting pods by their triage class, through
real cycles. The cluster (conftest): node1 with two T4s, node2 with two T4s and an A100."""

from __future__ import annotations

import pytest

from scheduling import services
from scheduling.pipeline import run_cycle

from .conftest import gpu_pod

pytestmark = pytest.mark.django_db


def submit(operator, **pod) -> None:
    answer = operator.post("/api/v1/pods/", pod, format="json")
    assert answer.status_code == 201, answer.content


def names(answer) -> list[str]:
    assert answer.status_code == 200, answer.content
    return [row["name"] for row in answer.json()["results"]]


@pytest.fixture
def waiting(cluster, operator):
    """Four pods: a T4 pod asking more than a T4 holds (never, although the A100 would hold
    it), one that fits once the placed pods leave (capacity), a gated one (rule), and one
    asking no GPU memory it can parse (invalid)."""
    submit(
        operator,
        **gpu_pod("filler", gpu=2, mem=15000, annotations={"nvidia.com/use-gpuuuid": "GPU-1-0,GPU-1-1"}),
    )
    submit(
        operator,
        **gpu_pod("filler2", gpu=2, mem=15000, annotations={"nvidia.com/use-gpuuuid": "GPU-2-0,GPU-2-1"}),
    )
    assert len(run_cycle("fill").placed) == 2
    submit(operator, **gpu_pod("t4-big", mem=30000, annotations={"nvidia.com/use-gputype": "T4"}))
    submit(operator, **gpu_pod("t4-later", mem=4000, annotations={"nvidia.com/use-gputype": "T4"}))
    submit(operator, **gpu_pod("gated", mem=1000, schedulingGates=[{"name": "quota.example/ok"}]))
    services.submit_pod(
        "default",
        "broken",
        {"hami.io/gpu-scheduler-policy": "binpack"},
        [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpucores": -1}}}],
        validate=False,
    )
    run_cycle("wait")


def test_pending_filters_by_verdict_and_says_the_deciding_fact(viewer, waiting):
    answer = viewer.get("/api/v1/pending/", {"verdict": "never"})
    assert names(answer) == ["t4-big"]
    (row,) = answer.json()["results"]
    assert row["verdict"] == "never"
    assert row["decisive"]["code"] == "CardInsufficientMemory"  # not CardTypeMismatch
    assert row["decisive"]["fact"] == "30,000 MiB > the largest NVIDIA-Tesla T4 (15,360 MiB)"
    assert names(viewer.get("/api/v1/pending/", {"verdict": "capacity"})) == ["t4-later"]
    assert names(viewer.get("/api/v1/pending/", {"verdict": "rule"})) == ["gated"]
    assert names(viewer.get("/api/v1/pending/", {"verdict": "invalid"})) == ["broken"]
    both = viewer.get("/api/v1/pending/", {"verdict": ["never", "rule"]})
    assert sorted(names(both)) == ["gated", "t4-big"]


def test_pods_list_filters_by_verdict_too(viewer, waiting):
    answer = viewer.get("/api/v1/pods/", {"verdict": "capacity"})
    assert names(answer) == ["t4-later"]
    placed = {row["name"]: row["verdict"] for row in viewer.get("/api/v1/pods/").json()["results"]}
    assert placed["filler"] is None and placed["t4-big"] == "never"


def test_an_unknown_verdict_is_refused_naming_the_field(viewer, waiting):
    answer = viewer.get("/api/v1/pending/", {"verdict": "sometimes"})
    assert answer.status_code == 400 and "verdict" in answer.json()
