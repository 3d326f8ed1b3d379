"""Node-pool shards (pipeline.pools): a pool's planner plans only the pods that select its
pool, against only its pool's nodes; the planner without a pool plans the rest against
every node; each keeps its own standing snapshot, lock and triggers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from scheduling import services
from scheduling.models import Card, Node, Pod
from scheduling.pipeline import locks, pools, run_cycle, triggers
from scheduling.pipeline.batch import POOL_CAPACITY_SECONDS, cluster_capacity, pool_capacity
from scheduling.pipeline.snapshot import due_pods, load_snapshot
from scheduling.pipeline.standing import STANDING

from .conftest import assert_consistent, card, submit

pytestmark = pytest.mark.django_db

LABEL = "hami.io/node-pool"


@pytest.fixture
def pooled(settings):
    """Pools `a` and `b` configured; `use(pool)` makes this process that pool's planner."""

    def use(pool: str) -> None:
        settings.HAMIADMIN = {**settings.HAMIADMIN, "NODE_POOLS": ["a", "b"], "NODE_POOL": pool}

    use("")
    return use


def report(name: str, pool: str | None, cards: int = 2) -> Node:
    labels = {LABEL: pool} if pool else {"zone": "z1"}
    devices = [card(f"{name}-gpu{i}", i, memory=16000) for i in range(cards)]
    return services.report_inventory(name, labels, {}, devices)


def selecting(name: str, pool: str | None, gpu: int = 1, mem: int = 4000) -> Pod:
    scheduling = {"nodeSelector": {LABEL: pool}} if pool else None
    return submit(name, gpu=gpu, mem=mem, scheduling=scheduling)


def cluster() -> None:
    for n in range(2):
        report(f"a{n}", "a")
        report(f"b{n}", "b")
        report(f"c{n}", "c")  # a pool no planner runs for
        report(f"plain{n}", None)


def due_names() -> set[str]:
    return {row[2] for row in due_pods(100)}


def test_each_planner_takes_the_pods_of_its_pool_and_the_planner_without_one_the_rest(pooled):
    cluster()
    for name, pool in [("pa", "a"), ("pb", "b"), ("pc", "c"), ("plain", None)]:
        selecting(name, pool)
    pooled("a")
    assert due_names() == {"pa"}
    pooled("b")
    assert due_names() == {"pb"}
    pooled("")  # `c` has no planner: its pods are the pool-less planner's, as unselected ones
    assert due_names() == {"pc", "plain"}


def test_a_gang_across_pools_is_the_planner_without_a_pool_s_and_placed_whole_in_its_pools(pooled):
    """A gang whose members select different pools (or one none) would never fit a pool's
    planner, which judges the others against its own nodes: the planner without a pool, which
    sees every node, takes all of it and places each member in the pool it selects."""
    cluster()
    gang = {"hami.io/group-name": "mixed", "hami.io/group-min-member": "3"}
    submit("m-a", gpu=1, mem=4000, annotations=gang, scheduling={"nodeSelector": {LABEL: "a"}})
    submit("m-b", gpu=1, mem=4000, annotations=gang, scheduling={"nodeSelector": {LABEL: "b"}})
    submit("m-none", gpu=1, mem=4000, annotations=gang)  # a launcher of no pool
    whole = {"hami.io/group-name": "whole", "hami.io/group-min-member": "2"}
    for n in range(2):
        submit(f"w-{n}", gpu=1, mem=4000, annotations=whole, scheduling={"nodeSelector": {LABEL: "a"}})
    pooled("a")
    assert due_names() == {"w-0", "w-1"}  # its own gang only
    pooled("b")
    assert due_names() == set()
    pooled("")
    assert due_names() == {"m-a", "m-b", "m-none"}
    assert sorted(placed[0] for placed in run_cycle().placed) == [
        "default/m-a",
        "default/m-b",
        "default/m-none",
    ]
    on = dict(Pod.objects.filter(name__startswith="m-").values_list("name", "node__name"))
    assert on["m-a"].startswith("a") and on["m-b"].startswith("b")
    pooled("a")
    assert sorted(placed[0] for placed in run_cycle().placed) == ["default/w-0", "default/w-1"]
    assert_consistent()


def test_without_pools_one_planner_takes_every_pod_and_sees_every_node(settings):
    cluster()
    for name, pool in [("pa", "a"), ("plain", None)]:
        selecting(name, pool)
    assert due_names() == {"pa", "plain"}
    assert len(load_snapshot().cluster.nodes) == 8


def test_a_pool_planner_sees_and_places_on_its_own_nodes_only(pooled):
    cluster()
    for n in range(3):
        selecting(f"pa{n}", "a", gpu=2, mem=12000)
    selecting("pb", "b")
    pooled("a")
    snapshot = load_snapshot(pool="a")
    assert sorted(node.name for node in snapshot.cluster.nodes) == ["a0", "a1"]
    assert len(snapshot.card_ids) == 4
    report_ = run_cycle()
    assert sorted(placed[0] for placed in report_.placed) == ["default/pa0", "default/pa1"]
    assert [p.name for p in Pod.objects.filter(status=Pod.PENDING).order_by("name")] == ["pa2", "pb"]
    # the pod that does not fit is told so about its pool's nodes, not the others'
    assert Pod.objects.get(name="pa2").reason.startswith("0/2 nodes")
    assert set(Pod.objects.filter(status=Pod.SCHEDULED).values_list("node__name", flat=True)) == {"a0", "a1"}
    pooled("b")
    assert [placed[0] for placed in run_cycle().placed] == ["default/pb"]
    assert Pod.objects.get(name="pb").node.name in {"b0", "b1"}
    assert_consistent()


def test_readers_other_than_the_planning_see_the_whole_cluster_in_a_pool_process(pooled, tmp_path, capsys):
    """`simulate`, the what-ifs and the extender judge a pod against every node, the pool's
    selector among the node rules, even in a process that plans a pool: an operator running
    `manage.py simulate` in a pool worker's container sees what the web tier sees."""
    cluster()
    selecting("pa", "a")
    pooled("a")
    assert [placed[0] for placed in run_cycle().placed] == ["default/pa"]
    whole = load_snapshot()
    assert len(whole.cluster.nodes) == 8 and len(whole.card_ids) == 16
    # the placed pod counts on its node in the whole read as in the pool's
    placed_on = Pod.objects.get(name="pa").node.name
    for snapshot in (whole, load_snapshot(pool="a")):
        assert sum(card.used_slots for card in snapshot.cluster.node(placed_on).cards) == 1
        assert any(pod.name == "pa" for pod in snapshot.cluster.running)
    path = tmp_path / "whatif.json"
    body = {
        "pods": [
            {
                "name": "to-b",
                "nodeSelector": {LABEL: "b"},
                "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            }
        ]
    }
    path.write_text(json.dumps(body), encoding="utf-8")
    call_command("simulate", str(path), "--live", "--indent", "0")
    (decision,) = json.loads(capsys.readouterr().out)["pods"]
    assert (decision["status"], decision["node"][:1]) == ("scheduled", "b")
    # the planning itself still reads only the pool
    with STANDING.use() as (snapshot, _):
        assert {node.name for node in snapshot.cluster.nodes} == {"a0", "a1"}


def test_a_pool_planner_keeps_its_snapshot_through_other_pools_writes(pooled, settings):
    cluster()
    pooled("a")
    with STANDING.use() as (snapshot, _):
        assert {node.name for node in snapshot.cluster.nodes} == {"a0", "a1"}
    rebuilds = STANDING.rebuilds
    # another pool's node reports new counters and a new card
    Card.objects.filter(node__name="b0").update(used_memory=5000, used_slots=1)
    report("b1", "b", cards=3)
    with STANDING.use() as (snapshot, _):
        assert {node.name for node in snapshot.cluster.nodes} == {"a0", "a1"}
    assert STANDING.rebuilds == rebuilds
    # a node labelled into the pool comes in; one labelled out leaves
    report("plain1", "a")
    report("a0", "b")
    with STANDING.use() as (snapshot, _):
        assert {node.name for node in snapshot.cluster.nodes} == {"a1", "plain1"}
    assert STANDING.rebuilds == rebuilds + 1


def test_a_pool_planner_reads_the_whole_cluster_capacity_again_at_most_every_ten_seconds(pooled):
    """A pool's planner shares queues out of the whole cluster's cards, which its snapshot does
    not hold: it reads their sum with one scan, kept on its snapshot for POOL_CAPACITY_SECONDS,
    so a card that comes elsewhere counts in its shares within that long, not every cycle."""
    cluster()
    pooled("a")
    with STANDING.use() as (snapshot, _):
        before = pool_capacity(snapshot, now=1000.0)
        assert before == cluster_capacity() and before["vgpus"] == 16 * 10
        report("b1", "b", cards=3)  # another pool's node reports a third card
        assert pool_capacity(snapshot, now=1000.0 + POOL_CAPACITY_SECONDS - 0.5) == before
        after = pool_capacity(snapshot, now=1000.0 + POOL_CAPACITY_SECONDS)
        assert after == cluster_capacity() and after["vgpus"] == before["vgpus"] + 10


def test_a_pool_not_among_the_configured_pools_is_refused(settings):
    settings.HAMIADMIN = {**settings.HAMIADMIN, "NODE_POOLS": ["a"], "NODE_POOL": "x"}
    with pytest.raises(ImproperlyConfigured, match="HAMI_NODE_POOL='x' is not one of HAMI_NODE_POOLS"):
        pools.current()


def test_each_pool_has_its_own_lock_lease_and_trigger_keys(pooled):
    pooled("")
    unsharded = (locks.advisory_lock_key(), locks.lease_row(), locks.redis_lock_key())
    assert unsharded == (locks.ADVISORY_LOCK_KEY, 1, locks.REDIS_LOCK_KEY)
    pooled("a")
    a = (locks.advisory_lock_key(), locks.lease_row(), locks.redis_lock_key())
    pooled("b")
    b = (locks.advisory_lock_key(), locks.lease_row(), locks.redis_lock_key())
    assert len({unsharded[0], a[0], b[0]}) == 3 and len({1, a[1], b[1]}) == 3
    assert a[2] == f"{locks.REDIS_LOCK_KEY}:a" and b[2] == f"{locks.REDIS_LOCK_KEY}:b"
    assert all(0 < key < 2**63 and 1 < row < 2**31 for key, row, _ in (a, b))


def test_pool_planners_hold_their_advisory_locks_at_once(pooled):
    """Two pools' cycle locks are taken together; a second taker of one pool's lock is refused
    (PostgreSQL: a second connection, as another worker would be)."""
    from django.db import connection, connections

    if connection.vendor != "postgresql":
        pytest.skip("advisory locks are PostgreSQL's")
    other = connections.create_connection("default")
    try:
        pooled("a")
        with locks.cycle_lock() as held_a:
            assert held_a
            pooled("b")
            with other.cursor() as cursor:  # pool b's lock is free while a's is held
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [locks.advisory_lock_key()])
                assert cursor.fetchone()[0]
                pooled("a")
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [locks.advisory_lock_key()])
                assert not cursor.fetchone()[0]  # pool a's is taken
    finally:
        other.close()


def test_a_request_reaches_every_pools_planner_on_its_own_queue(pooled, settings, redis_url):
    settings.REDIS_URL = redis_url
    settings.HAMIADMIN = {**settings.HAMIADMIN, "TRIGGER_DEBOUNCE_MS": 2000}
    client = locks.redis_client()
    client.delete(
        *(key(pool) for key in (triggers.requested_key, triggers.queued_key) for pool in ("", "a", "b"))
    )
    queues = ["celery", "hamiadmin-pool-a", "hamiadmin-pool-b"]
    before = {queue: client.llen(queue) for queue in queues}
    for n in range(5):
        triggers.signal_scheduler(f"write {n}")
    assert {queue: client.llen(queue) - before[queue] for queue in queues} == dict.fromkeys(queues, 1)
    pooled("a")
    assert triggers.take_request() and not triggers.take_request()
    triggers.clear_queued()  # pool a's task started: only a's next request sends a task
    pooled("")
    assert triggers.request_pending()  # the pool-less planner's flag is its own
    triggers.signal_scheduler("again")
    after = {queue: client.llen(queue) - before[queue] for queue in queues}
    assert after == {"celery": 1, "hamiadmin-pool-a": 2, "hamiadmin-pool-b": 1}
    client.delete(*queues[1:])


@pytest.mark.django_db(transaction=True)  # the signal is sent once the write commits
def test_a_new_pod_wakes_only_the_planners_that_plan_it(pooled, settings, redis_url):
    """A submission asks the planners of its pods' pools only (`pools.planners_of`); a pod in
    a gang, the planner without a pool too (its gang may be that planner's); a release, whose
    freed capacity any pool's pods may use, every planner."""
    settings.REDIS_URL = redis_url
    client = locks.redis_client()
    flags = {pool: triggers.requested_key(pool) for pool in ("", "a", "b")}
    in_a = {"nodeSelector": {LABEL: "a"}}

    def asked(write) -> set[str]:
        client.delete(*flags.values())
        write()
        return {pool for pool, key in flags.items() if client.exists(key)}

    report("na", "a")
    assert asked(lambda: selecting("in-a", "a")) == {"a"}
    assert asked(lambda: selecting("in-b", "b")) == {"b"}
    assert asked(lambda: selecting("anywhere", None)) == {""}
    assert asked(lambda: selecting("unknown-pool", "c")) == {""}  # not one of the pools
    gang = {"hami.io/group-name": "g"}
    assert asked(lambda: submit("member", gpu=1, mem=1000, annotations=gang, scheduling=in_a)) == {"a", ""}
    assert asked(lambda: selecting("in-a", "a")) == set()  # the same pod again: nothing to plan
    settings.HAMIADMIN = {**settings.HAMIADMIN, "NODE_POOL": "a"}
    run_cycle()
    placed = Pod.objects.get(name="in-a")
    assert placed.status == Pod.SCHEDULED
    assert asked(lambda: services.release_pod(placed, Pod.SUCCEEDED)) == {"", "a", "b"}


def test_beat_sends_each_pools_safety_cycle_to_that_pools_queue():
    """The beat schedule names each pool's queue itself (settings cannot import `pools`): read
    from settings as HAMI_NODE_POOLS gives them, they are `pools.pool_queue`'s."""
    script = (
        "import json; from hamiadmin import settings as s;"
        " print(json.dumps({k: v['options'].get('queue') for k, v in s.CELERY_BEAT_SCHEDULE.items()"
        " if v['task'] == 'scheduling.safety_cycle'}))"
    )
    env = {**os.environ, "HAMI_NODE_POOLS": "a,b,a"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {
        "safety-cycle": None,
        "safety-cycle-a": pools.pool_queue("a"),
        "safety-cycle-b": pools.pool_queue("b"),
    }
