"""The Queues page (the tree with usage bars against guarantee, quota and limit) and the Job page
(a pod group's members, where each landed or why not, and the gang verdict). The tree is
`services.queue_tree`, the same reader as `GET /api/v1/queues/`."""

from __future__ import annotations

from dataclasses import dataclass

from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET

from scheduling import services
from scheduling.filtersets import PodGroupFilterSet
from scheduling.models import Pod, PodGroup
from scheduling.services.batch import LIVE_PHASES
from scheduling.web.views import render_live, viewer_required

#: Jobs listed under the tree on the Queues page.
JOB_ROWS = 200


@dataclass
class Bar:
    """One resource of a queue: used against its figures, as shares of the widest of them."""

    resource: str
    unit: str
    used: int
    guarantee: int | None
    quota: int | None
    limit: int | None
    fair_share: float = 0.0

    @property
    def scale(self) -> float:
        figures = (self.guarantee, self.quota, self.limit, self.fair_share or None)
        return max(self.used, *(v for v in figures if v is not None), 1)

    def _at(self, value: float | None) -> float | None:
        return None if value is None else round(100 * min(value, self.scale) / self.scale, 1)

    @property
    def used_at(self) -> float:
        return self._at(self.used) or 0.0

    @property
    def marks(self) -> list[tuple[str, float, float]]:
        """(kind, figure, position in percent) of each figure set, for the ticks on the bar;
        `fair` is the fair share the next cycle computes (when above 0)."""
        figures = (
            ("guarantee", self.guarantee),
            ("quota", self.quota),
            ("limit", self.limit),
            ("fair", round(self.fair_share) if self.fair_share else None),
        )
        return [(kind, value, self._at(value) or 0.0) for kind, value in figures if value is not None]

    @property
    def state(self) -> str:
        if self.limit is not None and self.used >= self.limit:
            return "bad"
        if self.quota is not None and self.used > self.quota:
            return "warn"
        return "ok"


def queues_page(params) -> dict:
    """The tree, each queue with a bar per resource, and the unfinished jobs (filtered like
    `GET /api/v1/podgroups/`)."""
    rows = [(node, [Bar(**row) for row in node.resources()]) for node in services.queue_tree()]
    groups = PodGroup.objects.select_related("queue").order_by("namespace", "name")
    filterset = PodGroupFilterSet(params, queryset=groups)
    groups = filterset.qs if filterset.is_valid() else groups
    if not params.get("phase"):
        groups = groups.filter(phase__in=LIVE_PHASES)
    return {
        "rows": rows,
        "jobs": list(groups[:JOB_ROWS]),
        "phases": PodGroup.PHASES,
        "filters": {key: params.get(key, "") for key in ("queue", "phase", "namespace")},
        "filter_errors": filterset.errors if not filterset.is_valid() else {},
    }


def job_page(namespace: str, name: str) -> dict:
    """One job: its figures, the gang verdict and conditions, each member with its last decision."""
    group = get_object_or_404(PodGroup.objects.select_related("queue"), namespace=namespace, name=name)
    members = list(group.pods.select_related("node").with_latest_decision().order_by("name"))
    Pod.objects.latest_decisions(members)
    placed = sum(1 for pod in members if pod.status in Pod.BOUND)
    return {
        "group": group,
        "members": members,
        "placed": placed,
        "conditions": list(reversed(group.conditions or [])),
        "min_resources": group.min_resources(),
    }


@require_GET
@viewer_required
def queues(request):
    return render_live(request, "scheduling/queues.html", queues_page, request.GET)


@require_GET
@viewer_required
def job(request, namespace, name):
    return render_live(request, "scheduling/job.html", job_page, namespace, name)
