"""Django admin: browse the cluster, pods and history; act through `scheduling.services`.

Rows here are written by agents, the API and the scheduler, so every form is read-only.
What an operator may change is an action (cordon, uncordon, requeue, release, mark
succeeded) or a new cluster config, and each calls the same service function as the REST
API: a cordon from the admin wakes the scheduler exactly like one from the API. Queues and
jobs are the exception, being operator-made: their forms save through `services.batch`, which
checks the tree's rules and records who changed what.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.forms import ModelForm
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from scheduling.engine import PodInvalid, ScenarioError
from scheduling.engine.batch.queues import DEFAULT_QUEUE

from . import services
from .models import (
    Allocation,
    BoundPod,
    Card,
    Cycle,
    Decision,
    Event,
    Eviction,
    NamespaceQuota,
    Node,
    Nomination,
    Pod,
    PodGroup,
    Queue,
    SchedulerConfig,
)
from .services.batch import FIGURES, KINDS
from .templatetags import decision_path as decision_tags
from .templatetags.charts import fraction

DASHBOARD_CSS = {"all": ("scheduling/components.css", "scheduling/admin.css")}


class WrittenByServices:
    """Forms are read-only, nothing is added or deleted here. The model-level change
    permission stays, so the actions (which call services) are offered to those who hold it."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        if obj is not None:
            return False
        return super().has_change_permission(request)


def usage_cell(used: int, total: int, unit: str = ""):
    """`used/total` with a small bar, for list columns."""
    share = fraction(used, total)
    step = 0 if share <= 0 else min(4, 1 + int(share * 4 - 1e-9))
    return format_html(
        '<span class="admin-nowrap"><span class="admin-usage heat-{}" title="{}%"><span style="width:{}%"></span>'
        "</span> {}/{}{}</span>",
        step,
        round(100 * share),
        round(100 * share),
        used,
        total,
        f" {unit}" if unit else "",
    )


def badge(text: str, kind: str):
    return format_html('<span class="badge {}">{}</span>', kind, text)


def report(modeladmin, request, done: list[str], failed: list[str], verb: str) -> None:
    if done:
        modeladmin.message_user(request, f"{verb}: {', '.join(done)}", messages.SUCCESS)
    if failed:
        modeladmin.message_user(request, f"not {verb}: {'; '.join(failed)}", messages.ERROR)


# --- Nodes and cards -------------------------------------------------------------------


class ReadOnlyInline(admin.TabularInline):
    """Rows written only by the services: shown, never added, changed or deleted here."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class CardInline(ReadOnlyInline):
    model = Card
    fields = ("index", "uuid", "type", "numa", "slots_used", "memory_used", "cores_used", "state")
    readonly_fields = fields
    show_change_link = True
    ordering = ("index",)

    @admin.display(description="slots")
    def slots_used(self, card):
        return usage_cell(card.used_slots, card.slots)

    @admin.display(description="memory")
    def memory_used(self, card):
        return usage_cell(card.used_memory, card.memory, "MiB")

    @admin.display(description="cores")
    def cores_used(self, card):
        return usage_cell(card.used_cores, card.cores, "%")

    @admin.display(description="state")
    def state(self, card):
        return card_state(card)


def card_state(card: Card):
    parts = [badge("healthy", "ok") if card.health else badge("unhealthy", "bad")]
    if card.cordoned:
        parts.append(badge("cordoned", "warn"))
    if not card.present:
        parts.append(badge("absent", "bad"))
    return format_html_join(" ", "{}", ((part,) for part in parts))


@admin.register(Node)
class NodeAdmin(WrittenByServices, admin.ModelAdmin):
    list_display = ("name", "readiness", "card_count", "last_heartbeat", "dashboard_link")
    list_filter = ("ready",)
    search_fields = ("name",)
    fields = (
        "name",
        "ready",
        "not_ready_reason",
        "last_heartbeat",
        "labels",
        "annotations",
        "created_at",
        "updated_at",
    )
    inlines = [CardInline]
    actions = ["drain"]

    class Media:
        css = DASHBOARD_CSS

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(n_cards=Count("cards", filter=Q(cards__present=True)))

    @admin.action(description="Drain: cordon every card, list what runs there", permissions=["change"])
    def drain(self, request, queryset):
        """Asks first: a page lists each node's placed pods and offers to requeue those
        hamiadmin runs itself; only its confirm button (`confirm=yes`) drains, audited as the
        dashboard's drain is."""
        nodes = list(queryset.order_by("name"))
        if request.POST.get("confirm") != "yes":
            placed = [(node, services.running_on(node)) for node in nodes]
            own = sum(len(services.requeueable(pods)) for _, pods in placed)
            return TemplateResponse(
                request,
                "admin/scheduling/node/drain_confirmation.html",
                {
                    **self.admin_site.each_context(request),
                    "title": "Drain these nodes?",
                    "opts": self.model._meta,
                    "nodes": placed,
                    "own_count": own,
                    "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                },
            )
        requeue = request.POST.get("requeue") == "yes"
        done, failed = [], []
        for node in nodes:
            try:
                drained = services.drain_node(node.name, by=request.user.get_username(), requeue_own=requeue)
                done.append(f"{node.name} ({drained.message})")
            except Node.DoesNotExist:
                failed.append(f"{node.name}: no longer exists")
        report(self, request, done, failed, "drained")
        return None

    @admin.display(description="ready", ordering="ready")
    def readiness(self, node):
        return badge("ready", "ok") if node.ready else badge("not ready", "bad")

    @admin.display(description="cards", ordering="n_cards")
    def card_count(self, node):
        return node.n_cards

    @admin.display(description="dashboard")
    def dashboard_link(self, node):
        return format_html('<a href="{}">node page</a>', reverse("node", args=[node.name]))

    def view_on_site(self, node):
        return reverse("node", args=[node.name])


@admin.register(Card)
class CardAdmin(WrittenByServices, admin.ModelAdmin):
    list_display = (
        "uuid",
        "node",
        "index",
        "type",
        "numa",
        "state",
        "slots_used",
        "memory_used",
        "cores_used",
        "tenant_count",
    )
    list_filter = ("type", "health", "node", "cordoned", "present")
    search_fields = ("uuid", "node__name", "type")
    list_select_related = ("node",)
    actions = ["cordon", "uncordon"]
    fields = (
        "uuid",
        "node",
        "index",
        "type",
        "numa",
        "mode",
        "state",
        "slots_used",
        "memory_used",
        "cores_used",
        "tenants",
        "links",
        "updated_at",
    )
    readonly_fields = ("state", "slots_used", "memory_used", "cores_used", "tenants")

    class Media:
        css = DASHBOARD_CSS

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(n_tenants=Count("allocations__pod", filter=Q(allocations__active=True), distinct=True))
        )

    @admin.display(description="state")
    def state(self, card):
        return card_state(card)

    @admin.display(description="slots", ordering="used_slots")
    def slots_used(self, card):
        return usage_cell(card.used_slots, card.slots)

    @admin.display(description="memory", ordering="used_memory")
    def memory_used(self, card):
        return usage_cell(card.used_memory, card.memory, "MiB")

    @admin.display(description="cores", ordering="used_cores")
    def cores_used(self, card):
        return usage_cell(card.used_cores, card.cores, "%")

    @admin.display(description="tenants", ordering="n_tenants")
    def tenant_count(self, card):
        return card.n_tenants

    @admin.display(description="tenants")
    def tenants(self, card):
        rows = (
            card.allocations.filter(active=True).select_related("pod").order_by("pod__namespace", "pod__name")
        )
        if not rows:
            return "none"
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a> [{}]: {} MiB, {}% cores',
            (
                (
                    reverse("pod", args=[a.pod.namespace, a.pod.name]),
                    a.pod.key,
                    a.container_name,
                    a.memory,
                    a.cores,
                )
                for a in rows
            ),
        )

    def _cordon(self, request, queryset, on: bool):
        done, failed = [], []
        for card in queryset.order_by("pk"):
            try:
                services.cordon_card(card.uuid, on, by=request.user.get_username())
                done.append(card.uuid)
            except Card.DoesNotExist:
                failed.append(f"{card.uuid}: no longer exists")
        report(self, request, done, failed, "cordoned" if on else "uncordoned")

    @admin.action(description="Cordon: take no new vGPUs (tenants stay)", permissions=["change"])
    def cordon(self, request, queryset):
        self._cordon(request, queryset, True)

    @admin.action(description="Uncordon: take new vGPUs again", permissions=["change"])
    def uncordon(self, request, queryset):
        self._cordon(request, queryset, False)


# --- Pods ------------------------------------------------------------------------------


class AllocationInline(ReadOnlyInline):
    model = Allocation
    fields = (
        "container_index",
        "container_name",
        "card",
        "memory",
        "cores",
        "active",
        "created_at",
        "released_at",
    )
    readonly_fields = fields
    ordering = ("-active", "container_index", "id")


class DecisionInline(ReadOnlyInline):
    model = Decision
    fields = ("created_at", "cycle", "outcome", "node", "reason", "duration_ms")
    readonly_fields = fields
    show_change_link = True
    ordering = ("-id",)


@admin.register(Pod)
class PodAdmin(WrittenByServices, admin.ModelAdmin):
    list_display = ("key", "status", "origin", "node", "priority", "attempts", "submitted_at", "short_reason")
    list_filter = ("status", "origin", "parked", "namespace", "node")
    search_fields = ("namespace", "name", "uid")
    list_select_related = ("node",)
    actions = ["requeue", "release", "mark_succeeded"]
    fields = (
        "namespace",
        "name",
        "uid",
        "origin",
        "status",
        "node",
        "priority",
        "submitted_at",
        "scheduled_at",
        "bound_at",
        "finished_at",
        "attempts",
        "reason",
        "error",
        "parked",
        "next_attempt_at",
        "allocated",
        "annotations",
        "containers",
        "init_containers",
        "dashboard_link",
    )
    readonly_fields = ("dashboard_link",)
    inlines = [AllocationInline, DecisionInline]

    @admin.display(description="pod", ordering="name")
    def key(self, pod):
        return pod.key

    @admin.display(description="reason")
    def short_reason(self, pod):
        text = pod.error or pod.reason
        return text if len(text) <= 120 else text[:119] + "…"

    @admin.display(description="dashboard")
    def dashboard_link(self, pod):
        return format_html('<a href="{}">decision path</a>', reverse("pod", args=[pod.namespace, pod.name]))

    def view_on_site(self, pod):
        return reverse("pod", args=[pod.namespace, pod.name])

    @admin.action(description="Requeue: try again in the next cycle", permissions=["change"])
    def requeue(self, request, queryset):
        done, failed = [], []
        for pod in queryset.order_by("pk"):
            try:
                services.requeue_pod(pod)
                done.append(pod.key)
            except (Pod.DoesNotExist, PodInvalid, ValueError) as exc:
                failed.append(f"{pod.key}: {exc}")
        report(self, request, done, failed, "requeued")

    def _release(self, request, queryset, final_status: str, verb: str):
        done, failed = [], []
        for pod in queryset.order_by("pk"):
            try:
                services.release_pod(pod, final_status)
                done.append(pod.key)
            except (Pod.DoesNotExist, ValueError) as exc:
                failed.append(f"{pod.key}: {exc}")
        report(self, request, done, failed, verb)

    @admin.action(description="Release: the pod is deleted, give back its cards", permissions=["change"])
    def release(self, request, queryset):
        """Asks first: a page lists the pods and the cards they hold; only its confirm
        button (`confirm=yes`) releases them."""
        if request.POST.get("confirm") != "yes":
            pods = list(queryset.select_related("node").order_by("pk"))
            held = Allocation.objects.filter(pod__in=pods, active=True).select_related("card")
            cards: dict[int, list[str]] = {}
            for allocation in held:
                cards.setdefault(allocation.pod_id, []).append(allocation.card.uuid)
            return TemplateResponse(
                request,
                "admin/scheduling/pod/release_confirmation.html",
                {
                    **self.admin_site.each_context(request),
                    "title": "Release these pods?",
                    "opts": self.model._meta,
                    "pods": [(pod, sorted(set(cards.get(pod.pk, [])))) for pod in pods],
                    "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                },
            )
        self._release(request, queryset, Pod.DELETED, "released")
        return None

    @admin.action(description="Mark succeeded: the pod finished, give back its cards", permissions=["change"])
    def mark_succeeded(self, request, queryset):
        self._release(request, queryset, Pod.SUCCEEDED, "marked succeeded")


# --- History ---------------------------------------------------------------------------


@admin.register(Decision)
class DecisionAdmin(WrittenByServices, admin.ModelAdmin):
    list_display = ("id", "created_at", "pod", "outcome", "node", "cycle", "short_reason", "duration_ms")
    list_filter = ("outcome",)
    search_fields = ("pod__namespace", "pod__name", "node", "reason")
    list_select_related = ("pod",)
    fields = (
        "pod",
        "cycle",
        "outcome",
        "node",
        "reason",
        "error",
        "duration_ms",
        "created_at",
        "decision_path",
    )
    readonly_fields = ("decision_path",)

    class Media:
        css = DASHBOARD_CSS

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="reason")
    def short_reason(self, decision):
        return decision.reason if len(decision.reason) <= 120 else decision.reason[:119] + "…"

    @admin.display(description="decision path")
    def decision_path(self, decision):
        """The chain, the card table and the nodes as on the Pod page: the same component."""
        return render_to_string(
            decision_tags.TEMPLATE, decision_tags.pod_decision(decision.payload, heading=False, live=True)
        )


@admin.register(Cycle)
class CycleAdmin(WrittenByServices, admin.ModelAdmin):
    list_display = (
        "id",
        "started_at",
        "trigger",
        "worker",
        "considered",
        "placed",
        "pending",
        "rejected",
        "conflicts",
        "skipped",
        "nodes",
        "duration_ms",
    )
    list_filter = ("trigger",)
    date_hierarchy = "started_at"

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Allocation)
class AllocationAdmin(WrittenByServices, admin.ModelAdmin):
    list_display = ("pod", "container_name", "card", "memory", "cores", "active", "created_at", "released_at")
    list_filter = ("active",)
    search_fields = ("pod__namespace", "pod__name", "card__uuid")
    list_select_related = ("pod", "card")

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(BoundPod)
class BoundPodAdmin(WrittenByServices, admin.ModelAdmin):
    """Pods other schedulers bound, as the Kubernetes watcher last saw them: read-only."""

    list_display = ("key", "node_name", "phase", "allocated", "updated_at")
    list_filter = ("phase",)
    search_fields = ("namespace", "name", "node_name")

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Event)
class EventAdmin(WrittenByServices, admin.ModelAdmin):
    """Refusals and repairs, as the agents and services recorded them: read-only."""

    list_display = ("last_seen", "kind", "severity", "subject", "reason", "count", "actor", "short_message")
    list_filter = ("kind", "severity", "reason")
    search_fields = ("subject", "reason", "message")
    date_hierarchy = "last_seen"

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="message")
    def short_message(self, event):
        return event.message if len(event.message) <= 120 else event.message[:119] + "…"


# --- Preemption ------------------------------------------------------------------------


def pod_link(pod: Pod | None):
    """The pod's dashboard page (where its Preemption panel is), or a dash once deleted."""
    if pod is None:
        return "—"
    return format_html('<a href="{}">{}</a>', reverse("pod", args=[pod.namespace, pod.name]), pod.key)


@admin.register(Eviction)
class EvictionAdmin(WrittenByServices, admin.ModelAdmin):
    """Evictions the scheduler chose, one per victim: read-only (the cycle writes them, the
    services and the kube agent carry them out)."""

    list_display = (
        "id",
        "created_at",
        "victim_link",
        "preemptor_link",
        "kind",
        "state",
        "node",
        "short_reason",
    )
    list_filter = ("state", "kind")
    search_fields = ("victim__namespace", "victim__name", "preemptor__namespace", "preemptor__name", "node")
    list_select_related = ("victim", "preemptor")
    date_hierarchy = "created_at"
    fields = (
        "victim_link",
        "preemptor_link",
        "decision",
        "kind",
        "node",
        "cards",
        "reason",
        "state",
        "message",
        "created_at",
        "updated_at",
        "finished_at",
    )
    readonly_fields = ("victim_link", "preemptor_link")

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="victim", ordering="victim__name")
    def victim_link(self, eviction):
        return pod_link(eviction.victim)

    @admin.display(description="preemptor", ordering="preemptor__name")
    def preemptor_link(self, eviction):
        return pod_link(eviction.preemptor)

    @admin.display(description="reason")
    def short_reason(self, eviction):
        return eviction.reason if len(eviction.reason) <= 120 else eviction.reason[:119] + "…"


class ActiveNominationFilter(admin.SimpleListFilter):
    """Nominations hold their card until they expire; expired ones wait for the housekeeping."""

    title = "state"
    parameter_name = "active"

    def lookups(self, request, model_admin):
        return [("yes", "active"), ("no", "expired")]

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "yes":
            return queryset.filter(expires_at__gt=now)
        if self.value() == "no":
            return queryset.filter(expires_at__lte=now)
        return queryset


@admin.register(Nomination)
class NominationAdmin(WrittenByServices, admin.ModelAdmin):
    """The vGPUs preemptors hold on freed cards while their victims leave: read-only."""

    list_display = ("pod_link", "card", "memory", "cores", "whole", "created_at", "expires_at")
    list_filter = (ActiveNominationFilter, "whole", "card__node")
    search_fields = ("pod__namespace", "pod__name", "card__uuid")
    list_select_related = ("pod", "card")
    fields = ("pod_link", "card", "memory", "cores", "whole", "created_at", "expires_at")
    readonly_fields = ("pod_link",)

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="pod", ordering="pod__name")
    def pod_link(self, nomination):
        return pod_link(nomination.pod)


# --- Cluster config --------------------------------------------------------------------


class SchedulerConfigForm(ModelForm):
    """A new cluster default, checked by the engine's own config rules before it is stored."""

    class Meta:
        model = SchedulerConfig
        fields = (
            "node_scheduler_policy",
            "gpu_scheduler_policy",
            "memory_percentage",
            "default_cores",
            "exclusive_cores",
        )

    #: The config field each form field stands for, as `services.validate_config` names it.
    FIELDS = {
        "config.resources.memory_percentage": "memory_percentage",
        "config.resources.cores": "default_cores",
        "config.resources.exclusive_cores": "exclusive_cores",
    }

    def clean(self):
        data = super().clean()
        row = SchedulerConfig(**{name: data.get(name) for name in self.Meta.fields})
        try:
            services.validate_config(row.as_raw())
        except ScenarioError as exc:
            field = self.FIELDS.get(exc.where)
            if field is None or field in self.errors:
                raise ValidationError(str(exc)) from None
            self.add_error(field, exc.message)
        return data


@admin.register(SchedulerConfig)
class SchedulerConfigAdmin(admin.ModelAdmin):
    """Append-only: "add" writes a new row through services.set_config; old rows are history."""

    form = SchedulerConfigForm
    list_display = (
        "created_at",
        "node_scheduler_policy",
        "gpu_scheduler_policy",
        "memory_percentage",
        "default_cores",
        "exclusive_cores",
        "changed_by",
    )

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        try:
            row = services.set_config(
                node_scheduler_policy=obj.node_scheduler_policy,
                gpu_scheduler_policy=obj.gpu_scheduler_policy,
                memory_percentage=obj.memory_percentage,
                default_cores=obj.default_cores,
                exclusive_cores=obj.exclusive_cores,
                changed_by=request.user.get_username(),
            )
        except ScenarioError as exc:
            raise ValidationError(str(exc)) from None
        obj.pk = row.pk
        obj.created_at = row.created_at
        obj.changed_by = row.changed_by


# --- Queues, jobs, namespace quotas ------------------------------------------------------


def _checked_by(form: ModelForm, validate) -> None:
    """Run the service's validation on the row the form would save; errors go to their fields."""
    candidate = form.instance.__class__(pk=form.instance.pk)
    for name in form.instance._meta.concrete_fields:
        setattr(candidate, name.attname, getattr(form.instance, name.attname))
    for name, value in form.cleaned_data.items():
        setattr(candidate, name, value)
    try:
        validate(candidate)
    except ValidationError as exc:
        for name, errors in exc.message_dict.items():
            form.add_error(name if name in form.fields else None, errors)


def _figures(queue: Queue, resource: str) -> list[int | None]:
    return [getattr(queue, f"{kind}_{resource}") for kind in KINDS]


class QueueForm(ModelForm):
    """A queue, checked by `services.validate_queue` (the tree's rules) before it is saved."""

    class Meta:
        model = Queue
        fields = ("name", "parent", "weight", "namespaces", "lend_guarantee", *FIGURES)

    def clean(self):
        data = super().clean()
        if not self.errors:
            _checked_by(self, services.validate_queue)
        return data


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    """Written through `services.create_queue` / `update_queue` / `delete_queue`, audited."""

    form = QueueForm
    list_display = ("name", "parent", "weight", "gpumem_figures", "vgpus_figures", "dashboard_link")
    search_fields = ("name",)
    list_select_related = ("parent",)
    actions = None

    def get_readonly_fields(self, request, obj=None):
        return ("name",) if obj is not None else ()

    @admin.display(description="gpumem G / Q / L (MiB)")
    def gpumem_figures(self, queue):
        return " / ".join("—" if v is None else str(v) for v in _figures(queue, "gpumem"))

    @admin.display(description="vGPUs G / Q / L")
    def vgpus_figures(self, queue):
        return " / ".join("—" if v is None else str(v) for v in _figures(queue, "vgpus"))

    @admin.display(description="dashboard")
    def dashboard_link(self, queue):
        return format_html('<a href="{}?queue={}">Queues page</a>', reverse("queues"), queue.name)

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.name == DEFAULT_QUEUE:
            return False
        return super().has_delete_permission(request, obj)

    def save_model(self, request, obj, form, change):
        fields = {name: form.cleaned_data[name] for name in form.cleaned_data if name != "name"}
        fields["parent"] = fields["parent"].name if fields.get("parent") else None
        by = request.user.get_username()
        if change:
            saved = services.update_queue(obj.name, by=by, **fields)
        else:
            saved = services.create_queue(obj.name, by=by, **fields)
        obj.pk, obj.created_at, obj.updated_at = saved.pk, saved.created_at, saved.updated_at

    def delete_model(self, request, obj):
        try:
            services.delete_queue(obj.name, by=request.user.get_username())
        except ValidationError as exc:
            self.message_user(request, f"not deleted: {' '.join(exc.messages)}", messages.ERROR)


class MemberInline(ReadOnlyInline):
    model = Pod
    fk_name = "group"
    fields = ("name", "status", "node", "reason")
    readonly_fields = fields
    show_change_link = True


class PodGroupForm(ModelForm):
    """A job, checked by `services.validate_pod_group` before it is saved."""

    class Meta:
        model = PodGroup
        fields = (
            "namespace",
            "name",
            "min_member",
            "min_vgpus",
            "min_gpumem",
            "min_gpucores",
            "queue",
            "priority",
            "schedule_timeout_seconds",
            "on_timeout",
            "max_evicted",
        )

    def clean(self):
        data = super().clean()
        if not self.errors:
            _checked_by(self, services.validate_pod_group)
        return data


@admin.register(PodGroup)
class PodGroupAdmin(admin.ModelAdmin):
    """Jobs: operators create and edit them through `services.create_pod_group` /
    `update_pod_group`; the phase, verdict and conditions are the scheduler's."""

    form = PodGroupForm
    list_display = ("key", "phase", "min_member", "queue", "source", "short_reason", "created_at")
    list_filter = ("phase", "source", "namespace", "queue")
    search_fields = ("namespace", "name")
    list_select_related = ("queue",)
    inlines = [MemberInline]
    actions = None
    STATE = (
        "source",
        "phase",
        "reason",
        "conditions",
        "created_at",
        "running_at",
        "finished_at",
        "dashboard_link",
    )

    def get_readonly_fields(self, request, obj=None):
        return (("namespace", "name") if obj is not None else ()) + self.STATE

    @admin.display(description="job", ordering="name")
    def key(self, group):
        return group.key

    @admin.display(description="verdict")
    def short_reason(self, group):
        return group.reason if len(group.reason) <= 120 else group.reason[:119] + "…"

    @admin.display(description="dashboard")
    def dashboard_link(self, group):
        if group.pk is None:
            return "—"
        return format_html('<a href="{}">Job page</a>', reverse("job", args=[group.namespace, group.name]))

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        fields = {
            name: form.cleaned_data[name] for name in PodGroupForm.Meta.fields if name in form.cleaned_data
        }
        namespace, name = fields.pop("namespace", obj.namespace), fields.pop("name", obj.name)
        fields["queue"] = fields["queue"].name if fields.get("queue") else None
        by = request.user.get_username()
        if change:
            saved = services.update_pod_group(obj.namespace, obj.name, by=by, **fields)
        else:
            saved = services.create_pod_group(namespace, name, by=by, **fields)
        obj.pk, obj.created_at = saved.pk, saved.created_at


class NamespaceQuotaForm(ModelForm):
    """One hard limit of an operator's namespace quota, checked by
    `services.validate_namespace_quota` before it is saved."""

    class Meta:
        model = NamespaceQuota
        fields = ("namespace", "quota", "resource", "hard")

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        row = {name: data.get(name, getattr(self.instance, name)) for name in self.Meta.fields}
        namespace, quota = row["namespace"], row["quota"]
        try:
            services.validate_namespace_quota(namespace, quota, {row["resource"]: row["hard"]})
        except ValidationError as exc:
            for name, errors in exc.message_dict.items():
                self.add_error("hard" if name.startswith("hard.") else name, errors)
        if not self.errors and self.instance.pk is None:
            rows = NamespaceQuota.objects.filter(namespace=namespace, quota=quota)
            if rows.filter(source=NamespaceQuota.API, resource=row["resource"]).exists():
                self.add_error("resource", "this quota limits that resource already: change that row")
            elif not rows.filter(source=NamespaceQuota.API).exists() and rows.exists():
                self.add_error("quota", str(services.QuotaOwnedByKubernetes(namespace, quota)))
        return data


@admin.register(NamespaceQuota)
class NamespaceQuotaAdmin(admin.ModelAdmin):
    """Namespace quotas, one row per limit. A ResourceQuota's rows (`kubernetes`) are kept by
    the kube agent and shown read-only; an operator's (`api`) are added, changed and deleted
    through `services.create_namespace_quota` / `update_namespace_quota` /
    `delete_namespace_quota`, audited."""

    form = NamespaceQuotaForm
    list_display = ("namespace", "quota", "source", "resource", "hard", "updated_at")
    list_filter = ("source", "namespace", "resource")
    search_fields = ("namespace", "quota")
    actions = None

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ("source",)
        if obj.source == NamespaceQuota.KUBERNETES:
            return ("namespace", "quota", "source", "resource", "hard", "updated_at")
        return ("namespace", "quota", "source", "resource", "updated_at")

    def has_change_permission(self, request, obj=None):
        if obj is not None and obj.source == NamespaceQuota.KUBERNETES:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.source == NamespaceQuota.KUBERNETES:
            return False
        return super().has_delete_permission(request, obj)

    def save_model(self, request, obj, form, change):
        by = request.user.get_username()
        limit = {obj.resource: obj.hard}
        exists = NamespaceQuota.objects.filter(
            namespace=obj.namespace, quota=obj.quota, source=NamespaceQuota.API
        ).exists()
        if change or exists:
            services.update_namespace_quota(obj.namespace, obj.quota, limit, by=by)
        else:
            services.create_namespace_quota(obj.namespace, obj.quota, limit, by=by)
        saved = NamespaceQuota.objects.get(
            namespace=obj.namespace, quota=obj.quota, source=NamespaceQuota.API, resource=obj.resource
        )
        obj.pk, obj.source, obj.updated_at = saved.pk, saved.source, saved.updated_at

    def delete_model(self, request, obj):
        """One limit goes; the quota's last limit takes the quota with it."""
        by = request.user.get_username()
        others = NamespaceQuota.objects.filter(
            namespace=obj.namespace, quota=obj.quota, source=NamespaceQuota.API
        ).exclude(pk=obj.pk)
        if others.exists():
            services.update_namespace_quota(obj.namespace, obj.quota, {obj.resource: None}, by=by)
        else:
            services.delete_namespace_quota(obj.namespace, obj.quota, by=by)

    def delete_queryset(self, request, queryset):
        for row in queryset.filter(source=NamespaceQuota.API):
            if NamespaceQuota.objects.filter(pk=row.pk).exists():
                self.delete_model(request, row)
