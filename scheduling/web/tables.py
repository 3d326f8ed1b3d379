"""The dashboard's tables (django-tables2): paged and sorted by the database, never in Python.

The Cluster page's node table reads each node's card totals as annotations, so a page of 50
nodes is one query whatever the cluster's size, and sorting by memory sorts in SQL.
"""

from __future__ import annotations

import django_tables2 as tables
from django.core.paginator import EmptyPage
from django.db.models import Case, Count, IntegerField, Max, Min, Value, When
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from scheduling.models import Node, Pod
from scheduling.models.samples import pending_by_closest_node
from scheduling.templatetags.charts import amount

#: Nodes per page of the Cluster page's table.
NODES_PER_PAGE = 50
#: Pods per page of the Pending and Pods pages.
PODS_PER_PAGE = 50


def nodes_with_totals():
    """Nodes with their present cards' totals (`Node.objects.with_totals`) and card types."""
    return Node.objects.with_totals().annotate(model=Min("cards__type"), other_model=Max("cards__type"))


def _share(used: int, total: int) -> str:
    return f"{round(100 * used / total)}%" if total else "–"


class UsageColumn(tables.Column):
    """`used/total unit (share)`, sorted by the used amount."""

    def __init__(self, total: str, unit: str = "", **kwargs):
        self.total, self.unit = total, unit
        used = str(kwargs["accessor"])
        exact = {"title": lambda record: f"{getattr(record, used)}/{getattr(record, total)} {unit}".rstrip()}
        kwargs.setdefault("attrs", {"td": {"class": "num", **exact}})
        super().__init__(**kwargs)

    def render(self, value, record):
        """In GiB or cards (`charts.amount`); the cell's tooltip keeps the exact MiB or percent."""
        total = getattr(record, self.total)
        shown, unit = amount(value, total, self.unit)
        return format_html(
            '{}{} <span class="muted">{}</span>',
            shown,
            f" {unit}" if unit and unit != "%" else ("%" if unit else ""),
            _share(value, total),
        )


class NodeTable(tables.Table):
    name = tables.Column(verbose_name="node", linkify=lambda record: reverse("node", args=[record.name]))
    model = tables.Column(verbose_name="model", empty_values=())
    cards = tables.Column(verbose_name="cards", accessor="total_cards", attrs={"td": {"class": "num"}})
    used_slots = UsageColumn("total_slots", verbose_name="slots", accessor="total_used_slots")
    used_memory = UsageColumn("total_memory", "MiB", verbose_name="memory", accessor="total_used_memory")
    used_cores = UsageColumn("total_cores", "%", verbose_name="cores", accessor="total_used_cores")
    tenants = tables.Column(
        verbose_name="pods", orderable=False, empty_values=(), attrs={"td": {"class": "num"}}
    )
    blocked = tables.Column(
        verbose_name="pending here",
        order_by=("blocked", "name"),
        attrs={
            "th": {"title": "pending pods that came closest on this node: what it holds up"},
            "td": {"class": "num", "data-testid": "node-blocked"},
        },
    )
    ready = tables.Column(verbose_name="ready", empty_values=())

    class Meta:
        model = Node
        fields = ()
        sequence = (
            "name",
            "model",
            "cards",
            "used_slots",
            "used_memory",
            "used_cores",
            "tenants",
            "blocked",
            "ready",
        )
        order_by = ("name",)
        attrs = {
            "class": "dense node-table",
            "data-testid": "node-table",
            "tbody": {"data-live-rows": "nodes"},
        }
        row_attrs = {"data-testid": "node-row", "data-node": lambda record: record.name}
        empty_text = "No node matches."
        template_name = "django_tables2/table.html"

    def render_model(self, value, record):
        if not value:
            return mark_safe('<span class="muted">no cards</span>')
        if record.other_model != value:
            return format_html('{} <span class="muted">and others</span>', value)
        return value

    def render_blocked(self, value, record):
        if not value:
            return mark_safe('<span class="muted">0</span>')
        return value

    def render_ready(self, value, record):
        if value:
            state = mark_safe('<span class="badge ok">ready</span>')
        else:
            why = record.not_ready_reason or "its agent stopped reporting"
            state = format_html('<span class="badge bad" title="{}">not ready</span>', why)
        if record.cordoned_cards:
            return format_html('{} <span class="badge warn">{} cordoned</span>', state, record.cordoned_cards)
        return state


def with_blocked(rows, counts: dict[str, int]):
    """`rows` annotated with `blocked`, the pending pods that came closest on each node, from
    `counts` (`pending_by_closest_node`, read once): one CASE branch per distinct count (a
    handful), so the column sorts in the database without a per-node subquery."""
    by_count: dict[int, list[str]] = {}
    for name, pods in counts.items():
        by_count.setdefault(pods, []).append(name)
    if not by_count:
        return rows.annotate(blocked=Value(0, output_field=IntegerField()))
    branches = [When(name__in=sorted(names), then=Value(pods)) for pods, names in sorted(by_count.items())]
    return rows.annotate(blocked=Case(*branches, default=Value(0), output_field=IntegerField()))


def node_table(nodes, request) -> NodeTable:
    """The node table over `nodes` (filtered already). The pods placed on each are counted
    for the shown page only, in one query (a per-node subquery over the whole join costs
    half a second at 1,000 nodes on PostgreSQL), so that column does not sort. The pending
    pods each node holds up are counted once for all nodes, in one query; they go into the
    SQL (`with_blocked`) only when the table is sorted by them, else onto the shown rows."""
    order = request.GET.get("sort") or "name"
    blocked = pending_by_closest_node()
    rows = nodes_with_totals().filter(pk__in=nodes.values("pk"))
    if order.lstrip("-") == "blocked":
        rows = with_blocked(rows, blocked)
    table = NodeTable(rows, order_by=order)
    try:
        table.paginate(page=_page(request), per_page=NODES_PER_PAGE)
    except EmptyPage:
        table.paginate(page=table.paginator.num_pages, per_page=NODES_PER_PAGE)
    shown = list(table.page.object_list)
    placed = dict(
        Pod.objects.filter(node__in=[row.record.pk for row in shown], status__in=Pod.BOUND)
        .values("node")
        .annotate(n=Count("id"))
        .values_list("node", "n")
    )
    for row in shown:
        row.record.tenants = placed.get(row.record.pk, 0)
        row.record.blocked = blocked.get(row.record.name, 0)
    return table


def _page(request) -> int:
    """The `page` parameter, or 1 when it is missing or not a number (a page past the end
    shows the last one)."""
    try:
        return max(1, int(request.GET.get("page", 1)))
    except ValueError:
        return 1


class PodTable(tables.Table):
    key = tables.Column(
        verbose_name="pod",
        accessor="name",
        order_by=("namespace", "name"),
        linkify=lambda record: reverse("pod", args=[record.namespace, record.name]),
    )
    status = tables.Column()
    node = tables.Column(
        accessor="node__name",
        verbose_name="node",
        linkify=lambda record: reverse("node", args=[record.node.name]) if record.node_id else None,
    )
    submitted_at = tables.DateTimeColumn(verbose_name="submitted", format="Y-m-d H:i:s")
    attempts = tables.Column(verbose_name="tries", attrs={"td": {"class": "num"}})
    reason = tables.Column(verbose_name="latest decision", orderable=False, attrs={"td": {"class": "why"}})

    class Meta:
        model = Pod
        fields = ()
        sequence = ("key", "status", "node", "submitted_at", "attempts", "reason")
        order_by = ("-submitted_at",)
        attrs = {"class": "dense pod-table", "data-testid": "pod-table", "tbody": {"data-live-rows": "pods"}}
        row_attrs = {"data-testid": "pod-row", "data-pod": lambda record: record.key}
        empty_text = "No pod matches."
        template_name = "django_tables2/table.html"

    def render_key(self, value, record):
        return record.key

    def render_status(self, value, record):
        return format_html('<span class="badge status-{}">{}</span>', record.status, value)


def pod_table(pods, request) -> PodTable:
    table = PodTable(pods.select_related("node"), order_by=request.GET.get("sort") or "-submitted_at")
    try:
        table.paginate(page=_page(request), per_page=PODS_PER_PAGE)
    except EmptyPage:
        table.paginate(page=table.paginator.num_pages, per_page=PODS_PER_PAGE)
    return table
