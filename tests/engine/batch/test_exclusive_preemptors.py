"""Exclusive preemptors (docs/preemption.md): a preemptor whose ask does not share its card
(`mutex`, or all of a card's cores) holds the whole card it freed, in the cycle that evicts
and through its nomination after, so no pod of any size refills the card before it lands."""

from __future__ import annotations

from scheduling.engine.batch.jobs import Job, JobRunner, Member, Nominated, held_whole
from scheduling.engine.batch.statement import Statement
from scheduling.engine.decision import PENDING, SCHEDULED

from .test_preempt import World, job, pod, used

MUTEX = {"hami.io/gpu-scheduler-policy": "mutex"}


def test_a_mutex_preemptor_keeps_a_small_pod_off_the_card_it_freed_in_the_same_cycle():
    w = World({"n1": [16000]})
    w.run("a", "n1", {0: 6000})
    w.run("b", "n1", {0: 6000})
    p = Job("default", 100, (0, "p"), [Member(pod("p", mem=4000, **MUTEX))])
    outcomes = w.runner().run([p, job("q", priority=50, mem=2000)])
    mine, small = outcomes
    assert sorted(t.key for t in mine.victims) == ["default/a", "default/b"]  # mutex: the card empty
    assert mine.decision.preemption.whole == ("n1-GPU-0",)
    assert mine.decision.reason_text().endswith("card n1-GPU-0 held whole for preemptor default/p (mutex)")
    # 10000 MiB are free beside the preemptor's 4000, but the card is held whole for it
    assert small.decision.status == PENDING and small.victims == []
    assert small.decision.node is None
    assert "nomination: cards held whole: n1 (n1-GPU-0) for preemptor default/p" in small.decision.warnings


def test_a_whole_nomination_keeps_even_a_zero_mib_pod_off_and_its_preemptor_lands():
    w = World({"n1": [16000]})
    nominated = {"default/p": Nominated("n1", [("n1-GPU-0", 4000, 0)], whole=("n1-GPU-0",), grace_seconds=60)}
    runner = JobRunner(w.scheduler, w.book(), nominations=nominated)
    other = runner.run([job("q", priority=1000, mem=0, cores=0)])[0]
    assert other.decision.status == PENDING  # 0 MiB, 0 cores: only the whole hold refuses it
    mine = runner.run([Job("default", 100, (0, "p"), [Member(pod("p", mem=4000, **MUTEX))])])[0]
    assert mine.decision.status == SCHEDULED and mine.decision.node == "n1"
    assert used(w) == [("n1-GPU-0", 1, 4000, 0)]  # what the hold took is given back exactly


def test_a_nominated_mutex_pod_still_waiting_says_its_card_is_held_whole():
    w = World({"n1": [16000]})
    w.run("victim", "n1", {0: 6000})  # still terminating
    nominated = {
        "default/p": Nominated(
            "n1", [("n1-GPU-0", 4000, 0)], waiting=1, since_seconds=5, grace_seconds=60, whole=("n1-GPU-0",)
        )
    }
    runner = JobRunner(w.scheduler, w.book(), nominations=nominated)
    mine = runner.run([Job("default", 100, (0, "p"), [Member(pod("p", mem=4000, **MUTEX))])])[0]
    assert mine.decision.batch.reason == "Nominated"
    assert mine.decision.batch.message == (
        "nominated to n1 (n1-GPU-0); card n1-GPU-0 held whole for preemptor default/p (mutex); "
        "waiting for 1 victim to release (5 s of 60 s grace)"
    )


def test_which_asks_are_exclusive():
    w = World({"n1": [16000, 16000]})

    def parsed(**kwargs):
        return w.scheduler.decide_parsed(pod("p", **kwargs))[1]

    two = [("n1-GPU-0", 4000, 0), ("n1-GPU-1", 4000, 0)]
    assert held_whole(parsed(gpu=2, mem=4000, **MUTEX), two) == (("n1-GPU-0", "n1-GPU-1"), "mutex")
    assert held_whole(parsed(mem=4000, cores=100), [("n1-GPU-0", 4000, 100)]) == (("n1-GPU-0",), "whole card")
    assert held_whole(parsed(mem=16000, cores=30), [("n1-GPU-0", 16000, 30)]) == ((), "")
    assert held_whole(parsed(mem=4000), [("n1-GPU-0", 4000, 0)]) == ((), "")


def test_rolling_back_gives_a_card_held_whole_back_exactly():
    w = World({"n1": [16000]})
    w.run("a", "n1", {0: 6000})
    before = used(w)
    statement = Statement(w.scheduler)
    mark = statement.mark()
    statement.hold_whole("n1", ["n1-GPU-0"], "default/p")
    assert used(w) == [("n1-GPU-0", 10, 16000, 100)]
    assert statement.whole == {"default/p": ("n1", ("n1-GPU-0",))}
    statement.rollback(mark)
    assert used(w) == before and statement.whole == {}


def test_the_cards_held_whole_in_a_cycle_are_given_back_when_the_run_ends():
    w = World({"n1": [16000]})
    w.run("a", "n1", {0: 6000})
    w.run("b", "n1", {0: 6000})
    p = Job("default", 100, (0, "p"), [Member(pod("p", mem=4000, **MUTEX))])
    w.runner().run([p])
    # the evicting cycle's hold ends with it: the card shows what is assumed on it (the
    # preemptor's grant; the victims came off), so the next cycle's nomination holds it anew
    assert used(w) == [("n1-GPU-0", 1, 4000, 0)]
