"""A `Statement` gives what its queryset gives, for any values of any shape: model rows with
their joined rows, `.values()` rows with subqueries, converted as Django converts them."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, Subquery
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling import services
from scheduling.models import Card, Eviction, Nomination, Pod
from scheduling.pipeline.rowlocks import lock_pods
from scheduling.statements import Statement

pytestmark = pytest.mark.django_db


def named(keys):
    where = Q()
    for namespace, name in keys:
        where |= Q(namespace=namespace, name=name)
    return where


def pods_on_nodes(keys):
    return lock_pods(Pod.objects.filter(named(keys)).select_related("node"), of_self=True)


def flags(pk):
    return Pod.objects.filter(pk=pk).values(
        "name",
        "scheduling",
        evicted=Exists(Eviction.objects.filter(victim_id=OuterRef("pk"))),
        nominated_until=Subquery(
            Nomination.objects.filter(pod_id=OuterRef("pk")).order_by("-expires_at").values("expires_at")[:1]
        ),
    )


@pytest.fixture
def placed():
    """Two nodes of two cards, pods in two namespaces with odd names and JSON, some placed."""
    for n in range(2):
        cards = [{"uuid": f"GPU-{n}-{i}", "index": i, "memory": 16000, "type": "T4"} for i in range(2)]
        services.report_inventory(f"node{n}", {}, {}, cards)
    for n in range(12):
        namespace = ("default", "team-a")[n % 2]
        services.submit_pod(
            namespace=namespace,
            name=f"p{n}",
            labels={"n": str(n)},
            annotations={"example.com/note": "it's"},
            containers=[{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        )
    node = services.report_inventory("node0", {}, {}, [])
    Pod.objects.filter(name__in=["p0", "p3", "p4"]).update(status=Pod.SCHEDULED, node=node)
    pod = Pod.objects.get(name="p3")
    Nomination.objects.create(
        pod=pod, card=Card.objects.order_by("pk").first(), memory=1, cores=0, expires_at=timezone.now()
    )
    return pod


def model_rows(rows):
    return [
        (
            pod.pk,
            pod.namespace,
            pod.name,
            pod.labels,
            pod.annotations,
            pod.submitted_at,
            pod.node_id,
            pod.node and pod.node.name,
        )
        for pod in rows
    ]


def test_model_rows_with_their_node_match_the_queryset_for_any_keys(placed):
    statement = Statement(pods_on_nodes)
    names = [f"p{n}" for n in range(14)] + ["it's", "x' OR '1'='1"]
    chance = random.Random(29)
    for _ in range(40):
        keys = [
            (chance.choice(["default", "team-a", "none"]), chance.choice(names))
            for _ in range(chance.randint(1, 5))
        ]
        with transaction.atomic():
            expected = model_rows(pods_on_nodes(keys))
            with CaptureQueriesContext(connection) as sent:
                found = statement.rows(keys)
        assert model_rows(found) == expected, keys
        assert len(sent) == 1 and "FOR" in sent[0]["sql"].upper() or connection.vendor != "postgresql"
        assert all(not pod._state.adding and pod._state.db == "default" for pod in found)


def test_values_rows_carry_subqueries_and_converted_json(placed):
    statement = Statement(flags)
    for pod in Pod.objects.all():
        (expected,) = list(flags(pod.pk))
        assert statement.first(pod.pk) == expected
    found = statement.first(placed.pk)
    assert found["nominated_until"] is not None and found["nominated_until"] > timezone.now() - timedelta(
        hours=1
    )
    assert statement.first(-5) is None


def test_a_row_read_through_a_statement_saves_like_one_read_by_the_orm(placed):
    (pod,) = Statement(lambda name: Pod.objects.filter(name=name)).rows("p5")
    pod.labels = {"changed": "yes"}
    pod.save(update_fields=["labels"])
    assert Pod.objects.get(name="p5").labels == {"changed": "yes"}


def test_more_shapes_than_it_keeps_are_still_answered(placed):
    statement = Statement(lambda names: Pod.objects.filter(name__in=names).order_by("pk"))
    statement.SHAPES = 3
    for size in range(1, 10):
        names = [f"p{n}" for n in range(size)]
        assert [pod.name for pod in statement.rows(names)] == names
    assert len(statement._compiled) == 3


def test_more_values_than_its_most_run_the_queryset_and_keep_no_shape(placed):
    statement = Statement(lambda names: Pod.objects.filter(name__in=names).order_by("pk"), most=3)
    for size in (2, 5, 3, 9):
        names = [f"p{n}" for n in range(size)]
        with CaptureQueriesContext(connection) as sent:
            assert [pod.name for pod in statement.rows(names)] == names
        assert len(sent) == 1
    assert sorted(len(shape) for _, (shape,) in statement._compiled) == [2, 3]


def test_integer_values_and_constants_beside_them(placed):
    statement = Statement(lambda pks: Pod.objects.filter(pk__in=pks, status=Pod.SCHEDULED).order_by("pk"))
    pks = list(Pod.objects.order_by("pk").values_list("pk", flat=True))
    assert [pod.name for pod in statement.rows(pks[:6])] == ["p0", "p3", "p4"]
    Pod.objects.filter(name="p7").update(attempts=3)
    positive = Statement(lambda least: Pod.objects.filter(attempts__gte=least))  # a PositiveIntegerField
    assert [pod.name for pod in positive.rows(2)] == ["p7"]
    assert len(positive.rows(0)) == Pod.objects.count()


@pytest.mark.django_db(transaction=True)
def test_a_locking_statement_outside_a_transaction_is_refused_as_the_orm_refuses_it(placed):
    if not connection.features.has_select_for_update:
        pytest.skip("no row locks on this database")
    with pytest.raises(TransactionManagementError):
        Statement(pods_on_nodes).rows([("default", "p0")])


def test_values_of_other_types_are_refused_naming_the_type():
    with pytest.raises(TypeError, match="datetime"):
        Statement(lambda moment: Pod.objects.filter(submitted_at__gt=moment)).rows(timezone.now())
    with pytest.raises(TypeError, match="bool"):
        Statement(lambda flag: Pod.objects.filter(parked=flag)).rows(True)
