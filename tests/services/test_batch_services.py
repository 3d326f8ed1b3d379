"""Queues and pod groups: the tree's rules refuse naming the field, writes are audited, and the
tree's usage counts every vGPU (a 2-card 4000 MiB ask holds 8000 MiB)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduling import services
from scheduling.models import Allocation, Card, Event, NamespaceQuota, Node, Pod, PodGroup, Queue

pytestmark = pytest.mark.django_db


def place(name: str, queue: Queue | None, *holds: tuple[int, int], node: str = "n1", group=None, status=None):
    """A pod of `queue` holding one vGPU per (MiB, cores) of `holds`, each on its own card of `node`."""
    host, _ = Node.objects.get_or_create(name=node)
    pod = Pod.objects.create(
        name=name,
        queue=queue,
        group=group,
        node=host if holds else None,
        status=status or (Pod.RUNNING if holds else Pod.PENDING),
        containers=[{"name": "main", "resources": {"limits": {"nvidia.com/gpu": len(holds) or 1}}}],
    )
    for memory, cores in holds:
        index = Card.objects.filter(node=host).count()
        card = Card.objects.create(node=host, uuid=f"{node}-GPU-{index}", index=index, memory=16000)
        Allocation.objects.create(pod=pod, container_index=0, card=card, memory=memory, cores=cores)
    return pod


def errors_of(call, *args, **kwargs) -> dict:
    with pytest.raises(ValidationError) as caught:
        call(*args, **kwargs)
    return caught.value.message_dict


def tree() -> dict:
    return {node.name: node for node in services.queue_tree()}


def test_a_queue_is_created_and_changed_with_an_audit_record():
    services.create_queue("research", by="ops", weight=2, limit_gpumem=102400)
    services.update_queue("research", by="ops", quota_gpumem=51200)
    queue = Queue.objects.get(name="research")
    assert (queue.weight, queue.quota_gpumem, queue.limit_gpumem) == (2, 51200, 102400)
    events = Event.objects.filter(kind=Event.OPERATOR_ACTION, subject="queue/research")
    assert {(e.reason, e.actor) for e in events} == {("QueueCreate", "ops"), ("QueueUpdate", "ops")}


@pytest.mark.parametrize(
    ("figures", "field", "words"),
    [
        ({"weight": 0}, "weight", "greater than 0"),
        ({"guarantee_gpumem": 9000, "quota_gpumem": 8000}, "guarantee_gpumem", "over the quota"),
        ({"quota_vgpus": 9, "limit_vgpus": 8}, "quota_vgpus", "over the limit"),
        ({"guarantee_gpucores": 300, "limit_gpucores": 200}, "guarantee_gpucores", "over the limit"),
        ({"parent": "nowhere"}, "parent", "no queue named nowhere"),
        ({"parent": "default"}, "parent", "cannot have children"),
        ({"namespaces": ["Not A Name"]}, "namespaces", "namespace names"),
    ],
)
def test_the_tree_rules_refuse_naming_the_field(figures, field, words):
    assert words in " ".join(errors_of(services.create_queue, "q", **figures)[field])
    assert not Queue.objects.filter(name="q").exists()


def test_no_queue_is_its_own_ancestor():
    services.create_queue("a")
    services.create_queue("b", parent="a")
    assert "own ancestor" in errors_of(services.update_queue, "a", parent="b")["parent"][0]


def test_the_children_guarantees_stay_within_the_parent():
    services.create_queue("org", guarantee_vgpus=8, limit_gpumem=10000)
    services.create_queue("team-a", parent="org", guarantee_vgpus=5)
    refused = errors_of(services.create_queue, "team-b", parent="org", guarantee_vgpus=4)
    assert "guarantee 9 in all, over its guarantee 8" in refused["guarantee_vgpus"][0]
    refused = errors_of(services.create_queue, "team-c", parent="org", guarantee_gpumem=12000)
    assert "over its limit 10000" in refused["guarantee_gpumem"][0]
    assert (
        "over its guarantee 4"
        in errors_of(services.update_queue, "org", guarantee_vgpus=4)["guarantee_vgpus"][0]
    )


def test_a_queue_with_pods_cannot_become_a_parent_nor_be_deleted():
    services.create_queue("busy")
    place("p", Queue.objects.get(name="busy"), (1000, 10))
    assert "holds 1 pods" in errors_of(services.create_queue, "child", parent="busy")["parent"][0]
    assert "holds 1 pods" in errors_of(services.delete_queue, "busy")["name"][0]


def test_a_parent_or_default_is_never_deleted_and_an_empty_leaf_is():
    services.create_queue("org")
    services.create_queue("team", parent="org")
    assert "has children: team" in errors_of(services.delete_queue, "org")["name"][0]
    assert "never deleted" in errors_of(services.delete_queue, "default")["name"][0]
    services.delete_queue("team", by="ops")
    assert not Queue.objects.filter(name="team").exists()
    assert Event.objects.filter(subject="queue/team", reason="QueueDelete", actor="ops").exists()


def test_pod_groups_need_a_member_and_an_existing_leaf_queue():
    assert "at least 1" in errors_of(services.create_pod_group, "ml", "job", min_member=0)["min_member"][0]
    assert (
        "no queue named ghost" in errors_of(services.create_pod_group, "ml", "job", queue="ghost")["queue"][0]
    )
    services.create_queue("org")
    services.create_queue("team", parent="org")
    assert "only leaf queues" in errors_of(services.create_pod_group, "ml", "job", queue="org")["queue"][0]
    group = services.create_pod_group("ml", "job", by="ops", min_member=4, queue="team", min_gpumem=8000)
    assert (group.min_member, group.queue.name, group.source, group.phase) == (4, "team", "api", "pending")
    services.update_pod_group("ml", "job", by="ops", min_member=2, queue=None)
    group.refresh_from_db()
    assert (group.min_member, group.queue) == (2, None)
    reasons = set(Event.objects.filter(subject="podgroup/ml/job").values_list("reason", flat=True))
    assert reasons == {"PodGroupCreate", "PodGroupUpdate"}
    assert "exists" in errors_of(services.create_pod_group, "ml", "job")["name"][0]


def test_the_tree_counts_every_vgpu_and_sums_children_into_parents():
    services.create_queue("org", limit_gpumem=100000)
    services.create_queue("team", parent="org", quota_gpumem=20000)
    team = Queue.objects.get(name="team")
    place("two-cards", team, (4000, 30), (4000, 30))
    place("waiting", team)
    place("loose", None, (1000, 10), node="n2")
    group = PodGroup.objects.create(namespace="default", name="job", queue=team, phase=PodGroup.INQUEUE)
    place("member", team, group=group)
    queues = tree()
    assert [n.name for n in services.queue_tree()] == ["default", "org", "team"]
    assert queues["team"].used == {"vgpus": 2, "gpumem": 8000, "gpucores": 60}
    assert queues["org"].used == queues["team"].used and queues["org"].children == ["team"]
    assert (queues["team"].depth, queues["team"].leaf, queues["org"].leaf) == (1, True, False)
    assert (queues["team"].pending_pods, queues["team"].running_pods, queues["team"].pending_jobs) == (
        2,
        1,
        1,
    )
    assert queues["default"].used == {"vgpus": 1, "gpumem": 1000, "gpucores": 10}
    gpumem = next(row for row in queues["team"].resources() if row["resource"] == "gpumem")
    assert gpumem == {
        "resource": "gpumem",
        "unit": "MiB",
        "used": 8000,
        "guarantee": None,
        "quota": 20000,
        "limit": None,
        "fair_share": gpumem["fair_share"],
    }
    assert gpumem["fair_share"] > 0  # team has work waiting: it wants more than it holds


def test_a_pod_group_read_from_kubernetes_is_written_checked_and_only_when_it_changed():
    services.create_queue("team")
    assert services.store_pod_group("ml", "job", "volcano", "team", min_member=3, min_gpumem=8000)
    group = PodGroup.objects.get(namespace="ml", name="job")
    assert (group.source, group.min_member, group.min_gpumem, group.queue.name) == (
        "volcano",
        3,
        8000,
        "team",
    )
    assert not services.store_pod_group("ml", "job", "volcano", "team", min_member=3, min_gpumem=8000)
    assert services.store_pod_group("ml", "job", "volcano", "nowhere", min_member=3)
    group.refresh_from_db()
    assert (group.queue, group.min_gpumem) == (None, 8000)  # no such queue: none; unnamed figures kept
    assert (
        "at least 1"
        in errors_of(services.store_pod_group, "ml", "job", "volcano", min_member=0)["min_member"][0]
    )
    assert "namespace" in errors_of(services.store_pod_group, "ML!", "job", "volcano")
    assert (
        "not a pod group field"
        in errors_of(services.store_pod_group, "ml", "job", "volcano", phase="x")["phase"][0]
    )
    group.refresh_from_db()
    assert group.min_member == 3
    assert not Event.objects.filter(subject="podgroup/ml/job").exists()  # the object is the record


def test_namespace_quotas_are_checked_kept_where_refused_and_forgotten_when_gone():
    assert services.store_namespace_quota("ml", "gpus", {"vgpus": 4, "gpumem": 16000})
    assert not services.store_namespace_quota("ml", "gpus", {"vgpus": 4, "gpumem": 16000})
    assert services.store_namespace_quota("ml", "gpus", {"vgpus": 2}, keep=frozenset({"gpumem"}))
    rows = dict(NamespaceQuota.objects.filter(namespace="ml").values_list("resource", "hard"))
    assert rows == {"vgpus": 2, "gpumem": 16000}
    errors = errors_of(services.store_namespace_quota, "Bad_NS", "", {"cpu": 1, "vgpus": -1})
    assert set(errors) == {"namespace", "quota", "hard.cpu", "hard.vgpus"}
    assert services.store_namespace_quota("research", "cap", {"gpucores": 100})
    assert services.forget_namespace_quotas({("ml", "gpus")}) == 1
    assert set(NamespaceQuota.objects.values_list("namespace", flat=True)) == {"ml"}
