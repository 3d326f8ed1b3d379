"""Lease-based leader election against the stand-in's coordination.k8s.io Leases.

Time is injected: each elector has its own clock, so "the lease expired" is a number,
not a sleep, and clocks that disagree can be shown not to matter.
"""

from __future__ import annotations

from kube.api import api_for_host
from kube.leader import LeaderElector


class Clock:
    def __init__(self, start: float = 1000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


def elector(apiserver, identity, clock, **timing):
    timing = {"lease_duration": 15, "renew_deadline": 10, "retry_period": 2, **timing}
    return LeaderElector(
        api_for_host(apiserver.url),
        "hamiadmin",
        "kube-agent",
        identity,
        clock=clock,
        wall_clock=clock,
        **timing,
    )


def holder(apiserver) -> str:
    return apiserver.get("leases", "hamiadmin", "kube-agent")["spec"]["holderIdentity"]


def test_first_comes_leads_and_the_other_follows(apiserver):
    a_clock, b_clock = Clock(), Clock(50_000)  # clocks far apart: only elapsed time counts
    a, b = elector(apiserver, "a", a_clock), elector(apiserver, "b", b_clock)
    a.step()
    b.step()
    assert a.is_leader() and not b.is_leader()
    assert holder(apiserver) == "a"
    for _ in range(10):  # a keeps renewing, b keeps watching: no takeover however long
        a_clock.now += 2
        b_clock.now += 2
        a.step()
        b.step()
        assert a.is_leader() and not b.is_leader()


def test_a_silent_leader_is_replaced_after_the_lease_duration(apiserver):
    a_clock, b_clock = Clock(), Clock()
    a, b = elector(apiserver, "a", a_clock), elector(apiserver, "b", b_clock)
    a.step()
    b.step()  # b sees a's record now
    b_clock.now += 14
    b.step()
    assert not b.is_leader(), "taken over before the lease duration"
    b_clock.now += 1.5
    b.step()
    assert b.is_leader()
    lease = apiserver.get("leases", "hamiadmin", "kube-agent")["spec"]
    assert lease["holderIdentity"] == "b"
    assert lease["leaseTransitions"] == 1
    # a comes back: it cannot renew (b holds it) and steps down after its renew deadline.
    a_clock.now += 5
    a.step()
    assert a.is_leader(), "a leader keeps leading until its renew deadline"
    a_clock.now += 6
    a.step()
    assert not a.is_leader()
    assert holder(apiserver) == "b"


def test_two_candidates_racing_for_an_expired_lease_one_wins(apiserver):
    """c reads the expired record, then b takes the lease before c's write arrives: c's
    write carries a stale resourceVersion, the server refuses it (409), c stays a follower."""
    elector(apiserver, "old", Clock()).step()
    b_clock, c_clock = Clock(), Clock()
    b, c = elector(apiserver, "b", b_clock), elector(apiserver, "c", c_clock)
    b.step()
    c.step()
    b_clock.now += 16
    c_clock.now += 16
    apiserver.before("PUT", "/leases/kube-agent", b.step)
    c.step()
    assert b.is_leader() and not c.is_leader()
    assert holder(apiserver) == "b"
    assert len(apiserver.calls("PUT", "/leases/kube-agent")) == 2


def test_release_lets_a_successor_in_at_once(apiserver):
    a_clock, b_clock = Clock(), Clock()
    a, b = elector(apiserver, "a", a_clock), elector(apiserver, "b", b_clock)
    a.step()
    b.step()
    a.release()
    assert not a.is_leader()
    assert holder(apiserver) == ""
    b.step()
    assert b.is_leader()


def test_api_server_down_a_leader_steps_down_after_the_renew_deadline(apiserver):
    clock = Clock()
    a = elector(apiserver, "a", clock)
    a.step()
    apiserver.stop()
    clock.now += 9
    a.step()
    assert a.is_leader()
    clock.now += 2
    a.step()
    assert not a.is_leader()
    apiserver.start()
    clock.now += 1
    a.step()
    assert a.is_leader(), "the holder's own record: renewed as soon as the server is back"
