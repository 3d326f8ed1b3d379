"""A gang's members are bound back to back; one that cannot be bound gives back the placements
of the members not yet bound, so the gang is placed again together; a bound member stays.
Members that wait carry the gang verdict in their FailedScheduling event."""

from __future__ import annotations

import pytest

from kube.agent import KubeAgent
from scheduling.models import Card, Pod
from scheduling.pipeline import run_cycle

from .conftest import fast_options, node_object, pod_object, running, settled_cards, t4_register, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def member(name: str, group: str = "job", min_member: int = 3, **kwargs) -> dict:
    notes = {"hami.io/group-name": group, "hami.io/group-min-member": str(min_member)}
    return pod_object(name, annotations=notes, **kwargs)


def row(name: str) -> Pod:
    return Pod.objects.select_related("node").get(namespace="default", name=name)


def queued(*names: str):
    return lambda: Pod.objects.filter(name__in=names).count() == len(names) and Card.objects.exists()


def bound_order(apiserver) -> list[str]:
    return [path.split("/pods/")[1].split("/")[0] for _, path, *_ in apiserver.calls("POST", "/binding")]


def test_a_gangs_members_are_bound_back_to_back(kube, apiserver):
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 4)))
    apiserver.put("pods", member("w0", gpu=1, mem=1000))
    apiserver.put("pods", pod_object("single", gpu=1, mem=1000))
    apiserver.put("pods", member("w1", gpu=1, mem=1000))
    apiserver.put("pods", member("w2", gpu=1, mem=1000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(queued("w0", "w1", "w2", "single"))
        assert len(run_cycle().placed) == 4
        wait_until(
            lambda: all(row(n).status == Pod.RUNNING for n in ("w0", "w1", "w2", "single")), what="bound"
        )
    order = bound_order(apiserver)
    assert sorted(order) == ["single", "w0", "w1", "w2"]
    start = order.index("w0")
    assert order[start : start + 3] == ["w0", "w1", "w2"], f"interleaved: {order}"


def test_a_member_not_bound_requeues_the_members_not_yet_bound(kube, apiserver):
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 3)))
    for name in ("w0", "w1", "w2"):
        apiserver.put("pods", member(name, gpu=1, mem=2000))
    apiserver.fail("POST", r"/pods/w1/binding$", 500, times=10_000)
    with running(KubeAgent(kube, fast_options())):
        wait_until(queued("w0", "w1", "w2"))
        assert len(run_cycle().placed) == 3
        wait_until(
            lambda: row("w1").status == Pod.PENDING and row("w2").status == Pod.PENDING, what="requeued"
        )
        assert row("w0").status == Pod.RUNNING, "a bound member is never undone"
        assert "w2" not in bound_order(apiserver), "nothing bound after the failed member"
        assert row("w2").reason.startswith("gang default/job: member default/w1 was not bound")
        assert settled_cards().filter(used_memory=2000).count() == 1, "only the bound member holds a card"

        apiserver.injected.clear()  # the API server takes bindings again

        def bound_again():
            run_cycle()
            return all(row(name).status == Pod.RUNNING for name in ("w1", "w2"))

        wait_until(bound_again, timeout=15, what="the gang placed and bound again")
    assert Card.objects.filter(used_memory=2000).count() == 3


def test_waiting_members_carry_the_gang_verdict_in_their_event(kube, apiserver):
    apiserver.put("nodes", node_object("gpu-1", t4_register("GPU-a", 2)))
    for name in ("w0", "w1", "w2"):
        apiserver.put("pods", member(name, gpu=1, mem=12000))
    with running(KubeAgent(kube, fast_options())):
        wait_until(queued("w0", "w1", "w2"))
        assert not run_cycle().placed
        events = wait_until(lambda: gang_events(apiserver), what="an event per member")
    for event in events:
        assert event["message"].startswith("GangUnschedulable: gang default/job: 2/3 members placeable"), (
            event["message"]
        )


def gang_events(apiserver) -> list[dict] | None:
    found = [e for e in apiserver.all("events") if e["reason"] == "FailedScheduling"]
    return found if {e["involvedObject"]["name"] for e in found} == {"w0", "w1", "w2"} else None
