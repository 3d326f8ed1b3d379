"""Queues, jobs and namespace quotas in the admin: forms save through the services (the tree's
rules, the audit record), refusals land on the field; a Kubernetes ResourceQuota's rows are
read-only, an operator's namespace quota is written through the services."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling import services
from scheduling.models import Event, NamespaceQuota, Queue

pytestmark = pytest.mark.django_db

FIGURES = {name: "" for name in services.batch.FIGURES}


def queue_form(**values) -> dict:
    return {"name": "", "parent": "", "weight": "1", "namespaces": "[]", **FIGURES, **values}


def test_every_batch_changelist_and_change_page_renders(admin_client):
    services.create_queue("team")
    group = services.create_pod_group("ml", "train", min_member=2, queue="team")
    NamespaceQuota.objects.create(namespace="ml", quota="gpu", resource="gpumem", hard=40960)
    for model, obj in (
        ("queue", Queue.objects.get(name="team")),
        ("podgroup", group),
        ("namespacequota", NamespaceQuota.objects.get()),
    ):
        assert admin_client.get(reverse(f"admin:scheduling_{model}_changelist")).status_code == 200
        assert admin_client.get(reverse(f"admin:scheduling_{model}_change", args=[obj.pk])).status_code == 200


def test_a_queue_added_in_the_admin_goes_through_the_service(admin_client):
    answer = admin_client.post(
        reverse("admin:scheduling_queue_add"), queue_form(name="research", weight="2", limit_gpumem="102400")
    )
    assert answer.status_code == 302, answer.content[:2000]
    assert Queue.objects.get(name="research").limit_gpumem == 102400
    assert Event.objects.filter(subject="queue/research", reason="QueueCreate", actor="admin").exists()


def test_a_queue_lends_its_guarantee_when_the_admin_ticks_it(admin_client):
    form = queue_form(name="lender", guarantee_vgpus="2", lend_guarantee="on")
    answer = admin_client.post(reverse("admin:scheduling_queue_add"), form)
    assert answer.status_code == 302, answer.content[:2000]
    assert Queue.objects.get(name="lender").lend_guarantee is True
    kept = queue_form(name="keeper", guarantee_vgpus="2")  # an unticked box: kept, the default
    assert admin_client.post(reverse("admin:scheduling_queue_add"), kept).status_code == 302
    assert Queue.objects.get(name="keeper").lend_guarantee is False


def test_the_admin_form_puts_the_tree_rules_on_their_fields(admin_client):
    answer = admin_client.post(
        reverse("admin:scheduling_queue_add"),
        queue_form(name="q", guarantee_gpumem="9000", quota_gpumem="8000"),
    )
    assert answer.status_code == 200
    assert (
        "guarantee 9000 is over the quota 8000"
        in answer.context["adminform"].form.errors["guarantee_gpumem"][0]
    )
    default = Queue.default()
    answer = admin_client.post(
        reverse("admin:scheduling_queue_add"), queue_form(name="child", parent=str(default.pk))
    )
    assert "cannot have children" in answer.context["adminform"].form.errors["parent"][0]
    assert not Queue.objects.filter(name__in=("q", "child")).exists()


def test_default_is_never_deleted_and_kubernetes_quotas_are_read_only(admin_client):
    default = Queue.default()
    assert admin_client.get(reverse("admin:scheduling_queue_delete", args=[default.pk])).status_code == 403
    quota = NamespaceQuota.objects.create(namespace="ml", quota="gpu", resource="vgpus", hard=8)
    admin_client.post(reverse("admin:scheduling_namespacequota_change", args=[quota.pk]), {"hard": "100"})
    quota.refresh_from_db()
    assert quota.hard == 8
    assert (
        admin_client.get(reverse("admin:scheduling_namespacequota_delete", args=[quota.pk])).status_code
        == 403
    )
    taken = admin_client.post(
        reverse("admin:scheduling_namespacequota_add"),
        {"namespace": "ml", "quota": "gpu", "resource": "gpumem", "hard": "100"},
    )
    assert taken.status_code == 200 and "Kubernetes ResourceQuota" in str(
        taken.context["adminform"].form.errors["quota"]
    )
    assert NamespaceQuota.objects.count() == 1


def test_an_operators_namespace_quota_is_added_changed_and_deleted_through_the_services(admin_client):
    add = reverse("admin:scheduling_namespacequota_add")
    answer = admin_client.post(add, {"namespace": "ml", "quota": "cap", "resource": "vgpus", "hard": "4"})
    assert answer.status_code == 302, answer.content[:3000]
    row = NamespaceQuota.objects.get()
    assert (row.source, row.resource, row.hard) == (NamespaceQuota.API, "vgpus", 4)
    assert Event.objects.filter(subject="namespacequota/ml/cap", reason="NamespaceQuotaCreate").exists()
    more = admin_client.post(add, {"namespace": "ml", "quota": "cap", "resource": "gpumem", "hard": "8000"})
    assert more.status_code == 302
    bad = admin_client.post(add, {"namespace": "Bad_NS", "quota": "cap", "resource": "vgpus", "hard": "1"})
    assert bad.status_code == 200 and "namespace" in bad.context["adminform"].form.errors
    changed = admin_client.post(
        reverse("admin:scheduling_namespacequota_change", args=[row.pk]), {"hard": "2"}
    )
    assert changed.status_code == 302, changed.content[:3000]
    assert services.namespace_quota("ml", "cap").hard == {"vgpus": 2, "gpumem": 8000, "gpucores": None}
    for one in list(NamespaceQuota.objects.all()):
        deleted = admin_client.post(
            reverse("admin:scheduling_namespacequota_delete", args=[one.pk]), {"post": "yes"}
        )
        assert deleted.status_code == 302
    assert not NamespaceQuota.objects.exists()
    assert Event.objects.filter(subject="namespacequota/ml/cap", reason="NamespaceQuotaDelete").exists()


def test_a_job_edited_in_the_admin_goes_through_the_service(admin_client):
    services.create_queue("team")
    group = services.create_pod_group("ml", "train", min_member=2)
    team = Queue.objects.get(name="team")
    form = {"min_member": "4", "queue": str(team.pk), "priority": "0", "on_timeout": "pending"}
    form.update({"min_vgpus": "", "min_gpumem": "", "min_gpucores": "", "schedule_timeout_seconds": ""})
    form.update(
        {
            "pods-TOTAL_FORMS": "0",
            "pods-INITIAL_FORMS": "0",
            "pods-MIN_NUM_FORMS": "0",
            "pods-MAX_NUM_FORMS": "0",
        }
    )
    answer = admin_client.post(reverse("admin:scheduling_podgroup_change", args=[group.pk]), form)
    assert answer.status_code == 302, answer.content[:3000]
    group.refresh_from_db()
    assert (group.min_member, group.queue) == (4, team)
    assert Event.objects.filter(subject="podgroup/ml/train", reason="PodGroupUpdate").exists()
    form["min_member"] = "0"
    answer = admin_client.post(reverse("admin:scheduling_podgroup_change", args=[group.pk]), form)
    assert answer.status_code == 200 and "min_member" in answer.context["adminform"].form.errors
