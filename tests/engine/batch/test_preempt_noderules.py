"""Preemption respects the node rules (SPEC 10): victims are only chosen on a node the
preemptor could use once they leave, their cpu and memory freed in the trial fit."""

from __future__ import annotations

from scheduling.engine.batch.jobs import Job, Member
from scheduling.engine.batch.preempt import NODE_RULES_REFUSE, PREEMPTING
from scheduling.engine.decision import PENDING
from scheduling.engine.model import PodSpec
from scheduling.engine.noderules import accounting

from .test_preempt import World


def member(name: str, mem: int = 8000, requests: dict | None = None, **fields) -> Job:
    resources: dict = {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem}}
    if requests:
        resources["requests"] = requests
    spec = PodSpec(name, containers=[{"name": "main", "resources": resources}], **fields)
    return Job("default", 100, (0, name), [Member(spec)])


def full_world() -> World:
    w = World({"inference": [16000], "training": [16000]})
    w.cluster.node("inference").labels = {"pool": "inference"}
    w.cluster.node("training").labels = {"pool": "training"}
    w.run("cheap", "inference", {0: 12000}, priority=0)  # the cheaper victim, on the wrong pool
    w.run("dear", "training", {0: 14000}, priority=0)
    return w


def test_victims_are_chosen_only_on_a_node_the_selector_allows():
    w = full_world()
    decision = w.runner().run([member("big", node_selector={"pool": "training"})])[0].decision
    assert decision.status == PENDING and decision.batch.reason == PREEMPTING
    assert decision.preemption.node == "training"
    assert [v.pod for v in decision.preemption.victims] == ["default/dear"]


def test_no_victim_is_chosen_where_a_taint_refuses_the_pod_whoever_leaves():
    w = full_world()
    w.cluster.node("training").taints = [{"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}]
    decision = w.runner().run([member("big", node_selector={"pool": "training"})])[0].decision
    assert decision.preemption is not None and decision.preemption.tried
    assert NODE_RULES_REFUSE in decision.preemption.why


def test_a_victims_cpu_is_freed_in_the_trial_fit():
    w = World({"n1": [16000, 16000]})
    node = w.cluster.node("n1")
    node.allocatable = {"cpu": "2"}
    w.run("busy", "n1", {0: 1000}, priority=0)
    spec = PodSpec("default-busy", containers=[{"resources": {"requests": {"cpu": "2"}}}])
    held = accounting.footprint_of(spec)
    accounting.add(node, accounting.Footprint("default/busy", "default", {}, held.request))
    decision = w.runner().run([member("needs-cpu", mem=1000, requests={"cpu": "1"})])[0].decision
    assert decision.batch is not None and decision.batch.reason == PREEMPTING
    assert [v.pod for v in decision.preemption.victims] == ["default/busy"]


# --- the rules that read other pods: PodTopologySpread and InterPodAffinity -------------------

HOST = "kubernetes.io/hostname"


def anti(app: str, key: str = HOST) -> dict:
    """Required pod anti-affinity against pods labelled app=`app`, per `key` domain."""
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def labelled(nodes: dict[str, list[int]], **zones: str) -> World:
    """A World whose nodes carry their hostname label, and a zone where one is given."""
    w = World(nodes)
    for node in w.cluster.nodes:
        node.labels = {HOST: node.name, **({"zone": zones[node.name]} if node.name in zones else {})}
    return w


def on(w: World, node: str, name: str, labels: dict | None = None, affinity: dict | None = None) -> None:
    """Count pod default/`name` on `node` for the node rules (a tenant of that name, or a pod
    no one may evict), with its labels and affinity."""
    spec = PodSpec(name, labels=labels or {}, affinity=affinity, containers=[{"name": "main"}])
    accounting.add(w.cluster.node(node), accounting.footprint_of(spec))


def web(name: str, mem: int = 8000, **fields) -> Job:
    return member(name, mem=mem, labels={"app": "web"}, **fields)


def two_nodes_cheaper_on_a() -> World:
    """Node a frees the pod's room by evicting `cheap`, node b by evicting `dear` (more MiB):
    a wins unless a rule that reads other pods refuses it."""
    w = labelled({"a": [16000], "b": [16000]})
    w.run("cheap", "a", {0: 12000}, priority=0)
    w.run("dear", "b", {0: 14000}, priority=0)
    on(w, "a", "cheap")
    on(w, "b", "dear")
    return w


def test_no_victims_are_chosen_where_a_staying_pods_anti_affinity_refuses_the_pod():
    w = two_nodes_cheaper_on_a()
    on(w, "a", "guard", {"app": "guard"}, anti("web"))  # nobody's tenant: it stays
    decision = w.runner().run([web("big")])[0].decision
    assert decision.batch is not None and decision.batch.reason == PREEMPTING
    assert decision.preemption.node == "b"
    assert [v.pod for v in decision.preemption.victims] == ["default/dear"]


def test_no_victims_are_chosen_where_the_pods_own_anti_affinity_meets_a_staying_pod():
    w = two_nodes_cheaper_on_a()
    on(w, "a", "other-web", {"app": "web"})
    decision = w.runner().run([web("big", affinity=anti("web"))])[0].decision
    assert decision.batch is not None and decision.batch.reason == PREEMPTING
    assert [v.pod for v in decision.preemption.victims] == ["default/dear"]


def test_evicting_the_pod_whose_anti_affinity_bars_the_node_makes_it_usable():
    # the cards have room; only the tenant's anti-affinity keeps the pod off the node
    w = labelled({"a": [16000]})
    w.run("loner", "a", {0: 4000}, priority=0)
    on(w, "a", "loner", {"app": "loner"}, anti("web"))
    outcome = w.runner().run([web("big")])[0]
    assert outcome.decision.batch is not None and outcome.decision.batch.reason == PREEMPTING
    assert [t.key for t in outcome.victims] == ["default/loner"]
    assert outcome.decision.preemption.node == "a"


def test_evicting_the_pod_the_preemptors_anti_affinity_selects_makes_the_node_usable():
    w = labelled({"a": [16000]})
    w.run("old-web", "a", {0: 4000}, priority=0)
    on(w, "a", "old-web", {"app": "web"})
    outcome = w.runner().run([web("big", affinity=anti("web"))])[0]
    assert [t.key for t in outcome.victims] == ["default/old-web"]


def test_an_anti_affinity_tenant_of_higher_priority_is_not_evicted():
    w = labelled({"a": [16000]})
    w.run("loner", "a", {0: 4000}, priority=1000)
    on(w, "a", "loner", {"app": "loner"}, anti("web"))
    outcome = w.runner().run([web("big")])[0]
    assert outcome.victims == [] and outcome.decision.batch is None
    assert outcome.decision.reasons == {"InterPodAffinity": 1}


def spread(app: str = "web", key: str = "zone") -> list[dict]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
        }
    ]


def test_victims_are_chosen_only_where_the_hard_spread_holds_after_they_leave():
    # zone z1 (node a) already runs a web pod that stays, z2 (node b) none: one more web pod
    # in z1 would make the skew 2
    w = labelled({"a": [16000], "b": [16000]}, a="z1", b="z2")
    w.run("cheap", "a", {0: 12000}, priority=0)
    w.run("dear", "b", {0: 14000}, priority=0)
    on(w, "a", "cheap")
    on(w, "b", "dear")
    on(w, "a", "web-1", {"app": "web"})
    decision = w.runner().run([web("big", topology_spread_constraints=spread())])[0].decision
    assert decision.batch is not None and decision.batch.reason == PREEMPTING
    assert [v.pod for v in decision.preemption.victims] == ["default/dear"]


def test_a_victim_that_counts_for_the_spread_no_longer_counts_once_it_goes():
    # z1 runs a web pod, a tenant; z2 none, and its node b is tainted (it still counts as a
    # domain): the cards of a have room, the spread lets a web pod in only without the tenant
    w = labelled({"a": [16000], "b": [16000]}, a="z1", b="z2")
    w.run("old-web", "a", {0: 4000}, priority=0)
    on(w, "a", "old-web", {"app": "web"})
    w.cluster.node("b").taints = [{"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}]
    outcome = w.runner().run([web("big", topology_spread_constraints=spread())])[0]
    assert [t.key for t in outcome.victims] == ["default/old-web"]
    assert outcome.decision.preemption.node == "a"


def test_a_search_that_found_nothing_for_one_pods_affinity_is_not_reused_for_another():
    # same shape, same priority: x will not run beside the db pod that stays, y does not mind
    w = labelled({"a": [8000]})
    w.run("v", "a", {0: 8000}, priority=0)
    on(w, "a", "v")
    on(w, "a", "db", {"app": "db"})
    x, y = member("x", affinity=anti("db")), member("y")
    outcomes = w.runner().run([x, y])
    assert [o.decision.batch and o.decision.batch.reason for o in outcomes] == [None, PREEMPTING]
    assert [t.key for t in outcomes[1].victims] == ["default/v"]


def test_a_node_barred_by_a_pod_no_one_may_evict_is_not_searched():
    w = labelled({"a": [8000]})
    w.run("v", "a", {0: 8000}, priority=0)
    on(w, "a", "v")
    on(w, "a", "guard", {"app": "guard"}, anti("web"))
    decision = w.runner().run([web("big")])[0].decision
    assert decision.batch is None and decision.preemption.tried
    assert NODE_RULES_REFUSE in decision.preemption.why


def test_a_pod_that_must_run_beside_a_staying_pod_evicts_only_where_that_pod_runs():
    w = two_nodes_cheaper_on_a()
    on(w, "b", "db", {"app": "db"})
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST}
    near_db = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    decision = w.runner().run([member("big", affinity=near_db)])[0].decision
    assert decision.batch is not None and decision.batch.reason == PREEMPTING
    assert [v.pod for v in decision.preemption.victims] == ["default/dear"]
